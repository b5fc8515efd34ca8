package packing

import (
	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
)

// Item is one device's demand in a vector bin-packing instance: memory in
// MiB and compute in 1/(100·C) of a GPU (C the model's MIG compute slices,
// 1 without MIG; so percent on a model without MIG).
type Item struct{ Mem, Comp int64 }

// Group is an isolation group of claims on one GPU model (see
// isolationBound): devices are never shared across groups. Alone groups
// hold one claim that takes its device by itself.
type Group struct {
	// Key is the tenant, PoolGroup for tenants whose claims all chose
	// isolation none, or the claim's name for an alone group.
	Key   string
	Alone bool
	// Items are the demands of the group's claims, in input order, and
	// Claims their indexes in the input.
	Items  []Item
	Claims []int

	mem, comp       int64
	slices, cslices int64
	exact           bool
}

// PoolGroup is the Key of the group of tenants whose claims all chose
// isolation none (they may share devices with each other).
const PoolGroup = "\x00pool"

// IsolationGroups splits claims (one device each) on model m into
// isolation groups: each tenant's tenant-isolated claims; every claim
// that holds its device alone; and the claims with isolation none of
// tenants that only have such claims. Isolation-none claims of a tenant
// that also has other claims belong to no group (they may fill their own
// tenant's devices or the pool's), so bounds over the groups hold for the
// whole set.
func IsolationGroups(m *catalog.GPU, claims []alloc.Claim) []Group {
	var gs []Group
	byTenant := map[string]int{}
	strict := map[string]bool{} // tenants with a claim that is not isolation none
	for i := range claims {
		if claims[i].Isolation != alloc.IsolationNone {
			strict[claims[i].Tenant] = true
		}
	}
	for i := range claims {
		c := &claims[i]
		d := claimDemand(m, c)
		key := c.Tenant
		if c.Isolation == alloc.IsolationNone && !d.alone {
			if strict[c.Tenant] {
				continue
			}
			key = PoolGroup
		}
		it := Item{Mem: d.mem, Comp: d.comp}
		if d.alone {
			gs = append(gs, Group{Key: c.Name, Alone: true, Items: []Item{it}, Claims: []int{i},
				mem: d.mem, comp: d.comp, slices: d.slices, cslices: d.cslices, exact: d.slices > 0})
			continue
		}
		gi, ok := byTenant[key]
		if !ok {
			gi = len(gs)
			byTenant[key] = gi
			gs = append(gs, Group{Key: key})
		}
		g := &gs[gi]
		g.mem += d.mem
		g.comp += d.comp
		g.Items = append(g.Items, it)
		g.Claims = append(g.Claims, i)
	}
	return gs
}

// Bound is the fewest whole GPUs of model m (MIG off) the group's
// devices need: one for an alone group; else the most of the volume
// bounds (memory, compute), Martello and Toth's L2 on memory and on
// compute, and 1.
func (g *Group) Bound(m *catalog.GPU) int {
	if g.Alone {
		return 1
	}
	_, cs, _ := geometryOf(m)
	mems := make([]int64, len(g.Items))
	comps := make([]int64, len(g.Items))
	for i, it := range g.Items {
		mems[i], comps[i] = min(it.Mem, m.MemoryMiB), min(it.Comp, 100*cs)
	}
	return int(max(ceilDiv(g.mem, m.MemoryMiB), binsL2(mems, m.MemoryMiB),
		ceilDiv(g.comp, 100*cs), binsL2(comps, 100*cs), 1))
}
