package server

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/state"
)

// scheduler keeps the allocator's State in memory as the authority on what
// is reserved, and the pending queue (priority, then FIFO). A decision is
// reserved in memory under the lock, then made durable in the store outside
// it (so concurrent claims share a group commit); a failed commit gives the
// reservation back. The State is rebuilt from the store whenever nodes
// change.
type scheduler struct {
	mu      sync.Mutex
	st      *alloc.State
	pending []*api.Claim // ordered: priority desc, seq asc
	reasons map[string]string
	kick    chan struct{}
	// notify is closed (and replaced) whenever a claim changes, waking
	// long polls and event streams.
	notify chan struct{}
	// use is what each tenant's live claims are charged, for quotas (see
	// charge).
	use map[string]tenantUse
	// reserved is the starving head of the queue that later claims of its
	// priority or lower must not overtake (nil when the queue backfills);
	// nominees remembers, per claim until the fleet changes, whether it
	// could fit the empty fleet and which node it is nominated to.
	reserved *reservation
	nominees map[string]nominee
}

// reservation is a starving claim and the node held for it: later claims
// of its priority or lower are placed anywhere but there. With no node
// (no single node can hold the claim) they wait.
type reservation struct {
	claim *api.Claim
	node  string
}

type nominee struct {
	fits bool
	node string
}

type tenantUse struct {
	mem  int64
	comp int
}

func newScheduler() *scheduler {
	return &scheduler{reasons: map[string]string{}, kick: make(chan struct{}, 1), notify: make(chan struct{}),
		use: map[string]tenantUse{}, nominees: map[string]nominee{}}
}

// waitChan returns a channel closed at the next change.
func (s *scheduler) waitChan() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.notify
}

// poke asks the retry loop to run.
func (s *scheduler) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// changed wakes long-pollers; the caller holds mu.
func (s *scheduler) changed() {
	close(s.notify)
	s.notify = make(chan struct{})
}

// asks is what a claim asks for, for quotas.
func asks(spec *api.ClaimSpec) tenantUse {
	var u tenantUse
	for _, r := range spec.Requests {
		n := max(r.Count, 1)
		u.mem += r.MemoryMiB * int64(n)
		u.comp += r.ComputePercent * n
	}
	return u
}

// given is what an allocation hands out: the memory and compute promised
// on its devices (a whole GPU for an exclusive claim that asked for no
// memory, say).
func given(a *alloc.Allocation) tenantUse {
	var u tenantUse
	if a == nil {
		return u
	}
	for _, d := range a.Devices {
		u.mem += d.MemoryMiB
		u.comp += d.ComputePercent
	}
	return u
}

// charge is what a claim counts against its tenant's quota: what it asks
// for while pending; once allocated, the larger of what it asked for and
// what it was given, per resource. A claim that asks for nothing but gets
// a whole GPU is charged the GPU.
func charge(c *api.Claim) tenantUse {
	u := asks(&c.Spec)
	if c.Allocation == nil || c.State == api.Pending {
		return u
	}
	g := given(c.Allocation)
	return tenantUse{mem: max(u.mem, g.mem), comp: max(u.comp, g.comp)}
}

// sub returns u - v.
func (u tenantUse) sub(v tenantUse) tenantUse {
	return tenantUse{mem: u.mem - v.mem, comp: u.comp - v.comp}
}

func (s *scheduler) addUse(tenant string, u tenantUse, sign int) {
	cur := s.use[tenant]
	cur.mem += int64(sign) * u.mem
	cur.comp += sign * u.comp
	s.use[tenant] = cur
}

// allocClaim is the allocator's view of an API claim.
func allocClaim(c *api.Claim) *alloc.Claim {
	ac := &alloc.Claim{Name: c.ID, Tenant: c.Tenant, Priority: c.Spec.Priority, Isolation: c.Spec.Isolation,
		Requests: append([]alloc.Request(nil), c.Spec.Requests...), Constraints: c.Spec.Constraints}
	if c.Spec.Node != "" {
		require(ac, "node.name == '"+strings.ReplaceAll(c.Spec.Node, "'", "")+"'")
	}
	return ac
}

// require adds a CEL clause to every request's selector.
func require(ac *alloc.Claim, clause string) {
	for i := range ac.Requests {
		if ac.Requests[i].Selector != "" {
			ac.Requests[i].Selector = "(" + ac.Requests[i].Selector + ") && " + clause
		} else {
			ac.Requests[i].Selector = clause
		}
	}
}

// rebuild makes a fresh State from the store: ready nodes as reported by
// their agents, plus every live allocation with the layout changes the
// agents have not made yet. Allocations that no longer fit (their node is
// gone or lost) are returned for re-queueing.
func (srv *Server) rebuild(ctx context.Context) error {
	var nodes []api.Node
	var live, pend []api.Claim
	err := srv.store.View(ctx, func(tx state.Tx) error {
		var err error
		if nodes, err = tx.ListNodes(); err != nil {
			return err
		}
		live, pend, err = liveAndPending(tx)
		return err
	})
	if err != nil {
		return err
	}
	var f alloc.Fleet
	f.Policy = srv.cfg.Policy
	ready := map[string]bool{}
	sick := map[string]bool{} // GPU uuids reported unhealthy
	for _, n := range nodes {
		if n.State != api.NodeReady {
			continue
		}
		inv := n.Inventory
		inv.Name = n.Name
		f.Nodes = append(f.Nodes, inv)
		ready[n.Name] = true
		for _, g := range inv.GPUs {
			if !g.Healthy {
				sick[g.UUID] = true
			}
		}
	}
	st, err := alloc.NewState(f, nil, alloc.Options{})
	if err != nil {
		return fmt.Errorf("building the fleet from agent inventories: %w", err)
	}
	var requeue, failed []api.Claim
	for _, c := range live {
		a := c.Allocation
		if a == nil || !onReadyNodes(a, ready) {
			requeue = append(requeue, c)
			continue
		}
		if gpu := onSickGPU(a, sick); gpu != "" {
			// A running claim's process met the fault: it fails. One that
			// was only reserved goes back to the queue.
			if c.State == api.Running && c.Spec.FaultPolicy != "requeue" {
				c.State, c.Reason = api.Failed, "GPU "+gpu+" became unhealthy while it ran"
				failed = append(failed, c)
			} else {
				requeue = append(requeue, c)
			}
			continue
		}
		rest := *a
		rest.Changes = remainingChanges(a, f)
		if err := st.Apply(&rest); err != nil {
			srv.log.Warn("allocation no longer fits the reported fleet; re-queueing", "claim", c.ID, "err", err)
			requeue = append(requeue, c)
		}
	}
	srv.sched.mu.Lock()
	srv.sched.st = st
	srv.sched.nominees, srv.sched.reserved = map[string]nominee{}, nil // a new fleet
	srv.sched.pending = nil
	srv.sched.use = map[string]tenantUse{}
	for i := range pend {
		c := pend[i]
		srv.sched.pending = append(srv.sched.pending, &c)
		srv.sched.addUse(c.Tenant, charge(&c), 1)
	}
	for i := range live {
		srv.sched.addUse(live[i].Tenant, charge(&live[i]), 1)
	}
	srv.sched.mu.Unlock()
	if len(failed) > 0 {
		if err := srv.commitClaims(ctx, failed, "failed"); err != nil {
			return err
		}
		srv.sched.mu.Lock()
		for _, c := range failed {
			srv.sched.addUse(c.Tenant, charge(&c), -1)
		}
		srv.sched.mu.Unlock()
	}
	for _, c := range requeue {
		held := charge(&c)
		c.State, c.Allocation, c.Reason = api.Pending, nil, "re-queued: its node was lost or its GPU became unhealthy"
		if err := srv.commitClaims(ctx, []api.Claim{c}, "requeued"); err != nil {
			return err
		}
		srv.sched.mu.Lock()
		cc := c
		srv.sched.insertPending(&cc)
		srv.sched.addUse(c.Tenant, charge(&cc).sub(held), 1) // back to what it asks
		srv.sched.mu.Unlock()
	}
	srv.sched.mu.Lock()
	srv.sched.sortPending()
	srv.sched.changed()
	srv.sched.mu.Unlock()
	srv.sched.poke()
	return nil
}

// liveAndPending lists the claims holding devices (allocated or running)
// and the queued ones.
func liveAndPending(tx state.Tx) (live, pend []api.Claim, err error) {
	if live, err = tx.ListClaims(state.ClaimFilter{States: []api.ClaimState{api.Allocated, api.Running}}); err != nil {
		return nil, nil, err
	}
	pend, err = tx.ListClaims(state.ClaimFilter{States: []api.ClaimState{api.Pending}})
	return live, pend, err
}

// onSickGPU returns the first unhealthy GPU an allocation uses, or "".
func onSickGPU(a *alloc.Allocation, sick map[string]bool) string {
	for _, d := range a.Devices {
		if sick[d.GPU] {
			return d.GPU
		}
	}
	return ""
}

func onReadyNodes(a *alloc.Allocation, ready map[string]bool) bool {
	for _, d := range a.Devices {
		if !ready[d.Node] {
			return false
		}
	}
	return true
}

// remainingChanges keeps the changes of an allocation that the fleet (as
// the agents report it) does not show yet.
func remainingChanges(a *alloc.Allocation, f alloc.Fleet) []alloc.Change {
	gpus := map[string]*alloc.GPU{}
	for ni := range f.Nodes {
		for gi := range f.Nodes[ni].GPUs {
			g := &f.Nodes[ni].GPUs[gi]
			gpus[g.UUID] = g
		}
	}
	has := func(g *alloc.GPU, id string, profile string, start int) bool {
		for _, in := range g.Instances {
			if in.UUID == id || (in.Profile == profile && in.Start == start) {
				return true
			}
		}
		return false
	}
	var out []alloc.Change
	for _, ch := range a.Changes {
		g := gpus[ch.GPU]
		if g == nil {
			continue
		}
		switch ch.Kind {
		case alloc.CreateInstance:
			if g.MIGEnabled && has(g, ch.Device, ch.Profile, ch.Start) {
				continue
			}
		case alloc.DestroyInstance:
			if !g.MIGEnabled || !has(g, ch.Device, ch.Profile, ch.Start) {
				continue
			}
		case alloc.EnableMIG:
			if g.MIGEnabled {
				continue
			}
		case alloc.DisableMIG:
			if !g.MIGEnabled {
				continue
			}
		}
		out = append(out, ch)
	}
	return out
}

func (s *scheduler) sortPending() {
	sort.SliceStable(s.pending, func(i, j int) bool {
		a, b := s.pending[i], s.pending[j]
		if a.Spec.Priority != b.Spec.Priority {
			return a.Spec.Priority > b.Spec.Priority
		}
		return a.Seq < b.Seq
	})
}

func (s *scheduler) insertPending(c *api.Claim) {
	s.pending = append(s.pending, c)
	s.sortPending()
}

func (s *scheduler) removePending(id string) {
	for i, c := range s.pending {
		if c.ID == id {
			s.pending = append(s.pending[:i], s.pending[i+1:]...)
			return
		}
	}
}

// position is a pending claim's place in the queue (1 = next), or 0.
func (s *scheduler) position(id string) int {
	for i, c := range s.pending {
		if c.ID == id {
			return i + 1
		}
	}
	return 0
}

// retryLoop places pending claims whenever capacity may have changed.
func (srv *Server) retryLoop(ctx context.Context) {
	tick := time.NewTicker(srv.cfg.RetryInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-srv.sched.kick:
		case <-tick.C:
		}
		srv.retryPending(ctx)
	}
}

// retryPending tries every pending claim in queue order; lower-priority
// claims may fill room a higher one cannot use (backfill) until a claim
// has waited ReserveAfter: then a node is held for it, and the claims
// after it of its priority or lower go elsewhere (see Config.ReserveAfter).
func (srv *Server) retryPending(ctx context.Context) {
	s := srv.sched
	s.mu.Lock()
	if s.st == nil {
		s.mu.Unlock()
		return
	}
	now := srv.cfg.Clock()
	s.reserved = nil
	var placed []api.Claim
	queue := append([]*api.Claim(nil), s.pending...)
	// The queue is the look-ahead: a claim that opens a shared device gets
	// one sized for the queued claims behind it that could join it.
	ahead := make([]alloc.Claim, len(queue))
	for i, c := range queue {
		ahead[i] = *allocClaim(c)
	}
	for i, c := range queue {
		a, err := srv.allocate(c, now, ahead[i+1:])
		if err != nil {
			s.reasons[c.ID] = err.Error()
			if s.reserved == nil {
				if n, ok := srv.starving(c, now); ok {
					s.reserved = &reservation{claim: c, node: n.node}
					s.reasons[c.ID] = err.Error() + srv.reservedNote(s.reserved, now)
				}
			}
			continue
		}
		done := *c
		done.State, done.Allocation, done.Reason = api.Allocated, a, ""
		more := charge(&done).sub(charge(c))
		if err := srv.quotaRoom(c.Tenant, more); err != nil {
			s.reasons[c.ID] = err.Error()
			continue
		}
		if err := s.st.Apply(a); err != nil {
			s.reasons[c.ID] = err.Error()
			continue
		}
		s.addUse(c.Tenant, more, 1)
		placed = append(placed, done)
		s.removePending(c.ID)
		delete(s.reasons, c.ID)
		delete(s.nominees, c.ID)
	}
	s.mu.Unlock()
	if len(placed) == 0 {
		return
	}
	start := srv.cfg.Clock()
	if err := srv.commitClaims(ctx, placed, "allocated"); err != nil {
		srv.log.Error("committing allocations failed; giving the reservations back", "err", err)
		s.mu.Lock()
		for i := range placed {
			_ = s.st.Release(placed[i].ID)
			c := placed[i]
			held := charge(&c)
			c.State, c.Allocation = api.Pending, nil
			s.addUse(c.Tenant, charge(&c).sub(held), 1)
			s.insertPending(&c)
		}
		s.mu.Unlock()
		return
	}
	srv.metrics.observeAllocation(srv.cfg.Clock().Sub(start))
	s.mu.Lock()
	s.changed()
	s.mu.Unlock()
}

// allocate decides for a claim under the reservation in force: a claim
// of the reserved one's priority or lower may not use the node held for
// it, or waits when no node is. ahead is the queue behind the claim (nil
// for a claim just created), for alloc.State.AllocateAhead. The caller
// holds s.mu.
func (srv *Server) allocate(c *api.Claim, now time.Time, ahead []alloc.Claim) (*alloc.Allocation, error) {
	s := srv.sched
	ac := allocClaim(c)
	r := s.reserved
	if r == nil || r.claim.ID == c.ID || c.Spec.Priority > r.claim.Spec.Priority {
		return s.st.AllocateAhead(ac, ahead)
	}
	if r.node == "" {
		return nil, errors.New(srv.waitingBehind(r, now))
	}
	require(ac, "node.name != '"+strings.ReplaceAll(r.node, "'", "")+"'")
	a, err := s.st.AllocateAhead(ac, ahead)
	if err != nil {
		return nil, fmt.Errorf("%w (node %s is held for claim %s, pending for %s)", err, r.node, r.claim.ID, now.Sub(r.claim.Created).Round(time.Second))
	}
	return a, nil
}

// starving says whether a pending claim has waited past ReserveAfter and
// could fit the fleet were it empty (a claim that never fits must not
// hold anything back), and nominates the node to hold for it: of the
// nodes that could hold it alone, the one with the fewest claims on it
// now, the soonest free. The answer is kept until the fleet changes. The
// caller holds s.mu.
func (srv *Server) starving(c *api.Claim, now time.Time) (nominee, bool) {
	s := srv.sched
	if srv.cfg.ReserveAfter < 0 || now.Sub(c.Created) < srv.cfg.ReserveAfter {
		return nominee{}, false
	}
	n, known := s.nominees[c.ID]
	if !known {
		n = srv.nominate(c)
		s.nominees[c.ID] = n
	}
	return n, n.fits
}

func (srv *Server) nominate(c *api.Claim) nominee {
	s := srv.sched
	fleet := s.st.Fleet()
	empty, err := alloc.NewState(fleet, nil, alloc.Options{})
	if err == nil {
		_, err = empty.Allocate(allocClaim(c))
	}
	if err != nil {
		return nominee{}
	}
	claimsOn := map[string]int{}
	for _, a := range s.st.Allocations() {
		seen := map[string]bool{}
		for _, d := range a.Devices {
			if !seen[d.Node] {
				seen[d.Node] = true
				claimsOn[d.Node]++
			}
		}
	}
	best := nominee{fits: true}
	for _, node := range fleet.Nodes {
		one, err := alloc.NewState(alloc.Fleet{Policy: fleet.Policy, Nodes: []alloc.Node{node}}, nil, alloc.Options{})
		if err != nil {
			continue
		}
		if _, err := one.Allocate(allocClaim(c)); err != nil {
			continue
		}
		if best.node == "" || claimsOn[node.Name] < claimsOn[best.node] ||
			(claimsOn[node.Name] == claimsOn[best.node] && node.Name < best.node) {
			best.node = node.Name
		}
	}
	return best
}

// reservedNote ends the starving claim's reason.
func (srv *Server) reservedNote(r *reservation, now time.Time) string {
	waited := now.Sub(r.claim.Created).Round(time.Second)
	if r.node == "" {
		return fmt.Sprintf(" (waiting %s; no single node can hold it, so later claims of priority %d or lower now wait for it)", waited, r.claim.Spec.Priority)
	}
	return fmt.Sprintf(" (waiting %s; node %s is now held for it: later claims of priority %d or lower go elsewhere)", waited, r.node, r.claim.Spec.Priority)
}

// waitingBehind is the reason of a claim held back for a starving one.
func (srv *Server) waitingBehind(r *reservation, now time.Time) string {
	return fmt.Sprintf("waiting behind claim %s (priority %d, pending for %s): after %s the queue stops backfilling past a claim so it cannot starve",
		r.claim.ID, r.claim.Spec.Priority, now.Sub(r.claim.Created).Round(time.Second), srv.cfg.ReserveAfter)
}

// commitClaims writes claims and an event each, durably, in one update.
// A claim's Used is the heartbeats' to write: the stored one is kept, so
// a copy read before a heartbeat does not lose what it added.
func (srv *Server) commitClaims(ctx context.Context, cs []api.Claim, kind string) error {
	now := srv.cfg.Clock()
	return srv.store.Update(ctx, func(tx state.Tx) error {
		for i := range cs {
			cs[i].Updated = now
			if old, err := tx.GetClaim(cs[i].ID); err == nil {
				cs[i].Used = old.Used
			}
			if err := tx.UpdateClaim(cs[i]); err != nil {
				return err
			}
			ev := api.Event{Time: now, Kind: kind, Claim: cs[i].ID, Tenant: cs[i].Tenant, Message: describeClaim(&cs[i])}
			if err := tx.AppendEvent(&ev); err != nil {
				return err
			}
		}
		return nil
	})
}

func describeClaim(c *api.Claim) string {
	if c.Allocation == nil || len(c.Allocation.Devices) == 0 {
		if c.Reason != "" {
			return string(c.State) + ": " + c.Reason
		}
		return string(c.State)
	}
	var devs []string
	for _, d := range c.Allocation.Devices {
		devs = append(devs, fmt.Sprintf("%s on %s (%s, %d MiB)", d.Device, d.Node, d.Mode, d.MemoryMiB))
	}
	return string(c.State) + ": " + strings.Join(devs, ", ")
}
