package cli

import (
	"fmt"
	"math"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuslice/gpuslice/internal/server"
)

// retentionFlags are serve's flags for history retention and the agents'
// event rate. On the command line 0 means "no bound" (server.Config
// reads 0 as "the default" and a negative value as "no bound").
type retentionFlags struct {
	eventRetention, claimRetention time.Duration
	maxEvents, maxClaims           int
	eventRate                      float64
	eventBurst                     int
}

func (f *retentionFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.DurationVar(&f.eventRetention, "event-retention", server.DefaultEventRetention,
		"prune events older than this (0: keep them whatever their age)")
	fl.IntVar(&f.maxEvents, "max-events", server.DefaultMaxEvents,
		"keep at most this many events, the newest (0: no count bound)")
	fl.DurationVar(&f.claimRetention, "claim-retention", server.DefaultClaimRetention,
		"prune released and failed claims that ended longer ago than this (0: keep them whatever their age); live claims are never pruned, and tenants' usage totals are kept apart")
	fl.IntVar(&f.maxClaims, "max-final-claims", server.DefaultMaxFinalClaims,
		"keep at most this many released and failed claims, the last to end (0: no count bound)")
	fl.Float64Var(&f.eventRate, "agent-event-rate", server.DefaultAgentEventRate,
		"events per second each node's agent may add once its burst is spent; the rest are dropped, counted, and summarised in one event a minute (0: no limit)")
	fl.IntVar(&f.eventBurst, "agent-event-burst", server.DefaultAgentEventBurst,
		"events a node's agent may add at once before --agent-event-rate applies (at least 1; 0 is refused)")
}

// apply checks the flags and sets them in cfg.
func (f *retentionFlags) apply(cfg *server.Config) error {
	switch {
	case f.eventRetention < 0:
		return fmt.Errorf("--event-retention %s: want a duration ≥ 0 (0: no age bound)", f.eventRetention)
	case f.claimRetention < 0:
		return fmt.Errorf("--claim-retention %s: want a duration ≥ 0 (0: no age bound)", f.claimRetention)
	case f.maxEvents < 0:
		return fmt.Errorf("--max-events %d: want a count ≥ 0 (0: no count bound)", f.maxEvents)
	case f.maxClaims < 0:
		return fmt.Errorf("--max-final-claims %d: want a count ≥ 0 (0: no count bound)", f.maxClaims)
	case f.eventRate < 0 || math.IsNaN(f.eventRate) || math.IsInf(f.eventRate, 0):
		return fmt.Errorf("--agent-event-rate %v: want events per second ≥ 0 (0: no limit)", f.eventRate)
	case f.eventBurst < 1:
		return fmt.Errorf("--agent-event-burst %d: want at least 1", f.eventBurst)
	}
	none := func(v int64) int64 { // 0 on the command line: no bound
		if v == 0 {
			return -1
		}
		return v
	}
	cfg.EventRetention = time.Duration(none(int64(f.eventRetention)))
	cfg.ClaimRetention = time.Duration(none(int64(f.claimRetention)))
	cfg.MaxEvents = int(none(int64(f.maxEvents)))
	cfg.MaxFinalClaims = int(none(int64(f.maxClaims)))
	cfg.AgentEventRate = f.eventRate
	if f.eventRate == 0 {
		cfg.AgentEventRate = -1
	}
	cfg.AgentEventBurst = f.eventBurst
	return nil
}
