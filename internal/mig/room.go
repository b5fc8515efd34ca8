package mig

// Room measures what a GPU can still take as a set of futures: the number
// of distinct multisets of profiles without media extensions (the empty one
// included) that can be added to o, each at an allowed start, next to the
// instances o already holds, with every limit respected. An empty A100-40GB
// scores one more than its number of valid profile multisets; a full GPU 1.
//
// Placement (BestStart) first serves the most arrival orders still to
// come (SmallFirst, AnyOrder: exact counts of request sequences under the
// best play, see arrivals.go); Room, then Capacity, break its ties. Room
// alone sees that a 1g at slice 6 keeps a 4g at 0 possible but rules out
// 3g@4 next to 1g+1g+2g in slices 0-3, where Capacity, which counts one
// profile at a time, does not; but it weighs every combination the same
// however many arrival orders lead to it, and served 370 of the 424
// arrival orders of an 8-slice GPU where BestStart serves 384.
//
// Results are cached per occupancy; Room is safe for concurrent use.
func (g *Geometry) Room(o Occupancy) int {
	if v, ok := g.tables.room.Load(o); ok {
		return v.(int)
	}
	seen := map[[maxProfiles]uint8]struct{}{}
	sl := g.slots(false)
	var rec func(x Occupancy, from int)
	rec = func(x Occupancy, from int) {
		seen[x.Counts] = struct{}{}
		for k := from; k < len(sl); k++ {
			s := sl[k]
			if g.canAddAt(&x, s.p, s.si) {
				rec(g.Add(x, s.p, g.Shapes[s.p].Starts[s.si]), k+1)
			}
		}
	}
	rec(o, 0)
	g.tables.room.Store(o, len(seen))
	return len(seen)
}
