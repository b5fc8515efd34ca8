package alloc

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/gpuslice/gpuslice/internal/mig"
)

// AllocateAhead is Allocate for a caller that knows which claims come next
// (a planner, or a queue being drained). A shared device is sized when it
// is created, and cannot grow while in use: Allocate, seeing one claim,
// creates the smallest MIG instance that holds it, and the same tenant's
// next replica, which does not fit beside it, gets another small instance.
// Six 6 GiB replicas then take six 1g.10gb instances (12 memory slices of
// an A100-40GB) where one 7g.40gb (8) would hold them all.
//
// AllocateAhead decides like Allocate, and when that answer opens or
// creates a time-sliced or MPS device, it also tries devices with room for
// the first 1, 2, … of the claim's mates in ahead: the claims that could
// share the device with it (mode allowed, same tenant, isolation and
// selector, one device, memory asked, no profile or constraint). Room is
// sought in free space only (no eviction or mode switch for it). It keeps
// the answer whose device costs the least GPU share per share of demand it
// can hold (its GPU share — the larger of its memory and compute fractions
// — divided by that of the claim plus the mates that fit, first-fit in
// ahead order), preferring on ties the device that holds more. The mates are not
// placed: each is decided when its turn comes, and joins the device if it
// still fits (joining beats opening in the allocator's order).
//
// Like Allocate it does not change the State. ahead should be in the order
// the caller will allocate in; claims in it that are already allocated are
// ignored.
func (s *State) AllocateAhead(c *Claim, ahead []Claim) (*Allocation, error) {
	return s.allocateAhead(c, ahead, true)
}

// AllocateAheadQuick is AllocateAhead without the explanation of a no-fit:
// a claim that fits nowhere gets ErrNoFit, which costs nothing, instead of
// a *NoFitError, which runs every check on every node. A planner that
// grows the fleet when a claim does not fit uses it, and asks Allocate for
// the reasons only for what stays unplaced. The allocation carries no
// process environment (Env is nil): a planner starts no process, and
// building one per placement was an eighth of a large plan's garbage.
func (s *State) AllocateAheadQuick(c *Claim, ahead []Claim) (*Allocation, error) {
	return s.sizeAhead(c, ahead, false)
}

func (s *State) allocateAhead(c *Claim, ahead []Claim, explain bool) (*Allocation, error) {
	a, err := s.sizeAhead(c, ahead, explain)
	if err == nil {
		a.Env = processEnv(a)
	}
	return a, err
}

// sizeAhead is allocateAhead without the process environment.
func (s *State) sizeAhead(c *Claim, ahead []Claim, explain bool) (*Allocation, error) {
	a, err := s.allocate(c, room{}, explain)
	if err != nil || len(a.Devices) != 1 {
		return a, err
	}
	d := a.Devices[0]
	if (d.Mode != TimeSlice && d.Mode != MPS) || !opensDevice(a) || !mateable(c) {
		return a, nil
	}
	mates := s.matesOf(c, d.Mode, ahead)
	if len(mates) == 0 {
		return a, nil
	}
	best, bestScore := a, s.sizeScore(a, c, mates)
	var want room
	seen := map[string]bool{d.Profile + "|" + d.GPU: true}
	for _, m := range mates {
		r := &m.Requests[0]
		want.mem += r.MemoryMiB
		want.comp += r.ComputePercent
		b, err := s.allocate(c, want, false)
		if err != nil {
			break // a larger room will not fit either
		}
		bd := b.Devices[0]
		key := bd.Profile + "|" + bd.GPU
		if seen[key] {
			continue
		}
		seen[key] = true
		if sc := s.sizeScore(b, c, mates); sc.better(bestScore) {
			best, bestScore = b, sc
		}
	}
	if best != a {
		best.Why = append(best.Why, "the new device is sized for "+strconv.Itoa(bestScore.mates)+
			" more of the claims to come that could share it (AllocateAhead)")
	}
	return best, nil
}

// opensDevice reports whether an allocation takes a device nobody uses yet
// (an idle one, a new MIG instance, or a GPU switched whole).
func opensDevice(a *Allocation) bool {
	for _, ch := range a.Changes {
		if ch.Kind == CreateInstance || ch.Kind == ConfigureShare || ch.Kind == DisableMIG {
			return true
		}
	}
	return a.Devices[0].New
}

// mateable reports whether a claim has the simple shape AllocateAhead
// sizes devices for: one device, memory asked, no profile or constraint,
// not hardware-isolated.
func mateable(c *Claim) bool {
	if len(c.Requests) != 1 || len(c.Constraints) > 0 {
		return false
	}
	r := &c.Requests[0]
	return max(r.Count, 1) == 1 && r.MemoryMiB > 0 && r.Profile == "" && c.Isolation != IsolationHardware
}

// matesOf lists the claims among the first 4,096 of ahead that could
// share c's new device of mode m: mateable, not yet allocated, the same
// isolation and selector (so the same devices qualify), the same tenant
// (under isolation none, any tenant with isolation none), and m among
// their mechanisms.
func (s *State) matesOf(c *Claim, m Mode, ahead []Claim) []*Claim {
	const (
		most  = 32   // mates: enough to fill any device
		scope = 4096 // claims looked at: bounds the work on a long queue
	)
	iso := orTenant(c.Isolation)
	var out []*Claim
	for i := range ahead[:min(len(ahead), scope)] {
		o := &ahead[i]
		// Cheapest and most selective tests first: most claims ahead are
		// other tenants'.
		if (iso != IsolationNone && o.Tenant != c.Tenant) || !mateable(o) || orTenant(o.Isolation) != iso ||
			o.Requests[0].Selector != c.Requests[0].Selector || o.Name == c.Name {
			continue
		}
		if _, done := s.allocs[o.Name]; done {
			continue
		}
		if !allows(decide(&o.Requests[0], iso), m) {
			continue
		}
		out = append(out, o)
		if len(out) == most {
			break
		}
	}
	return out
}

func orTenant(iso Isolation) Isolation {
	if iso == "" {
		return IsolationTenant
	}
	return iso
}

// sizeScore is how well the device an allocation opens would be used by
// the claim and, first-fit in order, the mates that fit beside it.
type sizeScore struct {
	cost   float64 // GPU share held ÷ share of a GPU's demand it holds
	served float64 // that demand share
	mates  int     // the mates counted in it
}

func (a sizeScore) better(b sizeScore) bool {
	const eps = 1e-9
	if a.cost < b.cost-eps || a.cost > b.cost+eps {
		return a.cost < b.cost
	}
	return a.served > b.served+eps
}

func (s *State) sizeScore(a *Allocation, c *Claim, mates []*Claim) sizeScore {
	d := a.Devices[0]
	g := &s.gpus[s.gpuIdx[d.GPU]]
	locked, memMiB, compute := s.deviceSize(d)
	slots := slotLimit(s.shareFor(d.Mode, compute, Sharing{Mode: Dynamic}))
	r := &c.Requests[0]
	mem, comp, n := r.MemoryMiB, r.ComputePercent, 1
	for _, m := range mates {
		mr := &m.Requests[0]
		if n < slots && mem+mr.MemoryMiB <= memMiB && comp+mr.ComputePercent <= compute {
			mem, comp, n = mem+mr.MemoryMiB, comp+mr.ComputePercent, n+1
		}
	}
	served := max(float64(mem)/float64(g.model.MemoryMiB), float64(comp)/100)
	if served <= 0 {
		return sizeScore{cost: 1e18}
	}
	return sizeScore{cost: float64(locked) / lockedUnits / served, served: served, mates: n - 1}
}

// SortForPlacement orders claims the way a planner that knows them all
// places them: highest priority first, and within a priority biggest first
// (first-fit decreasing: MIG profile size, then memory over all devices,
// then compute), so that small claims fill the gaps big ones leave. The
// sort is stable: equal claims keep their order.
func SortForPlacement(cs []Claim) {
	type key struct {
		prof int
		mem  int64
		comp int
	}
	keyOf := func(c *Claim) key {
		var k key
		for i := range c.Requests {
			r := &c.Requests[i]
			n := max(r.Count, 1)
			if p, err := mig.ParseProfileName(r.Profile); err == nil && r.Profile != "" {
				k.prof = max(k.prof, p.ComputeSlices*1000+p.MemoryGB)
			}
			k.mem += r.MemoryMiB * int64(n)
			k.comp += r.ComputePercent * n
		}
		return k
	}
	ks := make([]struct {
		c Claim
		k key
	}, len(cs))
	for i := range cs {
		ks[i].c, ks[i].k = cs[i], keyOf(&cs[i])
	}
	sort.SliceStable(ks, func(i, j int) bool {
		a, b := &ks[i], &ks[j]
		if a.c.Priority != b.c.Priority {
			return a.c.Priority > b.c.Priority
		}
		if a.k.prof != b.k.prof {
			return a.k.prof > b.k.prof
		}
		if a.k.mem != b.k.mem {
			return a.k.mem > b.k.mem
		}
		return a.k.comp > b.k.comp
	})
	for i := range ks {
		cs[i] = ks[i].c
	}
}

// allows reports whether a decision lists mode m outside a MIG-only
// choice: a claim joins a shared device of any mode it allows before it
// opens one of the mode it prefers.
func allows(d decision, m Mode) bool {
	for _, ch := range d.choices {
		if ch.mode == m && !ch.inMIG {
			return true
		}
	}
	return false
}

// PlaceAll places claims in order, each with AllocateAhead over the ones
// after it, applying each answer. It stops at the first claim that does
// not fit and returns the allocations made so far with that error (a
// *NoFitError for a claim that fits nowhere). Unlike Allocate it changes
// the State: it is a planner's loop, run on a State the caller owns.
func (s *State) PlaceAll(order []Claim) ([]*Allocation, error) {
	out := make([]*Allocation, 0, len(order))
	for i := range order {
		a, err := s.AllocateAhead(&order[i], order[i+1:])
		if err != nil {
			return out, err
		}
		if err := s.Apply(a); err != nil {
			return out, fmt.Errorf("claim %s: %w", order[i].Name, err)
		}
		out = append(out, a)
	}
	return out, nil
}

// RefineOrder orders claims for another planning pass, from where this
// State has them: first-fit decreasing over the devices the last pass
// chose. A pass sorted by claim size finds out how big each device should
// be only as it goes (AllocateAhead sizes a tenant's device when its first
// claim comes, after bigger claims of other tenants have already spread
// over the GPUs); the next pass places the biggest devices first, each
// device's claims together in the order they had, so a MIG layout is filled
// like a bin by decreasing items. Priority still comes first. Claims this
// State has not allocated keep their relative order, after the allocated
// ones of their priority.
func (s *State) RefineOrder(order []Claim) []Claim {
	type key struct {
		size  int   // the claim's biggest device: GPU share in 1/840ths
		mem   int64 // its memory, to break ties between devices
		dev   string
		first int // position in order of the device's first claim
		pos   int
		found bool
	}
	keys := make([]key, len(order))
	firstOf := map[string]int{}
	for i := range order {
		k := key{pos: i}
		if a := s.allocs[order[i].Name]; a != nil {
			k.found = true
			for _, d := range a.Devices {
				size, mem, _ := s.deviceSize(d)
				if size > k.size || (size == k.size && mem > k.mem) {
					k.size, k.mem, k.dev = size, mem, d.Device
				}
			}
			if _, ok := firstOf[k.dev]; !ok {
				firstOf[k.dev] = i
			}
			k.first = firstOf[k.dev]
		}
		keys[i] = k
	}
	idx := make([]int, len(order))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(x, y int) bool {
		a, b := &keys[idx[x]], &keys[idx[y]]
		ca, cb := &order[idx[x]], &order[idx[y]]
		switch {
		case ca.Priority != cb.Priority:
			return ca.Priority > cb.Priority
		case a.found != b.found:
			return a.found
		case !a.found:
			return a.pos < b.pos
		case a.size != b.size:
			return a.size > b.size
		case a.mem != b.mem:
			return a.mem > b.mem
		case a.first != b.first:
			return a.first < b.first
		}
		return a.pos < b.pos
	})
	out := make([]Claim, len(order))
	for i, j := range idx {
		out[i] = order[j]
	}
	return out
}

// deviceSize is the GPU share (in 1/840ths), memory and compute (percent
// of the GPU) of an assigned device: a MIG instance's profile, or the
// whole GPU.
func (s *State) deviceSize(d Assigned) (locked int, memMiB int64, compute int) {
	gi, ok := s.gpuIdx[d.GPU]
	if !ok {
		return 0, 0, 0
	}
	g := &s.gpus[gi]
	if d.Profile != "" && g.geo != nil {
		if p, ok := g.geo.Lookup(d.Profile); ok {
			mem, comp := profileSize(g.model, g.geo, p)
			return lockedShare(g.geo, p), mem, comp
		}
	}
	return lockedUnits, g.model.MemoryMiB, 100
}
