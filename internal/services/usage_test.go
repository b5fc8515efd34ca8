package services

import (
	"math"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/catalog"
)

// A replica's use is its claim's change between two samples, over the
// compute and memory it can use there.
func TestUsageBetween(t *testing.T) {
	cat := catalog.Default()
	a100, _ := cat.GPU("A100-40GB")
	h100, _ := cat.GPU("H100-80GB-SXM")
	models := map[string]*catalog.GPU{"GPU-a": a100, "GPU-h": h100}
	modelOf := func(g string) *catalog.GPU { return models[g] }
	t0 := time.Unix(1000, 0)
	at := func(sec float64, gpu, sm, mib float64) usageReading {
		return usageReading{at: t0.Add(time.Duration(sec * float64(time.Second))), ok: true,
			used: api.Consumption{GPUSeconds: gpu, SMSeconds: sm, MemoryMiBSeconds: mib}}
	}
	for _, tc := range []struct {
		name      string
		devs      []alloc.Assigned
		prev, cur usageReading
		beat      time.Time
		sm, mem   float64 // NaN: not measured
		unsampled bool
	}{
		{"time-sliced, 40% of the GPU, half its promise",
			[]alloc.Assigned{{GPU: "GPU-a", Mode: alloc.TimeSlice, MemoryMiB: 4096}},
			at(0, 10, 2, 20480), at(10, 20, 6, 40960), t0.Add(10 * time.Second), 40, 50, false},
		{"MPS at 50% threads, using 40% of the GPU: 80% of its limit",
			[]alloc.Assigned{{GPU: "GPU-a", Mode: alloc.MPS, MemoryMiB: 8192, MPS: &alloc.MPSLimits{ActiveThreadPercent: 50}}},
			at(0, 0, 0, 0), at(10, 10, 4, 81920), t0, 80, 100, false},
		{"H100 1g.10gb busy: 1/7 of the GPU is all it can use",
			[]alloc.Assigned{{GPU: "GPU-h", Mode: alloc.MIG, Profile: "1g.10gb", MemoryMiB: 9856}},
			at(0, 0, 0, 0), at(7, 7, 1, 0), t0, 100, 0, false},
		{"no process ran and the node reported since: idle",
			[]alloc.Assigned{{GPU: "GPU-a", Mode: alloc.TimeSlice, MemoryMiB: 4096}},
			at(0, 5, 1, 0), at(10, 5, 1, 0), t0.Add(5 * time.Second), 0, 0, false},
		{"no report since the last sample: unknown",
			[]alloc.Assigned{{GPU: "GPU-a", Mode: alloc.TimeSlice, MemoryMiB: 4096}},
			at(10, 5, 1, 0), at(20, 5, 1, 0), t0.Add(5 * time.Second), math.NaN(), math.NaN(), false},
		{"A100 MIG: SM never sampled, memory is",
			[]alloc.Assigned{{GPU: "GPU-a", Mode: alloc.MIG, Profile: "1g.5gb", MemoryMiB: 4864}},
			at(0, 0, 0, 0), at(10, 10, 0, 48640), t0, math.NaN(), 100, true},
		{"first sample of a replica: unknown",
			[]alloc.Assigned{{GPU: "GPU-a", Mode: alloc.TimeSlice, MemoryMiB: 4096}},
			usageReading{}, at(10, 5, 1, 0), t0, math.NaN(), math.NaN(), false},
	} {
		compute, mem, why := deviceLimits(tc.devs, modelOf)
		u := usageBetween(tc.prev, tc.cur, tc.beat, compute, mem, why)
		same := func(a, b float64) bool { return math.IsNaN(a) && math.IsNaN(b) || math.Abs(a-b) < 1e-6 }
		if !same(u.SMPercent, tc.sm) || !same(u.MemPercent, tc.mem) || (u.Unsampled != "") != tc.unsampled {
			t.Errorf("%s: sm %v mem %v unsampled %q; want %v %v %v", tc.name, u.SMPercent, u.MemPercent, u.Unsampled, tc.sm, tc.mem, tc.unsampled)
		}
	}
}
