package mig

import (
	"fmt"
	"strings"
)

// FitResult is a layout that realises a multiset of profiles. Layout is in
// creation order (biggest instances first), each at an explicit start.
type FitResult struct {
	Layout        Layout  `json:"layout"`
	Capacity      int     `json:"capacityAfter"`
	Fragmentation float64 `json:"fragmentationAfter"`
}

// Fit finds explicit placements for every profile in want on an empty GPU,
// or proves that none exist. See FitInto.
func (g *Geometry) Fit(want []string) (FitResult, error) {
	return g.FitInto(nil, want)
}

// FitInto finds explicit placements for every profile in want next to the
// instances of have (which stay where they are). Among all solutions it
// returns the one that keeps Capacity highest. The search is exhaustive, so
// a *NoFitError is a proof: it names the limit that rules the multiset out,
// or says that every arrangement of starts overlaps.
//
// Creation order: with explicit placements any order succeeds; the result
// lists the biggest instances first, which is also the order NVIDIA advises
// for automatic placement (its A100 example 3g+2g+1g+1g fails unless the 3g
// is created first).
func (g *Geometry) FitInto(have Layout, want []string) (FitResult, error) {
	o, err := g.Occupancy(have)
	if err != nil {
		return FitResult{}, err
	}
	names := append([]string(nil), want...)
	idx := make([]int, len(names))
	for i, n := range names {
		p, err := g.Profile(n)
		if err != nil {
			return FitResult{}, err
		}
		names[i] = g.Shapes[p].Name
		idx[i] = p
	}
	g.sortBySize(names)
	for i, n := range names {
		idx[i] = g.byName[strings.ToLower(n)]
	}
	if err := g.fitLimits(o, idx, names); err != nil {
		return FitResult{}, err
	}
	bestCap := -1
	var best, cur Layout
	var rec func(o Occupancy, k, minSI int)
	rec = func(o Occupancy, k, minSI int) {
		if k == len(idx) {
			if c := g.Capacity(o); c > bestCap {
				bestCap = c
				best = append(best[:0], cur...)
			}
			return
		}
		p := idx[k]
		s := &g.Shapes[p]
		for si := minSI; si < len(s.Starts); si++ {
			if !g.canAddAt(&o, p, si) {
				continue
			}
			next := 0
			if k+1 < len(idx) && idx[k+1] == p {
				next = si + 1 // same profile again: later starts only
			}
			cur = append(cur, Instance{Profile: s.Name, Start: s.Starts[si]})
			rec(g.Add(o, p, s.Starts[si]), k+1, next)
			cur = cur[:len(cur)-1]
		}
	}
	rec(o, 0, 0)
	if bestCap < 0 {
		return FitResult{}, &NoFitError{Model: g.Model, Profile: strings.Join(names, "+"),
			Reasons: []string{fmt.Sprintf("every arrangement of allowed starts overlaps (exhaustive search; placements: %s)", g.placementsOf(idx))}}
	}
	final := o
	for _, in := range best {
		final = g.Add(final, g.byName[strings.ToLower(in.Profile)], in.Start)
	}
	return FitResult{Layout: best, Capacity: bestCap, Fragmentation: g.Fragmentation(final)}, nil
}

// fitLimits rules out multisets that break a count limit, with the reason.
func (g *Geometry) fitLimits(o Occupancy, idx []int, names []string) error {
	counts := o.Counts
	compute, size, inst, me := int(o.Compute), o.Used(), int(o.Instances), int(o.ME)
	for _, p := range idx {
		s := &g.Shapes[p]
		counts[p]++
		compute += s.Compute
		size += s.Size
		inst++
		if s.ME {
			me++
		}
	}
	var reasons []string
	for p := range g.Shapes {
		if s := &g.Shapes[p]; int(counts[p]) > s.MaxCount {
			reasons = append(reasons, fmt.Sprintf("%d× %s but at most %d fit", counts[p], s.Name, s.MaxCount))
		}
	}
	if me > 1 {
		reasons = append(reasons, fmt.Sprintf("%d +me instances but at most one is allowed", me))
	}
	if size > g.Slices {
		reasons = append(reasons, fmt.Sprintf("needs %d memory slices, the GPU has %d", size, g.Slices))
	}
	if compute > g.ComputeSlices {
		reasons = append(reasons, fmt.Sprintf("needs %d compute slices, the GPU has %d", compute, g.ComputeSlices))
	}
	if inst > g.MaxInstances {
		reasons = append(reasons, fmt.Sprintf("%d instances, the GPU holds at most %d", inst, g.MaxInstances))
	}
	if len(reasons) == 0 {
		return nil
	}
	return &NoFitError{Model: g.Model, Profile: strings.Join(names, "+"), Reasons: reasons}
}

func (g *Geometry) placementsOf(idx []int) string {
	seen := map[int]bool{}
	var parts []string
	for _, p := range idx {
		if !seen[p] {
			seen[p] = true
			parts = append(parts, g.Shapes[p].Name+" "+formatStarts(&g.Shapes[p]))
		}
	}
	return strings.Join(parts, ", ")
}
