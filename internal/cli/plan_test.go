package cli

import (
	"strings"
	"testing"
)

// A MIG plan's table collapses repeated instances and idle GPUs, never
// prints an empty claim list, and says nothing is saved when nothing is.
func TestPlanMIGTableReadable(t *testing.T) {
	out := run("plan", "../../examples/compose-mig.yaml")
	for _, l := range strings.Split(out, "\n") {
		if len([]rune(l)) > 200 {
			t.Errorf("line of %d characters:\n%s", len([]rune(l)), l)
		}
	}
	for _, bad := range []string{"[]", "saves $0.00", "dynamic"} {
		if strings.Contains(out, bad) {
			t.Errorf("output contains %q:\n%s", bad, out)
		}
	}
	for _, want := range []string{"-0/1-7 ", "MIG 7× 1g.5gb idle", "5× 1g.5gb exclusive: gpuinfo-0", "no saving at this size", "8 GPUs bought (1 in use)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// Issue #11 item 1: a device-plugin config read beside a spec fixes its
// pool's sharing, the plan says so, render writes it back with its flags,
// and a config that contradicts the spec is an error naming both files.
func TestPlanHonoursImportedDevicePluginConfig(t *testing.T) {
	dir := "../render/testdata/imports/dp-timeslicing/"
	out := run("plan", dir+"pool.yaml", dir+"dp-config.yaml")
	for _, want := range []string{"whole, timeslice×4: web-0 web-1 web-2 web-3",
		`config: whole GPUs: time-slicing with 4 replicas, fixed by device-plugin config "default"`} {
		if !strings.Contains(out, want) {
			t.Errorf("plan lacks %q:\n%s", want, out)
		}
	}
	out = run("render", dir+"pool.yaml", dir+"dp-config.yaml", "--target", "nvidia-device-plugin")
	for _, want := range []string{"replicas: 4", "renameByDefault: true", "failRequestsGreaterThanOne: true", "deviceIDStrategy: index"} {
		if !strings.Contains(out, want) {
			t.Errorf("render lacks %q:\n%s", want, out)
		}
	}
	out = run("plan", "../../examples/compose-timeslicing.yaml", dir+"dp-config.yaml")
	if !strings.Contains(out, "examples/compose-timeslicing.yaml:10, but device-plugin config \"default\" (../render/testdata/imports/dp-timeslicing/dp-config.yaml:15) sets time-slicing with 4 replicas") {
		t.Errorf("no conflict naming both positions:\n%s", out)
	}
}

// Issue #11 item 6: render --target dra writes NVIDIA's DeviceClasses only
// with --dra-device-classes, and plan warns about the driver's feature gates.
func TestRenderDRADeviceClassesFlag(t *testing.T) {
	if out := run("render", "../../examples/gpuslice.yaml", "--target", "dra"); strings.Contains(out, "kind: DeviceClass") {
		t.Errorf("DeviceClasses without the flag")
	}
	if out := run("render", "../../examples/gpuslice.yaml", "--target", "dra", "--dra-device-classes"); strings.Count(out, "kind: DeviceClass") != 2 {
		t.Errorf("want 2 DeviceClasses with the flag:\n%.800s", out)
	}
	if out := run("plan", "../../examples/gpuslice.yaml"); !strings.Contains(out, "feature gate(s) TimeSlicingSettings and MPSSupport") {
		t.Errorf("plan does not warn about the DRA driver's feature gates:\n%s", out)
	}
}
