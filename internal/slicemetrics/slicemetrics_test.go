package slicemetrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

type one struct {
	s Slice
	f Figures
}

func (one) Describe(ch chan<- *prometheus.Desc)   { Describe(ch) }
func (o one) Collect(ch chan<- prometheus.Metric) { Emit(ch, o.s, o.f) }

// A slice's series carry every label, the slice as <claim>/<n>; the used
// figures only when measured.
func TestEmit(t *testing.T) {
	s := Slice{UUID: "GPU-1", GPU: 2, ModelName: "NVIDIA L4", Hostname: "n1", Tenant: "acme", Claim: "c1", Request: "gpu",
		Device: "GPU-1", Index: 1}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(one{s, Figures{MemoryAllocated: 1 << 30, MemoryLimit: 2 << 30, ComputeAllocated: 0.25, ComputeLimit: 1}})
	want := `# HELP gpuslice_slice_compute_allocated_ratio Compute promised to a slice, as a fraction of its whole GPU: its compute share on a shared GPU, the instance's compute slices for MIG, 1 for a whole GPU.
# TYPE gpuslice_slice_compute_allocated_ratio gauge
gpuslice_slice_compute_allocated_ratio{GPU_I_ID="",GPU_I_PROFILE="",Hostname="n1",UUID="GPU-1",claim="c1",container="",device="GPU-1",gpu="2",modelName="NVIDIA L4",namespace="",pod="",request="gpu",slice="c1/1",tenant="acme"} 0.25
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "gpuslice_slice_compute_allocated_ratio"); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 4 {
		t.Fatalf("%d series (%v), want 4 without used figures", n, err)
	}
	mem, sm := 5.0, 0.5
	reg = prometheus.NewPedanticRegistry()
	reg.MustRegister(one{s, Figures{MemoryUsed: &mem, ComputeUsed: &sm}})
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 6 {
		t.Fatalf("%d series (%v), want 6 with used figures", n, err)
	}
}
