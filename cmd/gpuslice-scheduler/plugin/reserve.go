package plugin

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuslice/gpuslice/internal/k8s/draalloc"
)

// holding is the reserveAfter rule of gpuslice serve in the scheduler: a
// GPU pod left unschedulable for longer than reserveAfter gets a node
// held for it, and pods of its priority or lower may not take GPUs on
// that node, so a stream of small pods cannot starve a big one by always
// filling the room it waits for. One pod holds a node at a time (the
// longest waiting of the highest priority, in the order they are found).
type holding struct {
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

// held returns the node held for a pod other than uid whose priority is
// at least priority, with a note for the pod kept off it, or "".
func (h *holding) held(uid types.UID, priority int, now time.Time) (node, note string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pod == "" || h.pod == uid || priority > h.priority {
		return "", ""
	}
	return h.node, fmt.Sprintf("node %s is held for GPU pod %s, pending for %s (reserveAfter)", h.node, h.key, now.Sub(h.since).Round(time.Second))
}

// release forgets the hold of pod uid (placed, or gone).
func (h *holding) release(uid types.UID) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pod != uid || uid == "" {
		return false
	}
	h.pod, h.node = "", ""
	return true
}

// starving considers an unschedulable pod: past reserveAfter and with no
// hold in force (or a hold of a lower priority), it nominates a node for
// it — of the nodes that could hold its claims were they empty, the one
// with the fewest claims now, so the soonest free — and holds it.
func (p *Plugin) starving(pod *v1.Pod, c *cycle, now time.Time) {
	if p.reserveAfter <= 0 || len(c.acs) == 0 {
		return
	}
	if wait := p.reserveAfter - now.Sub(pod.CreationTimestamp.Time); wait > 0 {
		// Not yet: try the pod again when it will have waited long
		// enough, whether or not anything else happens meanwhile (a
		// stream of pods that fit would otherwise never retry it).
		p.retryAt(pod, wait)
		return
	}
	h := &p.hold
	h.mu.Lock()
	if h.pod != "" && (h.pod == pod.UID || h.priority >= c.priority) {
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	infos, err := p.fh.SnapshotSharedLister().NodeInfos().List()
	if err != nil {
		return
	}
	type cand struct {
		name   string
		claims int
	}
	var cands []cand
	for _, ni := range infos {
		node := ni.Node()
		if node == nil {
			continue
		}
		if n, ok := p.fitsAlone(c, node); ok {
			cands = append(cands, cand{node.Name, n})
		}
	}
	if len(cands) == 0 {
		return // it fits nowhere even empty: holding a node would help nobody
	}
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].claims != cands[j].claims {
			return cands[i].claims < cands[j].claims
		}
		return cands[i].name < cands[j].name
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pod != "" && h.priority >= c.priority {
		return
	}
	h.pod, h.key, h.since, h.priority, h.node = pod.UID, pod.Namespace+"/"+pod.Name, pod.CreationTimestamp.Time, c.priority, cands[0].name
}

// fitsAlone says whether the cycle's claims fit a node's GPUs with
// nothing else on them, and how many claims the node holds now.
func (p *Plugin) fitsAlone(c *cycle, node *v1.Node) (int, bool) {
	l := p.led
	l.mu.Lock()
	n := l.node(node.Name)
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
	for _, ac := range c.acs {
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

// holderGone releases the hold of a pod that was deleted or bound
// meanwhile (by this scheduler's Reserve, or another way).
func (p *Plugin) holderGone() {
	h := &p.hold
	h.mu.Lock()
	uid, key := h.pod, h.key
	h.mu.Unlock()
	if uid == "" || p.pods == nil {
		return
	}
	ns, name, _ := strings.Cut(key, "/")
	pod, err := p.pods.Pods(ns).Get(name)
	if (err != nil && apierrors.IsNotFound(err)) || (err == nil && (pod.UID != uid || pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil)) {
		if h.release(uid) {
			p.led.freed()
		}
	}
}

// retryAt moves pod back to the active queue after d, once per pod.
func (p *Plugin) retryAt(pod *v1.Pod, d time.Duration) {
	p.hold.mu.Lock()
	if p.hold.timers == nil {
		p.hold.timers = map[types.UID]bool{}
	}
	if p.hold.timers[pod.UID] {
		p.hold.mu.Unlock()
		return
	}
	p.hold.timers[pod.UID] = true
	p.hold.mu.Unlock()
	time.AfterFunc(d+100*time.Millisecond, func() {
		p.hold.mu.Lock()
		delete(p.hold.timers, pod.UID)
		p.hold.mu.Unlock()
		activator(p.fh)(map[string]*v1.Pod{pod.Namespace + "/" + pod.Name: pod})
	})
}
