package plan

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/model"
)

// The planner's own order (priority first, biggest first, with look-ahead,
// then refine) is good on the mixes it was tuned on but not on every
// input. best.go runs the orders a simple heuristic would use — first-fit
// decreasing under the common size keys, with and without priority first,
// and with MIG instances capped at a few sizes — through the same
// allocator and growth loop, and keeps the best valid result. Nothing here
// places a claim itself: every order is fed to alloc.State, so no rule can
// break that the allocator keeps.

// Heuristic names an order the planner tries besides its own: a sort key
// and whether priority comes first, look-ahead is used and MIG instances
// are capped.
type Heuristic struct {
	// Key is how replicas are sized: "plan" (the planner's own order:
	// memory, then compute, of a replica), "memory", "compute", "max" (the
	// larger of memory and compute, each as a share of the GPU), "sum"
	// (memory share + compute share) or "product" (their product).
	Key string `json:"key"`
	// Priority puts higher priorities first (the key orders within one).
	Priority bool `json:"priority,omitempty"`
	// Ahead places each replica with AllocateAhead over the replicas after
	// it (a new shared device is sized for its tenant's mates); without
	// it each replica is placed alone (plain first-fit decreasing).
	Ahead bool `json:"ahead,omitempty"`
	// Cap, when > 0, keeps replicas that name no MIG profile (and fit
	// one) off MIG instances bigger than Cap compute slices ("3": 1g, 2g
	// and 3g instances only).
	Cap int `json:"cap,omitempty"`
}

func (h Heuristic) String() string {
	s := "ffd-" + h.Key
	if h.Key == "plan" {
		s = "plan-order"
	}
	if h.Priority {
		s += "+priority"
	}
	if h.Ahead && h.Key != "plan" {
		s += "+ahead"
	}
	if h.Cap > 0 {
		s += "+cap" + strconv.Itoa(h.Cap) + "g"
	}
	return s
}

// SortKeys are the size keys of first-fit decreasing the planner tries.
var SortKeys = []string{"memory", "compute", "max", "sum", "product"}

// Heuristics lists the orders the planner tries for a spec besides its
// own, most useful first (as measured on plantest.RandomSpec): its own
// order without priority (when the spec has more than one), plain
// first-fit decreasing under every sort key (memory, max, sum, compute,
// product), the same priority first, and its own order with MIG instance
// sizes capped at 3, 2 and 1 compute slices when a pool has MIG. Every
// one runs at every size (two at a time on two cores), and the property
// tests (TestNeverBeatenByHeuristics, TestNeverBeatenAtScale) hold the
// planner to never leaving out more replicas, by priority, or using more
// GPUs than first-fit decreasing under any of these keys, priority first
// or not, and MIG caps, run by an independent reference.
func Heuristics(s *model.Spec) []Heuristic { return heuristics(s, false) }

// heuristics is Heuristics for a plan whose first pass ignored
// priorities (flatFits: the spec has several and every replica fit
// without them). Then priorities do not matter: the planner's own order
// is that first pass, the MIG caps run without priority, and no
// priority-first order runs (one is only another permutation of the
// replicas, and priorities are to decide who is left out, never to pack
// differently when nothing is).
func heuristics(s *model.Spec, flatFits bool) []Heuristic {
	prios := map[int]bool{}
	for _, w := range s.Workloads {
		prios[w.Priority] = true
	}
	byPriority := len(prios) > 1 && !flatFits
	var out []Heuristic
	if byPriority {
		out = append(out, Heuristic{Key: "plan", Ahead: true})
	}
	keys := []string{"memory", "max", "sum", "compute", "product"}
	for _, k := range keys {
		out = append(out, Heuristic{Key: k})
	}
	if byPriority {
		for _, k := range keys {
			out = append(out, Heuristic{Key: k, Priority: true})
		}
	}
	if hasMIG(s) {
		for _, c := range []int{3, 2, 1} {
			out = append(out, Heuristic{Key: "plan", Priority: byPriority, Ahead: true, Cap: c})
		}
	}
	return out
}

// hasMIG says whether a pool of the spec may run MIG.
func hasMIG(s *model.Spec) bool {
	for _, p := range s.Pools {
		if p.MIG != "" {
			return true
		}
	}
	return false
}

// order returns the replicas' claims in the heuristic's order, with the
// MIG cap's selector added where it applies.
func (h Heuristic) order(pools []*pool, reps []replica) []alloc.Claim {
	perm := h.perm(pools, reps)
	out := make([]alloc.Claim, len(reps))
	for j, i := range perm {
		out[j] = reps[i].claim
		if h.Cap > 0 {
			capClaim(&out[j], pools, &reps[i], h.Cap)
		}
	}
	return out
}

// perm returns the replicas' indexes in the heuristic's order (stable: a
// workload's replicas stay together, and ties keep the spec's order of
// workloads, whatever order reps came in).
func (h Heuristic) perm(pools []*pool, reps []replica) []int32 {
	type keyed struct {
		k   [2]float64
		pri int
		i   int32
	}
	ks := make([]keyed, len(reps))
	for i := range reps {
		ks[i] = keyed{k: sizeKey(h.Key, pools, &reps[i]), pri: reps[i].wl.Priority, i: int32(i)}
	}
	sort.SliceStable(ks, func(a, b int) bool {
		x, y := &ks[a], &ks[b]
		if h.Priority && x.pri != y.pri {
			return x.pri > y.pri
		}
		if x.k[0] != y.k[0] {
			return x.k[0] > y.k[0]
		}
		if x.k[1] != y.k[1] {
			return x.k[1] > y.k[1]
		}
		if rx, ry := &reps[x.i], &reps[y.i]; rx.w != ry.w {
			return rx.w < ry.w
		}
		return reps[x.i].n < reps[y.i].n
	})
	out := make([]int32, len(ks))
	for j, k := range ks {
		out[j] = k.i
	}
	return out
}

// sameAs returns, for each order, the index of an earlier order that
// places the replicas identically (same permutation, look-ahead and cap),
// or -1: the allocator is deterministic, so such an order's pass would
// repeat the earlier one exactly. Under several sort keys the order of
// the replicas often comes out the same (memory and max on a mix where
// memory dominates), and a pass is the expensive part.
func sameAs(hs []Heuristic, pools []*pool, reps []replica) []int {
	out := make([]int, len(hs))
	perms := make([][]int32, len(hs))
	for i, h := range hs {
		out[i] = -1
		perms[i] = h.perm(pools, reps)
		for j := 0; j < i; j++ {
			if out[j] < 0 && hs[j].Ahead == h.Ahead && hs[j].Cap == h.Cap && slices.Equal(perms[j], perms[i]) {
				out[i] = j
				perms[i] = nil
				break
			}
		}
	}
	return out
}

// sizeKey is a replica's size under a key: the primary value and a
// tie-breaker. Shares are of the GPU of the replica's pool (of the
// biggest GPU when it names none); a device held alone (exclusive, a
// whole GPU's compute) counts as the whole GPU.
func sizeKey(key string, pools []*pool, r *replica) [2]float64 {
	if key == "plan" {
		s := size(r.wl)
		return [2]float64{float64(s[0]), float64(s[1])}
	}
	var memGPU int64
	for _, p := range pools {
		if r.wl.Pool == "" || p.spec.Name == r.wl.Pool {
			memGPU = max(memGPU, p.gpu.MemoryMiB)
		}
	}
	memGPU = max(memGPU, 1)
	var mem, comp, mx, sum, prod float64
	for _, q := range r.claim.Requests {
		n := float64(max(q.Count, 1))
		m, c := float64(q.MemoryMiB)/float64(memGPU), float64(q.ComputePercent)/100
		if q.Mode == alloc.Exclusive || q.ComputePercent >= 100 {
			m, c = 1, 1
		}
		m, c = min(m, 1), min(c, 1)
		mem += n * m
		comp += n * c
		mx += n * max(m, c)
		sum += n * (m + c)
		prod += n * m * c
	}
	// Ties keep the planner's order (biggest memory, then compute, first):
	// memory and compute break their ties by the other dimension, the
	// combined keys by nothing more.
	switch key {
	case "memory":
		return [2]float64{mem, comp}
	case "compute":
		return [2]float64{comp, mem}
	case "max":
		return [2]float64{mx, 0}
	case "sum":
		return [2]float64{sum, 0}
	}
	return [2]float64{prod, 0}
}

// capClaim keeps a replica that names no MIG profile off MIG instances of
// more than c compute slices, when every MIG model it may land on has an
// instance within the cap that holds each of its devices (a capped claim
// must still fit somewhere). Whole GPUs stay allowed.
func capClaim(c *alloc.Claim, pools []*pool, r *replica, maxSlices int) {
	for _, q := range c.Requests {
		if q.Profile != "" || q.Mode == alloc.Exclusive || q.ComputePercent >= 100 {
			return
		}
	}
	for _, p := range pools {
		if p.gpu.MIG == nil || (r.wl.Pool != "" && r.wl.Pool != p.spec.Name) {
			continue
		}
		for _, q := range c.Requests {
			ok := false
			for _, pr := range p.gpu.MIG.Profiles {
				if pr.ComputeSlices <= maxSlices && pr.MemoryMiB >= q.MemoryMiB &&
					pr.ComputeSlices*100 >= q.ComputePercent*p.gpu.MIG.ComputeSlices {
					ok = true
					break
				}
			}
			if !ok {
				return
			}
		}
	}
	var allowed []string
	for k := 1; k <= maxSlices; k++ {
		allowed = append(allowed, "a.profile.startsWith('"+strconv.Itoa(k)+"g.')")
	}
	capSel := "device.attributes['gpu.nvidia.com'].type != 'mig' || " +
		strings.ReplaceAll(strings.Join(allowed, " || "), "a.", "device.attributes['gpu.nvidia.com'].")
	reqs := slices.Clone(c.Requests)
	for i := range reqs {
		if reqs[i].Selector == "" {
			reqs[i].Selector = capSel
		} else {
			reqs[i].Selector = "(" + reqs[i].Selector + ") && (" + capSel + ")"
		}
	}
	c.Requests = reqs
}

// initialNodes sets every pool to the nodes it starts with: none for a
// pool sized "as needed", its own count for a fixed one.
func initialNodes(pools []*pool) {
	for _, pl := range pools {
		pl.nodes = 0
		if !pl.auto {
			pl.nodes = pl.spec.Nodes
		}
	}
}

// heuristicPass places every replica in the heuristic's order on a fresh
// fleet that grows like the first pass's. When limit > 0 the pass gives
// up (nil, no error) as soon as more than limit GPUs hold work: GPUs in
// use never decrease during a pass, so it could not beat a pass that
// placed everything on limit GPUs. It changes the pools' node counts.
func heuristicPass(s *model.Spec, pools []*pool, reps []replica, h Heuristic, limit int) (*pass, error) {
	initialNodes(pools)
	st, err := build(s, pools, nil, nil)
	if err != nil {
		return nil, err
	}
	return orderPass(st, pools, reps, h.order(pools, reps), h.Ahead, limit)
}

// orderPasses runs heuristicPass for each order at once, each on its own
// copy of the pools (a pass grows them), and returns the passes in the
// orders' order; the first error by order wins. The shared inputs (spec,
// replicas, catalog entries) are only read.
func orderPasses(s *model.Spec, pools []*pool, reps []replica, hs []Heuristic, limit int) ([]*pass, error) {
	out := make([]*pass, len(hs))
	errs := make([]error, len(hs))
	var wg sync.WaitGroup
	for i, h := range hs {
		own := make([]*pool, len(pools))
		for j, pl := range pools {
			c := *pl
			own[j] = &c
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], errs[i] = heuristicPass(s, own, reps, h, limit)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// orderPass is placePass with look-ahead optional (without it each claim
// is decided alone: first-fit decreasing as a plain allocator does it)
// and a limit on the GPUs in use (see heuristicPass).
func orderPass(state *alloc.State, pools []*pool, reps []replica, order []alloc.Claim, ahead bool, limit int) (*pass, error) {
	byName := make(map[string]*replica, len(reps))
	for i := range reps {
		byName[reps[i].claim.Name] = &reps[i]
	}
	ps := &pass{state: state, order: order, byName: byName, allocs: make([]*alloc.Allocation, 0, len(order))}
	used := map[string]bool{}
	tried := map[*pool]bool{}
	for i := range order {
		c := &order[i]
		clear(tried)
		for {
			var next []alloc.Claim
			if ahead {
				next = order[i+1:]
			}
			a, err := state.AllocateAheadQuick(c, next)
			if err == nil {
				if err := state.Apply(a); err != nil {
					return nil, fmt.Errorf("plan: %w", err)
				}
				ps.allocs = append(ps.allocs, a)
				for _, d := range a.Devices {
					used[d.GPU] = true
				}
				break
			}
			if !alloc.IsNoFit(err) {
				return nil, fmt.Errorf("workload %s: %w", byName[c.Name].wl.Name, err)
			}
			if !growFor(state, pools, byName[c.Name], tried) {
				ps.unplaced = append(ps.unplaced, i)
				break
			}
		}
		if limit > 0 && len(used) > limit {
			return nil, nil
		}
	}
	for _, pl := range pools {
		ps.nodes = append(ps.nodes, pl.nodes)
	}
	return ps, nil
}

// score ranks passes: fewer replicas left out, counted from the highest
// priority down (a pass that leaves out a low-priority replica beats one
// that leaves out a high-priority one, whatever else); then fewer GPUs
// holding work; then the lower cost per hour of the nodes kept.
type score struct {
	unplaced []int // per priority level, highest first
	gpus     int
	cost     float64
}

func (a score) better(b score) bool {
	for i := range a.unplaced {
		if a.unplaced[i] != b.unplaced[i] {
			return a.unplaced[i] < b.unplaced[i]
		}
	}
	if a.gpus != b.gpus {
		return a.gpus < b.gpus
	}
	return a.cost < b.cost-1e-9
}

// placedAll says whether the pass left nothing out.
func (a score) placedAll() bool {
	for _, n := range a.unplaced {
		if n > 0 {
			return false
		}
	}
	return true
}

func scoreOf(pools []*pool, ps *pass, levels []int) score {
	sc := score{unplaced: make([]int, len(levels)), gpus: ps.state.GPUsUsed()}
	for _, i := range ps.unplaced {
		p := ps.byName[ps.order[i].Name].wl.Priority
		sc.unplaced[slices.Index(levels, p)]++
	}
	_, sc.cost = trim(pools, ps)
	return sc
}

// priorityLevels lists the spec's priorities, highest first.
func priorityLevels(reps []replica) []int {
	var out []int
	for i := range reps {
		if !slices.Contains(out, reps[i].wl.Priority) {
			out = append(out, reps[i].wl.Priority)
		}
	}
	sort.Sort(sort.Reverse(sort.IntSlice(out)))
	return out
}

// HeuristicGPUs places the spec's replicas in one heuristic order alone
// (no other order, no local search) and returns the GPUs holding work and
// the replicas left out: the baseline the plan-quality figures compare
// the planner with.
func HeuristicGPUs(s *model.Spec, h Heuristic) (gpus, unplaced int, err error) {
	pools, err := resolvePools(catalog.Default(), s)
	if err != nil {
		return 0, 0, err
	}
	ps, err := heuristicPass(s, pools, replicas(s), h, 0)
	if err != nil {
		return 0, 0, err
	}
	return ps.state.GPUsUsed(), len(ps.unplaced), nil
}
