package mig

import (
	"errors"
	"fmt"
	"strings"
)

// NoFitError says why a profile cannot be placed. Reasons has one line per
// allowed start (or one line for a limit that rules out every start).
type NoFitError struct {
	Model   string
	Profile string
	Reasons []string
}

func (e *NoFitError) Error() string {
	return fmt.Sprintf("%s does not fit on %s: %s", e.Profile, e.Model, strings.Join(e.Reasons, "; "))
}

// IsNoFit reports whether err is (or wraps) a *NoFitError.
func IsNoFit(err error) bool {
	var nf *NoFitError
	return errors.As(err, &nf)
}

// Placement is where Place puts a new instance and what the GPU keeps free
// afterwards.
type Placement struct {
	Instance      Instance `json:"instance"`
	Capacity      int      `json:"capacityAfter"`
	Fragmentation float64  `json:"fragmentationAfter"`
}

// Place chooses the start for a new instance of profile want on a GPU that
// already holds have: among the allowed starts that fit, the one that
// serves the most arrival orders still to come (see BestStart); ties go to
// the lowest start. have must be valid.
func (g *Geometry) Place(have Layout, want string) (Placement, error) {
	o, err := g.Occupancy(have)
	if err != nil {
		return Placement{}, err
	}
	p, err := g.Profile(want)
	if err != nil {
		return Placement{}, err
	}
	start, ok := g.BestStart(o, p)
	if !ok {
		return Placement{}, g.noFit(have, o, p)
	}
	after := g.Add(o, p, start)
	return Placement{
		Instance:      Instance{Profile: g.Shapes[p].Name, Start: start},
		Capacity:      g.Capacity(after),
		Fragmentation: g.Fragmentation(after),
	}, nil
}

// BestStart is Place's core on an occupancy: the allowed start of profile p
// that serves the most arrival orders still to come (SmallFirst, or
// AnyOrder first when p arrives after a bigger instance; see arrivals.go),
// then keeps Room, then Capacity highest (lowest start on ties). It is the
// one placement rule gpuslice has; the allocator calls it too.
func (g *Geometry) BestStart(o Occupancy, p int) (start int, ok bool) {
	s := &g.Shapes[p]
	if !g.countsAllow(&o, p) {
		return 0, false
	}
	key := bestKey{o, p}
	if v, hit := g.tables.best.Load(key); hit {
		st := v.(int)
		return max(st, 0), st >= 0
	}
	var best startScore
	for si, m := range s.masks {
		if o.Mask&m != 0 {
			continue
		}
		if sc := g.scoreStart(o, p, s.Starts[si]); !ok || best.less(sc) {
			best, start, ok = sc, s.Starts[si], true
		}
	}
	if ok {
		g.tables.best.Store(key, start)
	} else {
		g.tables.best.Store(key, -1)
	}
	return start, ok
}

// noFit explains, start by start, why profile p does not fit.
func (g *Geometry) noFit(have Layout, o Occupancy, p int) error {
	s := &g.Shapes[p]
	e := &NoFitError{Model: g.Model, Profile: s.Name}
	switch {
	case s.ME && o.ME > 0:
		e.Reasons = append(e.Reasons, "a +me instance already exists and at most one is allowed")
	case int(o.Counts[p]) >= s.MaxCount:
		e.Reasons = append(e.Reasons, fmt.Sprintf("%d instances of %s exist, the most one GPU holds", o.Counts[p], s.Name))
	case int(o.Instances) >= g.MaxInstances:
		e.Reasons = append(e.Reasons, fmt.Sprintf("the GPU already holds its maximum of %d instances", g.MaxInstances))
	case int(o.Compute)+s.Compute > g.ComputeSlices:
		e.Reasons = append(e.Reasons, fmt.Sprintf("%d of %d compute slices are used and %s needs %d", o.Compute, g.ComputeSlices, s.Name, s.Compute))
	}
	if len(e.Reasons) > 0 {
		return e
	}
	for si, st := range s.Starts {
		var blockers []string
		for _, in := range have {
			q := g.byName[strings.ToLower(in.Profile)]
			if rangeMask(in.Start, g.Shapes[q].Size)&s.masks[si] != 0 {
				blockers = append(blockers, in.String())
			}
		}
		e.Reasons = append(e.Reasons, fmt.Sprintf("start %d blocked by %s", st, strings.Join(blockers, ", ")))
	}
	return e
}
