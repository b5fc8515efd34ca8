package mig

// Occupancy summarises a valid layout for fast queries: which memory slices
// are taken and how many instances of each profile exist. It is a plain
// comparable value; callers keep one per GPU and update it with Add and
// Remove instead of re-reading the layout.
type Occupancy struct {
	Mask      uint16
	Compute   uint8
	Instances uint8
	ME        uint8
	Counts    [maxProfiles]uint8
}

// Used returns the number of memory slices taken.
func (o Occupancy) Used() int { return popcount(o.Mask) }

// CanAdd reports whether an instance of profile p fits at start without
// breaking any rule. An unknown start returns false.
func (g *Geometry) CanAdd(o Occupancy, p, start int) bool {
	s := &g.Shapes[p]
	i := s.startIndex(start)
	return i >= 0 && g.canAddAt(&o, p, i)
}

func (g *Geometry) canAddAt(o *Occupancy, p, si int) bool {
	s := &g.Shapes[p]
	return o.Mask&s.masks[si] == 0 && g.countsAllow(o, p)
}

// countsAllow checks the count limits of adding one instance of p.
func (g *Geometry) countsAllow(o *Occupancy, p int) bool {
	s := &g.Shapes[p]
	return int(o.Counts[p]) < s.MaxCount &&
		int(o.Instances) < g.MaxInstances &&
		int(o.Compute)+s.Compute <= g.ComputeSlices &&
		(!s.ME || o.ME == 0)
}

// Add returns o with an instance of p at start added. The caller must have
// checked CanAdd.
func (g *Geometry) Add(o Occupancy, p, start int) Occupancy {
	s := &g.Shapes[p]
	o.Mask |= rangeMask(start, s.Size)
	o.Compute += uint8(s.Compute)
	o.Instances++
	o.Counts[p]++
	if s.ME {
		o.ME++
	}
	return o
}

// Remove returns o without an instance of p at start. The caller must know
// the instance is present.
func (g *Geometry) Remove(o Occupancy, p, start int) Occupancy {
	s := &g.Shapes[p]
	o.Mask &^= rangeMask(start, s.Size)
	o.Compute -= uint8(s.Compute)
	o.Instances--
	o.Counts[p]--
	if s.ME {
		o.ME--
	}
	return o
}

// MaxAdditional is how many more instances of profile p can be added to o,
// each at an allowed start, with every limit respected.
func (g *Geometry) MaxAdditional(o Occupancy, p int) int {
	s := &g.Shapes[p]
	n := int(g.free[o.Mask][p])
	n = min(n, s.MaxCount-int(o.Counts[p]), g.MaxInstances-int(o.Instances))
	n = min(n, (g.ComputeSlices-int(o.Compute))/s.Compute)
	if s.ME && o.ME > 0 {
		n = 0
	}
	return max(n, 0)
}

// Capacity measures how much a GPU can still take: the sum, over every
// profile without media extensions, of the profile's size in memory slices
// times how many more instances of it still fit (MaxAdditional). An empty
// A100 scores 7·1 + 4·2 + 3·2 + 2·4 + 1·4 + 1·8 = 41 and a full one 0.
//
// Placement keeps Capacity as high as it can: a 1g instance placed at slice
// 6 leaves room for a 4g at 0, placed at slice 0 it does not, and Capacity
// says so (4g counts 4 for the first and 0 for the second). "+me" profiles
// are left out because they use the same room as their plain twins.
func (g *Geometry) Capacity(o Occupancy) int {
	total := 0
	for p := range g.Shapes {
		if g.Shapes[p].ME {
			continue
		}
		total += g.Shapes[p].Size * g.MaxAdditional(o, p)
	}
	return total
}

// Fragmentation is 1 − Capacity(o)/best, where best is the highest Capacity
// any valid layout with the same number of used memory slices reaches. 0
// means the used slices sit where they hurt least; values near 1 mean the
// free slices are scattered so that few profiles still fit. A full GPU
// scores 0.
func (g *Geometry) Fragmentation(o Occupancy) float64 {
	best := g.bestCapacity()[o.Used()]
	if best == 0 {
		return 0
	}
	f := 1 - float64(g.Capacity(o))/float64(best)
	return max(f, 0)
}
