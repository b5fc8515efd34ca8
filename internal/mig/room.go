package mig

// Room measures what a GPU can still take as a set of futures: the number
// of distinct multisets of profiles without media extensions (the empty one
// included) that can be added to o, each at an allowed start, next to the
// instances o already holds, with every limit respected. An empty A100-40GB
// scores one more than its number of valid profile multisets; a full GPU 1.
//
// Placement keeps Room highest (Capacity breaks ties): the start that rules
// out the fewest combinations of instances still to come. Capacity alone
// counts how many more of each profile fit one profile at a time, so it
// cannot see that a 1g at slice 6 keeps a 4g at 0 possible but rules out
// 3g@4 next to 1g+1g+2g in slices 0-3; Room counts both.
//
// No online rule serves every arrival order: on an A100 small-first
// arrivals 1g,1g,1g,4g need the 1g instances in slices 4-6 and 1g,1g,2g,3g
// need them in 0-3, and the first 1g cannot tell which will come. Among
// all online rules, keeping Room highest serves the most small-first
// arrival orders of the fitting multisets of an A100 or H100 (68 of 77,
// found by exhaustive search over every online rule; see room_test.go).
//
// Results are cached per occupancy; Room is safe for concurrent use.
func (g *Geometry) Room(o Occupancy) int {
	if v, ok := g.room.Load(o); ok {
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
	g.room.Store(o, len(seen))
	return len(seen)
}
