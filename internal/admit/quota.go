package admit

import "fmt"

// Scope is whose quota it is, which decides how its outcomes read: a
// tenant of gpuslice serve or a namespace under gpuslice-scheduler.
type Scope int

const (
	// TenantScope is a gpuslice serve tenant (api.Tenant's quotas).
	TenantScope Scope = iota
	// NamespaceScope is a Kubernetes namespace (its gpuslice.dev quota
	// annotations).
	NamespaceScope
)

// NoLimit is a Quota field with no limit.
const NoLimit = -1

// Quota is the most GPU memory and compute a tenant's claims may hold
// together; a negative field (NoLimit) has no limit, 0 allows nothing.
type Quota struct {
	Scope   Scope
	Name    string // the tenant or namespace
	MemMiB  int64
	Compute int
}

// TenantQuota is a serve tenant's quota, where 0 means unlimited.
func TenantQuota(name string, memMiB int64, compute int) Quota {
	q := Quota{Scope: TenantScope, Name: name, MemMiB: memMiB, Compute: compute}
	if q.MemMiB <= 0 {
		q.MemMiB = NoLimit
	}
	if q.Compute <= 0 {
		q.Compute = NoLimit
	}
	return q
}

// Resource names what a quota limits.
type Resource string

// The resources a quota limits.
const (
	Memory  Resource = "memory"
	Compute Resource = "compute"
)

// Check says whether adding asked to used stays within the quota: nil
// when it does, else the first resource it breaks (memory before
// compute). A resource the claim does not take is never over the quota,
// even when what is used already is (a quota lowered, a queue charged
// more than it was given): taking nothing of it cannot break it.
func (q Quota) Check(used, asked Use) *OverQuota {
	if q.MemMiB >= 0 && asked.MemMiB > 0 && used.MemMiB+asked.MemMiB > q.MemMiB {
		return &OverQuota{Scope: q.Scope, Name: q.Name, Resource: Memory, Used: used.MemMiB, Limit: q.MemMiB, Asked: asked.MemMiB}
	}
	if q.Compute >= 0 && asked.Compute > 0 && used.Compute+asked.Compute > q.Compute {
		return &OverQuota{Scope: q.Scope, Name: q.Name, Resource: Compute, Used: int64(used.Compute), Limit: int64(q.Compute), Asked: int64(asked.Compute)}
	}
	return nil
}

// OverQuota: the claim would take its tenant past a quota. Memory in MiB,
// compute in percent of a GPU.
type OverQuota struct {
	Scope    Scope
	Name     string
	Resource Resource
	Used     int64 // what the tenant's claims hold (are charged) now
	Limit    int64
	Asked    int64 // what this claim would add
	// Given is what the allocation found gives, when the claim was placed
	// and only the quota refuses it (nil otherwise): it may be more than
	// was asked (a whole GPU for an exclusive claim naming no memory).
	Given *Use
}

// Reason is the refusal as the tenant reads it.
func (o *OverQuota) Reason() string {
	var s string
	switch {
	case o.Scope == NamespaceScope && o.Resource == Memory:
		s = fmt.Sprintf("namespace %s GPU memory quota %s: %s in use, the pod's claims need %s",
			o.Name, mibString(o.Limit), mibString(o.Used), mibString(o.Asked))
	case o.Scope == NamespaceScope:
		s = fmt.Sprintf("namespace %s GPU compute quota %d%%: %d%% in use, the pod's claims need %d%%", o.Name, o.Limit, o.Used, o.Asked)
	case o.Resource == Memory:
		s = fmt.Sprintf("quota: tenant %s holds %d MiB of GPU memory and needs %d more; its quota is %d MiB", o.Name, o.Used, o.Asked, o.Limit)
	default:
		s = fmt.Sprintf("quota: tenant %s holds %d%% compute and needs %d%% more; its quota is %d%%", o.Name, o.Used, o.Asked, o.Limit)
	}
	if o.Given != nil {
		s += fmt.Sprintf(" (the allocation found gives %s; ask for less, or for a shared mode)", DescribeUse(*o.Given))
	}
	return s
}

// DescribeUse says "N MiB and P% compute".
func DescribeUse(u Use) string {
	return fmt.Sprintf("%d MiB and %d%% compute", u.MemMiB, u.Compute)
}

// mibString is MiB as a quantity: whole GiB as "Gi", else "Mi".
func mibString(m int64) string {
	if m%1024 == 0 {
		return fmt.Sprintf("%dGi", m/1024)
	}
	return fmt.Sprintf("%dMi", m)
}
