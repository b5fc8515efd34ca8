package plan

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/mig"
	"github.com/gpuslice/gpuslice/internal/model"
)

// PoolLabel is the node label that names a node's pool; the planner pins
// a workload to its pool with a selector on it, and render puts it on the
// nodes (Karpenter NodePools) and in node selectors.
const PoolLabel = "gpuslice.dev/pool"

// DefaultMaxNodes bounds a pool sized "as needed" when it sets no maxNodes.
const DefaultMaxNodes = 256

// Options configure Make.
type Options struct {
	Catalog *catalog.Catalog
	// Quality tunes the search for a better plan and its proof (quality.go).
	Quality QualityOptions
}

// pool is a spec pool resolved against the catalog.
type pool struct {
	spec  *model.Pool
	gpu   *catalog.GPU
	per   int
	it    *catalog.InstanceType
	nodes int
	max   int
	auto  bool
	// layout is the fixed MIG layout (explicit starts) every GPU gets.
	layout mig.Layout
}

// replica is one claim to place.
type replica struct {
	wl    *model.Workload
	w     int // the workload's index in the spec
	n     int
	claim alloc.Claim
}

// Make plans a spec: it places every replica with the real allocator on a
// simulated fleet (biggest first, each with AllocateAhead over the replicas
// after it) and grows pools sized "as needed" one node at a time until
// everything fits or a pool reaches its limit; then refine makes more
// passes in better orders and keeps the best.
func Make(s *model.Spec, opts Options) (*Plan, error) {
	cat := opts.Catalog
	if cat == nil {
		cat = catalog.Default()
	}
	pools, err := resolvePools(cat, s)
	if err != nil {
		return nil, err
	}
	reps := replicas(s)
	p := &Plan{}
	state, err := build(s, pools, nil, nil)
	if err != nil {
		return nil, err
	}
	// Priorities decide who is left out when capacity is short, and
	// nothing else: with several priorities the first pass ignores them,
	// and only when that leaves a replica out does the plan start again
	// highest priority first. A spec whose replicas all fit is planned
	// as if every priority were equal (better packed: placing by priority
	// first once cost a GPU on such a spec).
	levels := priorityLevels(reps)
	var first *pass
	flatFits := false
	if len(levels) > 1 {
		// The claims lose their priority too: the allocator's own orders
		// (RefineOrder) put priority first.
		flatReps := slices.Clone(reps)
		for i := range flatReps {
			flatReps[i].claim.Priority = 0
		}
		flat := Heuristic{Key: "plan"}.order(pools, flatReps)
		if first, err = placePass(state, pools, flatReps, flat); err != nil {
			return nil, err
		}
		if flatFits = len(first.unplaced) == 0; flatFits {
			reps = flatReps
		} else {
			initialNodes(pools)
			if state, err = build(s, pools, nil, nil); err != nil {
				return nil, err
			}
		}
	}
	if !flatFits {
		order := make([]alloc.Claim, len(reps))
		for i := range reps {
			order[i] = reps[i].claim
		}
		if first, err = placePass(state, pools, reps, order); err != nil {
			return nil, err
		}
	}
	var keep map[string]bool // nil: every node
	stats := []passStat{{GPUs: first.state.GPUsUsed(), Unplaced: len(first.unplaced)}}
	if len(first.unplaced) == 0 {
		if first, keep, err = refine(s, pools, first, reps, &stats); err != nil {
			return nil, err
		}
	}
	// Other orders, local search, bounds and the exact search (quality.go).
	first, keep, q, err := improve(s, pools, first, reps, flatFits, opts.Quality)
	if err != nil {
		return nil, err
	}
	state = first.state
	for _, a := range first.allocs {
		r := first.byName[a.Claim]
		p.Placements = append(p.Placements, Placement{Workload: r.wl.Name, Tenant: r.wl.Tenant, Replica: r.n,
			Pool: poolOf(a, state), Devices: a.Devices, Why: a.Why})
	}
	p.explainUnplaced(state, pools, first)
	p.fill(s, pools, state, cat, keep)
	p.warn(s, pools, state)
	q.finish(p)
	p.Quality = q
	if onPlanned != nil {
		onPlanned(state, stats)
	}
	return p, nil
}

// passStat is what one pass gave: GPUs used, replicas left out.
type passStat struct{ GPUs, Unplaced int }

// onPlanned, when set (by tests), sees the final state and every pass.
var onPlanned func(final *alloc.State, passes []passStat)

// pass is one placement of every replica: the state it left, the
// allocations in placement order, and what did not fit.
type pass struct {
	state    *alloc.State
	allocs   []*alloc.Allocation
	unplaced []int // indexes into order
	order    []alloc.Claim
	byName   map[string]*replica
	nodes    []int // nodes per pool at the end
}

// placePass places the claims in order on state, each with
// AllocateAheadQuick over the claims after it. A claim that fits nowhere
// grows a pool by one node (its own, or the cheapest per GPU whose GPU
// could hold it) on the live state and is tried again; a fresh node is the
// best a pool can offer, so a pool whose new node does not help gives it
// back and is not tried again for this claim. Nothing is explained here:
// explainUnplaced does it once, for what stays unplaced.
func placePass(state *alloc.State, pools []*pool, reps []replica, order []alloc.Claim) (*pass, error) {
	byName := make(map[string]*replica, len(reps))
	for i := range reps {
		byName[reps[i].claim.Name] = &reps[i]
	}
	ps := &pass{state: state, order: order, byName: byName, allocs: make([]*alloc.Allocation, 0, len(order))}
	var tried map[*pool]bool
	for i := range order {
		c := &order[i]
		clear(tried)
		for {
			// The claims still to place are known: a new shared device is
			// sized for the ones that could join it.
			a, err := state.AllocateAheadQuick(c, order[i+1:])
			if err == nil {
				if err := state.Apply(a); err != nil {
					return nil, fmt.Errorf("plan: %w", err)
				}
				ps.allocs = append(ps.allocs, a)
				break
			}
			if !alloc.IsNoFit(err) {
				return nil, fmt.Errorf("workload %s: %w", byName[c.Name].wl.Name, err)
			}
			if tried == nil {
				tried = map[*pool]bool{}
			}
			if !growFor(state, pools, byName[c.Name], tried) {
				ps.unplaced = append(ps.unplaced, i)
				break
			}
		}
	}
	for _, pl := range pools {
		ps.nodes = append(ps.nodes, pl.nodes)
	}
	return ps, nil
}

// growFor adds a node to the pool pickGrowth chooses for a replica that
// does not fit, and keeps it when the replica fits on the grown fleet.
// It reports false when no pool is left to try.
func growFor(state *alloc.State, pools []*pool, r *replica, tried map[*pool]bool) bool {
	for {
		grow := pickGrowth(pools, *r, tried)
		if grow == nil {
			return false
		}
		tried[grow] = true
		name := nodeName(grow, grow.nodes)
		if err := state.AddNode(newNode(grow, name)); err != nil {
			continue // cannot happen: build made the same nodes
		}
		if _, err := state.AllocateAheadQuick(&r.claim, nil); err == nil {
			grow.nodes++
			return true
		}
		if err := state.RemoveNode(name); err != nil {
			grow.nodes++ // cannot happen: nothing was placed on it
			return true
		}
	}
}

// explainUnplaced asks the final state why each replica still left out
// does not fit (the allocator's per-node reasons); the replicas of one
// workload share the first one's reasons. A replica that fits the final
// fleet after all (possible for multi-device claims) is placed.
func (p *Plan) explainUnplaced(state *alloc.State, pools []*pool, ps *pass) {
	firstOf := map[*model.Workload]string{}
	reasonOf := map[*model.Workload]string{}
	for _, i := range ps.unplaced {
		c := &ps.order[i]
		r := ps.byName[c.Name]
		if first, ok := firstOf[r.wl]; ok {
			p.Unplaced = append(p.Unplaced, Unplaced{Workload: r.wl.Name, Replica: r.n,
				Reason: strings.Replace(reasonOf[r.wl], "claim "+first+" ", "claim "+c.Name+" ", 1)})
			continue
		}
		a, err := state.Allocate(c)
		if err == nil {
			if err = state.Apply(a); err == nil {
				p.Placements = append(p.Placements, Placement{Workload: r.wl.Name, Tenant: r.wl.Tenant, Replica: r.n,
					Pool: poolOf(a, state), Devices: a.Devices, Why: a.Why})
				continue
			}
		}
		why := unplacedReason(err, pools, *r, newNodeWhy(state, pools, r))
		firstOf[r.wl], reasonOf[r.wl] = c.Name, why
		p.Unplaced = append(p.Unplaced, Unplaced{Workload: r.wl.Name, Replica: r.n, Reason: why})
	}
}

// newNodeWhy says, for each pool that could still grow and whose GPUs
// could hold r, why a fresh node of it would not take r either (the
// allocator's reason on that node), by adding the node to the final state,
// asking, and taking it back. Only replicas that stay unplaced get here.
func newNodeWhy(state *alloc.State, pools []*pool, r *replica) map[*pool]string {
	out := map[*pool]string{}
	for _, pl := range pools {
		if (r.wl.Pool != "" && r.wl.Pool != pl.spec.Name) || !pl.auto || pl.nodes >= pl.max || !couldHold(pl, *r) {
			continue
		}
		name := nodeName(pl, pl.nodes)
		if err := state.AddNode(newNode(pl, name)); err != nil {
			continue
		}
		if _, err := state.Allocate(&r.claim); err != nil {
			out[pl] = nodeReason(err, name)
		}
		_ = state.RemoveNode(name)
	}
	return out
}

// passes is how many more passes refine makes (a variable so a test can
// turn refining off).
var passes = 3

// refine makes more passes, each in the order alloc.State.RefineOrder
// derives from the pass before (first-fit decreasing over the devices that
// pass chose), on the fleet the first pass grew; a pass that does not fit
// there grows it further, like the first, rather than giving up. It keeps
// the pass that places every replica on the fewest GPUs (on ties the
// cheapest, then the earliest), unless it would cost more than the first
// pass. Nodes of pools
// sized "as needed" that the kept pass leaves empty at the end of the pool
// are given back: keep lists the nodes that stay (nil: all of them).
func refine(s *model.Spec, pools []*pool, first *pass, reps []replica, stats *[]passStat) (*pass, map[string]bool, error) {
	best, bestGPUs := first, first.state.GPUsUsed()
	bestKeep, firstCost := trim(pools, first)
	bestCost := firstCost
	firstNodes := first.nodes
	prev := first
	first = nil
	for range passes {
		order := prev.state.RefineOrder(prev.order)
		prev = nil // only the best pass and the one being made stay in memory
		for i, pl := range pools {
			pl.nodes = firstNodes[i]
		}
		st, err := build(s, pools, nil, nil)
		if err != nil {
			return nil, nil, err
		}
		ps, err := placePass(st, pools, reps, order)
		if err != nil {
			return nil, nil, err
		}
		prev = ps
		*stats = append(*stats, passStat{GPUs: st.GPUsUsed(), Unplaced: len(ps.unplaced)})
		if len(ps.unplaced) > 0 {
			continue
		}
		keep, cost := trim(pools, ps)
		if n := st.GPUsUsed(); cost <= firstCost && (n < bestGPUs || (n == bestGPUs && cost < bestCost)) {
			best, bestGPUs, bestKeep, bestCost = ps, n, keep, cost
		}
	}

	for i, pl := range pools {
		pl.nodes = best.nodes[i]
		for pl.auto && pl.nodes > 0 && !bestKeep[nodeName(pl, pl.nodes-1)] {
			pl.nodes--
		}
	}
	return best, bestKeep, nil
}

// trim says which nodes a pass keeps (every node of a fixed pool; of a
// pool sized "as needed", every node up to its last used one) and what
// they cost per hour (a node of unknown price counts as very expensive).
func trim(pools []*pool, ps *pass) (map[string]bool, float64) {
	used := map[string]bool{}
	for _, a := range ps.allocs {
		for _, d := range a.Devices {
			used[d.Node] = true
		}
	}
	keep := map[string]bool{}
	cost := 0.0
	for i, pl := range pools {
		n := ps.nodes[i]
		if pl.auto {
			for n > 0 && !used[nodeName(pl, n-1)] {
				n--
			}
		}
		for k := range n {
			keep[nodeName(pl, k)] = true
		}
		price := 1e6
		if pl.it != nil && pl.it.Price != nil {
			price = pl.it.Price.USDPerHour
		}
		cost += float64(n) * price
	}
	return keep, cost
}

func resolvePools(cat *catalog.Catalog, s *model.Spec) ([]*pool, error) {
	var out []*pool
	var errs []error
	for i := range s.Pools {
		sp := &s.Pools[i]
		p := &pool{spec: sp, per: sp.GPUsPerNode, nodes: sp.Nodes, max: sp.MaxNodes, auto: sp.Nodes == 0}
		if sp.InstanceType != "" {
			it, err := cat.InstanceType(sp.InstanceType)
			if err != nil {
				errs = append(errs, fmt.Errorf("pool %s: %w", sp.Name, err))
				continue
			}
			p.it = it
			if p.per == 0 {
				p.per = it.GPUCount
			}
		}
		model := sp.GPU
		if p.it != nil {
			model = p.it.GPU
		}
		g, err := cat.GPU(model)
		if err != nil {
			errs = append(errs, fmt.Errorf("pool %s: %w", sp.Name, err))
			continue
		}
		p.gpu = g
		if p.per <= 0 {
			p.per = 1
		}
		if p.max == 0 {
			p.max = DefaultMaxNodes
		}
		if p.auto {
			p.nodes = 0
		}
		if sp.MIG == "fixed" && g.MIG != nil {
			geo, err := mig.New(g)
			if err != nil {
				return nil, err
			}
			var want []string
			for prof, c := range sp.MIGLayout {
				for range c {
					want = append(want, prof)
				}
			}
			sort.Strings(want)
			fit, err := geo.Fit(want)
			if err != nil {
				errs = append(errs, fmt.Errorf("pool %s: %w", sp.Name, err))
				continue
			}
			p.layout = fit.Layout
		}
		out = append(out, p)
	}
	return out, errors.Join(errs...)
}

// replicas lists every replica's claim, highest priority first, pinned to
// the workload's pool when it names one.
func replicas(s *model.Spec) []replica {
	var out []replica
	for i := range s.Workloads {
		wl := &s.Workloads[i]
		for n := 0; n < wl.Replicas; n++ {
			c := alloc.Claim{Name: wl.Name + "-" + strconv.Itoa(n), Tenant: wl.Tenant, Priority: wl.Priority,
				Isolation: wl.Isolation, Constraints: wl.Constraints}
			for _, r := range wl.Requests {
				if wl.Pool != "" {
					pin := "node.labels['" + PoolLabel + "'] == '" + wl.Pool + "'"
					if r.Selector != "" {
						r.Selector = "(" + r.Selector + ") && " + pin
					} else {
						r.Selector = pin
					}
				}
				c.Requests = append(c.Requests, r)
			}
			out = append(out, replica{wl: wl, w: i, n: n, claim: c})
		}
	}
	// Highest priority first; within a priority the biggest replicas first
	// (first-fit decreasing: small ones fill the gaps big ones leave), a
	// workload's replicas staying together.
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.wl.Priority != b.wl.Priority {
			return a.wl.Priority > b.wl.Priority
		}
		sa, sb := size(a.wl), size(b.wl)
		if sa[0] != sb[0] {
			return sa[0] > sb[0]
		}
		return sa[1] > sb[1]
	})
	return out
}

// size orders workloads for first-fit decreasing: the memory of one
// replica, then its compute (a MIG profile counts as asked: its memory
// and compute are filled in by the reader).
func size(wl *model.Workload) [2]int64 {
	var s [2]int64
	for _, r := range wl.Requests {
		n := int64(max(r.Count, 1))
		s[0] += r.MemoryMiB * n
		s[1] += int64(r.ComputePercent) * n
	}
	return s
}

// build makes the simulated fleet: the nodes of every pool, keeping the
// layouts and allocations of a previous state.
func build(s *model.Spec, pools []*pool, prev *alloc.State, allocs []alloc.Allocation) (*alloc.State, error) {
	var f alloc.Fleet
	f.Policy = s.Policy
	have := map[string]alloc.Node{}
	if prev != nil {
		for _, n := range prev.Fleet().Nodes {
			have[n.Name] = n
		}
	}
	for _, p := range pools {
		for i := 0; i < p.nodes; i++ {
			name := nodeName(p, i)
			if n, ok := have[name]; ok {
				f.Nodes = append(f.Nodes, n)
				continue
			}
			f.Nodes = append(f.Nodes, newNode(p, name))
		}
	}
	return alloc.NewState(f, allocs, alloc.Options{})
}

func newNode(p *pool, name string) alloc.Node {
	n := alloc.Node{Name: name, Labels: map[string]string{PoolLabel: p.spec.Name}}
	for k, v := range p.spec.Labels {
		n.Labels[k] = v
	}
	if p.it != nil {
		n.InstanceType = p.it.Name
		n.Labels["node.kubernetes.io/instance-type"] = p.it.Name
	}
	for gi := 0; gi < p.per; gi++ {
		g := alloc.GPU{UUID: fmt.Sprintf("GPU-%s-%d", name, gi), Index: gi, Model: p.gpu.ID, Healthy: true,
			Sharing: p.spec.Sharing}
		if g.Sharing.Mode == "" {
			g.Sharing.Mode = alloc.Dynamic
		}
		switch {
		case p.spec.MIG == "dynamic" && p.gpu.MIG != nil:
			g.MIGEnabled, g.DynamicMIG = true, true
		case len(p.layout) > 0:
			g.MIGEnabled = true
			sh := p.spec.MIGSharing
			if sh.Mode == "" {
				sh.Mode = alloc.Dynamic
			}
			for _, in := range p.layout {
				ish := sh
				if by, ok := p.spec.MIGSharingByProfile[in.Profile]; ok {
					ish = by // an imported device-plugin config shares per profile
				}
				g.Instances = append(g.Instances, alloc.MIGInstance{UUID: fmt.Sprintf("MIG-%s-%d-%s-%d", name, gi, in.Profile, in.Start),
					Profile: in.Profile, Start: in.Start, Sharing: ish})
			}
		}
		n.GPUs = append(n.GPUs, g)
	}
	return n
}

// pickGrowth chooses the pool to add a node to for a replica that does not
// fit: its own pool, or the cheapest per GPU whose GPUs could hold it.
func pickGrowth(pools []*pool, r replica, tried map[*pool]bool) *pool {
	var best *pool
	bestPrice := math.Inf(1)
	for _, p := range pools {
		if tried[p] || !p.auto || p.nodes >= p.max || (r.wl.Pool != "" && r.wl.Pool != p.spec.Name) || !couldHold(p, r) {
			continue
		}
		price := math.Inf(1) - 1 // unknown prices lose to known ones
		if p.it != nil && p.it.Price != nil {
			price = p.it.Price.USDPerHour / float64(p.per)
		}
		if best == nil || price < bestPrice {
			best, bestPrice = p, price
		}
	}
	return best
}

// nodeReason is the allocator's reason for one node in a no-fit error.
func nodeReason(err error, node string) string {
	var nf *alloc.NoFitError
	if errors.As(err, &nf) {
		if why := nf.PerNode[node]; why != "" {
			return why
		}
	}
	return err.Error()
}

// unplacedReason is the allocator's reason for a replica that fits
// nowhere, followed by why each pool cannot take it, so that "0/0 nodes
// are available" (no pool has a node yet) still says what is wrong.
func unplacedReason(err error, pools []*pool, r replica, newNodeWhy map[*pool]string) string {
	var parts []string
	for _, p := range pools {
		var why string
		switch {
		case r.wl.Pool != "" && r.wl.Pool != p.spec.Name:
			continue // pinned elsewhere
		case newNodeWhy[p] != "":
			why = "a new node would not hold it either: " + newNodeWhy[p]
		case !couldHold(p, r):
			why = fmt.Sprintf("its %s GPUs cannot hold the request (%d MiB; profiles: %s)", p.gpu.ID, p.gpu.MemoryMiB, orNone(p.gpu.ProfileNames()))
		case !p.auto:
			why = fmt.Sprintf("its %d node(s) are fixed (nodes: %d)", p.nodes, p.nodes)
		case p.nodes >= p.max:
			why = fmt.Sprintf("it is at its maxNodes (%d)", p.max)
		default:
			why = "not tried"
		}
		parts = append(parts, fmt.Sprintf("pool %s (%s): %s", p.spec.Name, poolSetup(p), why))
	}
	var asks []string
	for _, q := range r.claim.Requests {
		a := "request " + q.Name
		if q.Mode != "" {
			a += " mode " + string(q.Mode)
		}
		if q.Profile != "" {
			a += " profile " + q.Profile
		}
		if q.MemoryMiB > 0 {
			a += fmt.Sprintf(" %d MiB", q.MemoryMiB)
		}
		asks = append(asks, a)
	}
	head := err.Error() + "; it asks for " + strings.Join(asks, ", ")
	if len(parts) == 0 {
		return head + "; no pool is open to it"
	}
	return head + "; " + strings.Join(parts, "; ")
}

func orNone(xs []string) string {
	if len(xs) == 0 {
		return "none, no MIG"
	}
	return strings.Join(xs, ", ")
}

// poolSetup says how a pool's GPUs are set up, for reasons.
func poolSetup(p *pool) string {
	switch {
	case p.spec.MIG == "dynamic" && p.gpu.MIG != nil:
		return p.gpu.ID + ", MIG made as needed"
	case len(p.layout) > 0:
		return p.gpu.ID + ", MIG " + p.layout.String()
	}
	sh := p.spec.Sharing
	switch sh.Mode {
	case alloc.TimeSlice:
		return fmt.Sprintf("%s, time-sliced ×%d", p.gpu.ID, sh.Replicas)
	case alloc.MPS:
		return fmt.Sprintf("%s, MPS ≤%d clients", p.gpu.ID, sh.MaxClients)
	case alloc.Exclusive:
		return p.gpu.ID + ", whole GPUs unshared"
	}
	return p.gpu.ID + ", sharing decided per GPU"
}

// couldHold says whether an empty node of the pool could take the replica.
func couldHold(p *pool, r replica) bool {
	devices := 0
	for _, req := range r.claim.Requests {
		if req.MemoryMiB > p.gpu.MemoryMiB {
			return false
		}
		if req.Profile != "" {
			if _, err := p.gpu.Profile(req.Profile); err != nil {
				return false
			}
		}
		devices += max(req.Count, 1)
	}
	if len(r.claim.Constraints) > 0 && devices > p.per && p.gpu.MIG == nil {
		return false
	}
	return true
}

// poolOf names the pool of an allocation's first device: nodes are named
// "<pool>-<n>" by build.
func poolOf(a *alloc.Allocation, _ *alloc.State) string {
	if len(a.Devices) == 0 {
		return ""
	}
	return poolOfNode(a.Devices[0].Node)
}

func poolOfNode(node string) string {
	if i := strings.LastIndex(node, "-"); i > 0 {
		return node[:i]
	}
	return node
}

// nodeName names node i of a pool; poolOfNode reads the pool back.
func nodeName(p *pool, i int) string { return fmt.Sprintf("%s-%d", p.spec.Name, i) }
