package alloc

import (
	"fmt"
	"slices"

	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/mig"
)

// kind orders candidates by how much they change: joining a device that is
// already shared changes nothing, opening an idle device or creating a MIG
// instance in free slices changes little, destroying idle instances more,
// and switching a GPU's MIG mode resets it.
type kind int

const (
	kindJoin kind = iota
	kindOpen
	kindEvict
	kindSwitch
)

var kindNames = [...]string{"join", "open", "evict", "switch"}

// cand is one way to serve one device of a request.
type cand struct {
	kind     kind
	mode     Mode
	modeRank int
	dev      int // existing device, or -1 when one is created
	gpu      int
	profile  int // MIG profile index of a created instance, else -1
	start    int
	destroy  []int // devices destroyed first (evict, switch)
	enable   bool  // switch: turn MIG on
	disable  bool  // switch: turn MIG off
	sharing  Sharing
	mem      int64 // promised memory
	comp     int   // promised compute
	locked   int   // GPU share newly held, in 1/840ths (0 for a join)
	tier     int
	created  bool // the device is created (or re-created) by this candidate
	fit      int64
}

// lockedUnits is the denominator of cand.locked: divisible by 7 and 8.
const lockedUnits = 840

// DefaultReplicas is how many claims a device the allocator configures for
// time-slicing takes. Memory and compute are accounted per claim anyway, so
// the replica count only bounds context-switching among small claims.
const DefaultReplicas = 16

// better reports whether a beats b under the fleet's policy. The order is
// total: kind, GPU share newly held, mechanism preference, touch tier
// (binpack: touched first; spread: untouched first), tightness of fit
// (binpack: least left; spread: most left), then GPU and device order.
func (s *State) better(a, b *cand) bool {
	if a.kind != b.kind {
		return a.kind < b.kind
	}
	if a.locked != b.locked {
		return a.locked < b.locked
	}
	if a.modeRank != b.modeRank {
		return a.modeRank < b.modeRank
	}
	spread := s.policy.Placement == "spread"
	if a.tier != b.tier {
		return (a.tier < b.tier) != spread
	}
	if a.created != b.created {
		return !a.created // an existing device before a new instance
	}
	if a.fit != b.fit {
		return (a.fit < b.fit) != spread
	}
	if a.dev >= 0 && b.dev >= 0 {
		return a.dev < b.dev
	}
	if a.gpu != b.gpu {
		return a.gpu < b.gpu
	}
	return a.start < b.start
}

// need is one device of a request being placed, with what it rules out.
type need struct {
	claim   *Claim
	req     *Request
	iso     Isolation
	choices []choice
	taken   map[int]bool // devices this claim already holds
	onNode  int          // -1, or the only node allowed
	onGPU   int          // -1, or the only GPU allowed
	// selPerDevice: the selector's answer may differ between devices of
	// one class (see selectorPerDevice).
	selPerDevice bool
	// room is what a device the request opens or creates must have beyond
	// the request (AllocateAhead sizes it for claims still to come).
	room room
	// skip lists nodes (GPUs when skipGPUs) a constrained group's first
	// device may not use: the rest of its claim did not fit there.
	skip     map[int]bool
	skipGPUs bool
	// allStarts: list a MIG instance at every start it fits, not only
	// the best (a constrained search's alternatives).
	allStarts bool
	// alts collects the other starts of a mode switch when allStarts.
	alts []cand
	// wholeOnly rules out MIG instances (and mode switches): the first
	// pass of a claim that did not ask for MIG (see wholeFirst).
	wholeOnly bool
}

// offLimits reports whether the constraints keep the device off GPU gi on
// node ni.
func (n *need) offLimits(gi, ni int) bool {
	if (n.onGPU >= 0 && gi != n.onGPU) || (n.onNode >= 0 && ni != n.onNode) {
		return true
	}
	if n.skip == nil {
		return false
	}
	if n.skipGPUs {
		return n.skip[gi]
	}
	return n.skip[ni]
}

// room is memory and compute asked of a new device beyond a request.
type room struct {
	mem  int64
	comp int
}

// wantMem and wantComp are what a device the request opens or creates
// must have: the request plus the room.
func (n *need) wantMem() int64 { return n.req.MemoryMiB + n.room.mem }
func (n *need) wantComp() int  { return n.req.ComputePercent + n.room.comp }

// reason is why a device or GPU was rejected; higher values got further
// through the pipeline, and a node reports its furthest.
type reason int

const (
	rNone reason = iota
	rUnschedulable
	rUnhealthy
	rConstraint
	rSelector
	rMode
	rMIGOff
	rProfile
	rIsolation
	rMemory
	rCompute
	rSlots
	rLayout
	rBusy
	rInUse
	rOK
)

var reasonText = map[reason]string{
	rUnschedulable: "node unschedulable",
	rUnhealthy:     "GPU unhealthy",
	rConstraint:    "constraint not met",
	rSelector:      "selector mismatch",
	rMode:          "sharing mode mismatch",
	rMIGOff:        "MIG off on its GPUs",
	rProfile:       "no matching MIG profile",
	rIsolation:     "tenant isolation",
	rMemory:        "insufficient GPU memory",
	rCompute:       "insufficient compute",
	rSlots:         "no free replica or MPS client slot",
	rLayout:        "no room for a MIG instance",
	rBusy:          "GPU held by other claims",
	rInUse:         "MIG instances in use",
	rNoGPU:         "no GPUs",
}

// rNoGPU is a node's reason when it has no GPU at all; it ranks with
// rNone (nothing was checked).
const rNoGPU = reason(-1)

// replicasFor and clientsFor give a device's sharing limits, filling in
// the fleet's defaults for dynamic devices.
func (s *State) shareFor(mode Mode, compute int, sh Sharing) Sharing {
	switch mode {
	case TimeSlice:
		if sh.Mode != TimeSlice {
			r := s.policy.DefaultReplicas
			if r <= 0 {
				r = DefaultReplicas
			}
			return Sharing{Mode: TimeSlice, Replicas: r, Interval: "Default"}
		}
	case MPS:
		if sh.Mode != MPS {
			c := s.policy.DefaultMaxClients
			if c <= 0 {
				c = MaxMPSClients
			}
			// MPS client limits shrink with a MIG instance's compute share.
			c = max(1, c*compute/100)
			return Sharing{Mode: MPS, MaxClients: c}
		}
	case Exclusive, MIG:
		return Sharing{Mode: Exclusive}
	}
	return sh
}

// promise is what a request gets on a device of this size and sharing.
// A shared request with no memory is promised the GPU's default share
// (defShare: its memory over the fleet's default replicas, 1/16 unless the
// policy says otherwise) wherever it lands, whole GPU or MIG instance, so
// the amount does not depend on placement; a device set up for fewer
// clients gives its larger equal share, an MPS device with a pinned-memory
// limit gives that limit. A device smaller than the share does not fit.
func promise(r *Request, mode Mode, memMiB int64, compute int, sh Sharing, defShare int64) (int64, int) {
	switch mode {
	case TimeSlice:
		mem := r.MemoryMiB
		if mem == 0 {
			mem = max(defShare, memMiB/int64(max(sh.Replicas, 1)))
		}
		return mem, r.ComputePercent
	case MPS:
		mem := r.MemoryMiB
		if mem == 0 {
			mem = sh.DefaultPinnedMiB
			if mem == 0 {
				mem = max(defShare, memMiB/int64(max(sh.MaxClients, 1)))
			}
		}
		return mem, r.ComputePercent
	}
	return memMiB, compute
}

// defShare is what a shared request with no memory is promised on GPU gi:
// the GPU's memory divided by the fleet's default time-slicing replicas.
func (s *State) defShare(gi int) int64 {
	r := s.policy.DefaultReplicas
	if r <= 0 {
		r = DefaultReplicas
	}
	return s.gpus[gi].model.MemoryMiB / int64(r)
}

// modeFits says whether an idle device configured with sh may serve mode.
func modeFits(sh Sharing, mode Mode) bool {
	m := normMode(sh.Mode)
	if m == Dynamic {
		return true
	}
	switch mode {
	case Exclusive, MIG:
		return m == Exclusive
	}
	return m == mode
}

// tenancyAllows applies the isolation rules to joining device d.
func tenancyAllows(d *devState, tenant string, iso Isolation) bool {
	if iso == IsolationHardware || d.hardware {
		return false
	}
	if iso == IsolationTenant {
		return len(d.tenants) == 1 && d.tenants[0].name == tenant
	}
	// none: every claim with tenant isolation must be of the same tenant
	if d.strict == 0 {
		return true
	}
	return len(d.tenants) == 1 && d.tenants[0].name == tenant
}

// tryJoin checks a device in use.
func (s *State) tryJoin(n *need, di int, ch choice, rank int) (cand, reason) {
	d := &s.devs[di]
	g := &s.gpus[d.gpu]
	if !d.alive || d.idle() || (n.wholeOnly && d.isMIG) {
		return cand{}, rMode
	}
	if r := s.gate(n, di); r != rOK {
		return cand{}, r
	}
	switch {
	case d.mode != TimeSlice && d.mode != MPS:
		if n.req.Profile != "" && (g.geo == nil || !hasProfile(g, n.req.Profile)) {
			return cand{}, rProfile // never, held or not
		}
		return cand{}, rBusy // held whole by a claim: nothing to share
	case d.mode != ch.mode || (ch.mode != TimeSlice && ch.mode != MPS) || (ch.inMIG && !d.isMIG):
		return cand{}, rMode
	case n.req.Profile != "" && (!d.isMIG || !sameProfile(g, d.profile, n.req.Profile)):
		return cand{}, rProfile
	case !tenancyAllows(d, n.claim.Tenant, n.iso):
		return cand{}, rIsolation
	}
	mem, comp := promise(n.req, ch.mode, d.memMiB, d.compute, d.sharing, s.defShare(d.gpu))
	switch {
	case d.usedMem+mem > d.memMiB:
		return cand{}, rMemory
	case d.usedComp+comp > d.compute:
		return cand{}, rCompute
	case d.clients >= slotLimit(d.sharing):
		return cand{}, rSlots
	}
	return cand{kind: kindJoin, mode: ch.mode, modeRank: rank, dev: di, gpu: d.gpu, profile: -1,
		sharing: d.sharing, mem: mem, comp: comp, tier: s.tierOf(d.gpu), fit: d.memMiB - d.usedMem - mem}, rOK
}

// gate is the checks every existing device passes first: its node takes
// work, its GPU is healthy, the claim's constraints and selector allow it.
func (s *State) gate(n *need, di int) reason {
	d := &s.devs[di]
	g := &s.gpus[d.gpu]
	switch {
	case s.nodes[g.node].node.Unschedulable:
		return rUnschedulable
	case !g.healthy:
		return rUnhealthy
	case n.taken[di] || n.offLimits(d.gpu, g.node):
		return rConstraint
	case !s.matchDevice(n.req.Selector, di):
		return rSelector
	}
	return rOK
}

func slotLimit(sh Sharing) int {
	switch sh.Mode {
	case TimeSlice:
		return sh.Replicas
	case MPS:
		return sh.MaxClients
	}
	return 1
}

func hasProfile(g *gpuState, name string) bool {
	_, ok := g.geo.Lookup(name)
	return ok
}

func sameProfile(g *gpuState, p int, name string) bool {
	q, ok := g.geo.Lookup(name)
	return ok && q == p
}

// tryOpen checks an idle existing device.
func (s *State) tryOpen(n *need, di int, ch choice, rank int) (cand, reason) {
	d := &s.devs[di]
	g := &s.gpus[d.gpu]
	if !d.alive || !d.idle() || (n.wholeOnly && d.isMIG) {
		return cand{}, rMode
	}
	if r := s.gate(n, di); r != rOK {
		return cand{}, r
	}
	switch {
	case !modeFits(d.sharing, ch.mode) || (ch.inMIG && !d.isMIG) || (ch.mode == Exclusive && !ch.inMIG && d.isMIG):
		return cand{}, rMode
	case n.req.Profile != "" && (!d.isMIG || !sameProfile(g, d.profile, n.req.Profile)):
		return cand{}, rProfile
	}
	sh := s.shareFor(ch.mode, d.compute, d.sharing)
	return s.finishNew(n, ch, rank, cand{kind: kindOpen, dev: di, gpu: d.gpu, profile: -1, start: d.start},
		d.memMiB, d.compute, sh, s.lockedOf(d))
}

// finishNew checks capacity on a device the candidate takes fresh.
func (s *State) finishNew(n *need, ch choice, rank int, c cand, memMiB int64, compute int, sh Sharing, locked int) (cand, reason) {
	if n.wantMem() > memMiB {
		return cand{}, rMemory
	}
	if n.wantComp() > compute {
		return cand{}, rCompute
	}
	mem, comp := promise(n.req, ch.mode, memMiB, compute, sh, s.defShare(c.gpu))
	if mem > memMiB {
		return cand{}, rMemory
	}
	c.mode, c.modeRank, c.sharing, c.mem, c.comp, c.locked = ch.mode, rank, sh, mem, comp, locked
	c.tier = s.tierOf(c.gpu)
	if !c.created {
		c.fit = memMiB - mem
	}
	return c, rOK
}

// lockedOf is the share of its GPU a device holds, in 1/840ths.
func (s *State) lockedOf(d *devState) int {
	if !d.isMIG {
		return lockedUnits
	}
	return lockedShare(s.gpus[d.gpu].geo, d.profile)
}

// lockedShare is the GPU share a MIG instance of profile p holds: the
// larger of its memory and compute shares (a 2g.20gb holds more than a
// 1g.20gb with the same memory), in 1/840ths.
func lockedShare(geo *mig.Geometry, p int) int {
	sh := &geo.Shapes[p]
	return max(lockedUnits*sh.Size/geo.Slices, lockedUnits*sh.Compute/geo.ComputeSlices)
}

// profilesFor lists the MIG profiles of a GPU that could serve a request:
// the named one, or every profile without media extensions that has the
// memory and compute it asks for.
func (s *State) profilesFor(n *need, gi int) ([]int, reason) {
	g := &s.gpus[gi]
	return profilesForModel(n, g.model, g.geo)
}

// profilesForModel is profilesFor for any GPU of a model, smallest first.
func profilesForModel(n *need, m *catalog.GPU, geo *mig.Geometry) ([]int, reason) {
	if n.req.Profile != "" {
		p, ok := geo.Lookup(n.req.Profile)
		if !ok {
			return nil, rProfile
		}
		return []int{p}, rOK
	}
	var out []int
	why := rMemory
	for p, sh := range geo.Shapes {
		if sh.ME {
			continue
		}
		mem, compute := profileSize(m, geo, p)
		if mem < n.wantMem() {
			continue
		}
		if compute < n.wantComp() {
			why = rCompute
			continue
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, why
	}
	slices.SortStableFunc(out, func(a, b int) int {
		if d := geo.Shapes[a].Size - geo.Shapes[b].Size; d != 0 {
			return d
		}
		return geo.Shapes[a].Compute - geo.Shapes[b].Compute
	})
	return out, rOK
}

// tryCreate checks a new MIG instance of profile p on GPU gi.
func (s *State) tryCreate(n *need, gi, p int, ch choice, rank int) (cand, reason) {
	g := &s.gpus[gi]
	switch {
	case s.nodes[g.node].node.Unschedulable:
		return cand{}, rUnschedulable
	case !g.healthy:
		return cand{}, rUnhealthy
	case n.offLimits(gi, g.node):
		return cand{}, rConstraint
	case !g.migOn || !g.dynamic || n.wholeOnly:
		return cand{}, rMode
	case ch.mode == Exclusive && !ch.inMIG:
		return cand{}, rMode
	case !s.matchVirtual(n.req.Selector, gi, p):
		return cand{}, rSelector
	}
	start, ok := g.geo.BestStart(g.occ, p)
	if !ok {
		return cand{}, rLayout
	}
	return s.createAt(n, gi, p, start, ch, rank)
}

// otherStarts lists the starts of profile p on GPU gi, other than the
// best one, where an instance fits: the alternatives a constrained
// search tries when the best start leaves no room for the rest of the
// claim.
func (s *State) otherStarts(n *need, gi, p int, ch choice, rank int) []cand {
	g := &s.gpus[gi]
	best, ok := g.geo.BestStart(g.occ, p)
	if !ok {
		return nil
	}
	var out []cand
	for _, st := range g.geo.Shapes[p].Starts {
		if st == best || !g.geo.CanAdd(g.occ, p, st) {
			continue
		}
		if c, r := s.createAt(n, gi, p, st, ch, rank); r == rOK {
			out = append(out, c)
		}
	}
	return out
}

// createAt is tryCreate's candidate at a given start (checked by the
// caller).
func (s *State) createAt(n *need, gi, p, start int, ch choice, rank int) (cand, reason) {
	g := &s.gpus[gi]
	d := s.migDevice(gi, p, start, "", Sharing{})
	sh := s.shareFor(ch.mode, d.compute, Sharing{Mode: Dynamic})
	after := g.geo.Add(g.occ, p, start)
	return s.finishNew(n, ch, rank, cand{kind: kindOpen, dev: -1, gpu: gi, profile: p, start: start, created: true,
		fit: int64(g.geo.Capacity(after))}, d.memMiB, d.compute, sh, lockedShare(g.geo, p))
}

// tryEvict checks destroying idle instances on GPU gi to create profile p.
func (s *State) tryEvict(n *need, gi, p int, ch choice, rank int) (cand, reason) {
	g := &s.gpus[gi]
	if c, r := s.tryCreate(n, gi, p, ch, rank); r != rLayout {
		return c, r // no eviction needed, or a reason eviction cannot fix
	}
	idle := false
	for _, di := range g.inst {
		idle = idle || (s.devs[di].idle() && !n.taken[di])
	}
	if !idle {
		return cand{}, rInUse // nothing to destroy
	}
	held := make([]mig.Held, len(g.inst))
	for i, di := range g.inst {
		d := &s.devs[di]
		held[i] = mig.Held{Instance: mig.Instance{Profile: g.geo.Shapes[d.profile].Name, Start: d.start},
			InUse: !d.idle() || n.taken[di]}
	}
	plan, err := g.geo.Evict(held, g.geo.Shapes[p].Name)
	if err != nil {
		return cand{}, rInUse
	}
	var destroy []int
	for _, in := range plan.Destroy {
		for _, di := range g.inst {
			d := &s.devs[di]
			if d.start == in.Start && g.geo.Shapes[d.profile].Name == in.Profile {
				destroy = append(destroy, di)
			}
		}
	}
	d := s.migDevice(gi, p, plan.Place.Start, "", Sharing{})
	sh := s.shareFor(ch.mode, d.compute, Sharing{Mode: Dynamic})
	return s.finishNew(n, ch, rank, cand{kind: kindEvict, dev: -1, gpu: gi, profile: p, start: plan.Place.Start,
		destroy: destroy, created: true, fit: int64(len(destroy))*1000 + int64(plan.Capacity)},
		d.memMiB, d.compute, sh, lockedShare(g.geo, p))
}

// trySwitch checks changing an idle GPU's MIG mode to serve the request.
func (s *State) trySwitch(n *need, gi int, ch choice, rank int) (cand, reason) {
	g := &s.gpus[gi]
	switch {
	case !s.policy.AllowModeSwitch || g.geo == nil || n.wholeOnly:
		return cand{}, rNone // not an option here: says nothing about the node
	case s.nodes[g.node].node.Unschedulable:
		return cand{}, rUnschedulable
	case !g.healthy:
		return cand{}, rUnhealthy
	case n.offLimits(gi, g.node):
		return cand{}, rConstraint
	case g.touched > 0:
		return cand{}, rBusy // a mode switch needs the whole GPU idle
	}
	if !g.migOn {
		if !ch.inMIG && ch.mode != MIG {
			return cand{}, rMode
		}
		ps, r := s.profilesFor(n, gi)
		if r != rOK {
			return cand{}, r
		}
		best, bestR := cand{}, rSelector
		for _, p := range ps {
			if !s.matchVirtual(n.req.Selector, gi, p) {
				continue
			}
			start, _ := g.geo.BestStart(mig.Occupancy{}, p)
			c, r := s.switchAt(n, gi, p, start, ch, rank)
			if r == rOK && (bestR != rOK || s.better(&c, &best)) {
				best, bestR = c, r
			} else if bestR != rOK && r > bestR {
				bestR = r
			}
			if r == rOK && n.allStarts {
				for _, st := range g.geo.Shapes[p].Starts {
					if st != start {
						if c, r := s.switchAt(n, gi, p, st, ch, rank); r == rOK {
							n.alts = append(n.alts, c)
						}
					}
				}
			}
		}
		return best, bestR
	}
	if ch.inMIG || ch.mode == MIG {
		return cand{}, rMode
	}
	if !s.matchVirtual(n.req.Selector, gi, -1) {
		return cand{}, rSelector
	}
	sh := s.shareFor(ch.mode, 100, Sharing{Mode: Dynamic})
	return s.finishNew(n, ch, rank, cand{kind: kindSwitch, dev: -1, gpu: gi, profile: -1, disable: true,
		created: true, destroy: append([]int(nil), g.inst...)}, g.model.MemoryMiB, 100, sh, lockedUnits)
}

// switchAt is a mode switch's candidate turning MIG on with profile p
// at start.
func (s *State) switchAt(n *need, gi, p, start int, ch choice, rank int) (cand, reason) {
	g := &s.gpus[gi]
	d := s.migDevice(gi, p, start, "", Sharing{})
	sh := s.shareFor(ch.mode, d.compute, Sharing{Mode: Dynamic})
	return s.finishNew(n, ch, rank, cand{kind: kindSwitch, dev: -1, gpu: gi, profile: p, start: start,
		enable: true, created: true, destroy: []int{g.whole}}, d.memMiB, d.compute, sh, lockedShare(g.geo, p))
}

func (c *cand) String() string {
	return fmt.Sprintf("%s %s", kindNames[c.kind], c.mode)
}
