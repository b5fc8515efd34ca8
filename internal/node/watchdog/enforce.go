package watchdog

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
)

// DefaultWarnEvery is how often a claim that stays over its promise is
// warned about.
const DefaultWarnEvery = time.Minute

// Enforcer applies memory policies and remembers, between calls, how long
// each claim has been over its promise and when it was last warned about.
// It is not safe for concurrent use.
type Enforcer struct {
	// WarnEvery rate-limits over-limit events per claim.
	WarnEvery time.Duration

	over   map[overKey]time.Time // over the promise continuously since
	warned map[string]time.Time  // claim → last over-limit event
}

type overKey struct{ claim, device string }

// NewEnforcer builds an Enforcer (warnEvery ≤ 0: DefaultWarnEvery).
func NewEnforcer(warnEvery time.Duration) *Enforcer {
	if warnEvery <= 0 {
		warnEvery = DefaultWarnEvery
	}
	return &Enforcer{WarnEvery: warnEvery, over: map[overKey]time.Time{}, warned: map[string]time.Time{}}
}

// Enforce acts on one Watch's violations at time now. A claim and device
// missing from v is no longer over its promise: its grace period starts
// afresh next time. warn emits an over-limit event, at most one per claim
// every WarnEvery. kill does the same until the claim has been over its
// promise on the device for grace (continuously, as seen by the calls so
// far; grace 0 kills at once), then kills its largest processes there
// until what is left fits the promise, with an event per kill (never rate
// limited), and starts the grace period again for what remains. A nil
// killer makes kill behave like warn. Enforce stops killing when ctx ends.
func (e *Enforcer) Enforce(ctx context.Context, v []Violation, killer func(pid int) error, grace time.Duration, now time.Time) []api.Event {
	current := map[overKey]bool{}
	for _, x := range v {
		current[overKey{x.Claim, x.Device}] = true
	}
	for k := range e.over {
		if !current[k] {
			delete(e.over, k)
		}
	}
	for c, t := range e.warned {
		if now.Sub(t) >= e.WarnEvery {
			delete(e.warned, c)
		}
	}
	v = slices.Clone(v)
	slices.SortStableFunc(v, func(a, b Violation) int {
		return cmp.Or(cmp.Compare(a.Claim, b.Claim), cmp.Compare(a.Device, b.Device))
	})

	var out []api.Event
	event := func(x Violation, kind, msg string) {
		out = append(out, api.Event{Time: now, Kind: kind, Claim: x.Claim, Tenant: x.Tenant, Node: x.Node, Message: msg})
	}
	for _, x := range v {
		k := overKey{x.Claim, x.Device}
		since, ok := e.over[k]
		if !ok {
			since = now
			e.over[k] = now
		}
		over := fmt.Sprintf("claim %s uses %d MiB on %s, %d MiB more than the %d MiB promised", x.Claim, x.UsedMiB, x.Device, x.UsedMiB-x.PromisedMiB, x.PromisedMiB)
		kill := Policy(x.Policy) == PolicyKill && killer != nil
		if kill && now.Sub(since) >= grace && ctx.Err() == nil {
			left := x.UsedMiB
			for _, p := range x.Processes {
				if left <= x.PromisedMiB {
					break
				}
				if err := killer(p.PID); err != nil {
					event(x, EventKillFailed, fmt.Sprintf("%s; killing pid %d (%d MiB) failed: %v", over, p.PID, p.MemoryMiB, err))
					continue
				}
				left -= p.MemoryMiB
				event(x, EventKilled, fmt.Sprintf("%s for %v; killed pid %d (%d MiB) (memory policy kill)", over, now.Sub(since).Round(time.Second), p.PID, p.MemoryMiB))
			}
			e.over[k] = now
			e.warned[x.Claim] = now
			continue
		}
		if last, ok := e.warned[x.Claim]; ok && now.Sub(last) < e.WarnEvery {
			continue
		}
		e.warned[x.Claim] = now
		if kill {
			event(x, EventOverLimit, fmt.Sprintf("%s; its processes there are killed if it stays over for %v more (memory policy kill)", over, (grace-now.Sub(since)).Round(time.Second)))
			continue
		}
		event(x, EventOverLimit, over+" (memory policy warn)")
	}
	return out
}
