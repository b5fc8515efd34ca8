package alloc

import (
	"math/bits"
	"slices"
	"sort"

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
//   - idle: idle devices by shape (model, profile, configured mode), node
//     class (labels and instance type) and tier;
//   - free: GPUs that accept new MIG instances, by model, node class,
//     occupancy and tier;
//   - evict: GPUs with an idle MIG instance the allocator may destroy;
//   - switchable: idle MIG-capable GPUs (a mode switch needs one).
//
// Keying by node class lets a selector on node labels (a workload pinned
// to a pool) reject a whole class with one evaluation.
//
// Every entry is rebuilt for a whole GPU at once (reindexGPU) whenever the
// GPU or its node changes, so the sets can never drift from the state.
type index struct {
	join       map[joinKey]*joinSet
	idle       map[shapeKey]*[numTiers]bitset
	free       map[freeKey]map[occKey]*occClass
	evict      bitset
	switchable bitset

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
	free int64 // the free memory the device was filed under
}

// joinSet is the devices of one join key ordered by free memory, then
// device index: best fit first.
type joinSet struct{ e []joinEntry }

type joinEntry struct {
	free int64
	dev  int
}

func (j *joinSet) search(free int64, dev int) int {
	return sort.Search(len(j.e), func(i int) bool {
		return j.e[i].free > free || (j.e[i].free == free && j.e[i].dev >= dev)
	})
}

func (j *joinSet) add(free int64, dev int) {
	i := j.search(free, dev)
	j.e = slices.Insert(j.e, i, joinEntry{free, dev})
}

func (j *joinSet) remove(free int64, dev int) {
	if i := j.search(free, dev); i < len(j.e) && j.e[i].dev == dev {
		j.e = slices.Delete(j.e, i, i+1)
	}
}

// from iterates devices with at least free MiB free, best fit first.
func (j *joinSet) from(free int64, fn func(dev int) bool) {
	for i := j.search(free, -1); i < len(j.e); i++ {
		if !fn(j.e[i].dev) {
			return
		}
	}
}

// shapeKey groups idle devices that serve any request identically: same
// model, same profile (or whole GPU) and same configured sharing.
type shapeKey struct {
	model   string
	profile int // -1 for a whole GPU
	sharing Sharing
	class   int // node class
}

// freeKey is the GPUs of one model on nodes of one class.
type freeKey struct {
	model string
	class int
}

type occKey = mig.Occupancy

// occClass is the GPUs of one model with one occupancy, by tier, and what
// placing each profile there gives (computed once: every GPU of the class
// places a profile the same way).
type occClass struct {
	tiers [numTiers]bitset
	// place[p] is 0 before it is computed, -1 when profile p does not fit,
	// else 1 + the best start; capAfter[p] is the Capacity after.
	place    []int8
	capAfter []int16
}

func (c *occClass) placeOf(geo *mig.Geometry, occ occKey, p int) (start, capacity int, ok bool) {
	if c.place == nil {
		c.place = make([]int8, len(geo.Shapes))
		c.capAfter = make([]int16, len(geo.Shapes))
	}
	if c.place[p] == 0 {
		c.place[p] = -1
		if st, fits := geo.BestStart(occ, p); fits {
			c.place[p] = int8(1 + st)
			c.capAfter[p] = int16(geo.Capacity(geo.Add(occ, p, st)))
		}
	}
	if c.place[p] < 0 {
		return 0, 0, false
	}
	return int(c.place[p]) - 1, int(c.capAfter[p]), true
}

type idleRef struct {
	ok   bool
	key  shapeKey
	tier int
}

type freeRef struct {
	ok   bool
	key  freeKey
	occ  occKey
	tier int
}

func newIndex(s *State) index {
	ix := index{
		join: map[joinKey]*joinSet{},
		idle: map[shapeKey]*[numTiers]bitset{},
		free: map[freeKey]map[occKey]*occClass{},
	}
	s.idx = ix
	for gi := range s.gpus {
		s.reindexGPU(gi)
	}
	return s.idx
}

func (ix index) clone() index {
	c := index{
		join:       make(map[joinKey]*joinSet, len(ix.join)),
		idle:       make(map[shapeKey]*[numTiers]bitset, len(ix.idle)),
		free:       make(map[freeKey]map[occKey]*occClass, len(ix.free)),
		evict:      ix.evict.clone(),
		switchable: ix.switchable.clone(),
		devJoin:    append([]joinKeys(nil), ix.devJoin...),
		devIdle:    append([]idleRef(nil), ix.devIdle...),
		gpuFree:    append([]freeRef(nil), ix.gpuFree...),
	}
	for k, set := range ix.join {
		c.join[k] = &joinSet{e: append([]joinEntry(nil), set.e...)}
	}
	for k, tiers := range ix.idle {
		var t [numTiers]bitset
		for i := range tiers {
			t[i] = tiers[i].clone()
		}
		c.idle[k] = &t
	}
	for fk, byOcc := range ix.free {
		m := make(map[occKey]*occClass, len(byOcc))
		for k, cl := range byOcc {
			n := &occClass{place: append([]int8(nil), cl.place...), capAfter: append([]int16(nil), cl.capAfter...)}
			for i := range cl.tiers {
				n.tiers[i] = cl.tiers[i].clone()
			}
			m[k] = n
		}
		c.free[fk] = m
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

// unindexGPU removes a GPU and every device ever on it (dead ones too)
// from every set.
func (s *State) unindexGPU(gi int) {
	ix := &s.idx
	g := &s.gpus[gi]
	for _, di := range g.allDevs {
		if di >= len(ix.devJoin) {
			continue
		}
		jk := ix.devJoin[di]
		for k := 0; k < jk.n; k++ {
			ix.join[jk.keys[k]].remove(jk.free, di)
		}
		ix.devJoin[di] = joinKeys{}
		if r := ix.devIdle[di]; r.ok {
			tiers := ix.idle[r.key]
			tiers[r.tier].clear(di)
			ix.devIdle[di] = idleRef{}
			if tiers[tierGPU].empty() && tiers[tierNode].empty() && tiers[tierNone].empty() {
				delete(ix.idle, r.key) // as for occupancies below
			}
		}
	}
	if gi < len(ix.gpuFree) {
		if r := ix.gpuFree[gi]; r.ok {
			byOcc := ix.free[r.key]
			cl := byOcc[r.occ]
			cl.tiers[r.tier].clear(gi)
			ix.gpuFree[gi] = freeRef{}
			// An occupancy no GPU has any more leaves the index, so that
			// a search walks only occupancies some GPU has (a pass over
			// thousands of GPUs sees hundreds of occupancies come and go).
			if cl.tiers[tierGPU].empty() && cl.tiers[tierNode].empty() && cl.tiers[tierNone].empty() {
				delete(byOcc, r.occ)
			}
		}
	}
	ix.evict.clear(gi)
	ix.switchable.clear(gi)
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
	s.unindexGPU(gi)
	g := &s.gpus[gi]
	g.ver = s.sel.nextGen() // unique: a node or GPU added later never repeats one
	s.nodes[g.node].ver = g.ver
	devs := g.inst
	if g.whole >= 0 {
		devs = []int{g.whole}
	}
	if !s.usable(gi) {
		return
	}
	if g.geo != nil && g.touched == 0 {
		ix.switchable.set(gi)
	}
	class := s.nodes[g.node].class
	tier := s.tierOf(gi)
	for _, di := range devs {
		d := &s.devs[di]
		if !d.alive {
			continue
		}
		if d.idle() {
			key := shapeKey{model: g.model.ID, profile: -1, sharing: d.sharing, class: class}
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
			if d.isMIG && g.migOn && g.dynamic {
				ix.evict.set(gi)
			}
			continue
		}
		if d.hardware || (d.mode != TimeSlice && d.mode != MPS) || d.clients >= slotLimit(d.sharing) {
			continue // nobody can join it
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
		jk.free = d.memMiB - d.usedMem
		for k := 0; k < jk.n; k++ {
			set := ix.join[jk.keys[k]]
			if set == nil {
				set = &joinSet{}
				ix.join[jk.keys[k]] = set
			}
			set.add(jk.free, di)
		}
		ix.devJoin[di] = jk
	}
	if g.migOn && g.dynamic {
		fk := freeKey{model: g.model.ID, class: class}
		byOcc := ix.free[fk]
		if byOcc == nil {
			byOcc = map[occKey]*occClass{}
			ix.free[fk] = byOcc
		}
		cl := byOcc[g.occ]
		if cl == nil {
			cl = &occClass{}
			byOcc[g.occ] = cl
		}
		cl.tiers[tier].set(gi)
		ix.gpuFree[gi] = freeRef{ok: true, key: fk, occ: g.occ, tier: tier}
	}
}

// normMode maps an unset device mode to exclusive.
func normMode(m Mode) Mode {
	if m == "" {
		return Exclusive
	}
	return m
}

// bitset is a growable set of small non-negative ints. It counts its
// members and remembers the lowest word that may hold one, so searching an
// empty or sparse set costs nothing.
type bitset struct {
	w  []uint64
	n  int // members
	lo int // no member below word lo
}

func (b *bitset) set(i int) {
	for len(b.w) <= i/64 {
		b.w = append(b.w, 0)
	}
	if b.w[i/64]&(1<<(i%64)) == 0 {
		b.n++
		b.w[i/64] |= 1 << (i % 64)
	}
	b.lo = min(b.lo, i/64)
}

func (b *bitset) clear(i int) {
	if i/64 < len(b.w) && b.w[i/64]&(1<<(i%64)) != 0 {
		b.w[i/64] &^= 1 << (i % 64)
		b.n--
	}
}

func (b *bitset) empty() bool { return b.n == 0 }

// each calls fn for members in increasing order until fn returns false.
func (b *bitset) each(fn func(int) bool) {
	if b.n == 0 {
		return
	}
	for wi := b.lo; wi < len(b.w); wi++ {
		w := b.w[wi]
		if w == 0 {
			if wi == b.lo {
				b.lo++
			}
			continue
		}
		for w != 0 {
			i := wi*64 + bits.TrailingZeros64(w)
			if !fn(i) {
				return
			}
			w &= w - 1
		}
	}
}

func (b bitset) clone() bitset { return bitset{w: append([]uint64(nil), b.w...), n: b.n, lo: b.lo} }
