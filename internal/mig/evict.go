package mig

import (
	"fmt"
	"math/bits"
	"strings"
)

// Held is an existing instance and whether a workload is using it.
type Held struct {
	Instance
	InUse bool `json:"inUse"`
}

// EvictPlan is the cheapest way to make room for a profile: the idle
// instances to destroy (possibly none) and where the new instance goes.
type EvictPlan struct {
	Destroy  []Instance `json:"destroy"`
	Place    Instance   `json:"place"`
	Capacity int        `json:"capacityAfter"`
}

// Evict finds the cheapest set of idle instances whose destruction lets an
// instance of profile want fit, and the start it then takes. An instance in
// use is never chosen. Cost is compared as: fewest instances destroyed, then
// fewest memory slices destroyed, then the highest Capacity afterwards, then
// the lowest start. have must be a valid layout.
func (g *Geometry) Evict(have []Held, want string) (EvictPlan, error) {
	layout := make(Layout, len(have))
	for i, h := range have {
		layout[i] = h.Instance
	}
	o, err := g.Occupancy(layout)
	if err != nil {
		return EvictPlan{}, err
	}
	p, err := g.Profile(want)
	if err != nil {
		return EvictPlan{}, err
	}
	s := &g.Shapes[p]
	prof := make([]int, len(have))
	for i, h := range have {
		prof[i] = g.byName[strings.ToLower(h.Profile)]
	}
	var idle uint64
	for i, h := range have {
		if !h.InUse {
			idle |= 1 << i
		}
	}
	best := evictCost{n: -1}
	for si, m := range s.masks {
		// Instances overlapping this start must go; if one is in use the
		// start is out.
		var forced uint64
		for i, h := range have {
			if rangeMask(h.Start, g.Shapes[prof[i]].Size)&m != 0 {
				forced |= 1 << i
			}
		}
		if forced&^idle != 0 {
			continue
		}
		// Then the fewest extra idle instances that lift a count limit.
		rest := idle &^ forced
		for extra := range subsetsBySize(rest) {
			gone := forced | extra
			after := o
			for i := range have {
				if gone&(1<<i) != 0 {
					after = g.Remove(after, prof[i], have[i].Start)
				}
			}
			if !g.canAddAt(&after, p, si) {
				continue
			}
			c := evictCost{n: bits.OnesCount64(gone), start: s.Starts[si], set: gone}
			for i := range have {
				if gone&(1<<i) != 0 {
					c.slices += g.Shapes[prof[i]].Size
				}
			}
			c.capacity = g.Capacity(g.Add(after, p, s.Starts[si]))
			if best.n < 0 || c.less(best) {
				best = c
			}
			break // subsets come smallest first; bigger ones cost more
		}
	}
	if best.n < 0 {
		return EvictPlan{}, g.noEvict(have, p)
	}
	plan := EvictPlan{Place: Instance{Profile: s.Name, Start: best.start}, Capacity: best.capacity, Destroy: []Instance{}}
	for i := range have {
		if best.set&(1<<i) != 0 {
			plan.Destroy = append(plan.Destroy, have[i].Instance)
		}
	}
	return plan, nil
}

type evictCost struct {
	n, slices, capacity, start int
	set                        uint64
}

func (a evictCost) less(b evictCost) bool {
	if a.n != b.n {
		return a.n < b.n
	}
	if a.slices != b.slices {
		return a.slices < b.slices
	}
	if a.capacity != b.capacity {
		return a.capacity > b.capacity
	}
	return a.start < b.start
}

// subsetsBySize yields the subsets of set, smallest first. Layouts hold at
// most a handful of instances, so this is cheap.
func subsetsBySize(set uint64) func(yield func(uint64) bool) {
	return func(yield func(uint64) bool) {
		var members []uint64
		for b := set; b != 0; b &= b - 1 {
			members = append(members, b&-b)
		}
		n := len(members)
		for k := 0; k <= n; k++ {
			for combo := uint64(1)<<k - 1; combo < 1<<n; {
				var sub uint64
				for j := 0; j < n; j++ {
					if combo&(1<<j) != 0 {
						sub |= members[j]
					}
				}
				if !yield(sub) {
					return
				}
				if combo == 0 {
					break
				}
				// Gosper's hack: next combination with the same popcount.
				c := combo & -combo
				r := combo + c
				combo = (((r ^ combo) >> 2) / c) | r
			}
		}
	}
}

func (g *Geometry) noEvict(have []Held, p int) error {
	s := &g.Shapes[p]
	e := &NoFitError{Model: g.Model, Profile: s.Name}
	for si, st := range s.Starts {
		var busy []string
		for _, h := range have {
			q := g.byName[strings.ToLower(h.Profile)]
			if h.InUse && rangeMask(h.Start, g.Shapes[q].Size)&s.masks[si] != 0 {
				busy = append(busy, h.String())
			}
		}
		if len(busy) > 0 {
			e.Reasons = append(e.Reasons, fmt.Sprintf("start %d overlaps in-use %s", st, strings.Join(busy, ", ")))
		} else {
			e.Reasons = append(e.Reasons, fmt.Sprintf("start %d: the in-use instances alone exceed a count limit", st))
		}
	}
	return e
}
