package schedcore

import (
	"fmt"
	"strconv"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuslice/gpuslice/internal/admit"
)

// Per-namespace GPU quotas are annotations on the Namespace. Not a
// ResourceQuota: in Kubernetes 1.36 a ResourceQuota counts a DeviceClass's
// devices (`<class>.deviceclass.resource.k8s.io/devices`), not the memory
// or compute a claim consumes from a shared device, so a quota of "40Gi of
// GPU memory" cannot be written as one; and not a CRD of our own, which
// would add an API, its RBAC and a controller for two numbers.
const (
	// QuotaMemoryAnnotation is the most GPU memory the namespace's claims
	// may hold together, a quantity ("40Gi"). A whole GPU or MIG instance
	// holds all its memory, a share on a shared GPU what it consumed.
	QuotaMemoryAnnotation = "gpuslice.dev/gpu-memory-quota"
	// QuotaComputeAnnotation is the most compute they may hold, in percent
	// of one GPU ("250": two and a half GPUs' worth).
	QuotaComputeAnnotation = "gpuslice.dev/gpu-compute-quota"
)

// QuotaOf reads a namespace's quota annotations: nil when it has none; a
// limit it does not set is admit.NoLimit, and "0" allows nothing.
func QuotaOf(ns *v1.Namespace) (*admit.Quota, error) {
	mem, hasMem := ns.Annotations[QuotaMemoryAnnotation]
	comp, hasComp := ns.Annotations[QuotaComputeAnnotation]
	if !hasMem && !hasComp {
		return nil, nil
	}
	q := &admit.Quota{Scope: admit.NamespaceScope, Name: ns.Name, MemMiB: admit.NoLimit, Compute: admit.NoLimit}
	if hasMem {
		v, err := resource.ParseQuantity(mem)
		if err != nil || v.Sign() < 0 {
			return nil, fmt.Errorf("namespace %s: annotation %s %q: want a quantity of GPU memory such as 40Gi", ns.Name, QuotaMemoryAnnotation, mem)
		}
		q.MemMiB = v.Value() >> 20
	}
	if hasComp {
		v, err := strconv.Atoi(comp)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("namespace %s: annotation %s %q: want a whole number of percent of a GPU such as 250", ns.Name, QuotaComputeAnnotation, comp)
		}
		q.Compute = v
	}
	return q, nil
}

// usageLocked sums what a namespace's claims hold — allocated ones as the
// API server records them and this scheduler's in flight — leaving out
// the claims in skip (a preemption simulation). Caller holds l.mu.
func (l *Ledger) usageLocked(ns string, skip map[types.UID]bool) admit.Use {
	var u admit.Use
	for uid, e := range l.claims {
		if e.namespace != ns || skip[uid] {
			continue
		}
		if e.a == nil && e.rc != nil {
			n := l.node(e.node)
			if nd, err := l.devices(n); err == nil {
				_, _ = l.allocation(e, nd) // sets held
			}
		}
		u = u.Add(e.held)
	}
	return u
}
