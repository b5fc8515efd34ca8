package render

import (
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/plan"
)

// Issue #11 item 6: the dra target leaves the DeviceClasses to NVIDIA's
// driver unless asked, and says which feature gates its sharing configs
// need.
func TestDRADeviceClassesOnlyWhenAsked(t *testing.T) {
	s, p := planFor(t, "../../examples/gpuslice.yaml")
	out, err := Render("dra", s, p)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "kind: DeviceClass") {
		t.Errorf("DeviceClasses written without being asked:\n%s", out)
	}
	for _, want := range []string{"feature gate(s) TimeSlicingSettings and MPSSupport", "featureGates: {TimeSlicingSettings: true, MPSSupport: true}",
		"cannot be enabled together with the driver's DynamicMIG", "strategy: MPS", "strategy: TimeSlicing"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the render lacks %q", want)
		}
	}
	with, err := RenderWith("dra", s, p, Options{DRADeviceClasses: true})
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(with), "kind: DeviceClass"); n != 2 {
		t.Errorf("%d DeviceClasses with the option, want 2", n)
	}
	if !strings.HasPrefix(string(with), "# DRA objects rendered by gpuslice") || !strings.Contains(string(with), "name: gpu.nvidia.com") {
		t.Errorf("classes not placed after the header:\n%.600s", with)
	}
}

// A plan without shared devices needs no gate.
func TestDRANoGatesWithoutSharing(t *testing.T) {
	s, p := planFor(t, "../spec/testdata/compose/seed-mig.yaml")
	out, err := Render("dra", s, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.DRAFeatureGates(p)) == 0 && strings.Contains(string(out), "feature gate") {
		t.Errorf("gates named without shared devices:\n%s", out)
	}
}

// Whole-GPU claims of an L4 or T4 pool select its model.
func TestDRAModelSelectorForWholeGPUPools(t *testing.T) {
	s, p := planFor(t, "../spec/testdata/compose/seed-timeslicing.yaml")
	out, err := Render("dra", s, p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(oneLine(out), "productName == 'Tesla T4'") {
		t.Errorf("no T4 model selector:\n%s", out)
	}
	s, p = planFor(t, "../../examples/gpuslice.yaml")
	out, _ = Render("dra", s, p)
	if !strings.Contains(oneLine(out), "productName == 'NVIDIA L4'") {
		t.Errorf("no L4 model selector for notebooks:\n%s", out)
	}
}

// oneLine undoes YAML's line folding for substring checks.
func oneLine(b []byte) string { return strings.Join(strings.Fields(string(b)), " ") }
