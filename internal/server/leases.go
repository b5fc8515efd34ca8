package server

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/state"
)

// Leases: a claim created with leaseSeconds lasts only while its holder
// (gpuslice run, a service replica) renews it. The table lives in memory
// only, so a renewal costs no write; a restarted server gives every leased
// live claim a whole lease again (from New), so holders that survived the
// restart renew against it, and those that did not are released one lease
// and one grace later.

type lease struct {
	ttl     time.Duration
	expires time.Time
}

// leaseTable maps live claim ids to their leases. Entries of claims that
// became final some other way are dropped when the sweep finds them.
type leaseTable struct {
	mu sync.Mutex
	m  map[string]lease
}

func (l *leaseTable) set(id string, ttl time.Duration, now time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	exp := now.Add(ttl)
	l.m[id] = lease{ttl: ttl, expires: exp}
	return exp
}

func (l *leaseTable) drop(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m, id)
}

func (l *leaseTable) get(id string) (lease, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	x, ok := l.m[id]
	return x, ok
}

// expired lists, sorted, the claims whose lease ran out more than grace
// before now.
func (l *leaseTable) expired(now time.Time, grace time.Duration) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for id, x := range l.m {
		if leaseOver(x, now, grace) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// leaseOver is the one rule: a lease is over once grace has passed since
// it expired.
func leaseOver(x lease, now time.Time, grace time.Duration) bool {
	return now.After(x.expires.Add(grace))
}

// loadLeases gives every live leased claim a whole lease from now (New).
func (srv *Server) loadLeases(ctx context.Context) error {
	now := srv.cfg.Clock()
	return srv.store.View(ctx, func(tx state.Tx) error {
		live, err := tx.ListClaims(state.ClaimFilter{States: []api.ClaimState{api.Pending, api.Allocated, api.Running}})
		if err != nil {
			return err
		}
		for _, c := range live {
			if c.Spec.LeaseSeconds > 0 {
				srv.leases.set(c.ID, leaseTTL(c), now)
			}
		}
		return nil
	})
}

func leaseTTL(c api.Claim) time.Duration { return time.Duration(c.Spec.LeaseSeconds) * time.Second }

// renewClaim extends a live leased claim's lease by its length from now.
// It runs in the store's order (Server.update), so a renewal and the sweep
// that would end the lease never cross: a renewal answered 200 holds. A
// final claim is a 409 with its state, which tells its holder to stop.
//
// A holder renewing far more often than it needs (within a tenth of its
// lease, at most a second, of the last renewal) is answered from a read:
// a flood of renewals never queues at the store's writer.
func (srv *Server) renewClaim(w http.ResponseWriter, r *http.Request, p principal) {
	id := r.PathValue("id")
	if x, ok := srv.leases.get(id); ok && srv.cfg.Clock().Before(x.expires.Add(-x.ttl).Add(min(x.ttl/10, time.Second))) {
		var c api.Claim
		err := srv.store.View(r.Context(), func(tx state.Tx) error {
			var err error
			c, err = readClaimLocked(tx, p, id)
			return err
		})
		if err == nil && !c.State.Final() {
			srv.decorate(&c)
			writeJSON(w, http.StatusOK, c)
			return
		}
		// Gone or final: the transaction below answers it.
	}
	var out api.Claim
	err := srv.update(r.Context(), func(tx state.Tx) error {
		c, err := readClaimLocked(tx, p, id)
		if err != nil {
			return err
		}
		if c.State.Final() {
			srv.leases.drop(c.ID)
			return conflict(&c, "claim %s is %s (%s); its holder must stop", c.ID, c.State, c.Reason)
		}
		if c.Spec.LeaseSeconds <= 0 {
			return errField("leaseSeconds", "claim %s has no lease to renew (create it with leaseSeconds)", c.ID)
		}
		exp := srv.leases.set(c.ID, leaseTTL(c), srv.cfg.Clock())
		c.LeaseExpires = &exp
		out = c
		return nil
	})
	if err != nil {
		writeError(w, err)
		return
	}
	srv.decorate(&out)
	writeJSON(w, http.StatusOK, out)
}

// expireLeases releases, in one transaction, every live claim whose lease
// is over (checked again inside it, so a renewal just before wins).
func (srv *Server) expireLeases(ctx context.Context) error {
	now := srv.cfg.Clock()
	grace := srv.cfg.LeaseGrace
	ids := srv.leases.expired(now, grace)
	if len(ids) == 0 {
		return nil
	}
	sys := principal{role: api.RoleAdmin}
	ended := 0
	err := srv.update(ctx, func(tx state.Tx) error {
		freed := false
		ended = 0
		for _, id := range ids {
			x, ok := srv.leases.get(id)
			if !ok || !leaseOver(x, now, grace) {
				continue
			}
			reason := fmt.Sprintf("lease expired: its holder did not renew it for %s (lease %s + grace %s)",
				now.Sub(x.expires.Add(-x.ttl)).Round(time.Second), x.ttl, grace)
			_, changed, f, err := srv.finishLocked(tx, sys, id, api.Released, reason)
			if err != nil && httpStatus(err) != http.StatusNotFound && httpStatus(err) != http.StatusConflict {
				return err
			}
			if !changed { // final already, or gone: nothing held
				tx.OnCommit(func() { srv.leases.drop(id) })
				continue
			}
			ended++
			freed = freed || f
		}
		if !freed {
			return nil
		}
		return srv.retryLocked(tx)
	})
	if err == nil && ended > 0 {
		srv.log.Warn("claims released: their leases expired", "count", ended)
	}
	return err
}

// httpStatus is the status an error answers with (500 for others).
func httpStatus(err error) int {
	if he, ok := err.(*httpError); ok {
		return he.status
	}
	return http.StatusInternalServerError
}
