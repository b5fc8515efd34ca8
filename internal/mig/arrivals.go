package mig

import (
	"fmt"
	"strings"
	"sync"
)

// Requests for MIG instances arrive one at a time, and each must be placed
// before the next is known; none is moved afterwards. On an 8-slice GPU no
// online rule places every arrival order of every profile multiset that
// fits: a first 1g must sit in slices 4-6 for 1g,1g,1g,4g and in 0-3 for
// 1g,1g,2g,3g. So the rule is chosen for the orders it serves, counted
// exactly over every future the GPU still has:
//
//   - an arrival sequence is any sequence of plain (non-+me) profiles
//     whose multiset, with the instances already there, fits the GPU
//     (some valid layout holds it); every prefix of one is one too, as
//     arrivals may stop at any point;
//   - it is small-first when no request is smaller, in memory slices,
//     then compute slices, than one before it (instances on the GPU
//     count as earlier requests): how inference fleets usually fill;
//   - a rule serves a sequence when it places every request of it.
//
// BestStart places so that, under the best play from then on, the most
// small-first sequences can still be served, and among those choices the
// most sequences in any order (SmallFirst); when the request itself
// breaks small-first order, the most sequences in any order first
// (AnyOrder). This is exact game search, not a heuristic score: on the
// 8-slice models it serves 68 of the 77 small-first sequences (the most
// any online rule serves) and 384 of the 424 sequences in any order (the
// most any rule serves among those that serve those 68; a rule may serve
// up to 393 by giving up one small-first multiset). Every sequence it
// does not serve is one that no online rule can serve without losing
// another it serves (checked exhaustively in arrivals_test.go). Room and
// Capacity break the remaining ties.
//
// The values depend only on the geometry's shape (slices, limits and each
// profile's starts and size, not names), so geometries of the same shape
// (the A100s, H100s, H200 and Blackwell parts are all one 8-slice shape)
// share one table; values are computed on first use and cached.

// shapeTables caches the per-occupancy values of one geometry shape.
type shapeTables struct {
	once sync.Once
	// fits holds the profile counts of every valid layout, +me included.
	fits  map[[maxProfiles]uint8]struct{}
	room  sync.Map // Occupancy → int
	any   sync.Map // Occupancy → int64
	small sync.Map // Occupancy → [2]int64
	best  sync.Map // bestKey → BestStart's start, -1 when none fits
}

type bestKey struct {
	o Occupancy
	p int
}

// tablesByShape maps a shape signature to its *shapeTables.
var tablesByShape sync.Map

// shapeSignature names what the cached values depend on.
func shapeSignature(g *Geometry) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d/%d/%d", g.Slices, g.ComputeSlices, g.MaxInstances)
	for _, s := range g.Shapes {
		fmt.Fprintf(&b, "|%d,%d,%d,%v,%v", s.Size, s.Compute, s.MaxCount, s.ME, s.Starts)
	}
	return b.String()
}

func tablesFor(g *Geometry) *shapeTables {
	key := shapeSignature(g)
	if t, ok := tablesByShape.Load(key); ok {
		return t.(*shapeTables)
	}
	t, _ := tablesByShape.LoadOrStore(key, &shapeTables{})
	return t.(*shapeTables)
}

// fitsWith reports whether o's instances and one more of profile p fit
// the GPU in some valid layout (not necessarily o's placements).
func (g *Geometry) fitsWith(o Occupancy, p int) bool {
	t := g.tables
	t.once.Do(func() {
		t.fits = map[[maxProfiles]uint8]struct{}{}
		g.walk(true, func(o Occupancy, _ Layout) { t.fits[o.Counts] = struct{}{} })
	})
	c := o.Counts
	c[p]++
	_, ok := t.fits[c]
	return ok
}

// smallerFirst reports whether profile a comes before profile b in a
// small-first arrival order: fewer memory slices, then fewer compute
// slices, then catalog order.
func (g *Geometry) smallerFirst(a, b int) bool {
	sa, sb := &g.Shapes[a], &g.Shapes[b]
	if sa.Size != sb.Size {
		return sa.Size < sb.Size
	}
	if sa.Compute != sb.Compute {
		return sa.Compute < sb.Compute
	}
	return a < b
}

// largest is the profile on the GPU that a small-first order would have
// brought last; -1 on an empty GPU.
func (g *Geometry) largest(o Occupancy) int {
	last := -1
	for p := range g.Shapes {
		if o.Counts[p] > 0 && (last < 0 || g.smallerFirst(last, p)) {
			last = p
		}
	}
	return last
}

// AnyOrder is the number of arrival sequences, in any order, that can
// still come to a GPU holding o and be placed in full by the best online
// rule (the empty sequence included): 1 + the sum, over each plain
// profile p that still fits beside o's instances, of the best AnyOrder
// among p's free starts (0 when none is free). An empty 8-slice GPU
// scores 394 of a possible 425; a full one 1.
func (g *Geometry) AnyOrder(o Occupancy) int64 {
	if v, ok := g.tables.any.Load(o); ok {
		return v.(int64)
	}
	n := int64(1)
	for p := range g.Shapes {
		if g.Shapes[p].ME || !g.fitsWith(o, p) || !g.countsAllow(&o, p) {
			continue
		}
		best := int64(0)
		for si, m := range g.Shapes[p].masks {
			if o.Mask&m == 0 {
				best = max(best, g.AnyOrder(g.Add(o, p, g.Shapes[p].Starts[si])))
			}
		}
		n += best
	}
	g.tables.any.Store(o, n)
	return n
}

// SmallFirst scores o for arrivals that came small-first: the number of
// small-first arrival sequences (continuing after o's largest instance)
// still served under the best play, and the number of sequences in any
// order served by the play that serves that many (a profile smaller than
// o's largest starts a sequence that is no longer small-first; it counts
// as AnyOrder does). Both count the empty sequence. An empty 8-slice GPU
// scores (69, 385).
func (g *Geometry) SmallFirst(o Occupancy) (smallFirst, anyOrder int64) {
	if v, ok := g.tables.small.Load(o); ok {
		s := v.([2]int64)
		return s[0], s[1]
	}
	last := g.largest(o)
	sf, all := int64(1), int64(1)
	for p := range g.Shapes {
		if g.Shapes[p].ME || !g.fitsWith(o, p) || !g.countsAllow(&o, p) {
			continue
		}
		inOrder := last < 0 || !g.smallerFirst(p, last)
		var bs, ba int64
		for si, m := range g.Shapes[p].masks {
			if o.Mask&m != 0 {
				continue
			}
			after := g.Add(o, p, g.Shapes[p].Starts[si])
			if !inOrder {
				ba = max(ba, g.AnyOrder(after))
				continue
			}
			if s, a := g.SmallFirst(after); s > bs || (s == bs && a > ba) {
				bs, ba = s, a
			}
		}
		sf += bs
		all += ba
	}
	g.tables.small.Store(o, [2]int64{sf, all})
	return sf, all
}

// startScore is what BestStart compares, most important first.
type startScore [5]int64

func (a startScore) less(b startScore) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// scoreStart scores placing profile p at start on o (the caller checked
// that it fits).
func (g *Geometry) scoreStart(o Occupancy, p, start int) startScore {
	after := g.Add(o, p, start)
	sf, all := g.SmallFirst(after)
	room, capacity := int64(g.Room(after)), int64(g.Capacity(after))
	if last := g.largest(o); last >= 0 && g.smallerFirst(p, last) {
		// The arrivals are not small-first any more: serve the most
		// orders of any kind.
		return startScore{g.AnyOrder(after), sf, all, room, capacity}
	}
	return startScore{sf, all, room, capacity, 0}
}
