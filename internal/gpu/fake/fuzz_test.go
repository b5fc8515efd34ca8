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

// FuzzParseFaultRequest checks that ParseFaultRequest never panics, that
// every error says something, and that a request it accepts is applied
// to a machine or refused with an error, never a panic.
func FuzzParseFaultRequest(f *testing.F) {
	for _, s := range []string{
		`{"gpu": 0, "xid": 79}`,
		`{"gpu": 1, "xid": 13}`,
		`{"instance": "MIG-00000000-0000-0000-0000-000000000000", "xid": 94}`,
		`{"gpu": 1, "lost": true}`,
		`{"gpu": 1, "recover": true}`,
		`{"gpu": 99999999999999999999, "xid": 79}`,
		`{"gpu": 0, "xid": 79, "lost": true, "extra": null}`,
		`{"gpu": null, "xid": null}`,
		`[]`, `null`, `"x"`, ``, `{`,
	} {
		f.Add([]byte(s))
	}
	m, err := fake.New(fake.MachineSpec{GPUs: []fake.GPUSpec{{Model: "A100-40GB", MIGEnabled: true, Instances: []string{"3g.20gb@4"}}, {Model: "L4"}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := fake.ParseFaultRequest(data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if r.Validate() != nil || r.String() == "" {
			t.Fatalf("accepted %+v", r)
		}
		if done, err := m.ApplyFault(r); (err == nil) == (done == "") {
			t.Fatalf("ApplyFault(%+v) = %q, %v", r, done, err)
		}
	})
}
