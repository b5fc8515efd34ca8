package schedcore

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuslice/gpuslice/internal/admit"
	"github.com/gpuslice/gpuslice/internal/k8s/draalloc"
)

// Holding is the reserve-after rule of gpuslice serve in the scheduler
// (admit.Due, Binds, Yields, Nominate): a GPU pod left unschedulable for
// longer than reserveAfter gets a node held for it, and pods of its
// priority or lower may not take GPUs on that node, so a stream of small
// pods cannot starve a big one by always filling the room it waits for.
// One pod holds a node at a time (the longest waiting of the highest
// priority, in the order they are found). The zero Holding holds nothing.
type Holding struct {
	mu  sync.Mutex
	pod types.UID
	// key is namespace/name, for messages; since is when the pod began
	// to wait (its creation).
	key      string
	since    time.Time
	priority int
	node     string
	// timers are the pods with a retry pending for when they reach
	// reserveAfter.
	timers map[types.UID]bool
}

// hold is the hold in force as admit's rules read it. Caller holds h.mu.
func (h *Holding) hold() *admit.Hold {
	if h.pod == "" {
		return nil
	}
	return &admit.Hold{Claim: string(h.pod), Priority: h.priority}
}

// Held says what keeps pod uid of priority off the held node: nil when
// the hold in force (if any) does not bind it.
func (h *Holding) Held(uid types.UID, priority int, now time.Time) *admit.Held {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !admit.Binds(h.hold(), string(uid), priority) {
		return nil
	}
	return &admit.Held{Scope: admit.NamespaceScope, Node: h.node, Holder: h.key, Priority: h.priority, Waited: now.Sub(h.since)}
}

// Holder is the pod holding a node ("" for none) and its namespace/name.
func (h *Holding) Holder() (types.UID, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pod, h.key
}

// Release forgets the hold of pod uid (placed, or gone); it reports
// whether there was one.
func (h *Holding) Release(uid types.UID) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pod != uid || uid == "" {
		return false
	}
	h.pod, h.node = "", ""
	return true
}

// RetryPending marks that pod uid will be retried when it reaches
// reserveAfter; false if it is marked already. RetryDone unmarks it.
func (h *Holding) RetryPending(uid types.UID) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.timers == nil {
		h.timers = map[types.UID]bool{}
	}
	if h.timers[uid] {
		return false
	}
	h.timers[uid] = true
	return true
}

// RetryDone unmarks a pod's pending retry (RetryPending).
func (h *Holding) RetryDone(uid types.UID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.timers, uid)
}

// Waiter is an unschedulable gpuslice pod under the reserve-after rule.
type Waiter struct {
	UID      types.UID
	Key      string    // namespace/name
	Created  time.Time // when it began to wait
	Priority int
	Claims   []*draalloc.Claim // its claims still to allocate
}

// Starve considers a pod found unschedulable. Not yet due (admit.Due),
// it returns how long until it is: the caller retries it then, whether or
// not anything else happens meanwhile (a stream of pods that fit would
// otherwise never retry it). Due, and with no hold in force it does not
// yield to (admit.Yields), it nominates a node for it (admit.Nominate) —
// of the nodes that could hold its claims were they empty, the one with
// the fewest claims now, so the soonest free — and holds it. nodes lists
// the cluster's nodes (read only when a nomination is made).
func (l *Ledger) Starve(h *Holding, w Waiter, nodes func() []string, now time.Time, reserveAfter time.Duration) (retryIn time.Duration) {
	if len(w.Claims) == 0 {
		return 0
	}
	due, wait := admit.Due(w.Created, now, reserveAfter)
	if !due {
		return wait
	}
	h.mu.Lock()
	yields := admit.Yields(h.hold(), string(w.UID), w.Priority)
	h.mu.Unlock()
	if !yields {
		return 0
	}
	var cands []admit.Candidate
	for _, name := range nodes() {
		if n, ok := l.fitsAlone(w.Claims, name); ok {
			cands = append(cands, admit.Candidate{Node: name, Claims: n})
		}
	}
	node, ok := admit.Nominate(cands)
	if !ok {
		return 0 // it fits nowhere even empty: holding a node would help nobody
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !admit.Yields(h.hold(), string(w.UID), w.Priority) {
		return 0
	}
	h.pod, h.key, h.since, h.priority, h.node = w.UID, w.Key, w.Created, w.Priority, node
	return 0
}

// fitsAlone says whether claims fit a node's GPUs with nothing else on
// them, and how many claims the node holds now.
func (l *Ledger) fitsAlone(claims []*draalloc.Claim, node string) (int, bool) {
	l.mu.Lock()
	n := l.node(node)
	nd, err := l.devices(n)
	held := len(n.claims)
	l.mu.Unlock()
	if err != nil || nd == nil || len(nd.Node.GPUs) == 0 {
		return 0, false
	}
	st, _, err := draalloc.NewState([]*draalloc.NodeDevices{nd}, nil, l.policy, l.cat)
	if err != nil {
		return 0, false
	}
	for _, ac := range claims {
		a, err := ac.Allocate(st, nd, nil)
		if err != nil {
			return 0, false
		}
		if err := st.Apply(a); err != nil {
			return 0, false
		}
	}
	return held, true
}
