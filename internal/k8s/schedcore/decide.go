package schedcore

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuslice/gpuslice/internal/admit"
	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/k8s/draalloc"
)

// Pod is a pod's gpuslice claims as PreFilter read them: what Filter and
// Reserve decide on each node. It does not change once Prepare has run
// (the clones of a scheduling cycle share it).
type Pod struct {
	Namespace string
	Quota     *admit.Quota // the namespace's GPU quota (nil: none)
	Priority  int
	Claims    []*resourceapi.ResourceClaim // the pod's gpuslice claims
	ToAlloc   []int                        // indices into Claims still to allocate
	Acs       []*draalloc.Claim            // translated, for ToAlloc
	Classes   map[string]*resourceapi.DeviceClass

	// key is the shape of Acs (names left out), for the ledger's
	// verdicts, and id its number there; shareable says no selector
	// reads a GPU uuid.
	key       string
	id        uint64
	shareable bool
	// used is what the namespace's claims held when Prepare ran
	// (quota); Reserve counts again.
	used admit.Use
}

// NodeResult is how a pod's claims fit a node, for the score.
type NodeResult struct {
	as []*alloc.Allocation
	// pref is the stock scheduler's score of the subrequests chosen
	// (draalloc.SubrequestScore summed over the claims).
	pref  int64
	share float64 // GPU share newly held
	used  float64 // share of the node's GPUs in use after
}

// Reserved is a claim Reserve allocated, with the allocation to write.
type Reserved struct {
	Claim  *resourceapi.ResourceClaim
	Result *resourceapi.AllocationResult
}

// Prepare keys the pod's claims by shape for the kept verdicts and, under
// a quota, reads what the namespace holds. A prioritized list under a
// namespace quota may take a later subrequest because of the quota, which
// a kept answer does not know: such pods are decided on every node.
func (l *Ledger) Prepare(p *Pod) {
	p.key, p.shareable = shapeKey(p.Acs)
	l.mu.Lock()
	defer l.mu.Unlock()
	if p.key != "" && (p.Quota == nil || !hasChoices(p.Acs)) {
		p.id = l.shapeID(p.key)
	}
	if p.Quota != nil {
		p.used = l.usageLocked(p.Namespace, nil)
	}
}

// Filter decides the pod's claims on one node alone (a State of the
// node's devices and the claims holding them), leaving out the claims in
// skip (a preemption simulation): admit.Admit with the result for the
// score, admit.Unfit with the allocator's reason for the node
// ("insufficient GPU memory", "tenant isolation", ...), or *admit.OverQuota.
// A kept verdict answers when the node has not changed since claims of
// this shape were decided on it (or, empty, on any empty node of its
// shape); the quota is checked on it per pod.
func (l *Ledger) Filter(p *Pod, node string, labels map[string]string, skip map[types.UID]bool) (*NodeResult, admit.Outcome, error) {
	if len(skip) == 0 && p.id != 0 {
		v, err := l.verdict(p, node, labels)
		if err != nil {
			return nil, nil, err
		}
		if v.reason != "" {
			return nil, admit.Unfit{Why: v.reason}, nil
		}
		if p.Quota != nil {
			if o := p.Quota.Check(p.used, v.held); o != nil {
				return nil, o, nil
			}
		}
		return &NodeResult{share: v.share, used: v.used, pref: v.pref}, admit.Admit{}, nil
	}
	r, _, out, err := l.decide(p, node, labels, skip, false)
	return r, out, err
}

// Reserve decides the pod's claims again on the node's current State and
// applies them to it, recording them in flight: admit.Admit with the
// allocations to write, or why they no longer fit.
func (l *Ledger) Reserve(p *Pod, node string, labels map[string]string) ([]Reserved, admit.Outcome, error) {
	_, res, out, err := l.decide(p, node, labels, nil, true)
	return res, out, err
}

// verdict is Filter's answer for the pod's claims on a node: the
// ledger's, when the node has not changed since claims of this shape were
// decided on it (or, empty, on any empty node of its shape), else the
// allocator's (decide), kept for the next pod of the shape. Most nodes
// of a big cluster do not change between two pods, so most Filter calls
// are a map lookup.
func (l *Ledger) verdict(p *Pod, node string, labels map[string]string) (*verdict, error) {
	l.mu.Lock()
	n := l.node(node)
	if labels != nil && !maps.Equal(labels, n.labels) {
		n.labels = maps.Clone(labels)
		l.stale(node, true)
	}
	nd, err := l.devices(n)
	if err != nil {
		l.mu.Unlock()
		return nil, fmt.Errorf("node %s: %w", node, err)
	}
	v, version := l.cachedVerdict(n, nd, p.id, p.shareable)
	l.mu.Unlock()
	if v != nil {
		return v, nil
	}
	// the quota is checked per pod, not kept
	free := &Pod{Namespace: p.Namespace, Claims: p.Claims, ToAlloc: p.ToAlloc, Acs: p.Acs, Classes: p.Classes}
	r, _, out, err := l.decide(free, node, labels, nil, false)
	if err != nil {
		return nil, err
	}
	v = &verdict{reason: out.Reason()}
	if r != nil {
		v.share, v.used, v.pref = r.share, r.used, r.pref
		v.held = admit.GivenAll(r.as)
	}
	l.mu.Lock()
	l.keepVerdict(n, nd, version, p.id, p.shareable, v)
	l.mu.Unlock()
	return v, nil
}

// decide allocates the pod's claims on one node; commit applies them to
// the node's State and records them in flight (Reserve). When they do not
// fit it says why (admit.Unfit, *admit.OverQuota).
func (l *Ledger) decide(p *Pod, node string, labels map[string]string, skip map[types.UID]bool, commit bool) (*NodeResult, []Reserved, admit.Outcome, error) {
	l.mu.Lock()
	var used admit.Use
	if p.Quota != nil {
		used = l.usageLocked(p.Namespace, skip)
	}
	n, st, err := l.state(node, labels, skip)
	if !commit {
		l.mu.Unlock()
	}
	defer func() {
		n.mu.Unlock()
		if commit {
			l.mu.Unlock()
		}
	}()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("node %s: %w", node, err)
	}
	if len(n.devs.Node.GPUs) == 0 {
		return nil, nil, admit.Unfit{Why: "no gpuslice GPUs"}, nil
	}
	work := st
	if len(p.Acs) > 1 && !commit {
		work = st.Clone()
	}
	before := st.GPUsUsed()
	r := &NodeResult{}
	var applied []string
	fail := func(out admit.Outcome) (*NodeResult, []Reserved, admit.Outcome, error) {
		if work == st {
			for _, name := range applied {
				_ = st.Release(name)
			}
			if len(applied) > 0 {
				n.st = nil // Release leaves idle MIG instances: rebuild
				l.changed(n)
			}
		}
		return nil, nil, out, nil
	}
	// over is the quota's last refusal: when the allocator's reason is
	// its text, the quota is why, and the outcome says so.
	var over *admit.OverQuota
	unfit := func(why string) (*NodeResult, []Reserved, admit.Outcome, error) {
		if over != nil && why == over.Reason() {
			return fail(over)
		}
		return fail(admit.Unfit{Why: why})
	}
	for i, ac := range p.Acs {
		// A quota is one of the things a prioritized list falls back
		// on: a subrequest the namespace's quota cannot hold gives way
		// to the next.
		var accept func(*alloc.Allocation) string
		if p.Quota != nil {
			accept = func(a *alloc.Allocation) string {
				if o := p.Quota.Check(used, admit.GivenAll(append(slices.Clone(r.as), a))); o != nil {
					over = o
					return o.Reason()
				}
				return ""
			}
		}
		a, err := ac.Allocate(work, n.devs, accept)
		if err != nil {
			var nf *alloc.NoFitError
			var ce *draalloc.ChoiceError
			switch {
			case errors.As(err, &ce):
				return unfit(ce.Reason(node))
			case errors.As(err, &nf):
				return unfit(nf.PerNode[node])
			}
			return unfit(err.Error())
		}
		r.pref += draalloc.SubrequestScore(p.Claims[p.ToAlloc[i]], a)
		r.share += newlyHeld(work, a)
		if commit || len(p.Acs) > 1 {
			if err := work.Apply(a); err != nil {
				return unfit(err.Error())
			}
			applied = append(applied, a.Claim)
		}
		r.as = append(r.as, a)
	}
	if p.Quota != nil {
		if o := p.Quota.Check(used, admit.GivenAll(r.as)); o != nil {
			return fail(o)
		}
	}
	var res []Reserved
	if commit {
		for i, a := range r.as {
			rc := p.Claims[p.ToAlloc[i]]
			ar, err := draalloc.ToResult(a, n.devs, rc, p.Classes)
			if err != nil {
				return unfit(err.Error())
			}
			l.reserve(rc.UID, rc.Namespace, a, ar)
			res = append(res, Reserved{Claim: rc, Result: ar})
		}
	}
	gpus := float64(len(n.devs.Node.GPUs))
	r.used = float64(before)/gpus + r.share/gpus
	return r, res, admit.Admit{}, nil
}

// newlyHeld is the GPU share an allocation newly holds: a device it joins
// costs nothing; a device it opens costs the larger of its memory and
// compute share of the GPU (a whole GPU: 1).
func newlyHeld(st *alloc.State, a *alloc.Allocation) float64 {
	var share float64
	for _, d := range a.Devices {
		if joined(st, d) {
			continue
		}
		switch {
		case d.Mode == alloc.Exclusive:
			share++
		default:
			total := gpuMemory(st, d.GPU)
			if total > 0 {
				share += max(float64(d.MemoryMiB)/float64(total), float64(d.ComputePercent)/100)
			}
		}
	}
	return share
}

// joined reports whether another allocation already uses the device.
func joined(st *alloc.State, d alloc.Assigned) bool {
	for _, o := range st.Allocations() {
		for _, od := range o.Devices {
			if od.Device == d.Device {
				return true
			}
		}
	}
	return false
}

func gpuMemory(st *alloc.State, uuid string) int64 {
	for _, n := range st.Fleet().Nodes {
		for _, g := range n.GPUs {
			if g.UUID == uuid {
				m, err := catalog.Default().GPU(g.Model)
				if err == nil {
					return m.MemoryMiB
				}
			}
		}
	}
	return 0
}

// shapeKey is the claims without their names, as Filter's verdicts are
// keyed: claims of one shape get one answer on a node. shareable says no
// selector reads a GPU's uuid (the answer on an empty node then holds for
// every empty node of its shape).
func shapeKey(acs []*draalloc.Claim) (string, bool) {
	keys := make([]string, len(acs))
	shareable := true
	for i, ac := range acs {
		k, readsUUID, _ := ac.Shape()
		if k == "" {
			return "", false
		}
		keys[i] = k
		shareable = shareable && !readsUUID
	}
	return strings.Join(keys, "\n"), shareable
}

// hasChoices says a claim has a prioritized list.
func hasChoices(acs []*draalloc.Claim) bool {
	for _, ac := range acs {
		if _, _, choices := ac.Shape(); choices {
			return true
		}
	}
	return false
}
