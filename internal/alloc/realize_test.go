package alloc

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// A control plane that restarts before its agents made any layout change
// rebuilds from the reported fleet and its live allocations, in whatever
// order its store lists them: every one of them must come back (Restore),
// and the rules hold (Check). Allocations are decided on the same fleet
// with random allocate/release sequences, as the server makes them.
func TestRestoreBringsBackEveryLiveAllocation(t *testing.T) {
	for seed := range uint64(150) {
		rng := rand.New(rand.NewPCG(seed, 7))
		fleet := randomFleet(rng)
		s, err := NewState(fleet, nil, Options{})
		if err != nil {
			t.Fatal(err)
		}
		var live []string
		for i := range 120 {
			if len(live) > 0 && rng.IntN(3) == 0 {
				k := rng.IntN(len(live))
				if err := s.Release(live[k]); err != nil {
					t.Fatal(err)
				}
				live = append(live[:k], live[k+1:]...)
				continue
			}
			a, err := s.Allocate(randomClaim(rng, i))
			if err != nil {
				continue
			}
			if err := s.Apply(a); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			live = append(live, a.Claim)
		}
		var as []*Allocation
		for _, id := range live {
			as = append(as, s.allocs[id])
		}
		rng.Shuffle(len(as), func(i, j int) { as[i], as[j] = as[j], as[i] })
		fresh, err := NewState(fleet, nil, Options{})
		if err != nil {
			t.Fatal(err)
		}
		applied, failed := fresh.Restore(as)
		for id, err := range failed {
			t.Errorf("seed %d: claim %s did not come back: %v", seed, id, err)
		}
		if len(applied) != len(as) {
			t.Errorf("seed %d: %d of %d allocations restored", seed, len(applied), len(as))
		}
		if err := fresh.Check(); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if t.Failed() {
			return
		}
	}
}

// The claim that opened a shared device is gone; a claim on a high slot
// stays. Rebuilt on the reported (dynamic) device, the device is sized so
// that slot fits instead of the fleet's default replicas.
func TestRestoreSizesASharedDeviceItsOpenerLeft(t *testing.T) {
	fleet := Fleet{Policy: Policy{DefaultReplicas: 2}, Nodes: []Node{gpuNode("n0", "L4", 1)}}
	s, err := NewState(fleet, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var as []*Allocation
	for i := range 2 {
		a, err := s.Allocate(&Claim{Name: fmt.Sprintf("c%d", i), Tenant: "t", Requests: []Request{{Name: "gpu", Mode: TimeSlice, MemoryMiB: 1000}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Apply(a); err != nil {
			t.Fatal(err)
		}
		as = append(as, a)
	}
	// c1 (slot 1) alone, on a fleet whose default is 2 replicas: fits.
	// With the opener's sizing gone and a default of 1, it must be sized.
	fleet.Policy.DefaultReplicas = 1
	fresh, err := NewState(fleet, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	applied, failed := fresh.Restore(as[1:])
	if len(failed) > 0 {
		t.Fatalf("failed: %v", failed)
	}
	if !hasKind(applied["c1"].Changes, ConfigureShare) {
		t.Fatalf("no sizing change: %+v", applied["c1"].Changes)
	}
	// Opener after joiner in the caller's order: still both back.
	fresh, _ = NewState(Fleet{Policy: Policy{DefaultReplicas: 2}, Nodes: fleet.Nodes}, nil, Options{})
	if _, failed := fresh.Restore([]*Allocation{as[1], as[0]}); len(failed) > 0 {
		t.Fatalf("joiner listed first: %v", failed)
	}
}

// The opener of a shared device also configures another device that a
// later claim joins... and that later claim configures a device of its
// own, so both "configure": whichever comes first in the caller's list,
// the device's set-up goes with the first claim restored onto it and both
// come back (the restore used to apply the opener's configure change onto
// a device the joiner already held: "the device is in use").
func TestRestoreConfigureGoesWithTheFirstClaimOnTheDevice(t *testing.T) {
	fleet := Fleet{Nodes: []Node{gpuNode("n0", "L4", 2)}}
	s, err := NewState(fleet, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	opener := must(t, s, &Claim{Name: "opener", Tenant: "t", Requests: []Request{{Name: "gpu", Mode: TimeSlice, MemoryMiB: 1000}}})
	// joiner: one request joins opener's device, one opens the other GPU.
	joiner := must(t, s, &Claim{Name: "joiner", Tenant: "t", Requests: []Request{
		{Name: "a", Mode: TimeSlice, MemoryMiB: 1000, Selector: "device.attributes['gpu.nvidia.com'].index == 0"},
		{Name: "b", Mode: TimeSlice, MemoryMiB: 1000, Selector: "device.attributes['gpu.nvidia.com'].index == 1"}}})
	if !hasKind(opener.Changes, ConfigureShare) || !hasKind(joiner.Changes, ConfigureShare) {
		t.Fatalf("want both to configure a device: opener %+v, joiner %+v", opener.Changes, joiner.Changes)
	}
	for _, order := range [][]*Allocation{{joiner, opener}, {opener, joiner}} {
		fresh, err := NewState(fleet, nil, Options{})
		if err != nil {
			t.Fatal(err)
		}
		applied, failed := fresh.Restore(order)
		if len(failed) > 0 || len(applied) != 2 {
			t.Fatalf("restore %s first: failed %v", order[0].Claim, failed)
		}
		if err := fresh.Check(); err != nil {
			t.Fatal(err)
		}
		// The shared device keeps the sharing it was set up with.
		dev := fresh.devs[fresh.byUUID[opener.Devices[0].Device]]
		if dev.sharing.Mode != TimeSlice || dev.sharing.Replicas != DefaultReplicas || dev.clients != 2 {
			t.Fatalf("restore %s first: device %s sharing %+v with %d clients", order[0].Claim, dev.id, dev.sharing, dev.clients)
		}
	}
}

func hasKind(cs []Change, k ChangeKind) bool {
	for _, c := range cs {
		if c.Kind == k {
			return true
		}
	}
	return false
}

// BenchmarkRestore is what a control-plane rebuild costs the allocator:
// a fresh State from the fleet, then every live allocation restored. At
// 10,000 GPUs with the fleet half full:
//
//	go test -run '^$' -bench Restore ./internal/alloc/
func BenchmarkRestore(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("gpus=%d", n), func(b *testing.B) {
			fleet := benchFleet(n)
			s, err := NewState(fleet, nil, Options{})
			if err != nil {
				b.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			var live []*Allocation
			for i := 0; len(live) < n/2 && i < 4*n; i++ {
				a, err := s.Allocate(benchClaim(rng, i))
				if err != nil {
					continue
				}
				if err := s.Apply(a); err != nil {
					b.Fatal(err)
				}
				live = append(live, a)
			}
			b.ResetTimer()
			for range b.N {
				fresh, err := NewState(fleet, nil, Options{})
				if err != nil {
					b.Fatal(err)
				}
				if _, failed := fresh.Restore(live); len(failed) > 0 {
					b.Fatalf("%d allocations did not come back", len(failed))
				}
			}
			b.ReportMetric(float64(len(live)), "allocations")
		})
	}
}

// An instance made for a shared claim is made with the sharing it was
// decided with. A rebuild before the agent has made it (the instance only
// planned) must not take the sharing of the fleet as it is now (here the
// operator restarted serve with other --default-replicas), in whichever
// order the live claims come.
func TestRestoreMakesAPlannedInstanceWithItsSharing(t *testing.T) {
	fleet := Fleet{Policy: Policy{DefaultReplicas: 4}, Nodes: []Node{gpuNode("n0", "A100-40GB", 1, migDynamic)}}
	s, err := NewState(fleet, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	mk := func(i int) *Claim {
		return &Claim{Name: fmt.Sprintf("c%d", i), Tenant: "t", Requests: []Request{{Name: "gpu", Mode: TimeSlice, MemoryMiB: 1000}}}
	}
	a := must(t, s, mk(0))
	var made *Sharing
	for _, ch := range a.Changes {
		if ch.Kind == CreateInstance {
			made = ch.Sharing
		}
	}
	if made == nil || made.Mode != TimeSlice || made.Replicas != 4 {
		t.Fatalf("want a new instance time-sliced ×4: %+v", a.Changes)
	}
	b := must(t, s, mk(1))
	if b.Devices[0].Device != a.Devices[0].Device {
		t.Fatalf("second claim on %s, want it to join %s", b.Devices[0].Device, a.Devices[0].Device)
	}
	fleet.Policy.DefaultReplicas = 0 // 16
	for _, order := range [][]*Allocation{{a, b}, {b, a}} {
		fresh, err := NewState(fleet, nil, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, failed := fresh.Restore(order); len(failed) > 0 {
			t.Fatalf("%s first: %v", order[0].Claim, failed)
		}
		dev := fresh.devs[fresh.byUUID[a.Devices[0].Device]]
		if dev.sharing != *made {
			t.Fatalf("%s first: the instance has sharing %+v, it was to be made with %+v", order[0].Claim, dev.sharing, *made)
		}
		if err := fresh.Check(); err != nil {
			t.Fatal(err)
		}
	}
}
