package server

import (
	"context"
	"errors"
	"net/http"

	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/state"
)

// update is the one way anything changes: fn runs inside one store
// transaction (state.Store.Update) while holding the scheduler's lock.
//
// The store runs transaction functions one at a time, in one order, and
// group-commits them; the scheduler's memory (the allocator State, the
// queue, the quota counters) is changed only from inside such a function.
// So the store and the scheduler see exactly the same sequence of
// changes, and a decision is always made on the state every earlier
// decision left — including ones whose commit is still in flight in the
// same batch. If a transaction does not commit, the store's rollback hook
// marks the scheduler stale and the next function rebuilds it from the
// store before it decides anything (rebuildLocked), so memory never keeps
// a change the store lost.
//
// fn reads the current record from tx, checks that it is in the state the
// transition starts from, and refuses with an *httpError otherwise (409
// with the current state, 404, 403, 429, 422). A refusal must come before
// fn writes to tx or changes memory: it is returned to the caller while
// the (empty) transaction commits, so refusals never force a rebuild.
// Any other error rolls the transaction back.
//
// Never call the store (Update or View) while holding the scheduler's
// lock: the writer runs fn under that lock, so it would wait for itself.
func (srv *Server) update(ctx context.Context, fn func(tx state.Tx) error) error {
	var refused error
	err := srv.store.Update(ctx, func(stx state.Tx) error {
		tx := &eventsTx{Tx: stx}
		s := srv.sched
		s.mu.Lock()
		defer s.mu.Unlock()
		tx.OnRollback(func() {
			s.mu.Lock()
			s.stale = true
			s.mu.Unlock()
		})
		tx.OnCommit(func() {
			s.mu.Lock()
			s.changed()
			s.mu.Unlock()
			srv.bell.ring(tx.appended)
		})
		if s.stale {
			if err := srv.rebuildLocked(tx); err != nil {
				return err
			}
		}
		err := fn(tx)
		var he *httpError
		if errors.As(err, &he) {
			refused = err
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	return refused
}

// conflict is the 409 of a transition whose claim is no longer in the
// state it starts from; the answer carries the claim's current state.
func conflict(c *api.Claim, format string, args ...any) error {
	e := errStatus(http.StatusConflict, format, args...).(*httpError)
	e.state = string(c.State)
	return e
}
