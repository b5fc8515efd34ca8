package admit

import (
	"fmt"
	"strings"
)

// Outcome is an admission decision: Admit, or why not (Unfit, OverQuota,
// QueueFull, Held, NeverFits). Reason is what the user reads ("" for
// Admit).
type Outcome interface {
	Reason() string
}

// Admit: the claim is admitted, placed now or (Queued) waiting its turn.
type Admit struct{ Queued bool }

// Reason implements Outcome.
func (Admit) Reason() string { return "" }

// Unfit: the claim does not fit now (the allocator's reason); it may
// later, as claims end or nodes join.
type Unfit struct{ Why string }

// Reason implements Outcome.
func (u Unfit) Reason() string { return u.Why }

// QueueFull: the tenant has as many claims waiting as it may.
type QueueFull struct {
	Tenant         string
	Waiting, Limit int
}

// Reason implements Outcome.
func (q *QueueFull) Reason() string {
	return fmt.Sprintf("queue full: tenant %s has %d claims waiting (at most %d); release some or retry later", q.Tenant, q.Waiting, q.Limit)
}

// NeverFits: no registered node could hold the claim even empty and
// healthy, so waiting would not help.
type NeverFits struct {
	Why           string // the allocator's reason on the empty fleet
	LargestGPUMiB int64  // the largest GPU's memory there
}

// Reason implements Outcome.
func (n *NeverFits) Reason() string {
	hint := fmt.Sprintf(" (the largest GPU here has %d MiB); ask for less", n.LargestGPUMiB)
	if strings.Contains(n.Why, " has ") && strings.Contains(n.Why, "(profile ") {
		// The choices are listed already: the profile is what is wrong.
		hint = fmt.Sprintf(" (the largest GPU here has %d MiB); ask for one of those profiles", n.LargestGPUMiB)
	}
	return fmt.Sprintf("this claim can never fit the registered nodes, even empty: %s%s, or pass waitForNodes (gpuslice run --wait-for-nodes) to queue it for nodes that may join", n.Why, hint)
}

// Claim is what admitting a new claim depends on, gathered by the caller
// under its lock.
type Claim struct {
	Quota Quota
	// Used is what the tenant's claims are charged now.
	Used Use
	// Placed says the allocator placed the claim now; Given is what that
	// allocation gives.
	Placed bool
	Given  Use
	// Charge is what the claim would be charged: placed, Charge(asked,
	// given); waiting, WaitingCharge.
	Charge Use
	// NeverFits is why no registered node could ever hold the claim ("":
	// one could, or no node is known yet); WaitForNodes queues it anyway.
	NeverFits     string
	WaitForNodes  bool
	LargestGPUMiB int64
	// Queued is how many of the tenant's claims wait; MaxQueued bounds
	// them (0 or negative: no bound).
	Queued, MaxQueued int
}

// Decide admits a new claim or says why not. Placed now, it must fit the
// quota on what it is given. Not placed, it waits unless no registered
// node could ever hold it (NeverFits, unless WaitForNodes), its waiting
// charge breaks the quota, or the tenant's queue is full.
func Decide(c Claim) Outcome {
	if c.Placed {
		if o := c.Quota.Check(c.Used, c.Charge); o != nil {
			g := c.Given
			o.Given = &g
			return o
		}
		return Admit{}
	}
	if c.NeverFits != "" && !c.WaitForNodes {
		return &NeverFits{Why: c.NeverFits, LargestGPUMiB: c.LargestGPUMiB}
	}
	if o := c.Quota.Check(c.Used, c.Charge); o != nil {
		return o
	}
	if c.MaxQueued > 0 && c.Queued >= c.MaxQueued {
		return &QueueFull{Tenant: c.Quota.Name, Waiting: c.Queued, Limit: c.MaxQueued}
	}
	return Admit{Queued: true}
}
