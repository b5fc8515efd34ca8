package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpuslice/gpuslice/internal/agent"
	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/gpu/fake"
	"github.com/gpuslice/gpuslice/internal/slicemetrics"
)

// scrape parses /metrics with Prometheus' own text parser.
func scrape(t *testing.T, h *harness) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := h.Call(h.Admin, "GET", "/metrics", nil)
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// sliceValue finds the one series of a family for a slice.
func sliceValue(t *testing.T, fams map[string]*dto.MetricFamily, name, slice string) (float64, map[string]string, bool) {
	t.Helper()
	f, ok := fams[name]
	if !ok {
		return 0, nil, false
	}
	for _, m := range f.GetMetric() {
		if l := labelsOf(m); l["slice"] == slice {
			return m.GetGauge().GetValue(), l, true
		}
	}
	return 0, nil, false
}

// Per-slice metrics carry dcgm-exporter's label names, so a query can join
// them with DCGM_FI_* series; allocated, limit and used follow each claim's
// device: a MIG instance (its GI id as GPU_I_ID) and an MPS client on a
// whole GPU (its thread and memory limits).
func TestSliceMetricsWithDCGMLabels(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 0)
	ag, m := h.Node("host-a", "mixed", func(c *agent.Config, m *fake.Machine) { c.Workloads = m })
	var mig, mps api.Claim
	h.Must(acme, "POST", "/v1/claims", api.CreateClaimRequest{ClaimSpec: api.ClaimSpec{
		Requests: []alloc.Request{{Name: "gpu", Mode: alloc.MIG, Profile: "3g.20gb"}}}}, 201, &mig)
	h.Must(acme, "POST", "/v1/claims", api.CreateClaimRequest{ClaimSpec: api.ClaimSpec{
		Requests: []alloc.Request{{Name: "gpu", Mode: alloc.MPS, MemoryMiB: 4000, ComputePercent: 30, Selector: "device.attributes['gpu.nvidia.com'].productName.contains('L4')"}}}}, 201, &mps)
	if err := ag.Step(context.Background()); err != nil { // makes the MIG instance
		t.Fatal(err)
	}
	for _, c := range []api.Claim{mig, mps} {
		h.Must(acme, "POST", "/v1/claims/"+c.ID+"/running", nil, 200, nil)
	}
	h.Pass(30*time.Second, ag) // simulated processes run; usage reaches the server
	// A claim that waits, so the pending metric has a series.
	h.Must(acme, "POST", "/v1/claims", api.CreateClaimRequest{ClaimSpec: api.ClaimSpec{WaitForNodes: true,
		Requests: []alloc.Request{{Name: "gpu", MemoryMiB: 500 * 1024, Mode: alloc.Exclusive}}}}, 201, nil)
	h.Must(acme, "GET", "/v1/claims/"+mig.ID, nil, 200, &mig)
	h.Must(acme, "GET", "/v1/claims/"+mps.ID, nil, 200, &mps)
	fams := scrape(t, h)

	cat := catalog.Default()
	a100, _ := cat.GPU("A100-40GB")
	p3g, _ := a100.Profile("3g.20gb")
	l4, _ := cat.GPU("L4")
	const mib = 1 << 20

	// The MIG slice: the instance's memory and 3 of 7 compute slices; its
	// GI id as the simulated driver gave it.
	d := mig.Allocation.Devices[0]
	v, l, ok := sliceValue(t, fams, "gpuslice_slice_memory_allocated_bytes", mig.ID+"/0")
	if !ok {
		t.Fatalf("no allocated-memory series for the MIG slice %s; families: %v", mig.ID, names(fams))
	}
	gpus, err := m.GPUs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	giID := ""
	for _, g := range gpus {
		for _, in := range g.Instances {
			if in.UUID == d.Device {
				giID = strconv.Itoa(in.GIID)
			}
		}
	}
	want := map[string]string{"UUID": d.GPU, "modelName": a100.ProductNames[0], "Hostname": "host-a", "GPU_I_PROFILE": "3g.20gb",
		"GPU_I_ID": giID, "tenant": "acme", "slice": mig.ID + "/0", "claim": mig.ID, "request": d.Request, "device": d.Device}
	for k, w := range want {
		if l[k] != w || w == "" {
			t.Errorf("MIG slice label %s=%q, want %q", k, l[k], w)
		}
	}
	// The one label set the DRA driver's series carry too; the
	// Kubernetes identity is empty here.
	for _, k := range slicemetrics.Labels {
		if _, ok := l[k]; !ok && k != "pod" && k != "namespace" && k != "container" {
			t.Errorf("MIG slice has no label %s", k)
		}
	}
	if len(l) > len(slicemetrics.Labels) {
		t.Errorf("MIG slice labels %v, want at most %v", l, slicemetrics.Labels)
	}
	for _, g := range gpus {
		if g.UUID == d.GPU && l["gpu"] != strconv.Itoa(g.Index) {
			t.Errorf("MIG slice label gpu=%q, want its index %d", l["gpu"], g.Index)
		}
	}
	if v != float64(d.MemoryMiB*mib) {
		t.Errorf("MIG allocated %v bytes, want %v", v, d.MemoryMiB*mib)
	}
	if v, _, _ := sliceValue(t, fams, "gpuslice_slice_memory_limit_bytes", mig.ID+"/0"); v != float64(p3g.MemoryMiB*mib) {
		t.Errorf("MIG memory limit %v, want the instance's %v MiB", v, p3g.MemoryMiB)
	}
	wantC := float64(p3g.ComputeSlices) / float64(a100.MIG.ComputeSlices)
	for _, name := range []string{"gpuslice_slice_compute_allocated_ratio", "gpuslice_slice_compute_limit_ratio"} {
		if v, _, _ := sliceValue(t, fams, name, mig.ID+"/0"); v != wantC {
			t.Errorf("MIG %s %v, want %v", name, v, wantC)
		}
	}
	if _, _, ok := sliceValue(t, fams, "gpuslice_slice_memory_used_bytes", mig.ID+"/0"); !ok {
		t.Errorf("no used memory for the running MIG slice")
	}
	if _, _, ok := sliceValue(t, fams, "gpuslice_slice_compute_used_ratio", mig.ID+"/0"); ok {
		t.Errorf("compute used exported for an A100 MIG instance, which NVML does not sample")
	}

	// The MPS slice on an L4: 30% of the GPU promised, the MPS limits.
	md := mps.Allocation.Devices[0]
	if md.MPS == nil {
		t.Fatalf("MPS claim without MPS limits: %+v", md)
	}
	v, l, ok = sliceValue(t, fams, "gpuslice_slice_compute_allocated_ratio", mps.ID+"/0")
	if !ok || v != 0.3 || l["GPU_I_PROFILE"] != "" || l["modelName"] != l4.ProductNames[0] {
		t.Errorf("MPS compute allocated %v %v", v, l)
	}
	if v, _, _ := sliceValue(t, fams, "gpuslice_slice_compute_limit_ratio", mps.ID+"/0"); v != float64(md.MPS.ActiveThreadPercent)/100 {
		t.Errorf("MPS compute limit %v, want the active-thread limit %d%%", v, md.MPS.ActiveThreadPercent)
	}
	if v, _, _ := sliceValue(t, fams, "gpuslice_slice_memory_limit_bytes", mps.ID+"/0"); v != float64(min(md.MPS.PinnedMemoryMiB, l4.MemoryMiB)*mib) {
		t.Errorf("MPS memory limit %v, want the pinned limit %d MiB", v, md.MPS.PinnedMemoryMiB)
	}
	if _, _, ok := sliceValue(t, fams, "gpuslice_slice_compute_used_ratio", mps.ID+"/0"); !ok {
		t.Errorf("no compute used for a running claim on a whole L4")
	}
	// What existed before is still there.
	for _, name := range []string{"gpuslice_claims", "gpuslice_device_memory_promised_mib", "gpuslice_tenant_gpu_seconds_total", "gpuslice_gpu_memory_total_bytes"} {
		if _, ok := fams[name]; !ok {
			t.Errorf("/metrics lacks %s", name)
		}
	}

	// Released: its series go.
	h.Must(acme, "DELETE", "/v1/claims/"+mps.ID, nil, 200, nil)
	if _, _, ok := sliceValue(t, scrape(t, h), "gpuslice_slice_memory_allocated_bytes", mps.ID+"/0"); ok {
		t.Errorf("a released slice is still exported")
	}
	testGrafanaDashboard(t, fams)
}

func names(fams map[string]*dto.MetricFamily) []string {
	var out []string
	for n := range fams {
		out = append(out, n)
	}
	return out
}

var metricName = regexp.MustCompile(`\bgpuslice_[a-zA-Z0-9_]+`)

// testGrafanaDashboard parses deploy/grafana/gpuslice.json and checks that
// every panel's queries (and the variables') name metrics that a real
// server exports (fams, scraped above).
func testGrafanaDashboard(t *testing.T, fams map[string]*dto.MetricFamily) {
	data, err := os.ReadFile("../../deploy/grafana/gpuslice.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Query string `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("deploy/grafana/gpuslice.json: %v", err)
	}
	if len(dash.Panels) == 0 {
		t.Fatal("the Grafana dashboard has no panels")
	}
	exported := func(n string) bool {
		if _, ok := fams[n]; ok {
			return true
		}
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(n, suf); ok {
				if f, ok := fams[base]; ok && f.GetType() == dto.MetricType_HISTOGRAM {
					return true
				}
			}
		}
		return false
	}
	check := func(where, expr string) {
		ms := metricName.FindAllString(expr, -1)
		if len(ms) == 0 {
			t.Errorf("%s: query %q names no gpuslice metric", where, expr)
		}
		for _, m := range ms {
			if !exported(m) {
				t.Errorf("%s: query names %s, which gpuslice does not export", where, m)
			}
		}
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			check("panel "+strconv.Quote(p.Title), tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		check("variable "+v.Name, v.Query)
	}
}
