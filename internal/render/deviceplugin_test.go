package render

import (
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/plan"
	"github.com/gpuslice/gpuslice/internal/spec"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// nvWant is what one pool's device-plugin config must say.
type nvWant struct {
	migStrategy string
	mode        alloc.Mode // "" when whole GPUs are not shared
	replicas    int
	mig         map[string]int // MIG profile -> time-slicing replicas
}

var nvWantDP = map[string]nvWant{
	"t4-shared": {migStrategy: "none", mode: alloc.TimeSlice, replicas: 6},
	"l4-mps":    {migStrategy: "none", mode: alloc.MPS, replicas: 8},
	"a100-mig":  {migStrategy: "mixed", mode: alloc.TimeSlice, replicas: 3, mig: map[string]int{"1g.5gb": 2, "1g.5gb+me": 2, "2g.10gb": 2}},
	"h100-dyn":  {migStrategy: "mixed", mig: map[string]int{"1g.10gb": 4, "3g.40gb": 2}},
	"a30-mixed": {migStrategy: "mixed", mig: map[string]int{"2g.12gb": 2}},
	"plain":     {migStrategy: "none"},
}

func renderDP(t *testing.T) []byte {
	t.Helper()
	out, err := Render("nvidia-device-plugin", nvSpec(), nvPlan())
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDevicePluginGolden(t *testing.T) {
	testkit.Golden(t, filepath.Join("testdata", "nvidia-device-plugin.golden.yaml"), renderDP(t))
}

func TestDevicePluginTargetIsRegistered(t *testing.T) {
	for _, name := range []string{"nvidia-device-plugin", "mig-parted"} {
		if !slices.Contains(Targets(), name) {
			t.Errorf("target %s is not registered: %v", name, Targets())
		}
	}
}

// TestDevicePluginRoundTripReader reads the output back with gpuslice's
// own reader, which validates as the device plugin does: no errors, and
// the same sharing per pool.
func TestDevicePluginRoundTripReader(t *testing.T) {
	out := renderDP(t)
	s, diags := spec.ReadDevicePluginConfig("nvidia-device-plugin.yaml", out)
	for _, d := range diags {
		t.Errorf("%s", d)
	}
	if len(s.Imported) != len(nvWantDP) {
		t.Fatalf("imported %d configs, want %d", len(s.Imported), len(nvWantDP))
	}
	for _, imp := range s.Imported {
		want, ok := nvWantDP[imp.Name]
		if !ok {
			t.Errorf("unexpected config %q", imp.Name)
			continue
		}
		if imp.Source != spec.SourceDevicePlugin || imp.MIGStrategy != want.migStrategy {
			t.Errorf("%s: source %q strategy %q, want %q", imp.Name, imp.Source, imp.MIGStrategy, want.migStrategy)
		}
		wantSh := alloc.Sharing{Mode: alloc.Exclusive}
		switch want.mode {
		case alloc.TimeSlice:
			wantSh = alloc.Sharing{Mode: alloc.TimeSlice, Replicas: want.replicas}
		case alloc.MPS:
			wantSh = alloc.Sharing{Mode: alloc.MPS, MaxClients: want.replicas, DefaultThreadPercent: 100 / want.replicas}
		}
		if imp.Sharing != wantSh {
			t.Errorf("%s: sharing %+v, want %+v", imp.Name, imp.Sharing, wantSh)
		}
		if want.migStrategy != "mixed" {
			continue
		}
		largest := 0
		for _, n := range want.mig {
			largest = max(largest, n)
		}
		if imp.MIGSharing != (alloc.Sharing{Mode: alloc.TimeSlice, Replicas: largest}) {
			t.Errorf("%s: MIG sharing %+v, want time-slicing with %d", imp.Name, imp.MIGSharing, largest)
		}
		if len(imp.Devices) != 1 {
			t.Fatalf("%s: devices %+v", imp.Name, imp.Devices)
		}
		got := slices.Sorted(maps.Keys(imp.Devices[0].MIGDevices))
		if w := slices.Sorted(maps.Keys(want.mig)); !slices.Equal(got, w) {
			t.Errorf("%s: shared profiles %v, want %v", imp.Name, got, w)
		}
	}
}

// TestDevicePluginDecisions checks the notes the config carries where the
// device plugin cannot express the plan.
func TestDevicePluginDecisions(t *testing.T) {
	byName := map[string]dpConfig{}
	for i := range nvPlan().Pools {
		c := dpPoolConfig(&nvPlan().Pools[i])
		byName[c.pool] = c
	}
	for pool, notes := range map[string][]string{
		"t4-shared": {"planned with 4 to 6 replicas", "all get the largest, 6"},
		"a100-mig":  {"4 2g.10gb instance(s) are planned exclusive"},
		"h100-dyn":  {"1 3g.40gb instance(s) are planned with MPS"},
		"a30-mixed": {"rejects MPS with migStrategy mixed", "1 2g.12gb instance(s) are planned exclusive"},
	} {
		all := strings.Join(byName[pool].notes, "\n")
		for _, n := range notes {
			if !strings.Contains(all, n) {
				t.Errorf("%s: notes %q lack %q", pool, all, n)
			}
		}
	}
	for _, pool := range []string{"l4-mps", "plain"} {
		if n := byName[pool].notes; len(n) > 0 {
			t.Errorf("%s: unexpected notes %q", pool, n)
		}
	}
}

func TestDevicePluginModeConflicts(t *testing.T) {
	for _, tc := range []struct {
		name string
		gpus []plan.GPUPlan
		want string // mode and replicas
		note string
	}{
		{"majority MPS", []plan.GPUPlan{nvWhole("n", 0, nvMPS(4)), nvWhole("n", 1, nvMPS(6)), nvWhole("n", 2, nvTS(3))}, "mps 6", "all use MPS"},
		{"tie goes to time-slicing", []plan.GPUPlan{nvWhole("n", 0, nvMPS(4)), nvWhole("n", 1, nvTS(3))}, "timeslice 3", "all use time-slicing"},
		{"exclusive next to shared", []plan.GPUPlan{nvWhole("n", 0, nvExcl), nvWhole("n", 1, nvTS(3))}, "timeslice 3", "1 whole GPU(s) are planned exclusive"},
		{"too many MPS clients", []plan.GPUPlan{nvWhole("n", 0, nvMPS(64))}, "mps 48", "64 lowered to 48"},
		{"one replica is no sharing", []plan.GPUPlan{nvWhole("n", 0, nvTS(1)), nvWhole("n", 1, nvMPS(1))}, " 0", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dpPoolConfig(&plan.PoolPlan{Name: "p", GPU: "L4", GPUsPerNode: len(tc.gpus), Nodes: 1, GPUs: tc.gpus})
			if got := string(c.mode) + " " + strconv.Itoa(c.replicas); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
			if all := strings.Join(c.notes, "\n"); !strings.Contains(all, tc.note) {
				t.Errorf("notes %q lack %q", all, tc.note)
			}
		})
	}
}

func TestDevicePluginRejectsBadPools(t *testing.T) {
	if _, err := Render("nvidia-device-plugin", nil, &plan.Plan{}); err == nil {
		t.Error("an empty plan should be an error")
	}
	for _, name := range []string{"has space", "-dash", strings.Repeat("x", 64), "a/b"} {
		p := &plan.Plan{Pools: []plan.PoolPlan{{Name: name, GPU: "T4", GPUsPerNode: 1, Nodes: 1, GPUs: []plan.GPUPlan{nvWhole("n", 0, nvTS(2))}}}}
		if _, err := Render("nvidia-device-plugin", nil, p); err == nil {
			t.Errorf("pool %q should be rejected", name)
		}
	}
	// A pool name YAML would read as a boolean is quoted.
	p := &plan.Plan{Pools: []plan.PoolPlan{{Name: "yes", GPU: "T4", GPUsPerNode: 1, Nodes: 1, GPUs: []plan.GPUPlan{nvWhole("n", 0, nvTS(2))}}}}
	out, err := Render("nvidia-device-plugin", nil, p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"yes": |`) {
		t.Errorf("pool yes is not quoted:\n%s", out)
	}
	s, diags := spec.ReadDevicePluginConfig("x.yaml", out)
	if diags.Err() != nil || len(s.Imported) != 1 || s.Imported[0].Name != "yes" {
		t.Errorf("read back: %v %+v", diags, s.Imported)
	}
}

// The seeds' device plugin runs from its own Helm chart in kube-system
// (AWS's EKS guide): --namespace puts the ConfigMap there; a name
// Kubernetes would refuse, or a target that writes tenants' namespaces,
// is an error naming what would be valid.
func TestDevicePluginNamespace(t *testing.T) {
	out, err := RenderWith("nvidia-device-plugin", nvSpec(), nvPlan(), Options{Namespace: "kube-system"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "\n  namespace: kube-system\n") || strings.Contains(string(out), "namespace: "+DevicePluginNamespace+"\n") {
		t.Fatalf("ConfigMap not in kube-system:\n%s", out)
	}
	def, _ := Render("nvidia-device-plugin", nvSpec(), nvPlan())
	if want := strings.Replace(string(def), "  namespace: "+DevicePluginNamespace+"\n", "  namespace: kube-system\n", 1); string(out) != want {
		t.Errorf("--namespace changed more than the namespace")
	}
	for _, bad := range []string{"Kube-System", "kube_system", "-x", strings.Repeat("a", 64)} {
		if _, err := RenderWith("nvidia-device-plugin", nvSpec(), nvPlan(), Options{Namespace: bad}); err == nil || !strings.Contains(err.Error(), "lowercase letters, digits and '-'") {
			t.Errorf("namespace %q: %v", bad, err)
		}
	}
	if _, err := RenderWith("kubernetes", nvSpec(), nvPlan(), Options{Namespace: "kube-system"}); err == nil || !strings.Contains(err.Error(), "only the nvidia-device-plugin target") {
		t.Errorf("--namespace with another target: %v", err)
	}
}
