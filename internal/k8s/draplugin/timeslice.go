package draplugin

import (
	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
)

// Time-slicing on a whole GPU: the length of a time slice is a property
// of the GPU, not of a claim, so every claim time-slicing one GPU must
// agree. The rule: a claim that names an interval (Default, Short, Medium,
// Long) sets it; a claim that names none takes what the GPU has; two
// claims naming different intervals on one GPU cannot both be prepared
// (conflict refuses the second, naming the first). The allocator cannot
// see the interval (it is in the opaque config), so the check is here.
// When the last claim naming an interval leaves, the GPU returns to
// Default.

// timeSliceLevels is the level each time-sliced GPU (by index) must have
// for the claims: the interval a claim names, else Default. It is pure.
func timeSliceLevels(claims map[string]*claimRecord) map[int]gpu.TimeSlice {
	out := map[int]gpu.TimeSlice{}
	for _, r := range sortedRecords(claims) {
		for _, dev := range r.Devices {
			if !timeSliced(dev) {
				continue
			}
			if _, ok := out[dev.GPUIndex]; !ok {
				out[dev.GPUIndex] = gpu.TimeSliceDefault
			}
			if l, err := gpu.ParseTimeSlice(dev.Interval); err == nil {
				out[dev.GPUIndex] = l
			}
		}
	}
	return out
}

// timeSliced reports whether a device is a whole GPU shared by
// time-slicing (MIG instances have no time-slice setting).
func timeSliced(dev preparedDevice) bool {
	return dev.Mode == alloc.TimeSlice && dev.Type != dradriver.TypeMIG
}

// intervalConflict names the claim whose device on the same GPU names an
// interval other than dev's, "" when none does.
func intervalConflict(rec claimRecord, dev preparedDevice, others map[string]*claimRecord) (string, string) {
	if !timeSliced(dev) || dev.Interval == "" {
		return "", ""
	}
	for _, o := range sortedRecords(others) {
		if o.UID == rec.UID {
			continue
		}
		for _, od := range o.Devices {
			if timeSliced(od) && od.GPU == dev.GPU && od.Interval != "" && od.Interval != dev.Interval {
				return o.Namespace + "/" + o.Name, od.Interval
			}
		}
	}
	return "", ""
}
