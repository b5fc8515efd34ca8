package alloc

import "testing"

// A shared request with no memory is promised the GPU's default share
// (1/16 of its memory) wherever it lands: on a whole GPU, on a MIG
// instance the allocator makes for it, and under MPS, whose 48 clients
// would otherwise give 1/48. A device an operator set up for fewer clients
// gives its larger equal share; an MPS pinned-memory limit is kept.
func TestDefaultMemoryIsTheGPUsShareWhereverItLands(t *testing.T) {
	const a100 = 40960 // A100-40GB memory in the catalog, MiB
	cases := []struct {
		name string
		node Node
		mode Mode
		want int64
	}{
		{"time-sliced whole GPU", gpuNode("n", "A100-40GB", 1), TimeSlice, a100 / 16},
		{"time-sliced on a dynamic MIG GPU", gpuNode("n", "A100-40GB", 1, migDynamic), TimeSlice, a100 / 16},
		{"MPS whole GPU", gpuNode("n", "A100-40GB", 1), MPS, a100 / 16},
		{"MPS on a dynamic MIG GPU", gpuNode("n", "A100-40GB", 1, migDynamic), MPS, a100 / 16},
		{"time-sliced, 4 replicas set by the operator", gpuNode("n", "A100-40GB", 1, shared(TimeSlice, 4)), TimeSlice, a100 / 4},
		{"L4, 16 replicas", gpuNode("n", "L4", 1, shared(TimeSlice, 16)), TimeSlice, 0}, // 0: the L4's own 1/16
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newState(t, Policy{}, tc.node)
			want := tc.want
			if want == 0 {
				want = s.gpus[0].model.MemoryMiB / 16
			}
			a := must(t, s, claim("c", "t", Request{Mode: tc.mode}))
			if got := a.Devices[0].MemoryMiB; got != want {
				t.Fatalf("promised %d MiB on %s, want %d", got, a.Devices[0].Device, want)
			}
			// A second one is promised the same: the amount is a rule, not
			// what the first claim left over.
			b := must(t, s, claim("d", "t", Request{Mode: tc.mode}))
			if got := b.Devices[0].MemoryMiB; got != want {
				t.Fatalf("second claim promised %d MiB, want %d", got, want)
			}
			if err := s.Check(); err != nil {
				t.Fatal(err)
			}
		})
	}
	// An MPS device with a pinned-memory limit promises that limit.
	n := gpuNode("n", "A100-40GB", 1)
	n.GPUs[0].Sharing = Sharing{Mode: MPS, MaxClients: 8, DefaultPinnedMiB: 3000}
	s := newState(t, Policy{}, n)
	if got := must(t, s, claim("c", "t", Request{Mode: MPS})).Devices[0].MemoryMiB; got != 3000 {
		t.Fatalf("pinned limit: promised %d MiB, want 3000", got)
	}
	// A policy with other default replicas changes the share.
	s = newState(t, Policy{DefaultReplicas: 8}, gpuNode("n", "A100-40GB", 1, migDynamic))
	if got := must(t, s, claim("c", "t", Request{Mode: TimeSlice})).Devices[0].MemoryMiB; got != a100/8 {
		t.Fatalf("policy 8 replicas: promised %d MiB, want %d", got, a100/8)
	}
}
