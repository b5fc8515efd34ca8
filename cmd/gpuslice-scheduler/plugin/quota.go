package plugin

import (
	"fmt"
	"strconv"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuslice/gpuslice/internal/alloc"
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

// quota is a namespace's limits (negative: none).
type quota struct {
	memMiB  int64
	compute int
}

// quotaOf reads a namespace's quota annotations; nil when it has none.
func quotaOf(ns *v1.Namespace) (*quota, error) {
	mem, hasMem := ns.Annotations[QuotaMemoryAnnotation]
	comp, hasComp := ns.Annotations[QuotaComputeAnnotation]
	if !hasMem && !hasComp {
		return nil, nil
	}
	q := &quota{memMiB: -1, compute: -1}
	if hasMem {
		v, err := resource.ParseQuantity(mem)
		if err != nil || v.Sign() < 0 {
			return nil, fmt.Errorf("namespace %s: annotation %s %q: want a quantity of GPU memory such as 40Gi", ns.Name, QuotaMemoryAnnotation, mem)
		}
		q.memMiB = v.Value() >> 20
	}
	if hasComp {
		v, err := strconv.Atoi(comp)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("namespace %s: annotation %s %q: want a whole number of percent of a GPU such as 250", ns.Name, QuotaComputeAnnotation, comp)
		}
		q.compute = v
	}
	return q, nil
}

// exceeded says why adding (mem, comp) to what the namespace holds
// (usedMem, usedComp) breaks the quota, or "".
func (q *quota) exceeded(ns string, usedMem int64, usedComp int, mem int64, comp int) string {
	if q.memMiB >= 0 && usedMem+mem > q.memMiB {
		return fmt.Sprintf("namespace %s GPU memory quota %s: %s in use, the pod's claims need %s",
			ns, mibString(q.memMiB), mibString(usedMem), mibString(mem))
	}
	if q.compute >= 0 && usedComp+comp > q.compute {
		return fmt.Sprintf("namespace %s GPU compute quota %d%%: %d%% in use, the pod's claims need %d%%", ns, q.compute, usedComp, comp)
	}
	return ""
}

func mibString(m int64) string {
	if m%1024 == 0 {
		return fmt.Sprintf("%dGi", m/1024)
	}
	return fmt.Sprintf("%dMi", m)
}

// usageLocked sums what a namespace's claims hold — allocated ones as the
// API server records them and this scheduler's in flight — leaving out
// the claims in skip (a preemption simulation). Caller holds l.mu.
func (l *ledger) usageLocked(ns string, skip map[types.UID]bool) (memMiB int64, compute int) {
	for uid, e := range l.claims {
		if e.namespace != ns || skip[uid] {
			continue
		}
		if e.a == nil && e.rc != nil {
			n := l.node(e.node)
			if nd, err := l.devices(n); err == nil {
				_, _ = l.allocation(e, nd) // sets memMiB and compute
			}
		}
		memMiB += e.memMiB
		compute += e.compute
	}
	return memMiB, compute
}

// holdsAll is what allocations hold together.
func holdsAll(as []*alloc.Allocation) (int64, int) {
	var m int64
	var c int
	for _, a := range as {
		am, ac := holds(a)
		m, c = m+am, c+ac
	}
	return m, c
}
