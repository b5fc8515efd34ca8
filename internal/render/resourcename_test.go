package render

import (
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/model"
	"github.com/gpuslice/gpuslice/internal/plan"
	"github.com/gpuslice/gpuslice/internal/spec"
)

// Issue #11 item 3: every MIG profile of every catalog GPU gets the
// resource name the device plugin advertises, and that name is a valid
// Kubernetes resource name.
func TestMIGResourceNamesAreWhatThePluginAdvertises(t *testing.T) {
	for _, g := range catalog.Default().GPUs() {
		for _, prof := range g.ProfileNames() {
			name := migResourceName(prof)
			if errs := validation.IsQualifiedName(name); len(errs) > 0 {
				t.Errorf("%s %s: %s is not a valid resource name: %v", g.ID, prof, name, errs)
			}
			if strings.Contains(name, "+") {
				t.Errorf("%s keeps a '+'", name)
			}
		}
	}
	for prof, want := range map[string]string{"1g.10gb+me": "nvidia.com/mig-1g.10gb.me", "1g.5gb": "nvidia.com/mig-1g.5gb",
		"1g.24gb+me.all": "nvidia.com/mig-1g.24gb.me.all", "1g.5gb-me": "nvidia.com/mig-1g.5gb-me"} {
		if got := migResourceName(prof); got != want {
			t.Errorf("%s: %s, want %s", prof, got, want)
		}
	}
	shared := &model.ImportedSharing{MIGStrategy: "mixed", DevicePlugin: &model.DevicePluginSettings{RenameByDefault: true,
		Replicas: map[string]int{"nvidia.com/gpu": 2, "nvidia.com/mig-1g.10gb.me": 2}}}
	single := &model.ImportedSharing{MIGStrategy: "single", DevicePlugin: &model.DevicePluginSettings{}}
	for _, c := range []struct {
		imp        *model.ImportedSharing
		prof, want string
	}{
		{nil, "", "nvidia.com/gpu"},
		{nil, "1g.10gb+me", "nvidia.com/mig-1g.10gb.me"},
		{shared, "", "nvidia.com/gpu.shared"},
		{shared, "1g.10gb+me", "nvidia.com/mig-1g.10gb.me.shared"},
		{shared, "1g.10gb", "nvidia.com/mig-1g.10gb"},
		{single, "3g.40gb", "nvidia.com/gpu"},
	} {
		if got := poolResourceName(c.imp, c.prof); got != c.want {
			t.Errorf("%+v %q: %s, want %s", c.imp, c.prof, got, c.want)
		}
	}
}

// The Kubernetes and device-plugin renders name a +me instance the way
// the plugin does.
func TestRenderedMIGResourceNamesAreValid(t *testing.T) {
	in := `apiVersion: gpuslice.dev/v1alpha1
kind: Spec
pools:
  - name: h100
    gpu: H100-80GB-SXM
    gpusPerNode: 1
    mig: {1g.10gb+me: 1, 1g.10gb: 6}
    migSharing: {mode: timeslice, replicas: 2}
workloads:
  - name: media
    tenant: a
    replicas: 2
    gpu: {profile: 1g.10gb+me, mode: timeslice, memory: 4GiB}
`
	s, diags := spec.Read("h100.yaml", []byte(in), "")
	if err := diags.Err(); err != nil {
		t.Fatal(err)
	}
	p := mustPlan(t, s)
	for _, target := range []string{"kubernetes", "nvidia-device-plugin"} {
		out, err := Render(target, s, p)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(out), "nvidia.com/mig-1g.10gb.me") || strings.Contains(string(out), "nvidia.com/mig-1g.10gb+me") {
			t.Errorf("%s does not name nvidia.com/mig-1g.10gb.me:\n%s", target, out)
		}
	}
}

func mustPlan(t *testing.T, s *spec.Spec) *plan.Plan {
	t.Helper()
	p, err := plan.Make(s, plan.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Unplaced) > 0 {
		t.Fatalf("unplaced: %+v", p.Unplaced)
	}
	return p
}

// Under an imported config with renameByDefault, pods ask for the renamed
// resource the plugin advertises.
func TestKubernetesAsksForRenamedResources(t *testing.T) {
	dir := filepath.Join("testdata", "imports", "dp-timeslicing")
	all, _ := importCase(t, dir)
	s := readApplied(t, all)
	out, err := Render("kubernetes", s, mustPlan(t, s))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "nvidia.com/gpu.shared: 1") || strings.Contains(string(out), "nvidia.com/gpu: 1") {
		t.Errorf("the Deployment does not ask for nvidia.com/gpu.shared:\n%s", out)
	}
}
