package admit

import (
	"fmt"
	"time"
)

// The reserve-after rule: a claim left waiting for reserveAfter while
// others take the room it needs gets capacity held for it, and claims of
// its priority or lower may not use what is held, so a stream of small
// claims cannot starve a big one. One claim holds at a time; a claim that
// could not fit even the empty fleet holds nothing (NeverFits).

// Due says whether a claim created at created has waited reserveAfter by
// now; if not, wait is how long is left. reserveAfter 0 or negative turns
// the rule off (never due, wait 0).
func Due(created, now time.Time, reserveAfter time.Duration) (due bool, wait time.Duration) {
	if reserveAfter <= 0 {
		return false, 0
	}
	if wait = reserveAfter - now.Sub(created); wait > 0 {
		return false, wait
	}
	return true, 0
}

// Hold is the claim capacity is held for.
type Hold struct {
	Claim    string // its id (a claim id, a pod's UID)
	Priority int
}

// Binds says whether hold h keeps the claim id of priority p off what it
// holds: any other claim of its priority or lower. A nil or empty hold
// binds nobody.
func Binds(h *Hold, id string, p int) bool {
	return h != nil && h.Claim != "" && h.Claim != id && p <= h.Priority
}

// Yields says whether a claim id of priority p, due a hold, takes it from
// h: when there is none, or h is another claim's of a lower priority.
func Yields(h *Hold, id string, p int) bool {
	return h == nil || h.Claim == "" || (h.Claim != id && p > h.Priority)
}

// Candidate is a node that could hold a due claim were it empty, with how
// many claims it holds now.
type Candidate struct {
	Node   string
	Claims int
}

// Nominate picks the node to hold for a due claim: the candidate with the
// fewest claims now (the soonest free), then by name. ok is false with no
// candidate (the claim fits no single node even empty).
func Nominate(cands []Candidate) (node string, ok bool) {
	var best *Candidate
	for i := range cands {
		c := &cands[i]
		if best == nil || c.Claims < best.Claims || (c.Claims == best.Claims && c.Node < best.Node) {
			best = c
		}
	}
	if best == nil {
		return "", false
	}
	return best.Node, true
}

// Held: capacity is held for another claim that has waited past
// reserveAfter, and this one is of its priority or lower.
type Held struct {
	Scope Scope
	// Node is the held node; "" when no single node could hold the
	// waiting claim and the GPUs it could use are held fleet-wide.
	Node string
	// Holder names the waiting claim: a claim id for a tenant of the same
	// tenant (else "": another tenant's claim is named by its priority
	// alone), a pod's namespace/name under the scheduler.
	Holder   string
	Priority int
	// Waited is how long the holder has waited; ReserveAfter the setting.
	Waited, ReserveAfter time.Duration
}

// Reason implements Outcome. It is the held-back claim's reason, shown to
// its tenant: under serve it names the holder only when it is the same
// tenant's (no id, tenant or age of another's).
func (h *Held) Reason() string {
	waited := h.Waited.Round(time.Second)
	if h.Scope == NamespaceScope {
		return fmt.Sprintf("node %s is held for GPU pod %s, pending for %s (reserveAfter)", h.Node, h.Holder, waited)
	}
	whose := fmt.Sprintf("a claim of another tenant waiting ahead of this one (priority %d)", h.Priority)
	if h.Holder != "" {
		whose = fmt.Sprintf("claim %s (priority %d, pending for %s)", h.Holder, h.Priority, waited)
	}
	rule := fmt.Sprintf("after %s waiting a claim's GPUs are held so it cannot starve; claims of its priority or lower use only the others", h.ReserveAfter)
	if h.Node == "" {
		return fmt.Sprintf("the GPUs %s could use are held for it: %s", whose, rule)
	}
	return fmt.Sprintf("node %s is held for %s: %s", h.Node, whose, rule)
}

// Holding is what is held for a due claim, as its own reason ends.
type Holding struct {
	Node     string // "": no single node, GPUs fleet-wide
	GPUs     int    // how many GPUs are held (Node "")
	Priority int
	Waited   time.Duration
}

// Note ends the holder's own reason (serve).
func (h Holding) Note() string {
	waited := h.Waited.Round(time.Second)
	if h.Node == "" {
		return fmt.Sprintf(" (waiting %s; no single node can hold it, so the %d GPUs it could use are now held for it: later claims of priority %d or lower use only others)", waited, h.GPUs, h.Priority)
	}
	return fmt.Sprintf(" (waiting %s; node %s is now held for it: later claims of priority %d or lower use only the GPUs there it cannot use, or go elsewhere)", waited, h.Node, h.Priority)
}
