package agent

import (
	"testing"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
)

func TestPlanOrdersChangesSafely(t *testing.T) {
	claim := func(id string, devices []string, changes ...alloc.Change) api.Claim {
		a := &alloc.Allocation{Claim: id, Changes: changes}
		for _, d := range devices {
			a.Devices = append(a.Devices, alloc.Assigned{Device: d, Node: "n"})
		}
		return api.Claim{ID: id, Allocation: a}
	}
	claims := []api.Claim{
		claim("new", []string{"G/3g.20gb@4"},
			alloc.Change{Kind: alloc.CreateInstance, Node: "n", GPU: "G", Device: "G/3g.20gb@4", Profile: "3g.20gb", Start: 4},
			alloc.Change{Kind: alloc.DestroyInstance, Node: "n", GPU: "G", Device: "MIG-old"},
			alloc.Change{Kind: alloc.EnableMIG, Node: "n", GPU: "H"},
			alloc.Change{Kind: alloc.ConfigureShare, Node: "n", GPU: "G", Device: "G/3g.20gb@4"}),
		// An older claim's destroy of an instance a live claim now holds
		// must never run again.
		claim("old", []string{"MIG-held"}, alloc.Change{Kind: alloc.DestroyInstance, Node: "n", GPU: "G", Device: "MIG-held"}),
		claim("elsewhere", nil, alloc.Change{Kind: alloc.CreateInstance, Node: "m", GPU: "X", Profile: "1g.5gb"}),
		{ID: "pending"},
	}
	got := Plan(claims, "n")
	want := []alloc.ChangeKind{alloc.DestroyInstance, alloc.EnableMIG, alloc.CreateInstance}
	if len(got) != len(want) {
		t.Fatalf("plan %+v, want kinds %v", got, want)
	}
	for i, k := range want {
		if got[i].Kind != k {
			t.Fatalf("step %d is %s, want %s (plan %+v)", i, got[i].Kind, k, got)
		}
	}
	if got[0].Device != "MIG-old" {
		t.Fatalf("destroyed %s", got[0].Device)
	}
}
