package alloc

import (
	"fmt"
	"strconv"
	"strings"
)

// The one rule for where a shared claim lands, whole GPU or MIG instance.
//
// A claim that asks for time-slicing, MPS or auto and names no MIG profile
// (and is not hardware-isolated) means a share of a GPU: its compute
// percentage is of a whole GPU, NVML samples its processes' SM use, and no
// MIG mode change is needed. On a fleet where some GPUs have MIG on and
// some off (the allocator turns MIG on for the first MIG claim of an
// A100), the candidate order alone would put it in a MIG instance, which
// holds less of a GPU. Unless the fleet's policy prefers MIG
// (Policy.PreferMIG), such a claim is first placed with MIG instances ruled
// out, and only if no whole GPU can take it is it placed again with every
// device allowed; the allocation's Notes then say where it landed and why.

// asksForMIG reports whether a request asked for a MIG instance itself:
// a profile, mode mig, or hardware isolation (a MIG instance first).
func asksForMIG(r *Request, iso Isolation) bool {
	return r.Profile != "" || r.Mode == MIG || iso == IsolationHardware
}

// wholeFirst reports whether a claim is placed on whole GPUs first (see
// above): the policy does not prefer MIG, the fleet has GPUs with MIG on
// and GPUs with it off (else both passes would decide alike), and one of
// its requests did not ask for MIG.
func (s *State) wholeFirst(c *Claim, iso Isolation) bool {
	if s.policy.PreferMIG || s.migOn == 0 || s.migOn == len(s.gpus) {
		return false
	}
	for i := range c.Requests {
		if !asksForMIG(&c.Requests[i], iso) {
			return true
		}
	}
	return false
}

// landingNotes says, one line per device, where a claim landed
// differently from what it asked for: a MIG instance for a request that
// named none (and why: no whole GPU could take it, or the policy prefers
// MIG, or every GPU has MIG on), with what that changes — an MPS
// percentage relative to the instance, no SM samples on a MIG instance of
// a GPU older than Hopper. triedWhole says whether the claim was placed on
// whole GPUs first (wholeFirst).
func (s *State) landingNotes(c *Claim, iso Isolation, a *Allocation, triedWhole bool) []string {
	var out []string
	seen := map[string]int{}
	for _, d := range a.Devices {
		k := seen[d.Request]
		seen[d.Request]++
		if d.Profile == "" {
			continue
		}
		r := requestNamed(c, d.Request)
		if r == nil || asksForMIG(r, iso) {
			continue
		}
		var b strings.Builder
		if len(a.Devices) > 1 {
			fmt.Fprintf(&b, "%s[%d]: ", d.Request, k)
		}
		what := "a MIG instance " + d.Profile + " to itself"
		switch d.Mode {
		case TimeSlice:
			what = "a time-sliced share of MIG instance " + d.Profile
		case MPS:
			what = "an MPS share of MIG instance " + d.Profile
		}
		gi, known := s.gpuIdx[d.GPU]
		on := ""
		if known {
			on = " on GPU " + strconv.Itoa(s.gpus[gi].spec.Index)
		}
		why := "every GPU here has MIG on"
		switch {
		case s.policy.PreferMIG:
			why = "the policy prefers MIG instances (preferMIG)"
		case triedWhole:
			why = "no whole GPU could take it"
		}
		fmt.Fprintf(&b, "placed in %s%s, not on a whole GPU: %s", what, on, why)
		if d.MPS != nil && d.ComputePercent > 0 {
			fmt.Fprintf(&b, "; its %d%% of a GPU is CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%d of the instance's SMs", d.ComputePercent, d.MPS.ActiveThreadPercent)
		}
		if known && !s.gpus[gi].model.HasGPM() {
			fmt.Fprintf(&b, "; usage shows no SM-seconds for it (NVML samples no processes on %s MIG instances)", s.gpus[gi].model.ID)
		}
		out = append(out, b.String())
	}
	return out
}

func requestNamed(c *Claim, name string) *Request {
	for i := range c.Requests {
		if c.Requests[i].Name == name {
			return &c.Requests[i]
		}
	}
	return nil
}
