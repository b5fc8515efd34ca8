package server

import (
	"context"
	"time"

	"github.com/gpuslice/gpuslice/internal/state"
)

// Retention defaults (Config): a week of history, and at most 100,000
// events and 100,000 final claims, pruned every minute in transactions
// of at most 1,000 rows each.
const (
	DefaultEventRetention = 7 * 24 * time.Hour
	DefaultMaxEvents      = 100_000
	DefaultClaimRetention = 7 * 24 * time.Hour
	DefaultMaxFinalClaims = 100_000
	DefaultPruneInterval  = time.Minute
	DefaultPruneBatch     = 1000
)

// retention is what a prune removes, decided from the configuration and
// the time (pure).
type retention struct {
	eventsBefore, claimsBefore time.Time // zero: no age bound
	maxEvents, maxClaims       int       // <= 0: no count bound
	batch                      int
}

func (srv *Server) retentionAt(now time.Time) retention {
	r := retention{maxEvents: srv.cfg.MaxEvents, maxClaims: srv.cfg.MaxFinalClaims, batch: srv.cfg.PruneBatch}
	if srv.cfg.EventRetention > 0 {
		r.eventsBefore = now.Add(-srv.cfg.EventRetention)
	}
	if srv.cfg.ClaimRetention > 0 {
		r.claimsBefore = now.Add(-srv.cfg.ClaimRetention)
	}
	return r
}

// Pruned counts what one prune removed.
type Pruned struct {
	Events, Claims int
}

// Prune removes the events and final claims past their retention (age or
// count, Config), in transactions of at most PruneBatch rows of each
// through update, until none is left or ctx ends: writers wait for one
// batch at most, never for the whole backlog. Live claims are never
// removed, and a tenant's usage is kept apart from its claims (the store's
// per-tenant totals), so bills do not change when claims go.
func (srv *Server) Prune(ctx context.Context) (Pruned, error) {
	var total Pruned
	r := srv.retentionAt(srv.cfg.Clock())
	for ctx.Err() == nil {
		var p Pruned
		err := srv.update(ctx, func(tx state.Tx) error {
			var err error
			if p.Events, err = tx.PruneEvents(r.eventsBefore, r.maxEvents, r.batch); err != nil {
				return err
			}
			p.Claims, err = tx.PruneClaims(r.claimsBefore, r.maxClaims, r.batch)
			return err
		})
		if err != nil {
			return total, err
		}
		total.Events += p.Events
		total.Claims += p.Claims
		srv.metrics.observePruned(p)
		if p.Events < r.batch && p.Claims < r.batch {
			break
		}
	}
	if total != (Pruned{}) {
		srv.log.Info("pruned history past its retention", "events", total.Events, "claims", total.Claims)
	}
	return total, ctx.Err()
}
