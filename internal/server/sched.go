package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpuslice/gpuslice/internal/admit"
	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/state"
)

// scheduler keeps the allocator's State in memory as the authority on what
// is reserved, the pending queue (priority, then FIFO) and the quota
// counters. It changes only inside a store transaction (Server.update), so
// it and the store see the same sequence of changes; mu guards it for the
// readers (queue positions, metrics, Check).
type scheduler struct {
	mu sync.Mutex
	st *alloc.State
	// reported is the fleet as the agents last reported it (ready nodes).
	reported alloc.Fleet
	// ever is every registered node (lost ones too), empty and healthy:
	// what a claim could get if everything came back and freed up. A claim
	// it cannot hold can never fit this fleet. nil with no nodes.
	ever *alloc.State
	// minGPUMiB is the smallest whole GPU's memory in the fleet: what a
	// pending exclusive claim that names no memory is charged.
	minGPUMiB int64
	// stale is set when a transaction that changed memory did not commit:
	// the next transaction rebuilds from the store first.
	stale   bool
	pending []*api.Claim // ordered: priority desc, seq asc
	// queued counts each tenant's pending claims (the queue bound).
	queued  map[string]int
	reasons map[string]string
	kick    chan struct{}
	// notify is closed (and replaced) whenever a transaction commits,
	// waking long polls and event streams.
	notify chan struct{}
	// use is what each tenant's live and queued claims are charged (see
	// charge): a new claim must fit the quota on top of it. held is the
	// part of it allocated or running claims hold: a queued claim is
	// placed when it fits the quota on top of held (the queue's charges
	// can exceed a quota after the fleet changed, and must not stop the
	// queue from moving).
	use, held map[string]admit.Use
	// reserved is the starving head of the queue that later claims of its
	// priority or lower must not overtake (nil when the queue backfills);
	// nominees remembers, per claim until the fleet changes, whether it
	// could fit the empty fleet, which node it is nominated to and which
	// GPUs are held for it.
	reserved *reservation
	nominees map[string]nominee
}

// reservation is a starving claim and what is held for it: the GPUs of
// its nominated node that it could use (with no node — no single node can
// hold it — every such GPU of the fleet). Later claims of its priority or
// lower are placed anywhere but on those GPUs: never in its way, however
// its node drains, yet free to use the rest of the node.
type reservation struct {
	claim *api.Claim
	nominee
}

// hold is the reservation as admit's rules read it (nil: none).
func (r *reservation) hold() *admit.Hold {
	if r == nil {
		return nil
	}
	return &admit.Hold{Claim: r.claim.ID, Priority: r.claim.Spec.Priority}
}

type nominee struct {
	fits bool
	node string
	// gpus are the GPU uuids held; clause is the CEL clause that keeps a
	// claim's devices off them ("" when none is held).
	gpus   []string
	clause string
}

func newScheduler() *scheduler {
	return &scheduler{reasons: map[string]string{}, kick: make(chan struct{}, 1), notify: make(chan struct{}),
		use: map[string]admit.Use{}, held: map[string]admit.Use{}, nominees: map[string]nominee{}, queued: map[string]int{}}
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

// charge is what a claim counts against its tenant's quota
// (admit.WaitingCharge while pending, the smallest GPU of the fleet for a
// whole-GPU request naming no memory; once allocated, admit.Charge: the
// larger of what it asked for and what it was given). The caller holds
// mu.
func (s *scheduler) charge(c *api.Claim) admit.Use {
	if c.Allocation != nil && c.State != api.Pending {
		return admit.Charge(admit.Asked(c.Spec.Requests), admit.Given(c.Allocation))
	}
	return admit.WaitingCharge(c.Spec.Requests, c.Spec.Isolation, s.minGPUMiB)
}

// account adds (sign 1) or takes away (sign -1) what a claim in its
// current state is charged: to use always, to held when it holds devices.
func (s *scheduler) account(c *api.Claim, sign int) {
	u := s.charge(c)
	addTo(s.use, c.Tenant, u, sign)
	if c.State == api.Allocated || c.State == api.Running {
		addTo(s.held, c.Tenant, u, sign)
	}
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

// rebuild makes a fresh scheduler state from the store (see
// rebuildLocked), in its own transaction.
func (srv *Server) rebuild(ctx context.Context) error {
	return srv.update(ctx, func(tx state.Tx) error { return srv.rebuildLocked(tx) })
}

// rebuildLocked makes a fresh State from what tx sees: ready nodes as
// reported by their agents, plus every live allocation with the layout
// changes that make it true on the reported hardware (alloc.Realize: a
// function of the live allocations, so a claim released before its set-up
// was made leaves nothing half-made behind). Running claims on an
// unhealthy GPU fail (or are re-queued with faultPolicy requeue); other
// allocations that no longer fit (their node is gone or lost, their GPU
// sick) are re-queued. Everything it changes is written to tx. The caller
// holds mu inside a transaction (Server.update).
func (srv *Server) rebuildLocked(tx state.Tx) error {
	s := srv.sched
	nodes, err := tx.ListNodes()
	if err != nil {
		return err
	}
	live, pend, err := liveAndPending(tx)
	if err != nil {
		return err
	}
	var f alloc.Fleet
	f.Policy = srv.cfg.Policy
	ready := map[string]bool{}
	registered := map[string]bool{} // lost nodes too: they may come back
	for _, n := range nodes {
		registered[n.Name] = true
	}
	sick := map[string]bool{} // GPU uuids reported unhealthy
	var minMiB int64
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
			if m, err := catalogModel(g.Model); err == nil && (minMiB == 0 || m < minMiB) {
				minMiB = m
			}
		}
	}
	st, err := alloc.NewState(f, nil, alloc.Options{})
	if err != nil {
		return fmt.Errorf("building the fleet from agent inventories: %w", err)
	}
	s.ever = everFleet(nodes, f.Policy)
	now := srv.cfg.Clock()
	var requeue, failed, fit []api.Claim
	// A claim pinned to a node that is no longer registered (an admin
	// removed it) can run nowhere else: it fails, saying so, rather than
	// wait for a node that will not come back (gpuslice run then stops
	// its command).
	removed := func(c *api.Claim) bool {
		if c.Spec.Node == "" || registered[c.Spec.Node] {
			return false
		}
		c.State, c.Reason = api.Failed, "node "+c.Spec.Node+" was removed (gpuslice nodes rm); the claim was pinned to it and cannot run elsewhere"
		failed = append(failed, *c)
		return true
	}
	pend = slices.DeleteFunc(pend, func(c api.Claim) bool { return removed(&c) })
	for _, c := range live {
		a := c.Allocation
		if removed(&c) {
			continue
		}
		if a == nil || !onReadyNodes(a, ready) {
			c.Reason = "re-queued: its node was lost or deleted"
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
				c.Reason = "re-queued: GPU " + gpu + " became unhealthy"
				requeue = append(requeue, c)
			}
			continue
		}
		fit = append(fit, c)
	}
	allocs := make([]*alloc.Allocation, len(fit))
	for i := range fit {
		allocs[i] = fit[i].Allocation
	}
	applied, misfit := st.Restore(allocs)
	for _, c := range fit {
		if err := misfit[c.ID]; err != nil {
			srv.log.Warn("allocation no longer fits the reported fleet; re-queueing", "claim", c.ID, "err", err)
			c.Reason = "re-queued: its allocation no longer fits its node as reported: " + err.Error()
			requeue = append(requeue, c)
			continue
		}
		if rest := applied[c.ID]; needsMore(c.Allocation.Changes, rest.Changes) {
			// The set-up another claim was to make is gone with it: this
			// claim's own changes now carry it, for the agent to make.
			c.Allocation = rest
			if err := srv.writeClaim(tx, &c, "replanned", now); err != nil {
				return err
			}
		}
	}
	for i := range failed {
		if err := srv.writeClaim(tx, &failed[i], "failed", now); err != nil {
			return err
		}
	}
	for i := range requeue {
		c := &requeue[i]
		c.State, c.Allocation = api.Pending, nil
		if err := srv.writeClaim(tx, c, "requeued", now); err != nil {
			return err
		}
		pend = append(pend, *c)
	}
	s.st, s.reported, s.minGPUMiB, s.stale = st, f, minMiB, false
	s.nominees, s.reserved = map[string]nominee{}, nil // a new fleet
	s.pending, s.queued = nil, map[string]int{}
	s.use, s.held = map[string]admit.Use{}, map[string]admit.Use{}
	keep := map[string]string{}
	for i := range pend {
		c := pend[i]
		s.pending = append(s.pending, &c)
		s.queued[c.Tenant]++
		s.account(&c, 1)
		if why, ok := s.reasons[c.ID]; ok {
			keep[c.ID] = why
		}
	}
	s.reasons = keep
	for i := range live {
		c := &live[i]
		if c.State == api.Allocated || c.State == api.Running {
			if _, ok := st.Allocations()[c.ID]; ok {
				s.account(c, 1)
			}
		}
	}
	s.sortPending()
	s.poke()
	return nil
}

// everFleet is every registered node, all GPUs healthy, nothing
// allocated (nil when there is no node, or the inventories do not make a
// fleet together).
func everFleet(nodes []api.Node, policy alloc.Policy) *alloc.State {
	var all alloc.Fleet
	all.Policy = policy
	for _, n := range nodes {
		inv := n.Inventory
		inv.Name = n.Name
		inv.GPUs = slices.Clone(inv.GPUs)
		for i := range inv.GPUs {
			inv.GPUs[i].Healthy = true
		}
		all.Nodes = append(all.Nodes, inv)
	}
	if len(all.Nodes) == 0 {
		return nil
	}
	st, err := alloc.NewState(all, nil, alloc.Options{})
	if err != nil {
		return nil
	}
	return st
}

// neverFits says why a claim could not be placed even on every registered
// node, empty and healthy ("" when it could, or when no node is known
// yet). The caller holds mu.
func (s *scheduler) neverFits(c *api.Claim) string {
	if s.ever == nil {
		return ""
	}
	if _, err := s.ever.Allocate(allocClaim(c)); err != nil {
		return claimReason(c, err)
	}
	return ""
}

// claimReason is why a claim does not fit, as its reason says it: the
// allocator's explanation, and for a claim pinned to a node (gpuslice run
// pins its claim to this host's node) that node's part alone — the other
// nodes, which the claim never asked for, would only add "selector
// mismatch" for a selector the user never wrote.
func claimReason(c *api.Claim, err error) string {
	text := err.Error()
	var nf *alloc.NoFitError
	if c.Spec.Node == "" || !errors.As(err, &nf) {
		return text
	}
	on, ok := nf.On(c.Spec.Node)
	if !ok {
		on = fmt.Sprintf("claim %s: its node %s is not ready (its agent sends no heartbeat); the claim waits for it", c.ID, c.Spec.Node)
	}
	return strings.Replace(text, nf.Error(), on, 1)
}

// needsMore reports whether realized holds a change that had not
// (kind, GPU, device) a claim's stored changes lack.
func needsMore(had, realized []alloc.Change) bool {
	type key struct {
		kind        alloc.ChangeKind
		gpu, device string
	}
	seen := map[key]bool{}
	for _, ch := range had {
		seen[key{ch.Kind, ch.GPU, ch.Device}] = true
	}
	for _, ch := range realized {
		if !seen[key{ch.Kind, ch.GPU, ch.Device}] {
			return true
		}
	}
	return false
}

// catalogModel is a model's whole-GPU memory.
func catalogModel(model string) (int64, error) {
	g, err := catalog.Default().GPU(model)
	if err != nil {
		return 0, err
	}
	return g.MemoryMiB, nil
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

func (s *scheduler) sortPending() {
	sort.SliceStable(s.pending, func(i, j int) bool {
		a, b := s.pending[i], s.pending[j]
		if a.Spec.Priority != b.Spec.Priority {
			return a.Spec.Priority > b.Spec.Priority
		}
		return a.Seq < b.Seq
	})
}

// insertPending queues a claim in its place (priority, then FIFO).
func (s *scheduler) insertPending(c *api.Claim) {
	i := sort.Search(len(s.pending), func(i int) bool {
		p := s.pending[i]
		if p.Spec.Priority != c.Spec.Priority {
			return p.Spec.Priority < c.Spec.Priority
		}
		return p.Seq > c.Seq
	})
	s.pending = slices.Insert(s.pending, i, c)
	s.queued[c.Tenant]++
}

func (s *scheduler) removePending(id string) {
	for i, c := range s.pending {
		if c.ID == id {
			s.pending = append(s.pending[:i], s.pending[i+1:]...)
			if s.queued[c.Tenant]--; s.queued[c.Tenant] <= 0 {
				delete(s.queued, c.Tenant)
			}
			return
		}
	}
}

// positions maps each pending claim to its place in the queue (1 = next).
func (s *scheduler) positions() map[string]int {
	out := make(map[string]int, len(s.pending))
	for i, c := range s.pending {
		out[c.ID] = i + 1
	}
	return out
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

// retryPending retries the queue in its own transaction (see
// retryLocked).
func (srv *Server) retryPending(ctx context.Context) {
	if err := srv.update(ctx, func(tx state.Tx) error { return srv.retryLocked(tx) }); err != nil && ctx.Err() == nil {
		srv.log.Error("retrying the queue", "err", err)
	}
}

// retryLocked tries every pending claim in queue order; lower-priority
// claims may fill room a higher one cannot use (backfill) until a claim
// has waited ReserveAfter: then a node is held for it, and the claims
// after it of its priority or lower go elsewhere (see Config.ReserveAfter).
// Placed claims are written to tx. The caller holds mu inside a
// transaction (Server.update).
func (srv *Server) retryLocked(tx state.Tx) error {
	s := srv.sched
	if s.st == nil || len(s.pending) == 0 {
		return nil
	}
	now := srv.cfg.Clock()
	s.reserved = nil
	queue := append([]*api.Claim(nil), s.pending...)
	// The queue is the look-ahead: a claim that opens a shared device gets
	// one sized for the queued claims behind it that could join it.
	ahead := make([]alloc.Claim, len(queue))
	for i, c := range queue {
		ahead[i] = *allocClaim(c)
	}
	placed := 0
	for i, c := range queue {
		a, err := srv.allocate(c, now, ahead[i+1:])
		if err != nil {
			s.reasons[c.ID] = claimReason(c, err)
			if admit.Yields(s.reserved.hold(), c.ID, c.Spec.Priority) {
				if n, ok := srv.starving(c, now); ok {
					s.reserved = &reservation{claim: c, nominee: n}
					s.reasons[c.ID] = claimReason(c, err) + srv.reservedNote(s.reserved, now)
				}
			}
			continue
		}
		done := *c
		done.State, done.Allocation, done.Reason = api.Allocated, a, ""
		if done.Allocated == nil {
			at := now
			done.Allocated = &at
		}
		// The tenant as this transaction sees it: a quota changed earlier
		// in the same batch is not in the cache yet (the cache follows
		// commits).
		t, err := tx.GetTenant(c.Tenant)
		if err != nil && !errors.Is(err, state.ErrNotFound) {
			return err
		}
		if o := tenantQuota(t).Check(s.held[c.Tenant], s.charge(&done)); o != nil {
			s.reasons[c.ID] = o.Reason()
			continue
		}
		if err := s.st.Apply(a); err != nil {
			s.reasons[c.ID] = err.Error()
			continue
		}
		if err := srv.writeClaim(tx, &done, "allocated", now); err != nil {
			return err
		}
		s.account(c, -1)
		s.account(&done, 1)
		s.removePending(c.ID)
		delete(s.reasons, c.ID)
		delete(s.nominees, c.ID)
		placed++
	}
	if placed > 0 {
		tx.OnCommit(func() { srv.metrics.observeAllocation(srv.cfg.Clock().Sub(now)) })
	}
	return nil
}

// allocate decides for a claim under the reservation in force: a claim
// of the reserved one's priority or lower may not use the GPUs held for
// it (it may use the rest of the held node). ahead is the queue behind the
// claim (nil for a claim just created), for alloc.State.AllocateAhead.
// The caller holds s.mu.
func (srv *Server) allocate(c *api.Claim, now time.Time, ahead []alloc.Claim) (*alloc.Allocation, error) {
	s := srv.sched
	ac := allocClaim(c)
	r := s.reserved
	if r == nil || r.clause == "" || !admit.Binds(r.hold(), c.ID, c.Spec.Priority) {
		return s.st.AllocateAhead(ac, ahead)
	}
	require(ac, r.clause)
	a, err := s.st.AllocateAhead(ac, ahead)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, srv.heldNote(r, c, now))
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
	if due, _ := admit.Due(c.Created, now, srv.cfg.ReserveAfter); !due {
		return nominee{}, false
	}
	n, known := s.nominees[c.ID]
	if !known {
		n = srv.nominate(c)
		s.nominees[c.ID] = n
	}
	return n, n.fits
}

// nominate decides what is held for a starving claim (see starving and
// reservation): the node, and the GPUs there it could use.
func (srv *Server) nominate(c *api.Claim) nominee {
	s := srv.sched
	fleet := s.st.Fleet()
	ac := allocClaim(c)
	empty, err := alloc.NewState(fleet, nil, alloc.Options{})
	if err == nil {
		_, err = empty.Allocate(ac)
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
	var cands []admit.Candidate
	for _, node := range fleet.Nodes {
		one, err := alloc.NewState(alloc.Fleet{Policy: fleet.Policy, Nodes: []alloc.Node{node}}, nil, alloc.Options{})
		if err != nil {
			continue
		}
		if _, err := one.Allocate(allocClaim(c)); err != nil {
			continue
		}
		cands = append(cands, admit.Candidate{Node: node.Name, Claims: claimsOn[node.Name]})
	}
	best := nominee{fits: true}
	best.node, _ = admit.Nominate(cands)
	// The nodes as their agents reported them: a GPU's sharing as set up,
	// not as its current claims configured it (an empty GPU takes the
	// sharing of its next claim).
	for _, node := range s.reported.Nodes {
		if best.node == "" || node.Name == best.node {
			best.gpus = append(best.gpus, usableGPUs(s.reported.Policy, node, ac)...)
		}
	}
	best.clause = offGPUs(best.gpus)
	return best
}

// usableGPUs lists the GPUs of node that claim c could use part of: one
// device of one of its requests fits the GPU alone, empty, as reported
// (layout and sharing as set up). A claim placed on any other GPU is
// never in c's way, however the node drains; one on such a GPU could be,
// whichever of its claims ends first, so these are held whole. Pure:
// decided on fresh single-GPU States, once per nomination.
func usableGPUs(policy alloc.Policy, node alloc.Node, c *alloc.Claim) []string {
	var out []string
	for _, g := range node.GPUs {
		one := node
		one.GPUs = []alloc.GPU{g}
		st, err := alloc.NewState(alloc.Fleet{Policy: policy, Nodes: []alloc.Node{one}}, nil, alloc.Options{})
		if err != nil {
			out = append(out, g.UUID) // unsure: hold it
			continue
		}
		for _, r := range c.Requests {
			r.Count = 1
			probe := &alloc.Claim{Name: c.Name, Tenant: c.Tenant, Priority: c.Priority, Isolation: c.Isolation, Requests: []alloc.Request{r}}
			if _, err := st.Allocate(probe); err == nil {
				out = append(out, g.UUID)
				break
			}
		}
	}
	return out
}

// offGPUs is the selector clause that keeps a device off the given GPUs
// (a MIG instance's parent, a whole GPU's own uuid), or "" for none.
func offGPUs(uuids []string) string {
	if len(uuids) == 0 {
		return ""
	}
	keys := make([]string, len(uuids))
	for i, u := range uuids {
		keys[i] = strconv.Quote(u) + ": true"
	}
	return "!(device.attributes['gpu.nvidia.com'].parentUUID in {" + strings.Join(keys, ", ") + "})"
}

// reservedNote ends the starving claim's reason (its own tenant's).
func (srv *Server) reservedNote(r *reservation, now time.Time) string {
	return admit.Holding{Node: r.node, GPUs: len(r.gpus), Priority: r.claim.Spec.Priority, Waited: now.Sub(r.claim.Created)}.Note()
}

// heldNote says why claim c may not use the GPUs held for r (admit.Held:
// it names r's claim only when r is the same tenant's).
func (srv *Server) heldNote(r *reservation, c *api.Claim, now time.Time) string {
	h := admit.Held{Scope: admit.TenantScope, Node: r.node, Priority: r.claim.Spec.Priority,
		Waited: now.Sub(r.claim.Created), ReserveAfter: srv.cfg.ReserveAfter}
	if r.claim.Tenant == c.Tenant {
		h.Holder = r.claim.ID
	}
	return h.Reason()
}

// writeClaim stores a claim's new state and an event of kind, in tx. The
// caller read c from tx in the same transaction, so it is current (Used
// included).
func (srv *Server) writeClaim(tx state.Tx, c *api.Claim, kind string, now time.Time) error {
	c.Updated = now
	if err := tx.UpdateClaim(*c); err != nil {
		return err
	}
	ev := api.Event{Time: now, Kind: kind, Claim: c.ID, Tenant: c.Tenant, Message: describeClaim(c)}
	return tx.AppendEvent(&ev)
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

// realized reports whether the reported fleet already shows every layout
// change of a (configure-sharing aside). The caller holds mu.
func (s *scheduler) realized(a *alloc.Allocation) bool {
	gpus := map[string]*alloc.GPU{}
	for ni := range s.reported.Nodes {
		for gi := range s.reported.Nodes[ni].GPUs {
			g := &s.reported.Nodes[ni].GPUs[gi]
			gpus[g.UUID] = g
		}
	}
	has := func(g *alloc.GPU, id, profile string, start int) bool {
		for _, in := range g.Instances {
			if in.UUID == id || (in.Profile == profile && in.Start == start) {
				return true
			}
		}
		return false
	}
	for _, ch := range a.Changes {
		g := gpus[ch.GPU]
		if g == nil {
			return false
		}
		switch ch.Kind {
		case alloc.CreateInstance:
			if !g.MIGEnabled || !has(g, ch.Device, ch.Profile, ch.Start) {
				return false
			}
		case alloc.DestroyInstance:
			if g.MIGEnabled && has(g, ch.Device, "", -1) {
				return false
			}
		case alloc.EnableMIG:
			if !g.MIGEnabled {
				return false
			}
		case alloc.DisableMIG:
			if g.MIGEnabled {
				return false
			}
		}
	}
	return true
}

// maxGPUMiB is the largest GPU memory of the registered nodes. The caller
// holds mu.
func (s *scheduler) maxGPUMiB() int64 {
	var most int64
	if s.ever == nil {
		return 0
	}
	for _, n := range s.ever.Fleet().Nodes {
		for _, g := range n.GPUs {
			if m, err := catalogModel(g.Model); err == nil {
				most = max(most, m)
			}
		}
	}
	return most
}
