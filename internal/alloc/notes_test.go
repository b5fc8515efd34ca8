package alloc

import (
	"strings"
	"testing"
)

// The README's first minute on the default simulated host (a DGX A100,
// MIG off, the allocator free to turn it on): after a MIG claim turned MIG
// on for one GPU, a shared claim that named no profile still gets a whole
// GPU — its compute percentage is of a GPU, as typed — and says nothing
// more. With the policy preferring MIG, or with no whole GPU left, it goes
// into a MIG instance and its allocation says so in one line.
func TestSharedClaimsPreferWholeGPUsAndSayWhenTheyLandInMIG(t *testing.T) {
	dgx := func() Node { return gpuNode("vm", "A100-40GB", 8) }
	setup := func(t *testing.T, pol Policy) *State {
		pol.AllowModeSwitch = true
		s := newState(t, pol, dgx())
		must(t, s, claim("mig", "default", Request{Mode: MIG, Profile: "3g.20gb"}))
		if err := s.Release("mig"); err != nil { // its 3g.20gb stays, idle
			t.Fatal(err)
		}
		if s.migOn != 1 {
			t.Fatalf("%d GPUs with MIG on, want 1", s.migOn)
		}
		return s
	}
	t.Run("mps 30% lands on a whole GPU as 30%", func(t *testing.T) {
		s := setup(t, Policy{})
		a := must(t, s, claim("mps", "default", Request{Mode: MPS, MemoryMiB: 4096, ComputePercent: 30}))
		d := a.Devices[0]
		if d.Profile != "" || d.MPS == nil || d.MPS.ActiveThreadPercent != 30 || a.Env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] != "30" {
			t.Fatalf("got %+v (env %v), want a whole GPU at 30%%", d, a.Env)
		}
		if len(a.Notes) != 0 {
			t.Fatalf("notes %q on a claim that landed as asked", a.Notes)
		}
	})
	t.Run("auto 8GiB lands on a whole GPU", func(t *testing.T) {
		s := setup(t, Policy{})
		a := must(t, s, claim("auto", "default", Request{MemoryMiB: 8192}))
		if d := a.Devices[0]; d.Profile != "" || d.Mode != TimeSlice {
			t.Fatalf("got %+v, want a time-sliced whole GPU", d)
		}
	})
	t.Run("a profile still gets its MIG instance", func(t *testing.T) {
		s := setup(t, Policy{})
		a := must(t, s, claim("p", "default", Request{Mode: MPS, Profile: "3g.20gb", ComputePercent: 30}))
		if d := a.Devices[0]; d.Profile != "3g.20gb" || len(a.Notes) != 0 {
			t.Fatalf("got %+v notes %q, want the 3g.20gb without a note (it was asked for)", d, a.Notes)
		}
	})
	t.Run("preferMIG puts it in the instance and says so", func(t *testing.T) {
		s := setup(t, Policy{PreferMIG: true})
		a := must(t, s, claim("mps", "default", Request{Mode: MPS, MemoryMiB: 4096, ComputePercent: 30}))
		d := a.Devices[0]
		if d.Profile != "3g.20gb" || d.MPS.ActiveThreadPercent != 72 {
			t.Fatalf("got %+v, want the idle 3g.20gb at 72%%", d)
		}
		if len(a.Notes) != 1 {
			t.Fatalf("notes %q, want one line", a.Notes)
		}
		for _, want := range []string{"MIG instance 3g.20gb", "preferMIG", "30% of a GPU", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=72", "no SM-seconds"} {
			if !strings.Contains(a.Notes[0], want) {
				t.Errorf("note %q lacks %q", a.Notes[0], want)
			}
		}
	})
	t.Run("no whole GPU left: MIG, and why", func(t *testing.T) {
		s := setup(t, Policy{})
		for i := range 7 { // the other tenants hold every whole GPU
			must(t, s, claim("x"+string(rune('a'+i)), "other", Request{Mode: Exclusive}))
		}
		a := must(t, s, claim("ts", "default", Request{Mode: TimeSlice, MemoryMiB: 8192}))
		if a.Devices[0].Profile == "" || len(a.Notes) != 1 || !strings.Contains(a.Notes[0], "no whole GPU could take it") {
			t.Fatalf("got %+v notes %q, want a MIG instance and why", a.Devices[0], a.Notes)
		}
	})
}
