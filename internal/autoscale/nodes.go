package autoscale

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/model"
	"github.com/gpuslice/gpuslice/internal/plan"
)

// DefaultEmptyTTL is how long a node stays empty before it is removed
// when its pool sets no TTL.
const DefaultEmptyTTL = 5 * time.Minute

// NodePool is a pool the autoscaler may grow or shrink.
type NodePool struct {
	// Pool is how its nodes are set up (instance type, sharing, MIG);
	// Pool.MaxNodes bounds it (0: no bound).
	Pool model.Pool
	// Nodes is how many nodes it has now.
	Nodes int
	// Booting is how many nodes were asked of the provider and have not
	// joined yet: pending claims are placed on them before any new node
	// is bought, and they count toward MinNodes and MaxNodes.
	Booting int
	// MinNodes (compose minimumNodesInPool) are kept warm, empty or not.
	MinNodes int
	// EmptyTTL is how long a node stays empty before it goes
	// (0: DefaultEmptyTTL).
	EmptyTTL time.Duration
}

// PoolNode is one node of a pool as the autoscaler sees it.
type PoolNode struct {
	Name, Pool string
	// EmptySince is when its last claim left; zero while it holds one.
	EmptySince time.Time
}

// Growth is nodes to add to one pool.
type Growth struct {
	Pool         string `json:"pool"`
	InstanceType string `json:"instanceType"`
	Nodes        int    `json:"nodes"`
	GPUs         int    `json:"gpus"`
	// CostPerHour is nil (JSON null) when the catalog has no price for
	// the instance type; PriceNote then says so.
	CostPerHour *float64 `json:"costPerHour"`
	PriceNote   string   `json:"priceNote,omitempty"`
}

// Removal is a node to take away, with why.
type Removal struct {
	Node   string `json:"node"`
	Pool   string `json:"pool"`
	Reason string `json:"reason"`
}

// WholeGPUs is what an autoscaler that counts whole GPUs would buy for
// the same pending claims: a GPU per requested device, on the instance
// type gpuslice chose.
type WholeGPUs struct {
	InstanceType string `json:"instanceType"`
	GPUs         int    `json:"gpus"`
	Nodes        int    `json:"nodes"`
	// CostPerHour is nil when the instance type has no known price.
	CostPerHour *float64 `json:"costPerHour"`
	PriceNote   string   `json:"priceNote,omitempty"`
}

// Cost is a cost per hour and whether it is known.
type Cost struct {
	USD   float64
	Known bool
}

// costOf is the cost of n nodes of an instance type: unknown when the
// catalog has no price for it (or no such type).
func costOf(cat *catalog.Catalog, instanceType string, n int) (*float64, string) {
	it, err := cat.InstanceType(instanceType)
	if err != nil || it.Price == nil {
		return nil, fmt.Sprintf("no known price for %s (gpuslice catalog instances lists the priced ones)", instanceType)
	}
	c := float64(n) * it.Price.USDPerHour
	return &c, ""
}

// Total adds the cost of every growth; Known is false when any is
// unpriced (USD is then the sum of the priced ones).
func Total(gs []Growth) Cost {
	t := Cost{Known: true}
	for _, g := range gs {
		if g.CostPerHour == nil {
			t.Known = false
			continue
		}
		t.USD += *g.CostPerHour
	}
	return t
}

// String is "$1.23/h", or "unknown" (with the priced part) when unpriced.
func (c Cost) String() string {
	switch {
	case c.Known:
		return fmt.Sprintf("$%.2f/h", c.USD)
	case c.USD > 0:
		return fmt.Sprintf("unknown (more than $%.2f/h)", c.USD)
	}
	return "unknown"
}

// money formats a cost that may be unknown.
func money(c *float64) string {
	if c == nil {
		return "unknown $/h"
	}
	return fmt.Sprintf("$%.2f/h", *c)
}

// NodePlan is what PlanNodes decided, with its reasons.
type NodePlan struct {
	Grow   []Growth  `json:"grow,omitempty"`
	Remove []Removal `json:"remove,omitempty"`
	// Unplaced lists pending claims no pool can take, with why.
	Unplaced []string `json:"unplaced,omitempty"`
	// WholeGPU is the comparison (nil when nothing is bought).
	WholeGPU *WholeGPUs `json:"wholeGPU,omitempty"`
	Reasons  []string   `json:"reasons"`
}

// PlanNodes decides which pools to grow for the claims pending for lack
// of capacity and which empty nodes to remove, counting slices. Pending
// claims are first planned on the nodes already asked for and still
// booting (NodePool.Booting): those they place wait for them, and no node
// is bought twice for one claim. The rest are planned with the real
// allocator (plan.Make, the planner's search included) on new nodes of
// each pool alone, and the pool that places them all at the lowest cost
// per hour wins (fewer GPUs on a tie; an unpriced pool after every priced
// one); when no pool alone can, every pool is grown together as the
// planner decides. A node empty for its pool's TTL is removed, never below
// the pool's MinNodes and never in a pool being grown or booting; a pool
// with fewer nodes (joined and booting) than its MinNodes grows to it
// (warm nodes, compose minimumNodesInPool), the pending claims counted on
// those new nodes. It reads no clock: now is given.
func PlanNodes(pools []NodePool, pending []alloc.Claim, nodes []PoolNode, now time.Time, cat *catalog.Catalog) (NodePlan, error) {
	if cat == nil {
		cat = catalog.Default()
	}
	var np NodePlan
	grown := map[string]bool{}
	for _, p := range pools {
		if p.Booting > 0 {
			grown[p.Pool.Name] = true
		}
	}
	if len(pending) > 0 {
		rest, err := np.onBooting(pools, pending, cat)
		if err != nil {
			return NodePlan{}, err
		}
		if len(rest) > 0 {
			if err := np.grow(pools, rest, cat); err != nil {
				return NodePlan{}, err
			}
		}
	} else {
		np.Reasons = append(np.Reasons, "no claim is pending: no node to add for claims")
	}
	np.warm(pools, cat)
	for _, g := range np.Grow {
		grown[g.Pool] = true
	}
	np.shrink(pools, nodes, now, grown)
	return np, nil
}

// onBooting plans the pending claims on the nodes still booting (each
// pool's Booting nodes, fixed: none added) and returns those they do not
// place.
func (np *NodePlan) onBooting(pools []NodePool, pending []alloc.Claim, cat *catalog.Catalog) ([]alloc.Claim, error) {
	var booting []NodePool
	n := 0
	for _, p := range pools {
		if p.Booting > 0 {
			booting = append(booting, p)
			n += p.Booting
		}
	}
	if n == 0 {
		return pending, nil
	}
	s := pendingSpec(pending)
	for _, p := range booting {
		sp := p.Pool
		sp.Nodes, sp.MaxNodes = p.Booting, p.Booting // fixed: exactly the booting nodes
		s.Pools = append(s.Pools, sp)
	}
	pl, err := plan.Make(s, plan.Options{Catalog: cat})
	if err != nil {
		return nil, fmt.Errorf("planning the pending claims on the booting nodes: %w", err)
	}
	left := map[string]bool{}
	for _, u := range pl.Unplaced {
		left[u.Workload] = true
	}
	var rest []alloc.Claim
	for _, c := range pending {
		if left[c.Name] {
			rest = append(rest, c)
		}
	}
	if placed := len(pending) - len(rest); placed > 0 {
		np.Reasons = append(np.Reasons, fmt.Sprintf("%d of %d pending claim(s) fit on the %d node(s) already booting: they wait for those, none is bought for them",
			placed, len(pending), n))
	}
	return rest, nil
}

// pendingSpec is a spec of one single-replica workload per pending claim
// (no pools yet).
func pendingSpec(pending []alloc.Claim) *model.Spec {
	s := &model.Spec{}
	tenants := map[string]bool{}
	for _, c := range pending {
		if !tenants[c.Tenant] {
			tenants[c.Tenant] = true
			s.Tenants = append(s.Tenants, model.Tenant{Name: c.Tenant})
		}
		s.Workloads = append(s.Workloads, model.Workload{Name: c.Name, Tenant: c.Tenant, Replicas: 1, Isolation: c.Isolation,
			Priority: c.Priority, Requests: slices.Clone(c.Requests), Constraints: slices.Clone(c.Constraints)})
	}
	return s
}

// candidate is one way to place the pending claims: a plan on new nodes.
// cost is +Inf when a pool in it is unpriced (it loses to every priced
// candidate); it never leaves this file.
type candidate struct {
	grow     []Growth
	cost     float64
	gpus     int
	unplaced []plan.Unplaced
}

func (np *NodePlan) grow(pools []NodePool, pending []alloc.Claim, cat *catalog.Catalog) error {
	var best *candidate
	bestPool := ""
	var tried []string
	for i := range pools {
		if room(pools[i]) == 0 {
			tried = append(tried, fmt.Sprintf("%s: at its maxNodes (%d)", pools[i].Pool.Name, pools[i].Pool.MaxNodes))
			continue
		}
		c, err := place([]NodePool{pools[i]}, pending, cat)
		if err != nil {
			return err
		}
		if len(c.unplaced) > 0 {
			tried = append(tried, fmt.Sprintf("%s: %d of %d pending claims would not fit (%s)", pools[i].Pool.Name,
				len(c.unplaced), len(pending), firstReason(c.unplaced)))
			continue
		}
		tried = append(tried, fmt.Sprintf("%s: %d node(s), %d GPU(s), %s", pools[i].Pool.Name, c.grow[0].Nodes, c.gpus, money(c.grow[0].CostPerHour)))
		if best == nil || c.cost < best.cost || (c.cost == best.cost && c.gpus < best.gpus) {
			best, bestPool = c, pools[i].Pool.Name
		}
	}
	if best != nil {
		np.Reasons = append(np.Reasons, fmt.Sprintf("%d pending claim(s) fit on new nodes of pool %s, the cheapest of the pools that place them all (%s)",
			len(pending), bestPool, strings.Join(tried, "; ")))
	} else {
		c, err := place(pools, pending, cat)
		if err != nil {
			return err
		}
		best = c
		np.Reasons = append(np.Reasons, fmt.Sprintf("no pool alone places all %d pending claims (%s): grown together as the planner places them",
			len(pending), strings.Join(tried, "; ")))
		for _, u := range c.unplaced {
			np.Unplaced = append(np.Unplaced, u.Workload+": "+u.Reason)
		}
	}
	np.Grow = best.grow
	// What a whole-GPU autoscaler buys: a GPU per requested device.
	if len(np.Grow) > 0 {
		g := np.Grow[0]
		it, err := cat.InstanceType(g.InstanceType)
		if err == nil && it.GPUCount > 0 {
			want := 0
			for _, c := range pending {
				for _, r := range c.Requests {
					want += max(r.Count, 1)
				}
			}
			n := (want + it.GPUCount - 1) / it.GPUCount
			w := &WholeGPUs{InstanceType: it.Name, GPUs: n * it.GPUCount, Nodes: n}
			w.CostPerHour, w.PriceNote = costOf(cat, it.Name, n)
			np.WholeGPU = w
		}
	}
	return nil
}

// place plans the pending claims on new nodes of pools (each sized as
// needed up to its room) with the planner.
func place(pools []NodePool, pending []alloc.Claim, cat *catalog.Catalog) (*candidate, error) {
	s := pendingSpec(pending)
	for _, p := range pools {
		r := room(p)
		if r == 0 {
			continue // at its maxNodes: no new node
		}
		sp := p.Pool
		sp.Nodes = 0
		sp.MaxNodes = max(r, 0) // 0: as many as needed
		s.Pools = append(s.Pools, sp)
	}
	if len(s.Pools) == 0 {
		c := &candidate{}
		for _, cl := range pending {
			c.unplaced = append(c.unplaced, plan.Unplaced{Workload: cl.Name, Reason: "every pool is at its maxNodes"})
		}
		return c, nil
	}
	p, err := plan.Make(s, plan.Options{Catalog: cat})
	if err != nil {
		return nil, fmt.Errorf("planning the pending claims: %w", err)
	}
	c := &candidate{unplaced: p.Unplaced}
	for _, pp := range p.Pools {
		if pp.Nodes == 0 {
			continue
		}
		g := Growth{Pool: pp.Name, InstanceType: pp.InstanceType, Nodes: pp.Nodes, GPUs: pp.Nodes * pp.GPUsPerNode}
		g.CostPerHour, g.PriceNote = costOf(cat, pp.InstanceType, pp.Nodes)
		c.grow = append(c.grow, g)
		if g.CostPerHour == nil {
			c.cost = math.Inf(1) // unknown price: chosen last
		} else {
			c.cost += *g.CostPerHour
		}
		c.gpus += g.GPUs
	}
	return c, nil
}

// warm grows every pool with fewer nodes (joined and booting) than its
// MinNodes to it (within its maxNodes). New nodes bought for pending
// claims count: a pool already grown for them grows to the larger of the
// two, never by the sum.
func (np *NodePlan) warm(pools []NodePool, cat *catalog.Catalog) {
	for i := range pools {
		p := &pools[i]
		have := p.Nodes + p.Booting
		want := p.MinNodes - have
		if r := room(*p); r >= 0 {
			want = min(want, r)
		}
		if want <= 0 {
			continue
		}
		k := slices.IndexFunc(np.Grow, func(g Growth) bool { return g.Pool == p.Pool.Name })
		if k >= 0 && np.Grow[k].Nodes >= want {
			np.Reasons = append(np.Reasons, fmt.Sprintf("pool %s keeps %d warm (minimumNodesInPool): the %d new node(s) for pending claims make up the %d missing",
				p.Pool.Name, p.MinNodes, np.Grow[k].Nodes, p.MinNodes-have))
			continue
		}
		g := Growth{Pool: p.Pool.Name, InstanceType: p.Pool.InstanceType}
		if k >= 0 {
			g = np.Grow[k]
		}
		perNode := p.Pool.GPUsPerNode
		if it, err := cat.InstanceType(p.Pool.InstanceType); err == nil {
			perNode = it.GPUCount
		}
		g.Nodes, g.GPUs = want, want*perNode
		g.CostPerHour, g.PriceNote = costOf(cat, p.Pool.InstanceType, want)
		if k >= 0 {
			np.Grow[k] = g
		} else {
			np.Grow = append(np.Grow, g)
		}
		booting := ""
		if p.Booting > 0 {
			booting = fmt.Sprintf(" (%d booting)", p.Booting)
		}
		np.Reasons = append(np.Reasons, fmt.Sprintf("pool %s has %d node(s)%s and keeps %d warm (minimumNodesInPool): grown to %d",
			p.Pool.Name, p.Nodes, booting, p.MinNodes, have+want))
	}
}

// room is how many nodes a pool may still add (-1: no bound); booting
// nodes count as added.
func room(p NodePool) int {
	if p.Pool.MaxNodes <= 0 {
		return -1
	}
	return max(p.Pool.MaxNodes-p.Nodes-p.Booting, 0)
}

func firstReason(us []plan.Unplaced) string {
	r := us[0].Reason
	if i := strings.Index(r, "; it asks for"); i > 0 {
		r = r[:i]
	}
	return r
}

// shrink removes nodes empty for their pool's TTL, oldest first, keeping
// MinNodes per pool and every node of a pool being grown.
func (np *NodePlan) shrink(pools []NodePool, nodes []PoolNode, now time.Time, grown map[string]bool) {
	byPool := map[string]*NodePool{}
	for i := range pools {
		byPool[pools[i].Pool.Name] = &pools[i]
	}
	empty := slices.Clone(nodes)
	sort.SliceStable(empty, func(i, j int) bool { return empty[i].EmptySince.Before(empty[j].EmptySince) })
	left := map[string]int{}
	for i := range pools {
		left[pools[i].Pool.Name] = pools[i].Nodes
	}
	for _, n := range empty {
		p := byPool[n.Pool]
		if p == nil || n.EmptySince.IsZero() {
			continue
		}
		ttl := p.EmptyTTL
		if ttl <= 0 {
			ttl = DefaultEmptyTTL
		}
		idle := now.Sub(n.EmptySince)
		switch {
		case idle < ttl:
			continue
		case grown[n.Pool]:
			np.Reasons = append(np.Reasons, fmt.Sprintf("node %s is empty but pool %s is being grown (or has nodes booting): kept", n.Name, n.Pool))
		case left[n.Pool] <= p.MinNodes:
			np.Reasons = append(np.Reasons, fmt.Sprintf("node %s is empty (%s) but pool %s keeps %d warm (minimumNodesInPool): kept",
				n.Name, idle.Round(time.Second), n.Pool, p.MinNodes))
		default:
			left[n.Pool]--
			np.Remove = append(np.Remove, Removal{Node: n.Name, Pool: n.Pool,
				Reason: fmt.Sprintf("empty for %s, past the pool's %s", idle.Round(time.Second), ttl)})
		}
	}
}
