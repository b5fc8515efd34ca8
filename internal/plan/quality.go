package plan

import (
	"fmt"
	"runtime"
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/model"
	"github.com/gpuslice/gpuslice/internal/packing"
)

// Quality says how good a plan is: the GPUs it uses, the most GPUs any
// plan provably needs, and the gap between the two.
type Quality struct {
	// GPUs counts GPUs holding work; LowerBound is the best bound proven
	// (no plan that places every replica can use fewer); Gap is
	// (GPUs − LowerBound) ÷ LowerBound; Optimal is GPUs == LowerBound.
	GPUs       int     `json:"gpus"`
	LowerBound int     `json:"lowerBound"`
	Gap        float64 `json:"gap"`
	Optimal    bool    `json:"optimal"`
	// Pools gives each pool's share: the GPUs it uses and the bound of
	// the replicas that can only run there.
	Pools []PoolQuality `json:"pools"`
	// Chosen names the order that gave the plan ("plan" for the planner's
	// own passes), Tried every order tried and what it gave; Skipped says
	// why no other order was tried (the plan met its bound).
	Chosen  string        `json:"chosen"`
	Tried   []OrderResult `json:"tried,omitempty"`
	Skipped string        `json:"skipped,omitempty"`
	// Moved is how many GPUs the local search emptied (moving their
	// claims onto other GPUs) after the best order.
	Moved int `json:"moved,omitempty"`
	// Exact says what the exact search did (see ExactStats).
	Exact ExactStats `json:"exact"`
	// Note qualifies the bound (replicas free to run in several pools are
	// counted by volume only).
	Note string `json:"note,omitempty"`
}

// PoolQuality is one pool's part of Quality.
type PoolQuality struct {
	Name string `json:"name"`
	GPUs int    `json:"gpus"`
	// LowerBound covers the replicas that can only run in this pool.
	LowerBound int `json:"lowerBound"`
	// Proof is how the bound was found: "isolation" (volume, Martello
	// and Toth's L2 and MIG slices per isolation group), or "exact"
	// (the exact search proved a group needs more).
	Proof string `json:"proof"`
}

// OrderResult is what one order gave. An Abandoned order was stopped
// once it held work on more GPUs (GPUs) than the best plan so far.
type OrderResult struct {
	Order     string `json:"order"`
	GPUs      int    `json:"gpus"`
	Unplaced  int    `json:"unplaced,omitempty"`
	Abandoned bool   `json:"abandoned,omitempty"`
	// SameAs names an earlier order that puts the replicas in the same
	// sequence: this one was not run again and has its result.
	SameAs string `json:"sameAs,omitempty"`
}

// ExactStats is what the exact search did within its budget.
type ExactStats struct {
	// Groups is how many isolation groups (a tenant's shared replicas on
	// a pool without MIG) were searched; Proved how many of them it
	// solved to optimality; Improved how many groups it packed on fewer
	// GPUs than the plan had (the plan then uses that packing).
	Groups   int `json:"groups"`
	Proved   int `json:"proved"`
	Improved int `json:"improved,omitempty"`
	// Budget is the time the search had.
	Budget string `json:"budget"`
}

// QualityOptions tune how hard Make works for a better plan.
type QualityOptions struct {
	// ExactBudget is the time the exact search may take in all (default
	// 200ms; negative: no exact search).
	ExactBudget time.Duration
	// Now is the clock the budget is measured with (default time.Now).
	Now func() time.Time
	// Orders, when set, replaces Heuristics(spec) (tests).
	Orders []Heuristic
	// OwnOnly keeps the planner's own passes: no other order, no local
	// search, no exact repacking (the bound is still computed). For
	// comparisons with the planner as it was before.
	OwnOnly bool
}

// DefaultExactBudget is the exact search's default time budget.
const DefaultExactBudget = 200 * time.Millisecond

// improve makes the plan at least as good as every heuristic order and
// proves how good it is: it computes the per-pool bounds (with the exact
// search on small groups), and unless the planner's own result already
// meets them, places the replicas in every order of Heuristics and keeps
// the best (fewest replicas left out by priority, then fewest GPUs, then
// cost), runs the local search on it, and tries the exact search's
// packings of groups the plan spreads over more GPUs. It returns the pass
// to report, the nodes to keep, and the quality (GPUs filled in by the
// caller from the final plan).
func improve(s *model.Spec, pools []*pool, cur *pass, reps []replica, flatFits bool, opts QualityOptions) (*pass, map[string]bool, *Quality, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.ExactBudget == 0 {
		opts.ExactBudget = DefaultExactBudget
	}
	q := &Quality{Chosen: "plan", Exact: ExactStats{Budget: opts.ExactBudget.String()}}
	if opts.ExactBudget < 0 {
		q.Exact.Budget = "off"
	}
	levels := priorityLevels(reps)
	lb := bounds(s, pools, reps, opts, q)

	best, bestScore := cur, scoreOf(pools, cur, levels)
	q.Tried = append(q.Tried, OrderResult{Order: "plan", GPUs: bestScore.gpus, Unplaced: len(cur.unplaced)})
	curNodes := append([]int(nil), cur.nodes...)
	// runOrders places the replicas in each order and keeps the best pass
	// (see the comment inside).
	runOrders := func(hs []Heuristic) error {
		// Every order runs, at every size: the guarantee is "never more
		// GPUs than any of them". Orders run side by side on the cores
		// (each on its own copy of the pools and its own state), a batch
		// at a time so only a batch's states are alive at once, and are
		// then folded in the list's order exactly as one after another
		// would be: the result does not depend on the number of cores.
		// The limit comes from the best pass before the batches, so which
		// orders are abandoned does not depend on timing either.
		limit := 0
		if bestScore.placedAll() {
			limit = bestScore.gpus
		}
		// An order that repeats an earlier one is not run again: its
		// result is the earlier one's.
		same := sameAs(hs, pools, reps)
		var run []int
		for i := range hs {
			if same[i] < 0 {
				run = append(run, i)
			}
		}
		results := make([]OrderResult, len(hs))
		workers := max(1, min(runtime.GOMAXPROCS(0), len(run)))
		done := 0
	batches:
		for lo := 0; lo < len(run); lo += workers {
			idx := run[lo:min(lo+workers, len(run))]
			batch := make([]Heuristic, len(idx))
			for k, i := range idx {
				batch[k] = hs[i]
			}
			passes, err := orderPasses(s, pools, reps, batch, limit)
			if err != nil {
				return err
			}
			for k, i := range idx {
				h, ps := hs[i], passes[k]
				done = i + 1
				if ps == nil {
					results[i] = OrderResult{Order: h.String(), GPUs: limit + 1, Abandoned: true}
					continue
				}
				sc := scoreOf(pools, ps, levels)
				results[i] = OrderResult{Order: h.String(), GPUs: sc.gpus, Unplaced: len(ps.unplaced)}
				if (h.Cap == 0 || sc.placedAll()) && sc.better(bestScore) {
					best, bestScore, q.Chosen = ps, sc, h.String()
					if sc.placedAll() && sc.gpus <= lb.total {
						break batches
					}
				}
			}
		}
		for i := range hs[:done] {
			if j := same[i]; j >= 0 {
				results[i] = results[j]
				results[i].Order, results[i].SameAs = hs[i].String(), hs[j].String()
			}
		}
		q.Tried = append(q.Tried, results[:done]...)
		return nil
	}

	// polish runs the local search and the exact packings on the best
	// pass; a clone stays behind in case a move cannot be undone. It
	// never adds a GPU.
	polish := func() {
		q.Moved, q.Exact.Improved = 0, 0
		if bestScore.gpus <= lb.total || opts.OwnOnly {
			return
		}
		backup := best.state.Clone()
		m := newMover(best, pools)
		n, err := m.emptyGPUs(2*len(reps) + 64)
		improved := 0
		if err == nil && m.used > lb.total {
			improved, err = m.exactMoves(lb)
		}
		if err == nil && m.replaced {
			err = cleanState(s, pools, best)
		}
		if err != nil {
			best.state = backup // cannot happen: every move is undone exactly
			return
		}
		q.Moved, q.Exact.Improved = n, improved
		bestScore = scoreOf(pools, best, levels)
	}

	switch {
	case opts.OwnOnly:
		q.Skipped = "own order only (asked)"
	case bestScore.placedAll() && bestScore.gpus <= lb.total:
		q.Skipped = "the planner's own order meets the lower bound"
	default:
		hs := opts.Orders
		if hs == nil {
			hs = heuristics(s, flatFits)
		}
		if err := runOrders(hs); err != nil {
			return nil, nil, nil, err
		}
	}
	polish()

	if best == cur {
		copy(cur.nodes, curNodes)
	}
	for i, pl := range pools {
		pl.nodes = best.nodes[i]
	}
	keep, _ := trim(pools, best)
	for _, pl := range pools {
		for pl.auto && pl.nodes > 0 && !keep[nodeName(pl, pl.nodes-1)] {
			pl.nodes--
		}
	}
	q.LowerBound = lb.total
	for i, pl := range pools {
		q.Pools = append(q.Pools, PoolQuality{Name: pl.spec.Name, LowerBound: lb.pools[i].bound, Proof: lb.pools[i].proof})
	}
	return best, keep, q, nil
}

// finish fills in the GPUs of the final plan and the gap.
func (q *Quality) finish(p *Plan) {
	q.GPUs = 0
	for i, pp := range p.Pools {
		q.GPUs += pp.GPUsUsed
		if i < len(q.Pools) {
			q.Pools[i].GPUs = pp.GPUsUsed
		}
	}
	if len(p.Unplaced) > 0 {
		q.Note = joinNote(q.Note, fmt.Sprintf("%d replica(s) unplaced: the bound is for placing them all", len(p.Unplaced)))
	}
	q.Optimal = q.GPUs == q.LowerBound && len(p.Unplaced) == 0
	if q.LowerBound > 0 {
		q.Gap = float64(q.GPUs-q.LowerBound) / float64(q.LowerBound)
	}
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// poolBound is one pool's bound and its groups (for the exact search's
// packings).
type poolBound struct {
	bound  int
	proof  string
	groups []exactGroup
}

// exactGroup is an isolation group on a pool without MIG that the exact
// search packed: its claims and the packing it found.
type exactGroup struct {
	pool   *pool
	claims []string // claim names, one per device (a claim repeats per device)
	assign []int    // bin of each device
	bins   int
}

type planBounds struct {
	total int
	pools []poolBound
}

// bounds computes each pool's lower bound from the replicas that can only
// run there (pinned to it, or fitting no other pool's GPU), with the
// isolation-aware bound of internal/packing on the pool's model (seen
// without MIG when the pool runs MIG off), raised by the exact search on
// each isolation group of a pool without MIG while the budget lasts. The
// total is the larger of the pools' sum and the volume of every replica
// over the biggest GPU.
func bounds(s *model.Spec, pools []*pool, reps []replica, opts QualityOptions, q *Quality) planBounds {
	out := planBounds{pools: make([]poolBound, len(pools))}
	per := make([][]alloc.Claim, len(pools))
	var maxMem int64
	for _, pl := range pools {
		maxMem = max(maxMem, pl.gpu.MemoryMiB)
	}
	var allMem, allComp int64
	free := 0
	// A replica whose selector no pool's node matches but one (a model
	// named in it, say) can only run there: an empty node of each pool
	// tells, for replicas with a selector, whether it could ever take them.
	empty := make([]*alloc.State, len(pools))
	selectorAllows := func(pi int, r *replica) bool {
		sel := false
		for _, rq := range r.claim.Requests {
			sel = sel || rq.Selector != ""
		}
		if !sel {
			return true
		}
		if empty[pi] == nil {
			st, err := alloc.NewState(alloc.Fleet{Nodes: []alloc.Node{newNode(pools[pi], pools[pi].spec.Name+"-bound")}, Policy: s.Policy}, nil, alloc.Options{})
			if err != nil {
				return true // no proof it cannot: count it as free
			}
			empty[pi] = st
		}
		c := r.claim
		_, err := empty[pi].AllocateAheadQuick(&c, nil)
		return err == nil || !alloc.IsNoFit(err)
	}
	for i := range reps {
		r := &reps[i]
		home := -1
		for pi, pl := range pools {
			if (r.wl.Pool == "" || r.wl.Pool == pl.spec.Name) && couldHold(pl, *r) && selectorAllows(pi, r) {
				if home != -1 {
					home = -2
					break
				}
				home = pi
			}
		}
		for _, rq := range r.claim.Requests {
			for k := range max(rq.Count, 1) {
				one := rq
				one.Count = 0
				c := alloc.Claim{Name: r.claim.Name, Tenant: r.claim.Tenant, Isolation: r.claim.Isolation,
					Requests: []alloc.Request{one}}
				_ = k
				allMem += min(rq.MemoryMiB, maxMem)
				allComp += int64(min(max(rq.ComputePercent, 0), 100))
				if rq.Mode == alloc.Exclusive || rq.ComputePercent >= 100 {
					allComp += 100 - int64(min(max(rq.ComputePercent, 0), 100))
				}
				if home >= 0 {
					if pools[home].spec.Sharing.Mode == alloc.Exclusive && !pools[home].migOn() {
						c.Requests[0].Mode = alloc.Exclusive
					}
					per[home] = append(per[home], c)
				} else {
					free++
				}
			}
		}
	}
	deadline := opts.Now().Add(opts.ExactBudget)
	stop := func() bool { return opts.Now().After(deadline) }
	sum := 0
	for pi, pl := range pools {
		pb := poolBound{proof: "isolation"}
		if len(per[pi]) > 0 {
			m := pl.gpu
			if !pl.migOn() && m.MIG != nil {
				whole := *m
				whole.MIG = nil
				m = &whole
			}
			b := packing.LowerBounds(m, per[pi])
			pb.bound = b.IsolationLowerBound
			if m.MIG == nil && opts.ExactBudget > 0 {
				pb.bound = max(pb.bound, exactPool(pl, m, per[pi], s.Policy, stop, q, &pb))
			}
		}
		out.pools[pi] = pb
		sum += pb.bound
	}
	out.total = max(sum, int(ceilDivInt(allMem, max(maxMem, 1))), int(ceilDivInt(allComp, 100)))
	if free > 0 {
		q.Note = fmt.Sprintf("%d device(s) of replicas free to run in several pools count toward the total by volume only", free)
	}
	return out
}

func ceilDivInt(a, b int64) int64 {
	if a <= 0 {
		return 0
	}
	return (a + b - 1) / b
}

// migOn says whether the pool's GPUs run MIG.
func (p *pool) migOn() bool {
	return p.gpu.MIG != nil && (p.spec.MIG == "dynamic" || len(p.layout) > 0)
}

// exactPool runs the exact search on every shared isolation group of a
// pool without MIG, smallest first, while the budget lasts, and returns
// the pool's bound: the sum over groups of the most of each group's own
// bound and what the search proved.
func exactPool(pl *pool, m *catalog.GPU, claims []alloc.Claim, pol alloc.Policy, stop func() bool, q *Quality, pb *poolBound) int {
	groups := packing.IsolationGroups(m, claims)
	perBin := clientLimit(pl, pol)
	total := 0
	raised := false
	for gi := range groups {
		g := &groups[gi]
		own := g.Bound(m)
		if g.Alone || len(g.Items) < 2 || stop() {
			total += own
			continue
		}
		q.Exact.Groups++
		ex := packing.PackExact(g.Items, m.MemoryMiB, 100, perBin, exactMaxNodes, stop)
		if ex.Optimal {
			q.Exact.Proved++
		}
		if ex.Bound > own {
			raised = true
		}
		total += max(own, ex.Bound)
		eg := exactGroup{pool: pl, assign: ex.Assign, bins: ex.Bins}
		for _, ci := range g.Claims {
			eg.claims = append(eg.claims, claims[ci].Name)
		}
		pb.groups = append(pb.groups, eg)
	}
	if raised {
		pb.proof = "exact"
	}
	return total
}

// exactMaxNodes bounds one group's search (besides the time budget), so
// that one hard group does not take the whole budget from the others.
const exactMaxNodes = 200000

// clientLimit is the most claims one whole GPU of the pool can serve at
// once: its sharing's replicas or MPS clients, or for a dynamic GPU the
// larger of the fleet's defaults (a bound: the allocator picks the mode).
func clientLimit(pl *pool, pol alloc.Policy) int {
	sh := pl.spec.Sharing
	reps := pol.DefaultReplicas
	if reps <= 0 {
		reps = alloc.DefaultReplicas
	}
	clients := pol.DefaultMaxClients
	if clients <= 0 {
		clients = alloc.MaxMPSClients
	}
	switch sh.Mode {
	case alloc.TimeSlice:
		if sh.Replicas > 0 {
			return sh.Replicas
		}
		return reps
	case alloc.MPS:
		if sh.MaxClients > 0 {
			return sh.MaxClients
		}
		return clients
	case alloc.Exclusive:
		return 1
	}
	return max(reps, clients)
}
