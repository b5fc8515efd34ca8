package plan

import (
	"os"
	"testing"

	"github.com/gpuslice/gpuslice/internal/spec"
)

func readNative(t *testing.T, path string) *spec.Spec {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, diags := spec.ReadNative(path, data)
	if err := diags.Err(); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestExamplePlan(t *testing.T) {
	s := readNative(t, "../../examples/gpuslice.yaml")
	p, err := Make(s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", p.Cost)
	for _, pp := range p.Pools {
		t.Logf("pool %s: %d nodes, %d GPUs used", pp.Name, pp.Nodes, pp.GPUsUsed)
		for _, g := range pp.GPUs {
			t.Logf("  %+v", g)
		}
	}
	for _, w := range p.Warnings {
		t.Log("warning:", w)
	}
	for _, u := range p.Unplaced {
		t.Log("unplaced:", u)
	}
	if len(p.Unplaced) > 0 {
		t.Fatalf("%d unplaced", len(p.Unplaced))
	}
}
