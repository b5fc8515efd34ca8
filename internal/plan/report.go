package plan

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/model"
)

// fill describes every pool's GPUs from the final state (its nodes in keep,
// or all of them when keep is nil), and the cost. One pass over the
// allocations and one over the fleet.
func (p *Plan) fill(s *model.Spec, pools []*pool, state *alloc.State, cat *catalog.Catalog, keep map[string]bool) {
	claimsOn := map[string][]string{} // device id -> claims
	for _, a := range state.Allocations() {
		for _, d := range a.Devices {
			claimsOn[d.Device] = append(claimsOn[d.Device], a.Claim)
		}
	}
	for _, cs := range claimsOn {
		sort.Strings(cs)
	}
	fleet := state.Fleet()
	byPool := map[string]*PoolPlan{}
	for _, pl := range pools {
		pp := PoolPlan{Name: pl.spec.Name, GPU: pl.gpu.ID, GPUsPerNode: pl.per, Nodes: pl.nodes, Labels: pl.spec.Labels, FixedBy: pl.spec.FixedBy}
		if pl.it != nil {
			pp.InstanceType = pl.it.Name
			if pl.it.Price != nil {
				v := pl.it.Price.USDPerHour
				pp.PricePerNodeHour = &v
			}
		}
		p.Pools = append(p.Pools, pp)
	}
	for i := range p.Pools {
		byPool[p.Pools[i].Name] = &p.Pools[i]
	}
	for _, n := range fleet.Nodes {
		pp := byPool[n.Labels[PoolLabel]]
		if pp == nil || (keep != nil && !keep[n.Name]) {
			continue
		}
		for _, g := range n.GPUs {
			gp := GPUPlan{Node: n.Name, Index: g.Index, UUID: g.UUID, MIG: g.MIGEnabled}
			used := false
			if g.MIGEnabled {
				for _, in := range g.Instances {
					cs := claimsOn[in.UUID]
					used = used || len(cs) > 0
					gp.Instances = append(gp.Instances, InstancePlan{Profile: in.Profile, Start: in.Start, Sharing: in.Sharing, Claims: cs})
				}
			} else {
				gp.Sharing, gp.Claims = g.Sharing, claimsOn[g.UUID]
				used = len(gp.Claims) > 0
			}
			if used {
				pp.GPUsUsed++
			}
			pp.GPUs = append(pp.GPUs, gp)
		}
	}
	p.cost(s, pools)
}

// cost compares the plan with dedicated whole GPUs: every device of every
// replica gets a whole GPU to itself, of the cheapest pool (per GPU-hour)
// whose GPU holds what the device asks for — the workload's own pool when
// it names one — and nodes are bought whole. The baseline does not depend
// on where gpuslice placed the replicas.
func (p *Plan) cost(s *model.Spec, pools []*pool) {
	byName := map[string]*model.Workload{}
	for i := range s.Workloads {
		byName[s.Workloads[i].Name] = &s.Workloads[i]
	}
	dedicated := map[string]int{}
	for _, pl := range p.Placements {
		wl := byName[pl.Workload]
		for _, d := range pl.Devices {
			dedicated[dedicatedPool(wl, d, pl.Pool, pools)]++
		}
	}
	p.Cost.Known = true
	var notes []string
	for i, pp := range p.Pools {
		pl := pools[i]
		p.Cost.GPUs += pp.Nodes * pp.GPUsPerNode
		p.Cost.DedicatedGPUs += dedicated[pp.Name]
		if pp.PricePerNodeHour == nil {
			if pp.Nodes > 0 || dedicated[pp.Name] > 0 {
				p.Cost.Known = false
				notes = append(notes, fmt.Sprintf("%s: no known price for %s", pp.Name, orModel(pp)))
			}
			continue
		}
		p.Cost.PerHour += float64(pp.Nodes) * *pp.PricePerNodeHour
		nodes := int(math.Ceil(float64(dedicated[pp.Name]) / float64(pp.GPUsPerNode)))
		p.Cost.DedicatedPerHour += float64(nodes) * *pp.PricePerNodeHour
		pr := pl.it.Price
		notes = append(notes, fmt.Sprintf("%s: %s $%.4f/h (%s, %s, %s)", pp.Name, pl.it.Name, pr.USDPerHour, orNA(pr.Region), orNA(pr.Date), pr.Source))
	}
	p.Cost.PriceNote = strings.Join(notes, "; ")
}

// dedicatedPool is the pool whose whole GPU a device would get in the
// dedicated baseline: the workload's pool if it names one, else the
// cheapest priced pool per GPU-hour whose GPU has the memory the request
// asks for (a MIG profile's memory when it names one); placed when no
// priced pool fits.
func dedicatedPool(wl *model.Workload, d alloc.Assigned, placed string, pools []*pool) string {
	if wl == nil {
		return placed
	}
	if wl.Pool != "" {
		return wl.Pool
	}
	var need int64
	for _, r := range wl.Requests {
		if r.Name == d.Request {
			need = r.MemoryMiB
			if r.Profile != "" {
				need = max(need, d.MemoryMiB)
			}
		}
	}
	best, bestPrice := placed, math.Inf(1)
	for _, pl := range pools {
		if pl.it == nil || pl.it.Price == nil || pl.gpu.MemoryMiB < need || pl.per <= 0 {
			continue
		}
		if perGPU := pl.it.Price.USDPerHour / float64(pl.per); perGPU < bestPrice {
			best, bestPrice = pl.spec.Name, perGPU
		}
	}
	return best
}

func orModel(pp PoolPlan) string {
	if pp.InstanceType != "" {
		return pp.InstanceType
	}
	return pp.GPU + " nodes"
}

func orNA(s string) string {
	if s == "" {
		return "n/a"
	}
	return s
}

// warn adds what a user should know before running the plan. It makes one
// pass over the placements and one over the GPUs.
func (p *Plan) warn(s *model.Spec, pools []*pool, state *alloc.State) {
	tenantOf := make(map[string]string, len(p.Placements)) // claim -> tenant
	type use struct {
		mem  int64
		comp int
	}
	byTenant := map[string]*use{}
	for _, pl := range p.Placements {
		tenantOf[pl.Workload+"-"+strconv.Itoa(pl.Replica)] = pl.Tenant
		u := byTenant[pl.Tenant]
		if u == nil {
			u = &use{}
			byTenant[pl.Tenant] = u
		}
		for _, d := range pl.Devices {
			u.mem += d.MemoryMiB
			u.comp += d.ComputePercent
		}
	}
	tsClaims := map[string]bool{}
	for _, pl := range p.Placements {
		for _, d := range pl.Devices {
			if d.Mode == alloc.TimeSlice {
				tsClaims[pl.Workload] = true
			}
		}
	}
	if len(tsClaims) > 0 {
		p.Warnings = append(p.Warnings, fmt.Sprintf("time-slicing has no memory isolation: NVIDIA does not enforce the memory of %s; gpuslice accounts it and its agent's watchdog enforces it (warn or kill)", list(tsClaims)))
	}
	for _, pp := range p.Pools {
		for _, g := range pp.GPUs {
			for _, in := range append([]InstancePlan{{Claims: g.Claims}}, g.Instances...) {
				if tenants := tenantsOf(in.Claims, tenantOf); len(tenants) > 1 {
					p.Warnings = append(p.Warnings, fmt.Sprintf("tenants %s share a device on %s GPU %d (they chose isolation none)", strings.Join(tenants, ", "), g.Node, g.Index))
				}
			}
		}
		if pp.Nodes > 0 && pp.GPUsUsed == pp.Nodes*pp.GPUsPerNode {
			p.Warnings = append(p.Warnings, fmt.Sprintf("pool %s has no headroom: all %d GPUs hold work; one more replica needs another node", pp.Name, pp.GPUsUsed))
		}
		if idle := pp.Nodes*pp.GPUsPerNode - pp.GPUsUsed; pp.Nodes > 0 && idle >= pp.GPUsPerNode {
			p.Warnings = append(p.Warnings, fmt.Sprintf("pool %s: %d GPUs stay idle (whole nodes come with %d GPUs)", pp.Name, idle, pp.GPUsPerNode))
		}
	}
	for _, t := range s.Tenants {
		var mem int64
		var comp int
		if u := byTenant[t.Name]; u != nil {
			mem, comp = u.mem, u.comp
		}
		if t.MemoryMiB > 0 && mem > t.MemoryMiB {
			p.Warnings = append(p.Warnings, fmt.Sprintf("tenant %s needs %d MiB of GPU memory, over its quota of %d MiB", t.Name, mem, t.MemoryMiB))
		}
		if t.ComputePercent > 0 && comp > t.ComputePercent {
			p.Warnings = append(p.Warnings, fmt.Sprintf("tenant %s needs %d%% compute, over its quota of %d%%", t.Name, comp, t.ComputePercent))
		}
	}
	if gates := DRAFeatureGates(p); len(gates) > 0 {
		p.Warnings = append(p.Warnings, fmt.Sprintf("rendered as DRA claims (render --target dra), the time-sliced and MPS devices need NVIDIA's DRA driver feature gate(s) %s: alpha and off in its default Helm values (checked against v25.12.0), and without them the driver rejects the claims' sharing configs", strings.Join(gates, " and ")))
	}
	if len(p.Unplaced) > 0 {
		p.Warnings = append(p.Warnings, fmt.Sprintf("%d replica(s) fit nowhere (see unplaced)", len(p.Unplaced)))
	}
}

// tenantsOf lists the tenants of claims, sorted, each once.
func tenantsOf(claims []string, tenantOf map[string]string) []string {
	var out []string
	for _, c := range claims {
		if t, ok := tenantOf[c]; ok && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	sort.Strings(out)
	return out
}

func list(m map[string]bool) string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// DRAFeatureGates names the NVIDIA DRA driver feature gates the plan's
// shared devices need as DRA claims: TimeSlicingSettings for time-slicing,
// MPSSupport for MPS (render's dra target says the same in its header).
func DRAFeatureGates(p *Plan) []string {
	var ts, mps bool
	for _, pl := range p.Placements {
		for _, d := range pl.Devices {
			ts = ts || d.Mode == alloc.TimeSlice
			mps = mps || d.Mode == alloc.MPS
		}
	}
	var out []string
	if ts {
		out = append(out, "TimeSlicingSettings")
	}
	if mps {
		out = append(out, "MPSSupport")
	}
	return out
}
