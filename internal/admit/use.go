package admit

import "github.com/gpuslice/gpuslice/internal/alloc"

// Use is GPU memory (MiB) and compute (percent of one GPU): what claims
// hold, ask for or are charged.
type Use struct {
	MemMiB  int64
	Compute int
}

// Add is u plus v.
func (u Use) Add(v Use) Use { return Use{MemMiB: u.MemMiB + v.MemMiB, Compute: u.Compute + v.Compute} }

// Given is what an allocation hands out: the memory and compute promised
// on its devices (a whole GPU for an exclusive claim that asked for no
// memory, say). A nil allocation gives nothing.
func Given(a *alloc.Allocation) Use {
	var u Use
	if a == nil {
		return u
	}
	for _, d := range a.Devices {
		u.MemMiB += d.MemoryMiB
		u.Compute += d.ComputePercent
	}
	return u
}

// GivenAll is what allocations hand out together.
func GivenAll(as []*alloc.Allocation) Use {
	var u Use
	for _, a := range as {
		u = u.Add(Given(a))
	}
	return u
}

// Asked is what requests ask for: memory and compute per device times the
// count (0 counts as 1).
func Asked(reqs []alloc.Request) Use {
	var u Use
	for _, r := range reqs {
		n := max(r.Count, 1)
		u.MemMiB += r.MemoryMiB * int64(n)
		u.Compute += r.ComputePercent * n
	}
	return u
}

// Charge is what an allocated claim counts against its quota: the larger
// of what it asked for and what it was given, per resource.
func Charge(asked, given Use) Use {
	return Use{MemMiB: max(asked.MemMiB, given.MemMiB), Compute: max(asked.Compute, given.Compute)}
}

// WaitingCharge is what a waiting claim counts against its quota: what it
// asks for, except that a whole-GPU request (exclusive, or hardware
// isolation without a MIG mode or profile) that names no memory is charged
// minGPUMiB (the smallest whole GPU it could get), and any whole-GPU
// request 100% compute: at least what it will hold, so a queue of such
// claims is bounded by the quota too.
func WaitingCharge(reqs []alloc.Request, isolation alloc.Isolation, minGPUMiB int64) Use {
	var u Use
	for _, r := range reqs {
		n := max(r.Count, 1)
		mem, comp := r.MemoryMiB, r.ComputePercent
		if r.Mode == alloc.Exclusive || (isolation == alloc.IsolationHardware && r.Mode != alloc.MIG && r.Profile == "") {
			mem = max(mem, minGPUMiB)
			comp = 100
		}
		u.MemMiB += mem * int64(n)
		u.Compute += comp * n
	}
	return u
}
