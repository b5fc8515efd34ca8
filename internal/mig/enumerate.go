package mig

import (
	"sort"
	"strings"
)

// slot is one (profile, start index) pair.
type slot struct{ p, si int }

// slots lists every (profile, start) pair ordered by start, then profile;
// walking them in this order visits each set of instances exactly once.
func (g *Geometry) slots(includeME bool) []slot {
	var out []slot
	for p := range g.Shapes {
		if g.Shapes[p].ME && !includeME {
			continue
		}
		for si := range g.Shapes[p].Starts {
			out = append(out, slot{p, si})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := g.Shapes[out[i].p].Starts[out[i].si], g.Shapes[out[j].p].Starts[out[j].si]
		if a != b {
			return a < b
		}
		return out[i].p < out[j].p
	})
	return out
}

// walk calls fn for every valid layout (the empty one included), each set
// of instances once. fn's layout is reused between calls.
func (g *Geometry) walk(includeME bool, fn func(o Occupancy, l Layout)) {
	sl := g.slots(includeME)
	var l Layout
	var rec func(o Occupancy, from int)
	rec = func(o Occupancy, from int) {
		fn(o, l)
		for k := from; k < len(sl); k++ {
			s := sl[k]
			if !g.canAddAt(&o, s.p, s.si) {
				continue
			}
			start := g.Shapes[s.p].Starts[s.si]
			l = append(l, Instance{Profile: g.Shapes[s.p].Name, Start: start})
			rec(g.Add(o, s.p, start), k+1)
			l = l[:len(l)-1]
		}
	}
	rec(Occupancy{}, 0)
}

// isMaximal reports whether no profile (ME ones only if includeME) can be
// added anywhere.
func (g *Geometry) isMaximal(o Occupancy, includeME bool) bool {
	for p := range g.Shapes {
		if g.Shapes[p].ME && !includeME {
			continue
		}
		if g.MaxAdditional(o, p) > 0 {
			return false
		}
	}
	return true
}

// MaximalLayouts enumerates the distinct profile multisets of every valid
// layout to which no further instance can be added, each with one explicit
// placement (the first found, in start order). "+me" profiles take part
// only when includeME is set. On an A100-40GB without +me there are 38.
// Each layout is in creation order and the list is sorted biggest first.
func (g *Geometry) MaximalLayouts(includeME bool) []Layout {
	seen := map[string]bool{}
	var out []Layout
	g.walk(includeME, func(o Occupancy, l Layout) {
		if len(l) == 0 || !g.isMaximal(o, includeME) {
			return
		}
		key := g.multisetKey(l)
		if seen[key] {
			return
		}
		seen[key] = true
		out = append(out, g.creationOrder(l))
	})
	sort.Slice(out, func(i, j int) bool { return g.biggerFirst(out[i], out[j]) })
	return out
}

// biggerFirst orders layouts in creation order by their instances, biggest
// first: 7g before 4g+3g before 3g+3g ... before 1g×7.
func (g *Geometry) biggerFirst(a, b Layout) bool {
	for k := 0; k < len(a) && k < len(b); k++ {
		sa := &g.Shapes[g.byName[strings.ToLower(a[k].Profile)]]
		sb := &g.Shapes[g.byName[strings.ToLower(b[k].Profile)]]
		if sa.Compute != sb.Compute {
			return sa.Compute > sb.Compute
		}
		if sa.Size != sb.Size {
			return sa.Size > sb.Size
		}
		if sa.Name != sb.Name {
			return sa.Name < sb.Name
		}
	}
	return len(a) < len(b)
}

// multisetKey orders a layout's profiles biggest first and joins them; two
// layouts with the same key hold the same profiles.
func (g *Geometry) multisetKey(l Layout) string {
	names := make([]string, len(l))
	for i, in := range l {
		names[i] = in.Profile
	}
	g.sortBySize(names)
	return strings.Join(names, "+")
}

// sortBySize orders profile names biggest first (memory slices, then
// compute slices, then name), the order Fit creates instances in.
func (g *Geometry) sortBySize(names []string) {
	sort.SliceStable(names, func(i, j int) bool {
		a, b := &g.Shapes[g.byName[strings.ToLower(names[i])]], &g.Shapes[g.byName[strings.ToLower(names[j])]]
		if a.Size != b.Size {
			return a.Size > b.Size
		}
		if a.Compute != b.Compute {
			return a.Compute > b.Compute
		}
		return a.Name < b.Name
	})
}

// creationOrder returns a copy of l with the biggest instances first
// (memory slices, then compute slices), then by start.
func (g *Geometry) creationOrder(l Layout) Layout {
	out := l.Sorted()
	sort.SliceStable(out, func(i, j int) bool {
		a, b := &g.Shapes[g.byName[strings.ToLower(out[i].Profile)]], &g.Shapes[g.byName[strings.ToLower(out[j].Profile)]]
		if a.Size != b.Size {
			return a.Size > b.Size
		}
		return a.Compute > b.Compute
	})
	return out
}

// computeBestCapacity fills best[k] with the highest Capacity of any valid
// layout using k memory slices.
func (g *Geometry) computeBestCapacity() []int {
	best := make([]int, g.Slices+1)
	for k := range best {
		best[k] = -1
	}
	g.walk(false, func(o Occupancy, _ Layout) {
		if c := g.Capacity(o); c > best[o.Used()] {
			best[o.Used()] = c
		}
	})
	for k := range best {
		best[k] = max(best[k], 0)
	}
	return best
}

// bestCapacity returns the per-used-slices maximum computed at New.
func (g *Geometry) bestCapacity() []int { return g.best }
