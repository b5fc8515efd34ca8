package server

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/state"
)

// CreateClaimRequest is the body of POST /v1/claims.
type CreateClaimRequest struct {
	// Tenant is required for admin tokens and must match a tenant token's.
	Tenant string `json:"tenant,omitempty"`
	api.ClaimSpec
}

func (srv *Server) createClaim(w http.ResponseWriter, r *http.Request, p principal) {
	var req CreateClaimRequest
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
	if err := srv.validateClaim(r, &c); err != nil {
		writeError(w, err)
		return
	}
	// Decide and reserve under the scheduler's lock; commit outside it.
	s := srv.sched
	u := asks(&c.Spec)
	s.mu.Lock()
	if err := srv.checkQuota(r, tenant, u); err != nil {
		s.mu.Unlock()
		writeError(w, err)
		return
	}
	start := srv.cfg.Clock()
	a, aerr := srv.allocate(&c, start, nil)
	if aerr == nil {
		// The allocation may hand out more than was asked (a whole GPU for
		// an exclusive claim with no memory): that is what the quota counts.
		got := c
		got.State, got.Allocation = api.Allocated, a
		if err := srv.quotaRoom(tenant, charge(&got)); err != nil {
			s.mu.Unlock()
			var he *httpError
			if errors.As(err, &he) {
				he.msg += fmt.Sprintf(" (the allocation found gives %s; ask for less, or for a shared mode)", describeUse(given(a)))
			}
			writeError(w, err)
			return
		}
		aerr = s.st.Apply(a)
	}
	if aerr == nil {
		c.State, c.Allocation = api.Allocated, a
	} else {
		c.Reason = aerr.Error()
	}
	u = charge(&c)
	s.addUse(tenant, u, 1)
	s.mu.Unlock()
	err = srv.store.Update(r.Context(), func(tx state.Tx) error {
		if err := tx.CreateClaim(&c); err != nil {
			return err
		}
		ev := api.Event{Time: c.Created, Kind: "created", Claim: c.ID, Tenant: tenant, Message: describeClaim(&c)}
		return tx.AppendEvent(&ev)
	})
	s.mu.Lock()
	if err != nil {
		if c.State == api.Allocated {
			_ = s.st.Release(c.ID)
		}
		s.addUse(tenant, u, -1)
		s.mu.Unlock()
		writeError(w, err)
		return
	}
	if c.State == api.Pending {
		s.insertPending(&c)
		s.reasons[c.ID] = c.Reason
		c.QueuePosition = s.position(c.ID)
	} else {
		srv.metrics.observeAllocation(srv.cfg.Clock().Sub(start))
	}
	s.changed()
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, c)
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

// validateClaim checks the spec with the allocator's own rules, the memory
// policy, and that the tenant and a pinned node exist.
func (srv *Server) validateClaim(r *http.Request, c *api.Claim) error {
	ac := allocClaim(c)
	if err := alloc.ValidateClaim(ac); err != nil {
		var fe *alloc.FieldError
		field := ""
		if errors.As(err, &fe) {
			field = fe.Field
		}
		return &httpError{status: http.StatusUnprocessableEntity, field: field, msg: err.Error()}
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
	if _, ok := srv.cache.tenant(c.Tenant); !ok {
		return errField("tenant", "tenant %q does not exist", c.Tenant)
	}
	if c.Spec.Node == "" {
		return nil
	}
	return srv.store.View(r.Context(), func(tx state.Tx) error {
		if _, err := tx.GetNode(c.Spec.Node); err != nil {
			return errField("node", "node %q is not registered", c.Spec.Node)
		}
		return nil
	})
}

// checkQuota enforces the tenant's quota at admission, on what the claim
// asks for; the caller holds the scheduler lock.
func (srv *Server) checkQuota(_ *http.Request, tenant string, u tenantUse) error {
	if _, ok := srv.cache.tenant(tenant); !ok {
		return errField("tenant", "tenant %q does not exist", tenant)
	}
	return srv.quotaRoom(tenant, u)
}

// quotaRoom says whether the tenant's live claims (see charge) leave room
// for u more; the caller holds the scheduler lock.
func (srv *Server) quotaRoom(tenant string, u tenantUse) error {
	t, ok := srv.cache.tenant(tenant)
	if !ok {
		return nil // deleted meanwhile; admission refuses new claims
	}
	cur := srv.sched.use[tenant]
	if t.MemoryMiB > 0 && u.mem > 0 && cur.mem+u.mem > t.MemoryMiB {
		return errStatus(http.StatusForbidden, "quota: tenant %s holds %d MiB of GPU memory and needs %d more; its quota is %d MiB", tenant, cur.mem, u.mem, t.MemoryMiB)
	}
	if t.ComputePercent > 0 && u.comp > 0 && cur.comp+u.comp > t.ComputePercent {
		return errStatus(http.StatusForbidden, "quota: tenant %s holds %d%% compute and needs %d%% more; its quota is %d%%", tenant, cur.comp, u.comp, t.ComputePercent)
	}
	return nil
}

// describeUse says "N MiB and P% compute".
func describeUse(u tenantUse) string {
	return fmt.Sprintf("%d MiB and %d%% compute", u.mem, u.comp)
}

// loadClaim reads a claim the principal may see; others' claims are 404.
func (srv *Server) loadClaim(r *http.Request, p principal, id string) (api.Claim, error) {
	var c api.Claim
	err := srv.store.View(r.Context(), func(tx state.Tx) error {
		var err error
		c, err = tx.GetClaim(id)
		return err
	})
	if err != nil || (p.role == api.RoleTenant && c.Tenant != p.tenant) {
		return api.Claim{}, errStatus(http.StatusNotFound, "claim %q not found", id)
	}
	srv.decorate(&c)
	return c, nil
}

// decorate adds the queue position and the latest reason to a pending claim.
func (srv *Server) decorate(c *api.Claim) {
	if c.State != api.Pending {
		return
	}
	srv.sched.mu.Lock()
	c.QueuePosition = srv.sched.position(c.ID)
	if why := srv.sched.reasons[c.ID]; why != "" {
		c.Reason = why
	}
	srv.sched.mu.Unlock()
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
	f := state.ClaimFilter{Tenant: r.URL.Query().Get("tenant"), Node: r.URL.Query().Get("node")}
	if p.role == api.RoleTenant {
		f.Tenant = p.tenant
	}
	for _, s := range r.URL.Query()["state"] {
		st := api.ClaimState(s)
		switch st {
		case api.Pending, api.Allocated, api.Running, api.Released, api.Failed:
			f.States = append(f.States, st)
		default:
			writeError(w, errField("state", "%q: want pending, allocated, running, released or failed", s))
			return
		}
	}
	var cs []api.Claim
	err := srv.store.View(r.Context(), func(tx state.Tx) error {
		var err error
		cs, err = tx.ListClaims(f)
		return err
	})
	if err != nil {
		writeError(w, err)
		return
	}
	// Decorate outside the transaction: decorate takes the scheduler's lock,
	// which must never be taken while a store transaction is open.
	for i := range cs {
		srv.decorate(&cs[i])
	}
	if cs == nil {
		cs = []api.Claim{}
	}
	writeJSON(w, http.StatusOK, cs)
}

// releaseClaim ends a claim: its devices go back and pending claims are
// retried before the answer, so a newcomer cannot jump the queue.
func (srv *Server) releaseClaim(w http.ResponseWriter, r *http.Request, p principal) {
	c, err := srv.finish(r, p, api.Released, "released")
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

func (srv *Server) markFailed(w http.ResponseWriter, r *http.Request, p principal) {
	c, err := srv.finish(r, p, api.Failed, r.URL.Query().Get("reason"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

func (srv *Server) finish(r *http.Request, p principal, to api.ClaimState, reason string) (api.Claim, error) {
	c, err := srv.loadClaim(r, p, r.PathValue("id"))
	if err != nil {
		return c, err
	}
	if c.State.Final() {
		return c, nil // idempotent
	}
	was, stored := c.State, c
	c.State, c.Reason = to, reason
	if err := srv.commitClaims(r.Context(), []api.Claim{c}, string(to)); err != nil {
		return c, err
	}
	s := srv.sched
	s.mu.Lock()
	if was == api.Pending {
		s.removePending(c.ID)
		delete(s.reasons, c.ID)
		delete(s.nominees, c.ID)
	} else if err := s.st.Release(c.ID); err != nil {
		srv.log.Warn("release: claim was not in the allocator's state", "claim", c.ID, "err", err)
	}
	s.addUse(c.Tenant, charge(&stored), -1)
	s.changed()
	s.mu.Unlock()
	srv.retryPending(r.Context())
	return c, nil
}

func (srv *Server) markRunning(w http.ResponseWriter, r *http.Request, p principal) {
	c, err := srv.loadClaim(r, p, r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	if c.State != api.Allocated && c.State != api.Running {
		writeError(w, errStatus(http.StatusConflict, "claim %s is %s; only an allocated claim can start running", c.ID, c.State))
		return
	}
	if c.State == api.Allocated {
		c.State = api.Running
		if err := srv.commitClaims(r.Context(), []api.Claim{c}, "running"); err != nil {
			writeError(w, err)
			return
		}
		srv.sched.mu.Lock()
		srv.sched.changed()
		srv.sched.mu.Unlock()
	}
	writeJSON(w, http.StatusOK, c)
}

// watchEvents streams events as Server-Sent Events from ?since=SEQ; a
// tenant sees its own claims' events only.
func (srv *Server) watchEvents(w http.ResponseWriter, r *http.Request, p principal) {
	since, _ := strconv.ParseInt(r.URL.Query().Get("since"), 10, 64)
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, errStatus(http.StatusInternalServerError, "streaming unsupported"))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	for {
		ch := srv.sched.waitChan()
		var evs []api.Event
		err := srv.store.View(r.Context(), func(tx state.Tx) error {
			var err error
			evs, err = tx.EventsSince(since, 500)
			return err
		})
		if err != nil {
			return
		}
		for _, e := range evs {
			since = e.Seq
			if p.role == api.RoleTenant && e.Tenant != p.tenant {
				continue
			}
			fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", e.Seq, e.Kind, mustJSON(e))
		}
		fl.Flush()
		select {
		case <-ch:
		case <-time.After(15 * time.Second):
			fmt.Fprint(w, ": keepalive\n\n")
			fl.Flush()
		case <-r.Context().Done():
			return
		}
	}
}
