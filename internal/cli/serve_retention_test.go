package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/server"
)

// serve's retention flags: 0 on the command line is "no bound" (a
// negative value in server.Config), bad values name their flag, and the
// defaults are the server's.
func TestRetentionFlags(t *testing.T) {
	cmd := serveCmd(&env{})
	for flag, want := range map[string]string{"event-retention": "168h0m0s", "max-events": "100000", "claim-retention": "168h0m0s",
		"max-final-claims": "100000", "agent-event-rate": "1", "agent-event-burst": "100"} {
		f := cmd.Flags().Lookup(flag)
		if f == nil || f.DefValue != want || !strings.Contains(f.Usage, "0") {
			t.Errorf("--%s: %+v, want default %s and the meaning of 0 in its help", flag, f, want)
		}
	}
	defaults := retentionFlags{eventRetention: server.DefaultEventRetention, maxEvents: 5, claimRetention: time.Hour, maxClaims: 7, eventRate: 3, eventBurst: 9}
	var cfg server.Config
	if err := defaults.apply(&cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.EventRetention != server.DefaultEventRetention || cfg.MaxEvents != 5 || cfg.ClaimRetention != time.Hour || cfg.MaxFinalClaims != 7 ||
		cfg.AgentEventRate != 3 || cfg.AgentEventBurst != 9 {
		t.Errorf("config %+v", cfg)
	}
	zero := retentionFlags{eventBurst: 1}
	if err := zero.apply(&cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.EventRetention >= 0 || cfg.MaxEvents >= 0 || cfg.ClaimRetention >= 0 || cfg.MaxFinalClaims >= 0 || cfg.AgentEventRate >= 0 {
		t.Errorf("0 on the command line should be no bound (negative in the config): %+v", cfg)
	}
	for flag, f := range map[string]retentionFlags{
		"--event-retention":   {eventRetention: -time.Second, eventBurst: 1},
		"--claim-retention":   {claimRetention: -time.Second, eventBurst: 1},
		"--max-events":        {maxEvents: -1, eventBurst: 1},
		"--max-final-claims":  {maxClaims: -1, eventBurst: 1},
		"--agent-event-rate":  {eventRate: -1, eventBurst: 1},
		"--agent-event-burst": {eventBurst: 0},
	} {
		if err := f.apply(&cfg); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%+v: %v, want an error naming %s", f, err, flag)
		}
	}
}
