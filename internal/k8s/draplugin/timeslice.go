package draplugin

import (
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/node"
)

// Time-slicing on a whole GPU follows internal/node's rule
// (node.TimeSliceLevels, node.IntervalConflict): a claim that names an
// interval (Default, Short, Medium, Long) sets it; a claim that names
// none takes what the GPU has; two claims naming different intervals on
// one GPU cannot both be prepared (conflict refuses the second, naming
// the first). The allocator cannot see the interval (it is in the opaque
// config), so the check is here. When the last claim naming an interval
// leaves, the GPU returns to Default.

// timeSliceLevels is the level each time-sliced GPU (by index) must have
// for the claims (node.TimeSliceLevels). It is pure.
func timeSliceLevels(claims map[string]*claimRecord) map[int]gpu.TimeSlice {
	var holds []node.Hold
	index := map[string]int{}
	for _, r := range sortedRecords(claims) {
		for _, dev := range r.Devices {
			holds = append(holds, holdOf(r, dev, false))
			index[dev.GPU] = dev.GPUIndex
		}
	}
	out := map[int]gpu.TimeSlice{}
	for uuid, l := range node.TimeSliceLevels(holds) {
		out[index[uuid]] = l
	}
	return out
}

// timeSliced reports whether a device is a whole GPU shared by
// time-slicing (MIG instances have no time-slice setting).
func timeSliced(dev preparedDevice) bool { return holdOf(&claimRecord{}, dev, false).TimeSliced() }

// intervalConflict names the claim whose device on the same GPU names an
// interval other than dev's, "" when none does (node.IntervalConflict).
func intervalConflict(rec claimRecord, dev preparedDevice, others map[string]*claimRecord) (string, string) {
	var holds []node.Hold
	for _, o := range sortedRecords(others) {
		if o.UID == rec.UID {
			continue
		}
		for _, od := range o.Devices {
			holds = append(holds, holdOf(o, od, false))
		}
	}
	return node.IntervalConflict(holdOf(&rec, dev, false), holds)
}
