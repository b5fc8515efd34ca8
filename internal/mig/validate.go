package mig

import (
	"errors"
	"fmt"
	"strings"
)

// Problem is one reason a layout is invalid. Index and Other are positions
// in the layout (Other is -1 when the problem involves one instance).
type Problem struct {
	Index   int
	Other   int
	Message string
}

// LayoutError lists every problem of an invalid layout.
type LayoutError struct {
	Model    string
	Problems []Problem
}

func (e *LayoutError) Error() string {
	msgs := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		msgs[i] = p.Message
	}
	return fmt.Sprintf("invalid MIG layout on %s: %s", e.Model, strings.Join(msgs, "; "))
}

// IsLayoutError reports whether err is (or wraps) a *LayoutError.
func IsLayoutError(err error) bool {
	var le *LayoutError
	return errors.As(err, &le)
}

// Validate checks a layout against the geometry and reports every problem
// at once: unknown profiles, starts the profile does not allow, instances
// whose memory slices overlap (naming both), more than one "+me" instance,
// and counts over a profile's or the GPU's limits.
func (g *Geometry) Validate(l Layout) error {
	_, err := g.Occupancy(l)
	return err
}

// Occupancy validates a layout and summarises it.
func (g *Geometry) Occupancy(l Layout) (Occupancy, error) {
	var o Occupancy
	var probs []Problem
	add := func(i, j int, format string, args ...any) {
		probs = append(probs, Problem{Index: i, Other: j, Message: fmt.Sprintf(format, args...)})
	}
	owner := make([]int, g.Slices) // slice -> index+1 of the instance holding it
	meAt := -1
	for i, in := range l {
		p, err := g.Profile(in.Profile)
		if err != nil {
			add(i, -1, "%s: %v", in, err)
			continue
		}
		s := &g.Shapes[p]
		if s.startIndex(in.Start) < 0 {
			add(i, -1, "%s: start %d is not allowed; %s may start at %s", in, in.Start, s.Name, formatStarts(s))
			continue
		}
		conflicts := map[int]bool{}
		for sl := in.Start; sl < in.Start+s.Size; sl++ {
			if prev := owner[sl] - 1; prev >= 0 && !conflicts[prev] {
				conflicts[prev] = true
				lo, hi := overlapRange(g, l[prev], in)
				add(i, prev, "%s overlaps %s on memory slice%s", in, l[prev], sliceRange(lo, hi))
			}
		}
		if len(conflicts) > 0 {
			continue
		}
		for sl := in.Start; sl < in.Start+s.Size; sl++ {
			owner[sl] = i + 1
		}
		if s.ME {
			if meAt >= 0 {
				add(i, meAt, "%s and %s: at most one +me profile per GPU", l[meAt], in)
				continue
			}
			meAt = i
		}
		o = g.Add(o, p, in.Start)
	}
	for p, n := range o.Counts[:len(g.Shapes)] {
		if s := &g.Shapes[p]; int(n) > s.MaxCount {
			add(-1, -1, "%d instances of %s; at most %d fit on one GPU", n, s.Name, s.MaxCount)
		}
	}
	if int(o.Instances) > g.MaxInstances {
		add(-1, -1, "%d instances; %s holds at most %d", o.Instances, g.Model, g.MaxInstances)
	}
	if int(o.Compute) > g.ComputeSlices {
		add(-1, -1, "%d compute slices used; %s has %d", o.Compute, g.Model, g.ComputeSlices)
	}
	if len(probs) > 0 {
		return Occupancy{}, &LayoutError{Model: g.Model, Problems: probs}
	}
	return o, nil
}

func overlapRange(g *Geometry, a, b Instance) (int, int) {
	sa := g.Shapes[g.byName[strings.ToLower(a.Profile)]].Size
	sb := g.Shapes[g.byName[strings.ToLower(b.Profile)]].Size
	return max(a.Start, b.Start), min(a.Start+sa, b.Start+sb) - 1
}

func sliceRange(lo, hi int) string {
	if lo == hi {
		return fmt.Sprintf(" %d", lo)
	}
	return fmt.Sprintf("s %d-%d", lo, hi)
}

// formatStarts renders a profile's placements the way nvidia-smi does:
// "{0,2,4}:2".
func formatStarts(s *Shape) string {
	parts := make([]string, len(s.Starts))
	for i, st := range s.Starts {
		parts[i] = fmt.Sprint(st)
	}
	return "{" + strings.Join(parts, ",") + "}:" + fmt.Sprint(s.Size)
}

// PlacementString returns profile p's placements as "{0,2,4}:2".
func (g *Geometry) PlacementString(p int) string { return formatStarts(&g.Shapes[p]) }
