package mig

import (
	"fmt"
	"math/bits"
	"strings"

	"github.com/gpuslice/gpuslice/internal/catalog"
)

// maxSlices bounds the memory slices a geometry may have; masks are uint16.
const maxSlices = 16

// maxProfiles bounds the profiles one geometry may have (Occupancy keeps a
// fixed-size count array so it stays a comparable value).
const maxProfiles = 24

// Shape is one profile as the geometry sees it.
type Shape struct {
	Name      string
	Starts    []int
	Size      int // memory slices
	Compute   int // compute slices
	MaxCount  int
	ME        bool // a "+me" profile: at most one per GPU
	MemoryMiB int64

	masks []uint16 // masks[i] covers [Starts[i], Starts[i]+Size)
}

// Geometry is the MIG placement model of one GPU model. It is immutable and
// safe for concurrent use.
type Geometry struct {
	Model         string
	Slices        int
	ComputeSlices int
	MaxInstances  int
	Shapes        []Shape

	byName map[string]int
	// free[mask][p] is how many more instances of profile p fit into the
	// slices not set in mask, ignoring count limits (greedy interval
	// packing, which is optimal for equal-size intervals).
	free [][]uint8
	// best[k] is the highest Capacity of any valid layout using k slices.
	best []int
	// tables caches Room, AnyOrder and SmallFirst by occupancy, shared
	// by every geometry of the same shape.
	tables *shapeTables
}

// New builds the geometry of a MIG-capable catalog model.
func New(g *catalog.GPU) (*Geometry, error) {
	if g == nil || g.MIG == nil {
		id := "<nil>"
		if g != nil {
			id = g.ID
		}
		return nil, fmt.Errorf("GPU model %s does not support MIG", id)
	}
	spec := g.MIG
	shapes := make([]Shape, 0, len(spec.Profiles))
	for _, p := range spec.Profiles {
		shapes = append(shapes, Shape{
			Name:      p.Name,
			Starts:    append([]int(nil), p.Placement.Starts...),
			Size:      p.Placement.Size,
			Compute:   p.ComputeSlices,
			MaxCount:  p.MaxCount,
			ME:        p.MediaExtensions,
			MemoryMiB: p.MemoryMiB,
		})
	}
	return NewFromShapes(g.ID, spec.MemorySlices, spec.ComputeSlices, spec.MaxInstances, shapes)
}

// NewFromShapes builds a geometry from explicit shapes; tests and synthetic
// models use it. It checks that every placement fits the slices.
func NewFromShapes(model string, slices, compute, maxInstances int, shapes []Shape) (*Geometry, error) {
	if slices <= 0 || slices > maxSlices {
		return nil, fmt.Errorf("model %s: %d memory slices, want 1..%d", model, slices, maxSlices)
	}
	if len(shapes) == 0 || len(shapes) > maxProfiles {
		return nil, fmt.Errorf("model %s: %d profiles, want 1..%d", model, len(shapes), maxProfiles)
	}
	if compute <= 0 {
		return nil, fmt.Errorf("model %s: %d compute slices, want at least 1", model, compute)
	}
	if maxInstances <= 0 {
		maxInstances = slices
	}
	geo := &Geometry{Model: model, Slices: slices, ComputeSlices: compute, MaxInstances: maxInstances,
		byName: make(map[string]int, len(shapes))}
	for i := range shapes {
		s := shapes[i]
		if s.Size <= 0 || s.Size > slices {
			return nil, fmt.Errorf("model %s profile %s: size %d does not fit %d slices", model, s.Name, s.Size, slices)
		}
		if len(s.Starts) == 0 {
			return nil, fmt.Errorf("model %s profile %s: no allowed starts", model, s.Name)
		}
		if s.MaxCount <= 0 {
			s.MaxCount = slices
		}
		if s.ME {
			s.MaxCount = 1
		}
		s.Starts = append([]int(nil), s.Starts...)
		s.masks = make([]uint16, len(s.Starts))
		for j, st := range s.Starts {
			if st < 0 || st+s.Size > slices {
				return nil, fmt.Errorf("model %s profile %s: start %d + size %d exceeds %d slices", model, s.Name, st, s.Size, slices)
			}
			if j > 0 && st <= s.Starts[j-1] {
				return nil, fmt.Errorf("model %s profile %s: starts %v are not strictly increasing", model, s.Name, s.Starts)
			}
			s.masks[j] = rangeMask(st, s.Size)
		}
		key := strings.ToLower(s.Name)
		if _, dup := geo.byName[key]; dup {
			return nil, fmt.Errorf("model %s: profile %s listed twice", model, s.Name)
		}
		geo.byName[key] = i
		geo.Shapes = append(geo.Shapes, s)
	}
	geo.free = make([][]uint8, 1<<slices)
	for mask := range geo.free {
		row := make([]uint8, len(geo.Shapes))
		for p := range geo.Shapes {
			used := uint16(mask)
			n := 0
			for _, m := range geo.Shapes[p].masks {
				if used&m == 0 {
					used |= m
					n++
				}
			}
			row[p] = uint8(n)
		}
		geo.free[mask] = row
	}
	geo.best = geo.computeBestCapacity()
	geo.tables = tablesFor(geo)
	return geo, nil
}

// Profile returns the index of a profile by name (case-insensitive).
func (g *Geometry) Profile(name string) (int, error) {
	if i, ok := g.byName[strings.ToLower(strings.TrimSpace(name))]; ok {
		return i, nil
	}
	names := g.ProfileNames()
	return -1, &catalog.NotFoundError{Kind: "MIG profile of " + g.Model, Name: name,
		Valid: names, Suggestion: catalog.Suggest(name, names)}
}

// Lookup returns the index of a profile by name (case-insensitive)
// without building an error; hot paths use it.
func (g *Geometry) Lookup(name string) (int, bool) {
	if i, ok := g.byName[name]; ok {
		return i, true
	}
	i, ok := g.byName[strings.ToLower(strings.TrimSpace(name))]
	return i, ok
}

// ProfileNames lists the profile names in catalog order.
func (g *Geometry) ProfileNames() []string {
	out := make([]string, len(g.Shapes))
	for i, s := range g.Shapes {
		out[i] = s.Name
	}
	return out
}

// FullMask is the mask with every memory slice set.
func (g *Geometry) FullMask() uint16 { return rangeMask(0, g.Slices) }

func rangeMask(start, size int) uint16 {
	return uint16((1<<size)-1) << start
}

// startIndex returns the index of start in the profile's allowed starts.
func (s *Shape) startIndex(start int) int {
	for i, st := range s.Starts {
		if st == start {
			return i
		}
	}
	return -1
}

func popcount(m uint16) int { return bits.OnesCount16(m) }
