package server

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/gpuslice/gpuslice/internal/admit"
	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/state"
)

func (srv *Server) createClaim(w http.ResponseWriter, r *http.Request, p principal) {
	var req api.CreateClaimRequest
	if err := decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	tenant, err := tenantFor(p, req.Tenant)
	if err != nil {
		writeError(w, err)
		return
	}
	c := api.Claim{Tenant: tenant, Spec: req.ClaimSpec, State: api.Pending, Created: srv.cfg.Clock()}
	c.Updated = c.Created
	id, err := randomHex(8)
	if err != nil {
		writeError(w, err)
		return
	}
	c.ID = "c-" + id
	if c.Spec.Service != "" && p.role != api.RoleAdmin {
		writeError(w, errField("service", "set by serve's services controller only; leave it empty"))
		return
	}
	if err := srv.validateClaim(&c); err != nil {
		writeError(w, err)
		return
	}
	start := srv.cfg.Clock()
	err = srv.update(r.Context(), func(tx state.Tx) error { return srv.admitLocked(tx, &c, start) })
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, c)
}

// admitLocked decides a new claim and stores it: the tenant and a pinned
// node must exist (as tx sees them, not as a cache remembers), the
// tenant's queue and quota must have room, then the allocator places it
// now or it is queued. The caller holds the scheduler's lock inside a
// transaction (Server.update).
func (srv *Server) admitLocked(tx state.Tx, c *api.Claim, start time.Time) error {
	s := srv.sched
	t, err := tx.GetTenant(c.Tenant)
	if err != nil {
		return errField("tenant", "tenant %q does not exist", c.Tenant)
	}
	// The tenant's maximum as this transaction sees it: an admin lowering
	// it earlier in the same batch binds this claim.
	if err := priorityAllowed(t, c.Spec.Priority, "priority"); err != nil {
		return err
	}
	if c.Spec.Node != "" {
		if _, err := tx.GetNode(c.Spec.Node); err != nil {
			return errField("node", "node %q is not registered", c.Spec.Node)
		}
	}
	a, aerr := srv.allocate(c, start, nil)
	in := admit.Claim{Quota: tenantQuota(t), Used: s.use[t.Name], Placed: aerr == nil,
		WaitForNodes: c.Spec.WaitForNodes, Queued: s.queued[c.Tenant], MaxQueued: srv.cfg.MaxQueuedPerTenant}
	if aerr == nil {
		// The allocation may hand out more than was asked (a whole GPU for
		// an exclusive claim with no memory): that is what the quota counts.
		got := *c
		got.State, got.Allocation = api.Allocated, a
		in.Given, in.Charge = admit.Given(a), s.charge(&got)
	} else {
		// It waits: charged at least what it will hold, within a bounded
		// queue, unless no registered node could ever hold it.
		in.Charge = s.charge(c)
		if in.NeverFits = s.neverFits(c); in.NeverFits != "" && !c.Spec.WaitForNodes {
			in.LargestGPUMiB = s.maxGPUMiB()
		}
	}
	if err := admissionError(admit.Decide(in)); err != nil {
		return err
	}
	if aerr == nil {
		aerr = s.st.Apply(a)
	}
	if aerr == nil {
		c.State, c.Allocation = api.Allocated, a
		at := start
		c.Allocated = &at
	} else {
		c.Reason = claimReason(c, aerr)
	}
	if err := tx.CreateClaim(c); err != nil {
		return err
	}
	if c.Spec.LeaseSeconds > 0 {
		// The answer carries the lease; the table takes it once the claim
		// is durable (nobody can renew it before: nobody knows its id).
		id, ttl := c.ID, leaseTTL(*c)
		exp := start.Add(ttl)
		c.LeaseExpires = &exp
		tx.OnCommit(func() { srv.leases.set(id, ttl, start) })
	}
	ev := api.Event{Time: c.Created, Kind: "created", Claim: c.ID, Tenant: c.Tenant, Message: describeClaim(c)}
	if err := tx.AppendEvent(&ev); err != nil {
		return err
	}
	s.account(c, 1)
	if c.State == api.Pending {
		cc := *c
		s.insertPending(&cc)
		s.reasons[c.ID] = c.Reason
		c.QueuePosition = s.position(c.ID)
	} else {
		tx.OnCommit(func() { srv.metrics.observeAllocation(srv.cfg.Clock().Sub(start)) })
	}
	return nil
}

// tenantFor resolves whose claim this is: a tenant token's own tenant, or
// the tenant an admin names.
func tenantFor(p principal, asked string) (string, error) {
	if p.role == api.RoleTenant {
		if asked != "" && asked != p.tenant {
			return "", errField("tenant", "a tenant token acts for its own tenant only")
		}
		return p.tenant, nil
	}
	if asked == "" {
		return "", errField("tenant", "an admin token must name the tenant")
	}
	return asked, nil
}

// validateClaim checks the spec with the allocator's own rules and the
// memory and fault policies (the tenant and a pinned node are checked in
// the transaction that admits the claim).
func (srv *Server) validateClaim(c *api.Claim) error {
	ac := allocClaim(c)
	if err := alloc.ValidateClaim(ac); err != nil {
		var fe *alloc.FieldError
		field := ""
		if errors.As(err, &fe) {
			field = fe.Field
		}
		return &httpError{status: http.StatusUnprocessableEntity, field: field, msg: err.Error()}
	}
	if p := c.Spec.Priority; p < api.LowestPriority || p > api.HighestPriority {
		return errField("priority", "%d: want %d..%d, and at most the tenant's maxPriority (0 unless an admin raised it)", p, api.LowestPriority, api.HighestPriority)
	}
	switch c.Spec.MemoryPolicy {
	case "", "warn", "kill":
	default:
		return errField("memoryPolicy", "%q: want warn or kill", c.Spec.MemoryPolicy)
	}
	switch c.Spec.FaultPolicy {
	case "", "fail", "requeue":
	default:
		return errField("faultPolicy", "%q: want fail or requeue", c.Spec.FaultPolicy)
	}
	if c.Spec.Node != "" && !validName.MatchString(c.Spec.Node) {
		return errField("node", "node name %q: lowercase letters, digits, '.', '_' and '-', 1–63 characters", c.Spec.Node)
	}
	if c.Spec.LeaseSeconds < 0 || c.Spec.LeaseSeconds > api.MaxLeaseSeconds {
		return errField("leaseSeconds", "%d: want 1..%d seconds (0: no lease)", c.Spec.LeaseSeconds, api.MaxLeaseSeconds)
	}
	if c.Spec.Service != "" && !validName.MatchString(c.Spec.Service) {
		return errField("service", "service name %q: lowercase letters, digits, '.', '_' and '-', 1–63 characters", c.Spec.Service)
	}
	return nil
}

// priorityAllowed says whether tenant t may ask for priority p: at most
// its MaxPriority, which only an admin sets (0 by default: no tenant
// outranks another). It binds every claim of the tenant, an admin's on
// its behalf too. field names the priority in the error.
func priorityAllowed(t api.Tenant, p int, field string) error {
	if p <= t.MaxPriority {
		return nil
	}
	return errField(field, "priority %d is above tenant %s's maximum of %d; ask for %d or less, or ask an admin to raise the tenant's maxPriority (gpuslice tenants put %s --max-priority N)",
		p, t.Name, t.MaxPriority, t.MaxPriority, t.Name)
}

// tenantQuota is tenant t's quota as admit reads it.
func tenantQuota(t api.Tenant) admit.Quota {
	return admit.TenantQuota(t.Name, t.MemoryMiB, t.ComputePercent)
}

// admissionError is an admission outcome as the API answers it: nil when
// admitted, 403 over a quota, 429 with the tenant's queue full, 422 for a
// claim no registered node could ever hold, 409 otherwise.
func admissionError(o admit.Outcome) error {
	status := http.StatusConflict
	switch o.(type) {
	case admit.Admit:
		return nil
	case *admit.OverQuota:
		status = http.StatusForbidden
	case *admit.QueueFull:
		status = http.StatusTooManyRequests
	case *admit.NeverFits:
		status = http.StatusUnprocessableEntity
	}
	return errStatus(status, "%s", o.Reason())
}

// loadClaim reads a claim the principal may see; others' claims are 404.
func (srv *Server) loadClaim(r *http.Request, p principal, id string) (api.Claim, error) {
	var c api.Claim
	err := srv.store.View(r.Context(), func(tx state.Tx) error {
		var err error
		c, err = tx.GetClaim(id)
		return err
	})
	if err != nil || !p.sees(&c) {
		return api.Claim{}, errStatus(http.StatusNotFound, "claim %q not found", id)
	}
	srv.decorate(&c)
	return c, nil
}

// decorate adds the queue position and the latest reason to pending
// claims, under one hold of the scheduler's lock (linear in the queue and
// the claims, whatever their number).
func (srv *Server) decorate(cs ...*api.Claim) {
	any := false
	for _, c := range cs {
		any = any || c.State == api.Pending
		if c.Spec.LeaseSeconds > 0 && !c.State.Final() {
			if x, ok := srv.leases.get(c.ID); ok {
				exp := x.expires
				c.LeaseExpires = &exp
			}
		}
	}
	if !any {
		return
	}
	s := srv.sched
	s.mu.Lock()
	defer s.mu.Unlock()
	var pos map[string]int
	if len(cs) > 1 {
		pos = s.positions()
	}
	for _, c := range cs {
		if c.State != api.Pending {
			continue
		}
		if pos != nil {
			c.QueuePosition = pos[c.ID]
		} else {
			c.QueuePosition = s.position(c.ID)
		}
		if why := s.reasons[c.ID]; why != "" {
			c.Reason = why
		}
	}
}

// getClaim answers at once, or with ?wait=30s&state=pending waits until the
// claim leaves that state (long poll).
func (srv *Server) getClaim(w http.ResponseWriter, r *http.Request, p principal) {
	wait, err := waitFor(r)
	if err != nil {
		writeError(w, err)
		return
	}
	from := api.ClaimState(r.URL.Query().Get("state"))
	if wait > 0 && from != "" {
		// It may wait: a long poll holds a slot, as a stream does.
		release, err := srv.slots.take(p)
		if err != nil {
			writeError(w, err)
			return
		}
		defer release()
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		ch := srv.sched.waitChan()
		c, err := srv.loadClaim(r, p, r.PathValue("id"))
		if err != nil {
			writeError(w, err)
			return
		}
		if wait == 0 || from == "" || c.State != from {
			writeJSON(w, http.StatusOK, c)
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			writeJSON(w, http.StatusOK, c)
			return
		case <-r.Context().Done():
			return
		}
	}
}

func (srv *Server) listClaims(w http.ResponseWriter, r *http.Request, p principal) {
	q := r.URL.Query()
	f := state.ClaimFilter{Tenant: q.Get("tenant"), Node: q.Get("node")}
	if p.role == api.RoleTenant {
		f.Tenant = p.tenant
	}
	for _, s := range q["state"] {
		st := api.ClaimState(s)
		switch st {
		case api.Pending, api.Allocated, api.Running, api.Released, api.Failed:
			f.States = append(f.States, st)
		default:
			writeError(w, errField("state", "%q: want pending, allocated, running, released or failed", s))
			return
		}
	}
	pg, err := pageOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if pg.after != "" {
		if f.AfterSeq, err = strconv.ParseInt(pg.after, 10, 64); err != nil || f.AfterSeq < 0 {
			writeError(w, errField("after", "cursor %q: pass the %s header of the previous page", pg.after, NextCursorHeader))
			return
		}
	}
	f.Limit = pg.limit + 1 // one more says whether there is a next page
	var cs []api.Claim
	for {
		// A tenant token sees no claim from before its tenant was
		// created: those of a deleted namesake come first (by Seq), and
		// are read past until the page is full or the claims end.
		var page []api.Claim
		err = srv.store.View(r.Context(), func(tx state.Tx) error {
			var err error
			page, err = tx.ListClaims(f)
			return err
		})
		if err != nil {
			writeError(w, err)
			return
		}
		for _, c := range page {
			f.AfterSeq = c.Seq
			if p.sees(&c) {
				cs = append(cs, c)
			}
		}
		if len(page) < f.Limit || len(cs) >= f.Limit {
			break
		}
	}
	if len(cs) > pg.limit {
		cs = cs[:pg.limit]
		w.Header().Set(NextCursorHeader, strconv.FormatInt(cs[len(cs)-1].Seq, 10))
	}
	// Decorate outside the transaction: decorate takes the scheduler's lock,
	// which must never be taken while a store transaction is open.
	ptrs := make([]*api.Claim, len(cs))
	for i := range cs {
		ptrs[i] = &cs[i]
	}
	srv.decorate(ptrs...)
	if cs == nil {
		cs = []api.Claim{}
	}
	writeJSON(w, http.StatusOK, cs)
}

// releaseClaim ends a claim: its devices go back and pending claims are
// retried in the same transaction, so a newcomer cannot jump the queue.
// Releasing a released claim answers it again; a failed one is a 409.
func (srv *Server) releaseClaim(w http.ResponseWriter, r *http.Request, p principal) {
	c, err := srv.finish(r, p, api.Released, "released")
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

func (srv *Server) markFailed(w http.ResponseWriter, r *http.Request, p principal) {
	reason := r.URL.Query().Get("reason")
	if len(reason) > 1024 {
		writeError(w, errField("reason", "at most 1024 bytes"))
		return
	}
	c, err := srv.finish(r, p, api.Failed, reason)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

// readClaimLocked reads a claim the principal may see from tx; others'
// claims are 404.
func readClaimLocked(tx state.Tx, p principal, id string) (api.Claim, error) {
	c, err := tx.GetClaim(id)
	if err != nil {
		if errors.Is(err, state.ErrNotFound) {
			return api.Claim{}, errStatus(http.StatusNotFound, "claim %q not found", id)
		}
		return api.Claim{}, err
	}
	if !p.sees(&c) {
		return api.Claim{}, errStatus(http.StatusNotFound, "claim %q not found", id)
	}
	return c, nil
}

// finish moves a live claim to a final state (released or failed) in one
// transaction (finishLocked), then retries the queue in it when devices or
// a held node came free. A claim already in that final state is answered
// as it is; one in the other final state is a 409.
func (srv *Server) finish(r *http.Request, p principal, to api.ClaimState, reason string) (api.Claim, error) {
	id := r.PathValue("id")
	var out api.Claim
	err := srv.update(r.Context(), func(tx state.Tx) error {
		c, _, freed, err := srv.finishLocked(tx, p, id, to, reason)
		if err != nil {
			return err
		}
		out = c
		if !freed {
			return nil
		}
		return srv.retryLocked(tx)
	})
	return out, err
}

// finishLocked ends a live claim inside tx: the claim is read there, its
// devices or its place in the queue go back, a released claim's set-up
// that was never made is dropped (the state is rebuilt from the live
// allocations), and its lease goes. changed says the claim was live;
// freed that the queue should be retried. The caller holds the
// scheduler's lock (Server.update).
func (srv *Server) finishLocked(tx state.Tx, p principal, id string, to api.ClaimState, reason string) (out api.Claim, changed, freed bool, err error) {
	s := srv.sched
	c, err := readClaimLocked(tx, p, id)
	if err != nil {
		return api.Claim{}, false, false, err
	}
	if c.State.Final() {
		if c.State == to {
			return c, false, false, nil
		}
		return api.Claim{}, false, false, conflict(&c, "claim %s is already %s; it cannot become %s", c.ID, c.State, to)
	}
	was, before := c.State, c
	c.State, c.Reason = to, reason
	now := srv.cfg.Clock()
	if err := srv.writeClaim(tx, &c, string(to), now); err != nil {
		return api.Claim{}, false, false, err
	}
	unmade := false
	freed = true
	if was == api.Pending {
		// Nothing comes free, unless the queue was held for this claim.
		freed = s.reserved != nil && s.reserved.claim.ID == c.ID
		s.removePending(c.ID)
		delete(s.reasons, c.ID)
		delete(s.nominees, c.ID)
	} else {
		unmade = srv.unmade(s.st.Allocations()[c.ID])
		if err := s.st.Release(c.ID); err != nil {
			srv.log.Warn("release: claim was not in the allocator's state", "claim", c.ID, "err", err)
			unmade = true
		}
	}
	s.account(&before, -1)
	tx.OnCommit(func() { srv.leases.drop(c.ID) })
	if unmade {
		if err := srv.rebuildLocked(tx); err != nil {
			return api.Claim{}, false, false, err
		}
	}
	return c, true, freed, nil
}

// unmade reports whether an allocation holds layout changes its node has
// not reported made yet: releasing it must not leave them planned.
func (srv *Server) unmade(a *alloc.Allocation) bool {
	if a == nil {
		return false
	}
	for _, ch := range a.Changes {
		if ch.Kind != alloc.ConfigureShare {
			return !srv.sched.realized(a)
		}
	}
	return false
}

func (srv *Server) markRunning(w http.ResponseWriter, r *http.Request, p principal) {
	id := r.PathValue("id")
	var out api.Claim
	err := srv.update(r.Context(), func(tx state.Tx) error {
		c, err := readClaimLocked(tx, p, id)
		if err != nil {
			return err
		}
		switch c.State {
		case api.Running:
		case api.Allocated:
			c.State = api.Running
			if err := srv.writeClaim(tx, &c, "running", srv.cfg.Clock()); err != nil {
				return err
			}
		default:
			return conflict(&c, "claim %s is %s; only an allocated claim can start running", c.ID, c.State)
		}
		out = c
		return nil
	})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}
