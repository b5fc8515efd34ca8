package agent

import (
	"testing"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/node"
)

// wantOf: a planned instance is made, a running claim's created instance
// and a reused idle one are only held, a whole GPU is made with the
// interval its configuring change names, a destroy is its claim's
// release; other nodes' devices and final claims are left out.
func TestWantOf(t *testing.T) {
	ts := &alloc.Sharing{Mode: alloc.TimeSlice, Replicas: 4, Interval: "Medium"}
	claims := []api.Claim{
		{ID: "new", State: api.Allocated, Allocation: &alloc.Allocation{
			Devices: []alloc.Assigned{{Node: "n", GPU: "G", Device: "G/3g.20gb@4", Profile: "3g.20gb", Start: 4, Mode: alloc.Exclusive}},
			Changes: []alloc.Change{{Kind: alloc.DestroyInstance, Node: "n", GPU: "G", Device: "MIG-old", Profile: "1g.5gb", Start: 4},
				{Kind: alloc.CreateInstance, Node: "n", GPU: "G", Device: "G/3g.20gb@4", Profile: "3g.20gb", Start: 4}}}},
		{ID: "run", State: api.Running, Allocation: &alloc.Allocation{
			Devices: []alloc.Assigned{{Node: "n", GPU: "G", Device: "MIG-run", Profile: "1g.5gb", Start: 0, Mode: alloc.Exclusive}},
			Changes: []alloc.Change{{Kind: alloc.CreateInstance, Node: "n", GPU: "G", Device: "MIG-run", Profile: "1g.5gb", Start: 0}}}},
		{ID: "reuse", State: api.Allocated, Allocation: &alloc.Allocation{
			Devices: []alloc.Assigned{{Node: "n", GPU: "G", Device: "MIG-idle", Profile: "1g.5gb", Start: 1, Mode: alloc.Exclusive}}}},
		{ID: "ts", State: api.Running, Allocation: &alloc.Allocation{
			Devices: []alloc.Assigned{{Node: "n", GPU: "H", Device: "H", Mode: alloc.TimeSlice}},
			Changes: []alloc.Change{{Kind: alloc.ConfigureShare, Node: "n", GPU: "H", Device: "H", Sharing: ts}}}},
		{ID: "elsewhere", State: api.Allocated, Allocation: &alloc.Allocation{
			Devices: []alloc.Assigned{{Node: "m", GPU: "X", Device: "X", Mode: alloc.Exclusive}}}},
		{ID: "done", State: api.Released, Allocation: &alloc.Allocation{
			Devices: []alloc.Assigned{{Node: "n", GPU: "K", Device: "K", Mode: alloc.Exclusive}}}},
	}
	w := wantOf(claims, "n")
	want := []node.Hold{
		{Claim: "new", GPU: "G", Profile: "3g.20gb", Start: 4, Mode: alloc.Exclusive, Make: true},
		{Claim: "run", GPU: "G", Profile: "1g.5gb", Start: 0, Instance: "MIG-run", Mode: alloc.Exclusive},
		{Claim: "reuse", GPU: "G", Profile: "1g.5gb", Start: 1, Instance: "MIG-idle", Mode: alloc.Exclusive},
		{Claim: "ts", GPU: "H", Mode: alloc.TimeSlice, Interval: "Medium", Make: true},
	}
	if len(w.Holds) != len(want) {
		t.Fatalf("holds %+v", w.Holds)
	}
	for i := range want {
		if w.Holds[i] != want[i] {
			t.Errorf("hold %d: %+v, want %+v", i, w.Holds[i], want[i])
		}
	}
	rel := node.Hold{Claim: "new", GPU: "G", Instance: "MIG-old", Profile: "1g.5gb", Start: 4}
	if len(w.Release) != 1 || w.Release[0] != rel {
		t.Fatalf("release %+v, want %+v", w.Release, rel)
	}
}
