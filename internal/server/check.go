package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/gpuslice/gpuslice/internal/admit"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/state"
)

// Check verifies the scheduler's memory against the store: the
// allocator's own rules (alloc.State.Check), the same live allocations on
// both sides, the same pending queue, and quota counters equal to the
// charges recomputed from the stored claims. It holds at rest — with no
// request or background step in flight — and is what the randomized
// server test calls after every step.
func (srv *Server) Check(ctx context.Context) error {
	var live, pend []api.Claim
	err := srv.store.View(ctx, func(tx state.Tx) error {
		var err error
		live, pend, err = liveAndPending(tx)
		return err
	})
	if err != nil {
		return err
	}
	s := srv.sched
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	if s.st == nil {
		return errors.New("check: the scheduler has no fleet")
	}
	if err := s.st.Check(); err != nil {
		errs = append(errs, fmt.Errorf("allocator: %w", err))
	}
	held := s.st.Allocations()
	want, wantHeld := map[string]admit.Use{}, map[string]admit.Use{}
	stored := map[string]bool{}
	for i := range live {
		c := &live[i]
		stored[c.ID] = true
		addTo(want, c.Tenant, s.charge(c), 1)
		addTo(wantHeld, c.Tenant, s.charge(c), 1)
		a, ok := held[c.ID]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("claim %s is %s in the store but holds nothing in the allocator", c.ID, c.State))
		case c.Allocation == nil || len(a.Devices) != len(c.Allocation.Devices):
			errs = append(errs, fmt.Errorf("claim %s: the store and the allocator disagree on its devices", c.ID))
		}
	}
	for _, id := range slices.Sorted(maps.Keys(held)) {
		if !stored[id] {
			errs = append(errs, fmt.Errorf("the allocator holds devices for claim %s, which is not live in the store", id))
		}
	}
	queued := map[string]bool{}
	for _, c := range s.pending {
		queued[c.ID] = true
	}
	for i := range pend {
		c := &pend[i]
		addTo(want, c.Tenant, s.charge(c), 1)
		if !queued[c.ID] {
			errs = append(errs, fmt.Errorf("claim %s is pending in the store but not queued", c.ID))
		}
		delete(queued, c.ID)
	}
	for _, id := range slices.Sorted(maps.Keys(queued)) {
		errs = append(errs, fmt.Errorf("claim %s is queued but not pending in the store", id))
	}
	for _, t := range slices.Sorted(maps.Keys(mergeKeys(want, s.use))) {
		if want[t] != s.use[t] {
			errs = append(errs, fmt.Errorf("tenant %s: quota counters say %s, the claims %s", t, admit.DescribeUse(s.use[t]), admit.DescribeUse(want[t])))
		}
	}
	for _, t := range slices.Sorted(maps.Keys(mergeKeys(wantHeld, s.held))) {
		if wantHeld[t] != s.held[t] {
			errs = append(errs, fmt.Errorf("tenant %s: held counters say %s, the allocated claims %s", t, admit.DescribeUse(s.held[t]), admit.DescribeUse(wantHeld[t])))
		}
	}
	return errors.Join(errs...)
}

// Tick runs the background steps once, in order: the lost-node sweep,
// a retry of the pending queue, then a prune of the history past its
// retention. Run does the same on timers; tests and simulations call Tick
// instead to stay deterministic.
func (srv *Server) Tick(ctx context.Context) error {
	if err := srv.sweep(ctx); err != nil {
		return err
	}
	if err := srv.expireLeases(ctx); err != nil {
		return err
	}
	srv.retryPending(ctx)
	_, err := srv.Prune(ctx)
	return err
}

func addTo(m map[string]admit.Use, tenant string, u admit.Use, sign int) {
	cur := m[tenant]
	cur.MemMiB += int64(sign) * u.MemMiB
	cur.Compute += sign * u.Compute
	if cur == (admit.Use{}) {
		delete(m, tenant)
		return
	}
	m[tenant] = cur
}

// mergeKeys is the tenants of either map, zero entries left out.
func mergeKeys(a, b map[string]admit.Use) map[string]bool {
	out := map[string]bool{}
	for _, m := range []map[string]admit.Use{a, b} {
		for k, v := range m {
			if v != (admit.Use{}) {
				out[k] = true
			}
		}
	}
	return out
}
