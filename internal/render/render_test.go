package render

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/model"
	"github.com/gpuslice/gpuslice/internal/plan"
	"github.com/gpuslice/gpuslice/internal/spec"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// planFor reads a spec file and plans it.
func planFor(t *testing.T, path string) (*spec.Spec, *plan.Plan) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, diags := spec.Read(filepath.Base(path), data, "")
	if err := diags.Err(); err != nil {
		t.Fatal(err)
	}
	p, err := plan.Make(s, plan.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s, p
}

var goldenInputs = map[string]string{
	"example":          "../../examples/gpuslice.yaml",
	"seed-timeslicing": "../spec/testdata/compose/seed-timeslicing.yaml",
	"seed-mig":         "../spec/testdata/compose/seed-mig.yaml",
}

// Every target has a golden file per input; -update rewrites them.
func TestGoldenTargets(t *testing.T) {
	for name, in := range goldenInputs {
		s, p := planFor(t, in)
		for _, target := range Targets() {
			t.Run(name+"/"+target, func(t *testing.T) {
				out, err := Render(target, s, p)
				if err != nil {
					t.Fatal(err)
				}
				testkit.Golden(t, filepath.Join("testdata", "golden", name+"."+target+".yaml"), out)
			})
		}
	}
}

// Rendered DRA objects read back into the same requests (round trip).
func TestDRARoundTrip(t *testing.T) {
	s, p := planFor(t, "../../examples/gpuslice.yaml")
	out, err := Render("dra", s, p)
	if err != nil {
		t.Fatal(err)
	}
	back, diags := spec.ReadDRA("dra.yaml", out)
	if err := diags.Err(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// A device the plan shares is one ResourceClaim, named for the device,
	// that every replica on it references: it reads back as one workload
	// with the planned device's request.
	dp := newDRAPlan(nvidiaDRA, s, p)
	for _, c := range dp.claims {
		var got *spec.Workload
		for i := range back.Workloads {
			if back.Workloads[i].Name == c.name && back.Workloads[i].Tenant == c.namespace {
				got = &back.Workloads[i]
			}
		}
		if got == nil {
			t.Fatalf("shared claim %s/%s missing after the round trip", c.namespace, c.name)
		}
		if len(got.Requests) != 1 || got.Requests[0].Profile != c.profile {
			t.Errorf("shared claim %s: got %+v, planned one %q device", c.name, got.Requests, c.profile)
		}
	}
	for _, wl := range s.Workloads {
		if len(dp.sharedRequests(&wl)) == len(wl.Requests) {
			continue // all its devices are shared claims, checked above
		}
		var got *spec.Workload
		for i := range back.Workloads {
			if strings.HasPrefix(back.Workloads[i].Name, dnsName(wl.Name)) {
				got = &back.Workloads[i]
				break
			}
		}
		if got == nil {
			t.Fatalf("workload %s missing after the round trip", wl.Name)
		}
		if len(got.Requests) != len(wl.Requests) || len(got.Constraints) != len(wl.Constraints) {
			t.Fatalf("%s: %d requests %d constraints back, want %d and %d", wl.Name, len(got.Requests), len(got.Constraints), len(wl.Requests), len(wl.Constraints))
		}
		modes, _ := workloadModes(p, &wl)
		for i, r := range got.Requests {
			want := modes[wl.Requests[i].Name]
			if r.Name != wl.Requests[i].Name || (want.Profile != "" && r.Profile != want.Profile) {
				t.Errorf("%s request %d: got %+v, planned %+v", wl.Name, i, r, want)
			}
		}
	}
	// And again: rendering what was read back is stable.
	p2, err := plan.Make(back, plan.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p2.Unplaced) != 0 && len(back.Pools) > 0 {
		t.Fatalf("round-tripped spec does not place: %+v", p2.Unplaced)
	}
}

// A DRA selector keeps gpuslice's attribute names; the render names those
// NVIDIA's driver does not publish.
func TestForeignSelectorNames(t *testing.T) {
	for sel, want := range map[string]string{
		"device.attributes['gpu.nvidia.com'].model == 'A100-40GB'":                                               "attribute model",
		"device.attributes['gpu.nvidia.com'].productName == 'NVIDIA A100-SXM4-40GB'":                             "",
		"device.capacity['gpu.nvidia.com'].memoryMiB >= 40000 && device.attributes['gpu.nvidia.com'].index == 0": "attribute index, capacity memoryMiB",
		"device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0":                              "",
	} {
		if got := foreignNames(sel); got != want {
			t.Errorf("%s: %q, want %q", sel, got, want)
		}
	}
}

// A pool described by GPU model and count has no instance type for
// Karpenter to provision: the karpenter target says so in its output and
// in its warnings instead of leaving the pool out without a word.
func TestKarpenterSaysWhyAPoolHasNoNodePool(t *testing.T) {
	s := &model.Spec{Sources: []string{"pool.yaml"},
		Pools: []model.Pool{{Name: "local", GPU: "L4", GPUsPerNode: 4}, {Name: "l4", InstanceType: "g6.xlarge"}},
		Workloads: []model.Workload{{Name: "w", Tenant: "a", Replicas: 2, Pool: "local",
			Requests: []alloc.Request{{Name: "gpu", Mode: alloc.TimeSlice, MemoryMiB: 4096}}}}}
	p, err := plan.Make(s, plan.Options{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := Render("karpenter", s, p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "# WARNING: pool local has no instanceType") || strings.Count(string(out), "kind: NodePool") != 1 {
		t.Fatalf("render:\n%s", out)
	}
	if w := Warnings("karpenter", s, p); len(w) != 1 || !strings.Contains(w[0], "pool local") {
		t.Fatalf("warnings %q", w)
	}
}

// The hpa target writes an autoscaling/v2 HorizontalPodAutoscaler per
// workload with compose autoscaling, aimed at its Deployment: the compose
// bounds, one pod per period each way with the compose minutes as the
// stabilization windows, the over-utilized threshold as the target, and a
// warning for what an HPA cannot do (scale to zero).
func TestHPAFromComposeAutoscaling(t *testing.T) {
	s, p := planFor(t, "../../examples/compose-timeslicing.yaml")
	out, err := Render("hpa", s, p)
	if err != nil {
		t.Fatal(err)
	}
	var hpa struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Metadata   map[string]any `json:"metadata"`
		Spec       struct {
			ScaleTargetRef struct{ APIVersion, Kind, Name string } `json:"scaleTargetRef"`
			MinReplicas    int                                     `json:"minReplicas"`
			MaxReplicas    int                                     `json:"maxReplicas"`
			Metrics        []struct {
				Type string `json:"type"`
				Pods struct {
					Metric struct{ Name string } `json:"metric"`
					Target struct {
						Type         string `json:"type"`
						AverageValue string `json:"averageValue"`
					} `json:"target"`
				} `json:"pods"`
			} `json:"metrics"`
			Behavior struct {
				ScaleUp, ScaleDown struct {
					Select   string `json:"selectPolicy"`
					Window   int    `json:"stabilizationWindowSeconds"`
					Policies []struct {
						Type          string `json:"type"`
						Value         int    `json:"value"`
						PeriodSeconds int    `json:"periodSeconds"`
					} `json:"policies"`
				}
			} `json:"behavior"`
		} `json:"spec"`
	}
	docs := strings.Split(string(out), "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("want a header and one HPA:\n%s", out)
	}
	if err := yaml.UnmarshalStrict([]byte(docs[1]), &hpa); err != nil {
		t.Fatal(err)
	}
	sp := hpa.Spec
	if hpa.Kind != "HorizontalPodAutoscaler" || sp.ScaleTargetRef.Kind != "Deployment" || sp.ScaleTargetRef.Name != "gpuinfo" ||
		sp.MinReplicas != 1 || sp.MaxReplicas != 3 || sp.Metrics[0].Pods.Metric.Name != HPAMetric || sp.Metrics[0].Pods.Target.AverageValue != "800m" ||
		sp.Behavior.ScaleUp.Window != 180 || sp.Behavior.ScaleDown.Window != 120 ||
		sp.Behavior.ScaleUp.Policies[0].Value != 1 || sp.Behavior.ScaleDown.Policies[0].PeriodSeconds != 120 {
		t.Fatalf("HPA %+v\n%s", sp, out)
	}
	if w := Warnings("hpa", s, p); len(w) == 0 || !strings.Contains(w[0], "scale to zero") {
		t.Fatalf("warnings %q", w)
	}
}

// minimumNodesInPool has no field in a dynamic Karpenter NodePool (it
// provisions for pending pods and consolidates empty nodes away): the
// karpenter target adds a static NodePool of that many warm nodes for the
// pool the workload is planned on, counts them toward the pool's maxNodes,
// and warns that static capacity is an alpha feature gate.
func TestKarpenterKeepsMinimumNodesWarm(t *testing.T) {
	s := &model.Spec{Sources: []string{"pool.yaml"},
		Pools: []model.Pool{{Name: "l4", InstanceType: "g6.xlarge", MaxNodes: 5, Sharing: alloc.Sharing{Mode: alloc.TimeSlice, Replicas: 4}},
			{Name: "t4", InstanceType: "g4dn.xlarge"}},
		Workloads: []model.Workload{
			{Name: "web", Tenant: "a", Replicas: 2, Pool: "l4", Autoscaling: &model.Autoscaling{MinReplicas: 2, MaxReplicas: 6, MinimumNodesInPool: 2},
				Requests: []alloc.Request{{Name: "gpu", Mode: alloc.TimeSlice, MemoryMiB: 4096}}},
			{Name: "batch", Tenant: "b", Replicas: 1, Pool: "t4", Requests: []alloc.Request{{Name: "gpu", Mode: alloc.Exclusive}}}}}
	p, err := plan.Make(s, plan.Options{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := Render("karpenter", s, p)
	if err != nil {
		t.Fatal(err)
	}
	type nodePool struct {
		Metadata struct{ Name string } `json:"metadata"`
		Spec     struct {
			Replicas *int              `json:"replicas"`
			Limits   map[string]string `json:"limits"`
		} `json:"spec"`
	}
	var pools []nodePool
	for _, doc := range strings.Split(string(out), "\n---\n") {
		if !strings.Contains(doc, "kind: NodePool") {
			continue
		}
		var np nodePool
		if err := yaml.Unmarshal([]byte(doc), &np); err != nil {
			t.Fatal(err)
		}
		pools = append(pools, np)
	}
	byName := map[string]int{}
	for i, np := range pools {
		byName[np.Metadata.Name] = i
	}
	warm, ok := byName["gpuslice-l4-warm"]
	if !ok || len(pools) != 3 {
		t.Fatalf("want l4, l4-warm and t4 NodePools:\n%s", out)
	}
	if w := pools[warm].Spec; w.Replicas == nil || *w.Replicas != 2 || len(w.Limits) != 1 || w.Limits["nodes"] != "2" {
		t.Fatalf("warm NodePool %+v", w)
	}
	// maxNodes 5 of one GPU each: 2 warm, 3 for the dynamic NodePool.
	if l := pools[byName["gpuslice-l4"]].Spec; l.Replicas != nil || l.Limits["nvidia.com/gpu"] != "3" {
		t.Fatalf("dynamic l4 NodePool %+v", l)
	}
	if _, ok := byName["gpuslice-t4-warm"]; ok {
		t.Fatal("t4 has no minimumNodesInPool")
	}
	if w := Warnings("karpenter", s, p); len(w) != 1 || !strings.Contains(w[0], "StaticCapacity") || !strings.Contains(w[0], "pool l4") {
		t.Fatalf("warnings %q", w)
	}
}
