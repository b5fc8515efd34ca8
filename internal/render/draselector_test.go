package render

import (
	"context"
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	dracel "k8s.io/dynamic-resource-allocation/cel"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
)

func TestNVIDIASelectorRewrites(t *testing.T) {
	for _, tc := range []struct{ in, want, foreign string }{
		{"device.attributes['gpu.nvidia.com'].model == 'A100-40GB'",
			`device.attributes["gpu.nvidia.com"].productName in ["NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB"]`, ""},
		{"device.attributes['gpu.nvidia.com'].model != 'T4' && node.labels['zone'] == 'a'",
			`!(device.attributes["gpu.nvidia.com"].productName in ["Tesla T4"]) && node.labels["zone"] == "a"`, ""},
		{"40000 <= device.capacity['gpu.nvidia.com'].memoryMiB",
			`device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40000Mi")) >= 0`, ""},
		{"device.attributes['gpu.nvidia.com'].memoryMiB > 20000 || device.attributes['gpu.nvidia.com'].index == 0",
			`device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("20000Mi")) > 0 || device.attributes["gpu.nvidia.com"].index == 0`,
			"attribute index"},
		// Kept as written: an unknown model, a comparison with a variable.
		{"device.attributes['gpu.nvidia.com'].model == 'Z9'", "device.attributes['gpu.nvidia.com'].model == 'Z9'", "attribute model"},
		{"device.attributes['gpu.nvidia.com'].memoryMiB > device.attributes['gpu.nvidia.com'].index",
			"device.attributes['gpu.nvidia.com'].memoryMiB > device.attributes['gpu.nvidia.com'].index", "attribute memoryMiB, attribute index"},
	} {
		got, err := nvidiaSelector(tc.in, catalog.Default())
		if err != nil || got != tc.want || foreignNames(got) != tc.foreign {
			t.Errorf("%s\n got  %s (%v), foreign %q\n want %s, foreign %q", tc.in, got, err, foreignNames(got), tc.want, tc.foreign)
		}
	}
	if _, err := nvidiaSelector("device.attributes[", catalog.Default()); err == nil {
		t.Error("a selector that does not parse gave no error")
	}
}

// The translation keeps the meaning: for every catalog model, each of its
// product names and memory sizes around the thresholds, the original
// selector under gpuslice's attributes and the rewritten one under the
// attributes NVIDIA's driver publishes (evaluated by Kubernetes' own DRA
// CEL library) agree.
func TestNVIDIASelectorKeepsMeaning(t *testing.T) {
	cat := catalog.Default()
	selectors := []string{
		"device.attributes['gpu.nvidia.com'].model == 'A100-40GB'",
		"device.attributes['gpu.nvidia.com'].model != 'H100-80GB-SXM'",
		"device.attributes['gpu.nvidia.com'].model in ['L4', 'T4', 'L40S']",
		"device.attributes['gpu.nvidia.com'].memoryMiB >= 40960",
		"device.capacity['gpu.nvidia.com'].memoryMiB < 24000",
		"81559 == device.attributes['gpu.nvidia.com'].memoryMiB",
		"40960 < device.attributes['gpu.nvidia.com'].memoryMiB && 100001 >= device.capacity['gpu.nvidia.com'].memoryMiB",
		"device.attributes['gpu.nvidia.com'].model == 'A100-80GB' || device.attributes['gpu.nvidia.com'].memoryMiB > 100000",
	}
	compiler := dracel.GetCompiler(dracel.Features{})
	for _, sel := range selectors {
		out, err := nvidiaSelector(sel, cat)
		if err != nil || foreignNames(out) != "" {
			t.Fatalf("%s: %s, %v, foreign %q", sel, out, err, foreignNames(out))
		}
		mine, err := alloc.CompileSelector(sel)
		if err != nil {
			t.Fatal(err)
		}
		theirs := compiler.CompileCELExpression(out, dracel.Options{})
		if theirs.Error != nil {
			t.Fatalf("%s: Kubernetes rejects %s: %v", sel, out, theirs.Error)
		}
		checked := 0
		for _, g := range cat.GPUs() {
			for _, product := range g.ProductNames {
				for _, mem := range []int64{g.MemoryMiB, 24000, 40960, 40959, 81559, 100001} {
					dev := map[string]any{
						"driver":     gpuClass,
						"attributes": map[string]any{gpuClass: map[string]any{"model": g.ID, "productName": product, "memoryMiB": mem}},
						"capacity":   map[string]any{gpuClass: map[string]any{"memoryMiB": mem, "memory": mem << 20}},
					}
					res, _, err := mine.Eval(map[string]any{"device": dev, "node": map[string]any{}})
					if err != nil {
						t.Fatal(err)
					}
					want := res.Value().(bool)
					p := product
					got, _, err := theirs.DeviceMatches(context.Background(), dracel.Device{Driver: gpuClass,
						Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{gpuClass + "/productName": {StringValue: &p}},
						Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
							gpuClass + "/memory": {Value: resource.MustParse(fmt.Sprintf("%dMi", mem))}},
					})
					if err != nil || got != want {
						t.Errorf("%s on %s %q with %d MiB: gpuslice %v, NVIDIA form %v (%v)\n  %s", sel, g.ID, product, mem, want, got, err, out)
					}
					checked++
				}
			}
		}
		if checked < 50 {
			t.Fatalf("only %d devices checked", checked)
		}
	}
}
