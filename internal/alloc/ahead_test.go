package alloc

import (
	"fmt"
	"reflect"
	"testing"
)

// Six 6 GiB replicas of one tenant on A100-40GB with dynamic MIG: online,
// each gets the smallest instance that holds it (a 1g.10gb: 2 memory slices, 1 compute slice), which takes
// 12 memory slices and two GPUs; with the replicas still to come in view,
// the first gets an instance sized for several and the rest join it.
func TestAllocateAheadSizesForMates(t *testing.T) {
	var reps []Claim
	for i := range 6 {
		reps = append(reps, *claim(fmt.Sprintf("svc-%d", i), "acme",
			Request{MemoryMiB: 6 * 1024, ComputePercent: 10, Mode: MPS}))
	}
	run := func(ahead bool) (gpus int, profiles []string) {
		s := newState(t, Policy{}, gpuNode("n1", "A100-40GB", 4, migDynamic))
		used := map[string]bool{}
		for i := range reps {
			var a *Allocation
			var err error
			if ahead {
				a, err = s.AllocateAhead(&reps[i], reps[i+1:])
			} else {
				a, err = s.Allocate(&reps[i])
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Apply(a); err != nil {
				t.Fatal(err)
			}
			d := a.Devices[0]
			used[d.GPU] = true
			if d.New {
				profiles = append(profiles, d.Profile)
			}
		}
		if err := s.Check(); err != nil {
			t.Fatal(err)
		}
		return len(used), profiles
	}
	g0, p0 := run(false)
	g1, p1 := run(true)
	if g0 != 2 || fmt.Sprint(p0) != "[1g.10gb 1g.10gb 1g.10gb 1g.10gb 1g.10gb 1g.10gb]" {
		t.Fatalf("online: %d GPUs, instances %v; want 2 GPUs and six 1g.10gb", g0, p0)
	}
	if g1 != 1 || len(p1) >= len(p0) {
		t.Fatalf("ahead: %d GPUs, instances %v; want 1 GPU and fewer instances than %v", g1, p1, p0)
	}
}

// AllocateAhead changes nothing, ignores claims it cannot share with (other
// tenants, other modes, already allocated) and gives Allocate's answer when
// no claim to come could join.
func TestAllocateAheadIgnoresNonMates(t *testing.T) {
	s := newState(t, Policy{}, gpuNode("n1", "A100-40GB", 2, migDynamic))
	c := claim("a", "acme", Request{MemoryMiB: 4096, ComputePercent: 10, Mode: MPS})
	others := []Claim{
		*claim("other-tenant", "globex", Request{MemoryMiB: 4096, ComputePercent: 10, Mode: MPS}),
		*claim("exclusive", "acme", Request{MemoryMiB: 4096, Mode: Exclusive}),
		*claim("profile", "acme", Request{Profile: "3g.20gb", Mode: MPS}),
		*claim("two-devices", "acme", Request{MemoryMiB: 4096, Count: 2, Mode: MPS}),
	}
	hw := *claim("hardware", "acme", Request{MemoryMiB: 4096, Mode: MPS})
	hw.Isolation = IsolationHardware
	others = append(others, hw)
	before := fingerprint(s)
	want, err := s.Allocate(c)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.AllocateAhead(c, others)
	if err != nil {
		t.Fatal(err)
	}
	if fingerprint(s) != before {
		t.Fatal("AllocateAhead changed the state")
	}
	if !reflect.DeepEqual(got.Devices, want.Devices) {
		t.Fatalf("no mates, yet the answer differs:\nAllocate      %+v\nAllocateAhead %+v", want.Devices, got.Devices)
	}
	// A mate makes the difference; once it is allocated it no longer does.
	mate := *claim("mate", "acme", Request{MemoryMiB: 4096, ComputePercent: 10})
	got, _ = s.AllocateAhead(c, append(others, mate))
	if got.Devices[0].Profile == want.Devices[0].Profile {
		t.Fatalf("a mate to come did not size the device: %s", got.Devices[0].Profile)
	}
	a, err := s.Allocate(&mate)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(a); err != nil {
		t.Fatal(err)
	}
	want, _ = s.Allocate(c)
	got, _ = s.AllocateAhead(c, append(others, mate))
	if !reflect.DeepEqual(got.Devices, want.Devices) {
		t.Fatalf("an allocated mate still sized the device: %+v vs %+v", got.Devices, want.Devices)
	}
}

func TestSortForPlacement(t *testing.T) {
	cs := []Claim{
		*claim("small", "t", Request{MemoryMiB: 1024}),
		*claim("big", "t", Request{MemoryMiB: 8192}),
		*claim("profile", "t", Request{Profile: "1g.5gb"}),
		*claim("two", "t", Request{MemoryMiB: 3072, Count: 2}),
		*claim("small-2", "t", Request{MemoryMiB: 1024}),
	}
	urgent := *claim("urgent", "t", Request{MemoryMiB: 512})
	urgent.Priority = 10
	cs = append(cs, urgent)
	SortForPlacement(cs)
	var got []string
	for _, c := range cs {
		got = append(got, c.Name)
	}
	if want := "[urgent profile big two small small-2]"; fmt.Sprint(got) != want {
		t.Fatalf("order %v, want %s", got, want)
	}
}

// RefineOrder sorts by the devices the last pass chose: the biggest device
// first, its claims together in their old order; unallocated claims last
// in their priority, in their old order.
func TestRefineOrder(t *testing.T) {
	s := newState(t, Policy{}, gpuNode("n1", "A100-40GB", 2, migDynamic))
	small := *claim("small", "a", Request{Profile: "1g.5gb", Mode: MIG})
	bigA := *claim("big-a", "b", Request{MemoryMiB: 12 * 1024, Mode: MPS, ComputePercent: 10})
	bigB := *claim("big-b", "b", Request{MemoryMiB: 14 * 1024, Mode: MPS, ComputePercent: 10})
	mid := *claim("mid", "c", Request{Profile: "2g.10gb", Mode: MIG})
	order := []Claim{small, bigA, mid, bigB}
	if _, err := s.PlaceAll(order); err != nil {
		t.Fatal(err)
	}
	late := *claim("late", "d", Request{MemoryMiB: 1024})
	urgent := *claim("urgent", "d", Request{MemoryMiB: 1024})
	urgent.Priority = 5
	var got []string
	for _, c := range s.RefineOrder(append(order, late, urgent)) {
		got = append(got, c.Name)
	}
	// b's two claims share the 3g.20gb AllocateAhead sized for both.
	if want := "[urgent big-a big-b mid small late]"; fmt.Sprint(got) != want {
		t.Fatalf("order %v, want %s (allocations %v)", got, want, s.Allocations())
	}
}

// PlaceAll stops at the first claim that fits nowhere and returns what it
// placed before it.
func TestPlaceAllStopsAtNoFit(t *testing.T) {
	s := newState(t, Policy{}, gpuNode("n1", "T4", 1))
	order := []Claim{
		*claim("a", "t", Request{MemoryMiB: 8192, Mode: TimeSlice}),
		*claim("huge", "t", Request{MemoryMiB: 64 * 1024}),
		*claim("b", "t", Request{MemoryMiB: 1024, Mode: TimeSlice}),
	}
	as, err := s.PlaceAll(order)
	if !IsNoFit(err) || len(as) != 1 || as[0].Claim != "a" {
		t.Fatalf("placed %d, err %v", len(as), err)
	}
	if _, ok := s.Allocations()["a"]; !ok || len(s.Allocations()) != 1 {
		t.Fatalf("state holds %v", s.Allocations())
	}
}
