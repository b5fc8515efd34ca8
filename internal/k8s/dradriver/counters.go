package dradriver

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/mig"
)

// The counters a MIG-capable GPU's devices consume are the fewest that
// still allow exactly the layouts mig.Geometry.CanAdd allows, because the
// stock allocator converts, validates and checks every consumption of
// every device of a node on each Filter call (see docs/scheduler-cost.md):
//
//   - The whole GPU, the shared GPU and each tenant's copy consume only
//     "instances", all of them (MaxInstances); every MIG placement
//     consumes one. So any one of them excludes every MIG instance and
//     every other of them, and nothing else is needed to say so.
//   - A MIG placement consumes the memory slices it covers, except a
//     slice every placement covering it also covers another kept slice
//     with (on an A100 every placement on slice 7 covers slice 6): two
//     placements that share that slice share the other one too.
//   - The compute-slices counter, each profile's count and the media
//     extension are kept only where some set of placements the other
//     counters allow breaks the rule they carry; placementCounters
//     enumerates those sets to decide (a few thousand per model).
//
// The result depends only on the geometry and the published profiles and
// is cached.

// counterPlan is what one GPU model's devices consume.
type counterPlan struct {
	// set is the counter set (name → capacity) every GPU of the model has.
	set map[string]int
	// mig[p][i] is what profile p at its i-th start consumes (nil for a
	// profile that is not published).
	mig [][]map[string]int
	// whole is what the whole GPU, the shared GPU and the copies consume.
	whole map[string]int
}

var plans sync.Map // planKey → *counterPlan

type planKey struct {
	model    string
	profiles string
}

// placementCounters is the counter plan of geo with the profiles in
// publish (nil: all).
func placementCounters(geo *mig.Geometry, publish []bool) *counterPlan {
	key := planKey{geo.Model, fmt.Sprint(publish)}
	if p, ok := plans.Load(key); ok {
		return p.(*counterPlan)
	}
	p := buildPlan(geo, publish)
	plans.Store(key, p)
	return p
}

type placement struct{ p, i, start int }

func buildPlan(geo *mig.Geometry, publish []bool) *counterPlan {
	var ps []placement
	for p := range geo.Shapes {
		if publish != nil && !publish[p] {
			continue
		}
		for i, st := range geo.Shapes[p].Starts {
			ps = append(ps, placement{p, i, st})
		}
	}
	// Every counter the full rules need, per placement.
	full := make([]map[string]int, len(ps))
	capacity := map[string]int{counterInstances: geo.MaxInstances, counterCompute: geo.ComputeSlices, counterME: 1}
	for i := range geo.Slices {
		capacity[counterSlice(i)] = 1
	}
	for p := range geo.Shapes {
		capacity[counterProfile(geo.Shapes[p].Name)] = geo.Shapes[p].MaxCount
	}
	for k, pl := range ps {
		s := &geo.Shapes[pl.p]
		use := map[string]int{counterInstances: 1, counterCompute: s.Compute, counterProfile(s.Name): 1}
		for i := pl.start; i < pl.start+s.Size; i++ {
			use[counterSlice(i)] = 1
		}
		if s.ME {
			use[counterME] = 1
		}
		full[k] = use
	}
	keep := map[string]bool{counterInstances: true}
	users := func(c string) map[int]bool {
		u := map[int]bool{}
		for k := range ps {
			if full[k][c] > 0 {
				u[k] = true
			}
		}
		return u
	}
	// Memory slices: drop slice i when every placement on it also covers
	// a slice j whose placements are a strict superset (or the same, and
	// j is lower): a strict order, so each dropped slice leads to a kept
	// one that two placements sharing i both consume.
	for i := range geo.Slices {
		ui := users(counterSlice(i))
		if len(ui) == 0 {
			continue
		}
		dominated := false
		for j := range geo.Slices {
			uj := users(counterSlice(j))
			if j == i || len(uj) < len(ui) || (len(uj) == len(ui) && j > i) {
				continue
			}
			sub := true
			for k := range ui {
				sub = sub && uj[k]
			}
			if sub {
				dominated = true
				break
			}
		}
		if !dominated {
			keep[counterSlice(i)] = true
		}
	}
	// The other rules: start with all of them and drop each one whose
	// absence lets no set of placements through that the rules refuse.
	var others []string
	for c := range capacity {
		if !keep[c] && !strings.HasPrefix(c, "memory-slice-") && len(users(c)) > 0 {
			others = append(others, c)
			keep[c] = true
		}
	}
	slices.Sort(others)
	if !allowsOnlyValid(geo, ps, full, capacity, keep) {
		// Cannot happen: every rule has its counter here. Keep them all.
		for c := range capacity {
			keep[c] = len(users(c)) > 0 || c == counterInstances
		}
	} else {
		for _, c := range others {
			keep[c] = false
			if !allowsOnlyValid(geo, ps, full, capacity, keep) {
				keep[c] = true
			}
		}
	}
	plan := &counterPlan{set: map[string]int{}, mig: make([][]map[string]int, len(geo.Shapes)),
		whole: map[string]int{counterInstances: geo.MaxInstances}}
	for c, ok := range keep {
		if ok {
			plan.set[c] = capacity[c]
		}
	}
	for p := range geo.Shapes {
		if publish == nil || publish[p] {
			plan.mig[p] = make([]map[string]int, len(geo.Shapes[p].Starts))
		}
	}
	for k, pl := range ps {
		use := map[string]int{}
		for c, n := range full[k] {
			if plan.set[c] > 0 {
				use[c] = n
			}
		}
		plan.mig[pl.p][pl.i] = use
	}
	return plan
}

// allowsOnlyValid enumerates every set of placements the kept counters
// allow and says whether the placement rules allow each.
func allowsOnlyValid(geo *mig.Geometry, ps []placement, full []map[string]int, capacity map[string]int, keep map[string]bool) bool {
	left := map[string]int{}
	for c := range keep {
		left[c] = capacity[c]
	}
	var dfs func(from int, occ mig.Occupancy) bool
	dfs = func(from int, occ mig.Occupancy) bool {
		for k := from; k < len(ps); k++ {
			fits := true
			for c, n := range full[k] {
				if keep[c] && left[c] < n {
					fits = false
					break
				}
			}
			if !fits {
				continue
			}
			if !geo.CanAdd(occ, ps[k].p, ps[k].start) {
				return false
			}
			for c, n := range full[k] {
				if keep[c] {
					left[c] -= n
				}
			}
			ok := dfs(k+1, geo.Add(occ, ps[k].p, ps[k].start))
			for c, n := range full[k] {
				if keep[c] {
					left[c] += n
				}
			}
			if !ok {
				return false
			}
		}
		return true
	}
	return dfs(0, mig.Occupancy{})
}

// ParseMIGProfiles reads the driver's --mig-profiles: "all" (or empty)
// publishes every MIG profile (nil); "none" publishes none ([]string{}:
// MIG-capable GPUs are whole and shared GPUs only); else a comma-
// separated list of profile names (1g.5gb,3g.20gb,7g.40gb), each a
// profile of some MIG-capable model in cat (a GPU lacking one publishes
// the others). Duplicates are merged; the result is sorted.
func ParseMIGProfiles(s string, cat *catalog.Catalog) ([]string, error) {
	s = strings.TrimSpace(s)
	switch s {
	case "", "all":
		return nil, nil
	case "none":
		return []string{}, nil
	}
	if cat == nil {
		cat = catalog.Default()
	}
	known := map[string]bool{}
	for _, m := range cat.GPUs() {
		if m.MIG == nil {
			continue
		}
		for _, p := range m.MIG.Profiles {
			known[p.Name] = true
		}
	}
	out := []string{}
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if p == "all" || p == "none" {
			return nil, fmt.Errorf("MIG profiles %q: %q stands alone, not in a list", s, p)
		}
		if !known[p] {
			names := make([]string, 0, len(known))
			for n := range known {
				names = append(names, n)
			}
			slices.Sort(names)
			msg := fmt.Sprintf("MIG profile %q: no MIG-capable GPU of the catalog has it; want all, none or a comma-separated list of %s", p, strings.Join(names, ", "))
			if sug := catalog.Suggest(p, names); sug != "" {
				msg += fmt.Sprintf(" (did you mean %s?)", sug)
			}
			return nil, errors.New(msg)
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("MIG profiles %q: no profile named; want all, none or a list such as 1g.5gb,3g.20gb", s)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}
