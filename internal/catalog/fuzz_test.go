package catalog

import (
	"testing"
)

func FuzzLoad(f *testing.F) {
	f.Add(embedded)
	f.Add([]byte("sources: {S: x}\ngpus:\n  - id: X\n    memoryMiB: 1\n    source: S\n    confidence: verified\n"))
	f.Add([]byte("gpus: [{id: A, mig: {memorySlices: 8, profiles: [{name: 1g.5gb, placement: {starts: [7], size: 2}}]}}]"))
	f.Add([]byte("&a [*a]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Load(data)
		if err != nil {
			return
		}
		// A catalog that loads must answer lookups on every name it holds.
		for _, g := range c.GPUs() {
			for _, key := range gpuKeys(&g) {
				if _, err := c.GPU(key); err != nil {
					t.Fatalf("loaded catalog cannot resolve %q: %v", key, err)
				}
			}
			for _, name := range g.ProfileNames() {
				if _, err := g.Profile(name); err != nil {
					t.Fatalf("%s cannot resolve its profile %q: %v", g.ID, name, err)
				}
			}
		}
	})
}

func FuzzLookup(f *testing.F) {
	for _, s := range []string{"A100-40GB", "a100-40g", "NVIDIA H100 80GB HBM3", "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "-mig-", "", "\x00"} {
		f.Add(s, "1g.5g", "p4d.24xlarge")
	}
	c := Default()
	gpus := c.GPUs()
	f.Fuzz(func(t *testing.T, gpu, profile, instance string) {
		g, err := c.GPU(gpu)
		if err != nil && !IsNotFound(err) {
			t.Fatalf("GPU(%q): unexpected error type %v", gpu, err)
		}
		if g == nil {
			g = &gpus[len(gpu)%len(gpus)]
		}
		if _, err := g.Profile(profile); err != nil {
			_ = err.Error()
		}
		_, _ = c.InstanceType(instance)
		_, _ = c.InstanceTypes(instance)
		_ = Suggest(profile, g.ProfileNames())
	})
}
