package server

import (
	"testing"
	"time"
)

// The per-node event bucket the heartbeat applies (pure).
func TestLimitAdmit(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	l := limit{rate: 2, burst: 10, window: time.Minute}
	type step struct {
		at                  time.Duration
		n, pass, summary    int
		wantTokens, dropped int
	}
	for _, tc := range []struct {
		name  string
		l     limit
		steps []step
	}{
		{"a new node starts full", l, []step{{0, 4, 4, 0, 6, 0}, {0, 6, 6, 0, 0, 0}}},
		{"the first drop is told at once, later ones a window apart", l, []step{
			{0, 15, 10, 5, 0, 0}, {0, 3, 0, 0, 0, 3}, {30 * time.Second, 20, 10, 0, 0, 13},
			{61 * time.Second, 0, 0, 13, 10, 0}}},
		{"refill is capped at the burst", l, []step{{0, 10, 10, 0, 0, 0}, {time.Hour, 0, 0, 0, 10, 0}}},
		{"time going back refills nothing", l, []step{{time.Minute, 10, 10, 0, 0, 0}, {0, 1, 0, 1, 0, 0}}},
		{"no limit", limit{rate: -1, burst: 1, window: time.Minute}, []step{{0, 1000, 1000, 0, 0, 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bucket
			for i, s := range tc.steps {
				var pass, summary int
				b, pass, summary = tc.l.admit(b, t0.Add(s.at), s.n)
				if pass != s.pass || summary != s.summary || int(b.tokens) != s.wantTokens || b.dropped != s.dropped {
					t.Fatalf("step %d (%d events at +%s): pass %d summary %d tokens %.1f dropped %d, want %d %d %d %d",
						i, s.n, s.at, pass, summary, b.tokens, b.dropped, s.pass, s.summary, s.wantTokens, s.dropped)
				}
			}
		})
	}
}
