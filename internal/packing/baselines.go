package packing

import (
	"fmt"
	"sort"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/mig"
)

// The baselines model the tools users have today. They are deliberately
// simple and, where a choice exists, generous to the baseline.

// wholeGPU gives every claim a GPU of its own (nvidia.com/gpu: 1).
func wholeGPU(claims []alloc.Claim) Result {
	return Result{Method: WholeGPU, Applicable: true, GPUs: len(claims),
		Note: "one claim per GPU"}
}

// timeSlicing is the NVIDIA device plugin with time-slicing: each GPU is
// advertised as n replicas and every claim takes one, whatever it asks,
// first-fit in arrival order. The plugin does not separate tenants and
// checks no memory or compute, so a GPU whose claims' memory adds up to
// more than the GPU has is an overcommitted device (its workloads can run
// out of memory at any time).
func timeSlicing(m *catalog.GPU, claims []alloc.Claim, n int) Result {
	type dev struct {
		claims int
		mem    int64
		comp   int64
	}
	var devs []dev
	for i := range claims {
		d := claimDemand(m, &claims[i])
		_, cs, _ := geometryOf(m)
		placed := false
		for j := range devs {
			if devs[j].claims < n {
				devs[j].claims++
				devs[j].mem += d.mem
				devs[j].comp += d.comp / cs
				placed = true
				break
			}
		}
		if !placed {
			devs = append(devs, dev{claims: 1, mem: d.mem, comp: d.comp / cs})
		}
	}
	over, overComp := 0, 0
	for _, d := range devs {
		if d.mem > m.MemoryMiB {
			over++
		}
		if d.comp > 100 {
			overComp++
		}
	}
	return Result{Method: TimeSlice, Applicable: true, GPUs: len(devs), Overcommitted: over,
		Note: fmt.Sprintf("%d replicas per GPU, tenants mixed, memory unchecked; %d GPU(s) also over 100%% compute", n, overComp)}
}

// staticMIG pre-partitions every GPU into layout (validated against the
// model's MIG geometry). Each claim takes the smallest free instance that
// fits its memory and compute (a claim naming a profile takes a free
// instance of exactly that profile) among the GPUs already in use, and a
// fresh partitioned GPU only when none is free; instances are not shared
// (the device plugin's MIG strategies give one instance per container).
// A claim that no instance of the layout can hold gets a whole GPU from a
// separate un-partitioned pool, as an admin would keep one.
func staticMIG(m *catalog.GPU, claims []alloc.Claim, layout []string) (Result, error) {
	if m.MIG == nil || len(layout) == 0 {
		return Result{Method: StaticMIG, Note: "model has no MIG"}, nil
	}
	geo, err := mig.New(m)
	if err != nil {
		return Result{}, err
	}
	if _, err := geo.Fit(layout); err != nil {
		return Result{}, fmt.Errorf("static MIG layout %v on %s: %w", layout, m.ID, err)
	}
	type inst struct {
		name    string
		slices  int
		mem     int64
		compute int
	}
	var types []inst
	for _, name := range layout {
		p, err := m.Profile(name)
		if err != nil {
			return Result{}, err
		}
		types = append(types, inst{p.Name, p.MemorySlices, p.MemoryMiB, p.ComputeSlices * 100 / m.MIG.ComputeSlices})
	}
	// Smallest first: slices, then memory, then compute.
	sort.SliceStable(types, func(i, j int) bool {
		a, b := types[i], types[j]
		if a.slices != b.slices {
			return a.slices < b.slices
		}
		if a.mem != b.mem {
			return a.mem < b.mem
		}
		return a.compute < b.compute
	})
	var gpus [][]bool // gpus[g][i]: instance types[i] of GPU g is taken
	whole := 0
	for ci := range claims {
		r := &claims[ci].Requests[0]
		fits := func(t inst) bool {
			if r.Profile != "" {
				return t.name == r.Profile
			}
			return t.mem >= r.MemoryMiB && t.compute >= r.ComputePercent
		}
		best, bestGPU := -1, -1
		for g := range gpus {
			for i, t := range types {
				if !gpus[g][i] && fits(t) && (best < 0 || i < best) {
					best, bestGPU = i, g
					break
				}
			}
		}
		if best < 0 {
			for i, t := range types {
				if fits(t) {
					best = i
					break
				}
			}
			if best < 0 {
				whole++
				continue
			}
			gpus = append(gpus, make([]bool, len(types)))
			bestGPU = len(gpus) - 1
		}
		gpus[bestGPU][best] = true
	}
	note := fmt.Sprintf("layout %v", layout)
	if whole > 0 {
		note += fmt.Sprintf(", %d claim(s) fit no instance and take a whole GPU", whole)
	}
	return Result{Method: StaticMIG, Applicable: true, GPUs: len(gpus) + whole, Note: note}, nil
}

// firstFit packs whole GPUs first-fit on memory and compute with one
// tenant per GPU (claims of different tenants never share a GPU), no MIG
// and no replica limit. A claim that holds its device alone (hardware
// isolation, exclusive, a MIG profile, 100% compute) takes a GPU by itself.
func firstFit(m *catalog.GPU, claims []alloc.Claim) Result {
	type gpu struct {
		tenant string
		mem    int64
		comp   int64
		alone  bool
	}
	_, cs, _ := geometryOf(m)
	var gpus []gpu
	for i := range claims {
		c := &claims[i]
		d := claimDemand(m, c)
		comp := d.comp // in 1/(100·C)
		placed := false
		if !d.alone {
			for j := range gpus {
				g := &gpus[j]
				if !g.alone && g.tenant == c.Tenant && g.mem+d.mem <= m.MemoryMiB && g.comp+comp <= 100*cs {
					g.mem += d.mem
					g.comp += comp
					placed = true
					break
				}
			}
		}
		if !placed {
			gpus = append(gpus, gpu{tenant: c.Tenant, mem: d.mem, comp: comp, alone: d.alone})
		}
	}
	return Result{Method: FirstFit, Applicable: true, GPUs: len(gpus), Note: "whole GPUs, one tenant per GPU, memory+compute first-fit"}
}
