package alloc

import (
	"math/bits"

	"github.com/gpuslice/gpuslice/internal/mig"
)

// Touch tiers order candidates for bin packing: devices on a GPU that
// already serves claims first, then on a node that does, then untouched.
// Spread walks them the other way round.
const (
	tierGPU = iota
	tierNode
	tierNone
	numTiers
)

// index keeps the sets the fast path searches instead of the whole fleet:
//   - join: devices in use whose claims a newcomer may share, keyed by mode
//     and tenant (tenant "" holds devices whose claims all allow any tenant);
//   - idle: idle devices by shape (model, profile, configured mode) and tier;
//   - free: GPUs that accept new MIG instances, by model, occupancy and tier.
//
// Every entry is rebuilt for a whole GPU at once (reindexGPU) whenever the
// GPU or its node changes, so the sets can never drift from the state.
type index struct {
	join map[joinKey]map[int]struct{}
	idle map[shapeKey]*[numTiers]bitset
	free map[string]map[occKey]*[numTiers]bitset

	// where each device and GPU is indexed now, to remove it again
	devJoin []joinKeys
	devIdle []idleRef
	gpuFree []freeRef
}

type joinKey struct {
	mode   Mode
	tenant string
}

type joinKeys struct {
	n    int
	keys [2]joinKey
}

// shapeKey groups idle devices that serve any request identically: same
// model, same profile (or whole GPU) and same configured sharing.
type shapeKey struct {
	model   string
	profile int // -1 for a whole GPU
	sharing Sharing
}

type occKey = mig.Occupancy

type idleRef struct {
	ok   bool
	key  shapeKey
	tier int
}

type freeRef struct {
	ok    bool
	model string
	occ   occKey
	tier  int
}

func newIndex(s *State) index {
	ix := index{
		join: map[joinKey]map[int]struct{}{},
		idle: map[shapeKey]*[numTiers]bitset{},
		free: map[string]map[occKey]*[numTiers]bitset{},
	}
	s.idx = ix
	for gi := range s.gpus {
		s.reindexGPU(gi)
	}
	return s.idx
}

func (ix index) clone() index {
	c := index{
		join:    make(map[joinKey]map[int]struct{}, len(ix.join)),
		idle:    make(map[shapeKey]*[numTiers]bitset, len(ix.idle)),
		free:    make(map[string]map[occKey]*[numTiers]bitset, len(ix.free)),
		devJoin: append([]joinKeys(nil), ix.devJoin...),
		devIdle: append([]idleRef(nil), ix.devIdle...),
		gpuFree: append([]freeRef(nil), ix.gpuFree...),
	}
	for k, set := range ix.join {
		m := make(map[int]struct{}, len(set))
		for d := range set {
			m[d] = struct{}{}
		}
		c.join[k] = m
	}
	for k, tiers := range ix.idle {
		var t [numTiers]bitset
		for i := range tiers {
			t[i] = tiers[i].clone()
		}
		c.idle[k] = &t
	}
	for model, byOcc := range ix.free {
		m := make(map[occKey]*[numTiers]bitset, len(byOcc))
		for k, tiers := range byOcc {
			var t [numTiers]bitset
			for i := range tiers {
				t[i] = tiers[i].clone()
			}
			m[k] = &t
		}
		c.free[model] = m
	}
	return c
}

// tierOf is the touch tier of a GPU.
func (s *State) tierOf(gi int) int {
	g := &s.gpus[gi]
	switch {
	case g.touched > 0:
		return tierGPU
	case s.nodes[g.node].touched > 0:
		return tierNode
	}
	return tierNone
}

// usable reports whether new work may land on a GPU at all.
func (s *State) usable(gi int) bool {
	g := &s.gpus[gi]
	return g.healthy && !s.nodes[g.node].node.Unschedulable
}

// reindexGPU removes a GPU and its devices from every set and adds them
// back according to their current state.
func (s *State) reindexGPU(gi int) {
	ix := &s.idx
	for len(ix.devJoin) < len(s.devs) {
		ix.devJoin = append(ix.devJoin, joinKeys{})
		ix.devIdle = append(ix.devIdle, idleRef{})
	}
	for len(ix.gpuFree) < len(s.gpus) {
		ix.gpuFree = append(ix.gpuFree, freeRef{})
	}
	g := &s.gpus[gi]
	devs := g.inst
	if g.whole >= 0 {
		devs = []int{g.whole}
	}
	// Remove what was there: every device ever on this GPU (dead ones too).
	for _, di := range g.allDevs {
		jk := ix.devJoin[di]
		for k := 0; k < jk.n; k++ {
			delete(ix.join[jk.keys[k]], di)
		}
		ix.devJoin[di] = joinKeys{}
		if r := ix.devIdle[di]; r.ok {
			ix.idle[r.key][r.tier].clear(di)
			ix.devIdle[di] = idleRef{}
		}
	}
	if r := ix.gpuFree[gi]; r.ok {
		ix.free[r.model][r.occ][r.tier].clear(gi)
		ix.gpuFree[gi] = freeRef{}
	}
	if !s.usable(gi) {
		return
	}
	tier := s.tierOf(gi)
	for _, di := range devs {
		d := &s.devs[di]
		if !d.alive {
			continue
		}
		if d.idle() {
			key := shapeKey{model: g.model.ID, profile: -1, sharing: d.sharing}
			if d.isMIG {
				key.profile = d.profile
			}
			tiers := ix.idle[key]
			if tiers == nil {
				tiers = &[numTiers]bitset{}
				ix.idle[key] = tiers
			}
			tiers[tier].set(di)
			ix.devIdle[di] = idleRef{ok: true, key: key, tier: tier}
			continue
		}
		if d.hardware || (d.mode != TimeSlice && d.mode != MPS) {
			continue
		}
		var jk joinKeys
		if len(d.tenants) == 1 {
			jk.keys[jk.n] = joinKey{d.mode, d.tenants[0].name}
			jk.n++
		}
		if d.strict == 0 {
			jk.keys[jk.n] = joinKey{d.mode, ""}
			jk.n++
		}
		for k := 0; k < jk.n; k++ {
			set := ix.join[jk.keys[k]]
			if set == nil {
				set = map[int]struct{}{}
				ix.join[jk.keys[k]] = set
			}
			set[di] = struct{}{}
		}
		ix.devJoin[di] = jk
	}
	if g.migOn && g.dynamic {
		byOcc := ix.free[g.model.ID]
		if byOcc == nil {
			byOcc = map[occKey]*[numTiers]bitset{}
			ix.free[g.model.ID] = byOcc
		}
		tiers := byOcc[g.occ]
		if tiers == nil {
			tiers = &[numTiers]bitset{}
			byOcc[g.occ] = tiers
		}
		tiers[tier].set(gi)
		ix.gpuFree[gi] = freeRef{ok: true, model: g.model.ID, occ: g.occ, tier: tier}
	}
}

// normMode maps an unset device mode to exclusive.
func normMode(m Mode) Mode {
	if m == "" {
		return Exclusive
	}
	return m
}

// bitset is a growable set of small non-negative ints.
type bitset struct{ w []uint64 }

func (b *bitset) set(i int) {
	for len(b.w) <= i/64 {
		b.w = append(b.w, 0)
	}
	b.w[i/64] |= 1 << (i % 64)
}

func (b *bitset) clear(i int) {
	if i/64 < len(b.w) {
		b.w[i/64] &^= 1 << (i % 64)
	}
}

func (b *bitset) empty() bool {
	for _, w := range b.w {
		if w != 0 {
			return false
		}
	}
	return true
}

// each calls fn for members in increasing order until fn returns false.
func (b *bitset) each(fn func(int) bool) {
	for wi, w := range b.w {
		for w != 0 {
			i := wi*64 + bits.TrailingZeros64(w)
			if !fn(i) {
				return
			}
			w &= w - 1
		}
	}
}

func (b bitset) clone() bitset { return bitset{w: append([]uint64(nil), b.w...)} }
