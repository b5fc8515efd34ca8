package fake_test

import (
	"context"
	"testing"

	"github.com/gpuslice/gpuslice/internal/gpu/fake"
)

// FuzzLoadSpec checks that LoadSpec never panics, that every error says
// something, and that every spec it accepts builds a machine.
func FuzzLoadSpec(f *testing.F) {
	for _, name := range []string{"dgx-a100-mig.yaml", "lab.yaml"} {
		f.Add(readTestdata(f, name))
	}
	for _, s := range []string{
		"",
		"gpus: []\n",
		"gpus:\n  - model: T4\n",
		"gpus:\n  - {model: A100-40GB, mig: true, instances: [7g.40gb]}\n",
		"gpus:\n  - {model: A100-40GB, mig: true, instances: \"3g.20gb@4,2g.10gb@0,1g.5gb@2,1g.5gb@3\"}\n",
		"gpus:\n  - {model: H200, count: 64, mig: true, instances: [1g.18gb+me@3, 1g.18gb]}\n",
		"gpus:\n  - model: A100-40GB\n    mig: true\n    instances: [3g.20gb@2, 4g.20gb@0, 1g.5gb@99]\n",
		"x: &a [*a]\n",
		"gpus: [{model: T4, count: 99999999999999999999}]\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		spec, err := fake.LoadSpec("fuzz.yaml", data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if len(spec.GPUs) == 0 || len(spec.GPUs) > fake.MaxGPUs {
			t.Fatalf("accepted %d GPUs", len(spec.GPUs))
		}
		m, err := fake.New(spec)
		if err != nil {
			t.Fatalf("LoadSpec accepted a spec New rejects: %v\n%q", err, data)
		}
		if gs, err := m.GPUs(context.Background()); err != nil || len(gs) != len(spec.GPUs) {
			t.Fatalf("GPUs: %d, %v", len(gs), err)
		}
	})
}
