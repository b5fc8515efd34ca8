package fake_test

import (
	"testing"

	"github.com/gpuslice/gpuslice/internal/agent"
	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/gpu/fake"
)

// TestUUIDsAsNVMLWritesThem: every preset and spec file, under several
// seeds, has GPU and MIG uuids in NVML's lowercase 8-4-4-4-12 form, and
// the inventory an agent reports of it passes the server's validation.
func TestUUIDsAsNVMLWritesThem(t *testing.T) {
	specs := map[string]fake.MachineSpec{}
	for _, name := range fake.Presets() {
		s, err := fake.Preset(name)
		if err != nil {
			t.Fatal(err)
		}
		specs[name] = s
	}
	for _, file := range []string{"dgx-a100-mig.yaml", "lab.yaml"} {
		s, err := fake.LoadSpec(file, readTestdata(t, file))
		if err != nil {
			t.Fatal(err)
		}
		specs[file] = s
	}
	specs["MIG on"] = fake.MachineSpec{GPUs: []fake.GPUSpec{
		{Model: "A100-40GB", MIGEnabled: true, Instances: []string{"3g.20gb", "2g.10gb", "1g.5gb"}},
		{Model: "H100-80GB-SXM", MIGEnabled: true},
		{Model: "L4"},
	}}
	for name, spec := range specs {
		for _, seed := range []int64{0, 1, -7, 1 << 40} {
			m := mustNew(t, spec, fake.WithSeed(seed))
			// An instance created later gets its uuid the same way.
			for _, g := range gpus(t, m) {
				if g.MIGEnabled && len(g.Instances) == 0 {
					if _, err := m.CreateInstance(t.Context(), g.Index, "1g.10gb", 0); err != nil {
						t.Fatalf("%s: GPU %d: %v", name, g.Index, err)
					}
				}
			}
			gs := gpus(t, m)
			for _, g := range gs {
				if !alloc.ValidGPUUUID(g.UUID) {
					t.Errorf("%s seed %d: GPU %d uuid %q", name, seed, g.Index, g.UUID)
				}
				for _, in := range g.Instances {
					if !alloc.ValidMIGUUID(in.UUID) {
						t.Errorf("%s seed %d: GPU %d instance uuid %q", name, seed, g.Index, in.UUID)
					}
				}
			}
			inv, err := agent.Inventory("n1", gs)
			if err != nil {
				t.Fatal(err)
			}
			if err := alloc.ValidateInventory(inv); err != nil {
				t.Errorf("%s seed %d: %v", name, seed, err)
			}
		}
	}
}
