package packing

import (
	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
)

// demand is what one claim needs of a GPU model, in the units the bounds
// count:
//
//   - mem: MiB; the request's memory, or for a claim naming a MIG profile
//     the larger of that and the profile's memory (the instance is held
//     whole, unless the claim shares it by time-slicing or MPS: layered
//     sharing, where only the request's own memory and compute count);
//   - comp: compute in 1/(100·C) of a GPU, C being the model's MIG compute
//     slices (1 without MIG): a request's percent × C, or for a profile its
//     compute slices × 100, exactly;
//   - slices, cslices: for a claim naming a profile, the profile's memory
//     and compute slices (0 otherwise);
//   - alone: the claim holds its device by itself (a profile, mode mig or
//     exclusive, compute ≥ 100% in auto mode, or hardware isolation).
type demand struct {
	mem     int64
	comp    int64
	slices  int64
	cslices int64
	alone   bool
}

// geometryOf returns the model's MIG sizes: memory slices, compute slices
// and most instances (1, 1, 1 without MIG).
func geometryOf(m *catalog.GPU) (slices, cslices, maxInst int64) {
	if m.MIG == nil {
		return 1, 1, 1
	}
	return int64(m.MIG.MemorySlices), int64(m.MIG.ComputeSlices), int64(m.MIG.MaxInstances)
}

func claimDemand(m *catalog.GPU, c *alloc.Claim) demand {
	r := &c.Requests[0]
	_, cs, _ := geometryOf(m)
	d := demand{mem: r.MemoryMiB, comp: int64(r.ComputePercent) * cs}
	shared := r.Mode == alloc.TimeSlice || r.Mode == alloc.MPS
	if r.Profile != "" && m.MIG != nil && !shared {
		if p, err := m.Profile(r.Profile); err == nil {
			d.mem = max(d.mem, p.MemoryMiB)
			d.comp = int64(p.ComputeSlices) * 100
			d.slices, d.cslices = int64(p.MemorySlices), int64(p.ComputeSlices)
		}
	}
	// A shared device (time-slicing, MPS) asked for explicitly may hold
	// a 100% claim beside claims that promise no compute; auto mode gives
	// a 100% claim a whole GPU or instance.
	auto := r.Mode == "" || r.Mode == alloc.Auto
	d.alone = (r.Profile != "" && !shared) || r.Mode == alloc.MIG || r.Mode == alloc.Exclusive ||
		(auto && r.ComputePercent >= 100) || c.Isolation == alloc.IsolationHardware
	return d
}

func ceilDiv(a, b int64) int64 {
	if a <= 0 {
		return 0
	}
	return (a + b - 1) / b
}

// Bounds are the lower bounds of a set of claims on one GPU model, with the
// totals they come from.
type Bounds struct {
	// MemoryMiB, ComputePercent and MIGSlices are the summed demands
	// (ComputePercent in percent of one GPU, rounded up; MIGSlices the
	// memory slices of claims that name a profile).
	MemoryMiB      int64
	ComputePercent int64
	MIGSlices      int64
	// ByMemory, ByCompute and BySlices are the per-dimension bounds;
	// LowerBound is their maximum.
	ByMemory, ByCompute, BySlices int
	LowerBound                    int
	// Groups is the number of isolation groups; IsolationLowerBound is the
	// larger of LowerBound and the group bound (see isolationBound).
	Groups              int
	IsolationLowerBound int
	// ByComputeL2 is the L2 bound on the claims' compute shares (each
	// GPU holds 100%), across isolation groups.
	ByComputeL2 int
}

// LowerBounds computes the bounds of claims on model m.
//
// LowerBound = ⌈max(Σ mem ÷ M, Σ comp ÷ (100·C), Σ slices ÷ S)⌉ where M is the
// GPU's memory (the whole GPU, more than any set of MIG instances offers),
// C its compute slices and S its memory slices (1 and 1 without MIG). Every
// method that gives each claim its memory and compute, and each profile its
// slices, needs at least this many GPUs.
func LowerBounds(m *catalog.GPU, claims []alloc.Claim) Bounds {
	s, cs, _ := geometryOf(m)
	var b Bounds
	var comp int64
	items := make([]int64, 0, len(claims))
	for i := range claims {
		d := claimDemand(m, &claims[i])
		b.MemoryMiB += d.mem
		comp += d.comp
		b.MIGSlices += d.slices
		items = append(items, min(d.comp, 100*cs))
	}
	b.ComputePercent = ceilDiv(comp, cs)
	b.ByMemory = int(ceilDiv(b.MemoryMiB, m.MemoryMiB))
	b.ByCompute = int(ceilDiv(comp, 100*cs))
	if m.MIG != nil {
		b.BySlices = int(ceilDiv(b.MIGSlices, s))
	}
	b.LowerBound = max(b.ByMemory, b.ByCompute, b.BySlices, min(len(claims), 1))
	iso, groups := isolationBound(m, claims)
	b.Groups = groups
	// Compute is conserved per GPU whatever shares it (MIG instances
	// split its compute slices, shared devices promise no more than they
	// have), so Martello and Toth's L2 over every claim's compute holds
	// across isolation groups too: three 60% claims need three GPUs.
	b.ByComputeL2 = int(binsL2(items, 100*cs))
	b.IsolationLowerBound = max(b.LowerBound, iso, b.ByComputeL2)
	return b
}

// isolationBound is the tighter bound that knows tenant isolation. An
// isolation group is either every tenant-isolated claim of one tenant that
// may share a device, or one claim that holds its device alone (see
// demand.alone). Devices are never shared across groups: a time-sliced or
// MPS device serves one tenant unless all its claims chose isolation none,
// and a device held alone serves one claim. Claims with isolation none
// whose tenant has only such claims form one more group, the pool: they
// may share a device with each other but not with another tenant's
// tenant-isolated claims. Other isolation-none claims are left out (they
// may fill their own tenant's devices), so the bound holds for the whole
// set.
//
// Without MIG a device is a whole GPU, so groups never share a GPU and the
// bound is Σ over groups of the most of ⌈mem ÷ M⌉, ⌈comp ÷ 100%⌉, 1 and
// binsL2 of the group's claim memories: claims do not split across GPUs,
// so a group is a bin-packing instance and needs at least the bins that
// bound proves.
//
// With MIG, GPUs are shared by groups only through MIG instances (or not at
// all: a whole GPU with MIG off holds one group). Each group is charged
//
//   - memory slices: ⌈mem ÷ q⌉, q being the most memory one memory slice
//     gives (the larger of M ÷ S and any profile's memory ÷ size, i.e. the
//     whole GPU's), at least 1, or a profile's exact size;
//   - compute slices: ⌈comp ÷ (100% ÷ C)⌉, at least 1 (every instance has a
//     compute slice), or a profile's exact compute slices;
//   - instances: 1,
//
// and the bound is ⌈max(Σ memory slices ÷ S, Σ compute slices ÷ C,
// Σ instances ÷ max instances)⌉. A whole GPU given to one group counts as S
// memory slices, C compute slices and (at most) max instances, so the bound
// holds for mixed MIG / non-MIG placements too.
func isolationBound(m *catalog.GPU, claims []alloc.Claim) (bound, groups int) {
	s, cs, maxInst := geometryOf(m)
	gs := IsolationGroups(m, claims)
	if m.MIG == nil {
		total := int64(0)
		for _, g := range gs {
			total += int64(g.Bound(m))
		}
		return int(total), len(gs)
	}
	// q = num/den MiB per memory slice, the best any device offers.
	num, den := m.MemoryMiB, s
	for _, p := range m.MIG.Profiles {
		if p.MemoryMiB*den > num*int64(p.MemorySlices) {
			num, den = p.MemoryMiB, int64(p.MemorySlices)
		}
	}
	var ms, cslices, inst int64
	for _, g := range gs {
		if g.exact {
			ms += g.slices
			cslices += g.cslices
		} else {
			ms += max(ceilDiv(g.mem*den, num), 1)
			cslices += max(ceilDiv(g.comp, 100), 1) // comp is in 1/(100·C): 100 units per compute slice
		}
		inst++
	}
	return int(max(ceilDiv(ms, s), ceilDiv(cslices, cs), ceilDiv(inst, maxInst))), len(gs)
}

// binsL2 is Martello and Toth's L2 lower bound on the bins of capacity c
// that items need (each item ≤ c). For a threshold k ≤ c/2, items above
// c−k each need a bin of their own that nothing of size ≥ k can join;
// items in (c/2, c−k] each need their own bin too; and items in [k, c/2]
// need what is left of those bins' space plus whole new bins for the
// rest. The bound is the best over every k that is an item size (or 0).
func binsL2(items []int64, c int64) int64 {
	if len(items) == 0 || c <= 0 {
		return 0
	}
	ks := []int64{0}
	for _, it := range items {
		if it <= c/2 {
			ks = append(ks, it)
		}
	}
	best := int64(0)
	for _, k := range ks {
		var n1, n2, s2, s3 int64
		for _, it := range items {
			switch {
			case it > c-k:
				n1++
			case it > c/2:
				n2++
				s2 += it
			case it >= k:
				s3 += it
			}
		}
		best = max(best, n1+n2+max(0, ceilDiv(s3-(n2*c-s2), c)))
	}
	return best
}
