package node

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/gpu"
)

// Hold is one device a claim holds on the node, as it was decided (by
// the server's allocator for the agent, by the scheduler for the DRA
// plugin).
type Hold struct {
	// Claim identifies the holder; Name is how errors name it ("" names
	// it by Claim).
	Claim, Name string
	// GPU is the GPU's uuid.
	GPU string
	// Profile and Start place a MIG instance; Profile "" is the GPU
	// whole (exclusive, time-sliced or MPS).
	Profile string
	Start   int
	// Instance is the MIG instance's uuid when it is known; "" finds it
	// by placement.
	Instance string
	// Mode is how the device is used: exclusive, timeslice or mps.
	Mode alloc.Mode
	// Interval is the time-slice length the claim names (Default,
	// Short, Medium, Long; "" names none), for a whole GPU time-sliced.
	Interval string
	// Make marks a hold to make true now: MIG mode and the instance at
	// its placement, or the GPU whole in its compute mode and time
	// slice. A hold without it is only protected: what it holds is
	// never destroyed, never created (a running claim's instance that
	// vanished is reported, not made again).
	Make bool
}

// MIG reports whether the hold is a MIG instance (named by placement or
// by uuid).
func (h Hold) MIG() bool { return h.Profile != "" || h.Instance != "" }

// TimeSliced reports whether the hold is a whole GPU shared by
// time-slicing (MIG instances have no time-slice setting).
func (h Hold) TimeSliced() bool { return h.Mode == alloc.TimeSlice && !h.MIG() }

// name is how messages name the holder.
func (h Hold) name() string { return cmp.Or(h.Name, h.Claim) }

// Covers reports whether two holds use the same hardware: the same GPU
// whole, an instance and its GPU whole, or the same MIG placement (or
// instance).
func Covers(a, b Hold) bool {
	if a.GPU != b.GPU {
		return false
	}
	if a.MIG() != b.MIG() {
		return true
	}
	if !a.MIG() {
		return true
	}
	if a.Instance != "" && a.Instance == b.Instance {
		return true
	}
	return a.Profile == b.Profile && a.Start == b.Start
}

// Want is what the node's GPUs must be.
type Want struct {
	// Holds are every device the node's claims hold; Make marks those
	// to make true now.
	Holds []Hold
	// Release are devices given up or decided gone: the MIG instance
	// (by uuid when Instance is set, else at the placement) is destroyed
	// unless a hold of another claim covers it, and a released
	// time-sliced GPU takes the level its remaining holds name.
	Release []Hold
}

// Observed is the device state a decision reads.
type Observed struct {
	GPUs []gpu.GPU
	// TimeSlice is each GPU's time-slice level as this node last set it,
	// by GPU uuid: the device layer cannot read it back. A GPU missing
	// here has an unknown level.
	TimeSlice map[string]gpu.TimeSlice
}

// TimeSliceLevels is the level each time-sliced GPU (by uuid) must have
// for the holds: the interval a claim names, else Default. The length of
// a time slice is a property of the GPU, not of a claim, so every claim
// time-slicing one GPU must agree (IntervalConflict refuses the second
// of two that name different ones); when holds disagree all the same, the
// last claim in id order wins. It is pure.
func TimeSliceLevels(holds []Hold) map[string]gpu.TimeSlice {
	out := map[string]gpu.TimeSlice{}
	for _, h := range byClaim(holds) {
		if !h.TimeSliced() {
			continue
		}
		if _, ok := out[h.GPU]; !ok {
			out[h.GPU] = gpu.TimeSliceDefault
		}
		if l, err := gpu.ParseTimeSlice(h.Interval); err == nil {
			out[h.GPU] = l
		}
	}
	return out
}

// IntervalConflict names the holder (and its interval) of another
// claim's time-sliced hold on h's GPU that names an interval other than
// h's; "" when none does or h names none (it takes the GPU's).
func IntervalConflict(h Hold, holds []Hold) (holder, interval string) {
	if !h.TimeSliced() || h.Interval == "" {
		return "", ""
	}
	for _, o := range byClaim(holds) {
		if o.Claim != h.Claim && o.TimeSliced() && o.GPU == h.GPU && o.Interval != "" && o.Interval != h.Interval {
			return o.name(), o.Interval
		}
	}
	return "", ""
}

// byClaim is holds in claim order (stable within a claim).
func byClaim(holds []Hold) []Hold {
	out := slices.Clone(holds)
	slices.SortStableFunc(out, func(a, b Hold) int { return cmp.Compare(a.Claim, b.Claim) })
	return out
}

// HeldError says a hold cannot be made because another claim holds the
// same hardware.
type HeldError struct {
	// What is the hardware ("MIG instance 1g.5gb@0 on GPU 1", "GPU 1").
	What string
	// Holder names the claim that holds it.
	Holder string
}

func (e *HeldError) Error() string { return fmt.Sprintf("%s is held by claim %s", e.What, e.Holder) }
