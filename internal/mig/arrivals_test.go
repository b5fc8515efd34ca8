package mig

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// arrivalTree is every arrival sequence of a geometry: every order of
// every multiset of plain profiles that fits (prefixes included, since
// arrivals may stop anywhere), as a tree of requests.
type arrivalTree struct {
	g    *Geometry
	fits map[[maxProfiles]uint8]bool
	ps   []int // the plain profiles
}

func newArrivalTree(g *Geometry) *arrivalTree {
	t := &arrivalTree{g: g, fits: map[[maxProfiles]uint8]bool{}}
	for _, ms := range fittingMultisets(g) {
		var c [maxProfiles]uint8
		for _, p := range ms {
			c[p]++
		}
		t.fits[c] = true
	}
	for p := range g.Shapes {
		if !g.Shapes[p].ME {
			t.ps = append(t.ps, p)
		}
	}
	return t
}

// follows lists the profiles that may arrive after counts c.
func (t *arrivalTree) follows(c [maxProfiles]uint8) []int {
	var out []int
	for _, p := range t.ps {
		c2 := c
		c2[p]++
		if t.fits[c2] {
			out = append(out, p)
		}
	}
	return out
}

// run places every sequence with rule and returns how many it serves
// (the empty one excluded) and the minimal sequences it does not: those
// whose last request is the first it cannot place.
func (t *arrivalTree) run(rule onlineRule) (served int, lost [][]int) {
	var rec func(o Occupancy, seq []int)
	rec = func(o Occupancy, seq []int) {
		for _, p := range t.follows(o.Counts) {
			next := append(slices.Clone(seq), p)
			st, ok := rule(t.g, o, p)
			if !ok {
				lost = append(lost, next)
				continue
			}
			served++
			rec(t.g.Add(o, p, st), next)
		}
	}
	rec(Occupancy{}, nil)
	return served, lost
}

// total counts the sequences (the empty one excluded).
func (t *arrivalTree) total() int {
	memo := map[[maxProfiles]uint8]int{}
	var rec func(c [maxProfiles]uint8) int
	rec = func(c [maxProfiles]uint8) int {
		if v, ok := memo[c]; ok {
			return v
		}
		n := 1
		for _, p := range t.follows(c) {
			c2 := c
			c2[p]++
			n += rec(c2)
		}
		memo[c] = n
		return n
	}
	return rec([maxProfiles]uint8{}) - 1
}

// bestAnyOrder is how many sequences the best online rule serves, by
// exhaustive search over the rule's choice of start at every request
// (a choice depends only on the instances placed, so per occupancy).
func (t *arrivalTree) bestAnyOrder() int {
	memo := map[Occupancy]int{}
	var rec func(o Occupancy) int
	rec = func(o Occupancy) int {
		if v, ok := memo[o]; ok {
			return v
		}
		n := 1
		for _, p := range t.follows(o.Counts) {
			best := 0
			if t.g.countsAllow(&o, p) {
				for si, m := range t.g.Shapes[p].masks {
					if o.Mask&m == 0 {
						best = max(best, rec(t.g.Add(o, p, t.g.Shapes[p].Starts[si])))
					}
				}
			}
			n += best
		}
		memo[o] = n
		return n
	}
	return rec(Occupancy{}) - 1
}

// bestLex is the best any online rule can do on the pair (small-first
// sequences served, sequences served), compared small-first first, by
// exhaustive search over every rule's choices. A rule here may look at the
// whole history (whether the requests so far came small-first), not only
// at the occupancy, so this bounds BestStart from above independently of
// its own tables.
func (t *arrivalTree) bestLex() (sf, all int) {
	type key struct {
		o      Occupancy
		sorted bool
		last   int
	}
	memo := map[key][2]int{}
	before := func(a, b int) bool { // a may come after b small-first
		sa, sb := &t.g.Shapes[a], &t.g.Shapes[b]
		return sa.Size < sb.Size || (sa.Size == sb.Size && (sa.Compute < sb.Compute || (sa.Compute == sb.Compute && a < b)))
	}
	var rec func(k key) [2]int
	rec = func(k key) [2]int {
		if v, ok := memo[k]; ok {
			return v
		}
		v := [2]int{0, 1}
		if k.sorted {
			v[0] = 1
		}
		for _, p := range t.follows(k.o.Counts) {
			var best [2]int
			if t.g.countsAllow(&k.o, p) {
				for si, m := range t.g.Shapes[p].masks {
					if k.o.Mask&m != 0 {
						continue
					}
					c := rec(key{t.g.Add(k.o, p, t.g.Shapes[p].Starts[si]), k.sorted && (k.last < 0 || !before(p, k.last)), p})
					if c[0] > best[0] || (c[0] == best[0] && c[1] > best[1]) {
						best = c
					}
				}
			}
			v[0] += best[0]
			v[1] += best[1]
		}
		memo[k] = v
		return v
	}
	v := rec(key{Occupancy{}, true, -1})
	return v[0] - 1, v[1] - 1
}

// coverSearch decides whether some online rule serves a sequence that
// rule does not, as well as every sequence rule serves.
type coverSearch struct {
	t    *arrivalTree
	rule onlineRule
	memo map[[2]Occupancy]bool
}

// covers: some rule, at occupancy a after the same requests that left
// rule at r (rOK false: rule already failed one), serves every
// continuation rule serves from r, and path too.
func (c *coverSearch) covers(a, r Occupancy, rOK bool, path []int) bool {
	if !rOK && len(path) == 0 {
		return true
	}
	key := [2]Occupancy{a, r}
	if len(path) == 0 {
		if v, ok := c.memo[key]; ok {
			return v
		}
	}
	g := c.t.g
	var need []int
	if rOK {
		for _, p := range c.t.follows(r.Counts) {
			if _, ok := c.rule(g, r, p); ok {
				need = append(need, p)
			}
		}
	}
	if len(path) > 0 && !slices.Contains(need, path[0]) {
		need = append(need, path[0])
	}
	ok := true
	for _, p := range need {
		var r2 Occupancy
		ok2 := false
		if rOK {
			var st int
			if st, ok2 = c.rule(g, r, p); ok2 {
				r2 = g.Add(r, p, st)
			}
		}
		var rest []int
		if len(path) > 0 && path[0] == p {
			rest = path[1:]
		}
		found := false
		if g.countsAllow(&a, p) {
			for si, m := range g.Shapes[p].masks {
				if a.Mask&m == 0 && c.covers(g.Add(a, p, g.Shapes[p].Starts[si]), r2, ok2, rest) {
					found = true
					break
				}
			}
		}
		if !found {
			ok = false
			break
		}
	}
	if len(path) == 0 {
		c.memo[key] = ok
	}
	return ok
}

// shapeGroups groups the catalog's MIG models by geometry shape, each
// group named after its first model in catalog order.
func shapeGroups(t *testing.T) (names []string, groups map[string][]*Geometry) {
	groups = map[string][]*Geometry{}
	first := map[string]string{}
	for _, gpu := range catalog.Default().GPUs() {
		if gpu.MIG == nil {
			continue
		}
		g, err := New(&gpu)
		if err != nil {
			t.Fatal(err)
		}
		sig := shapeSignature(g)
		if _, ok := first[sig]; !ok {
			first[sig] = g.Model
			names = append(names, g.Model)
		}
		groups[first[sig]] = append(groups[first[sig]], g)
	}
	return names, groups
}

// TestArrivalsServedOrUnavoidable is the online property over every
// arrival order on every MIG model of the catalog (A100 40/80 GB, A30,
// H100 SXM/PCIe/NVL, H200, GH200, B200, GB200, B300, GB300, RTX PRO 6000):
// each sequence of requests whose multiset fits, arriving one by one, each
// placed by BestStart before the next comes and none removed, is placed
// in full — or it is one of the documented sequences
// (testdata/unavoidable-arrivals.golden, minimal ones: the last request is
// the one that fails) that no online rule can serve without failing
// another sequence BestStart serves (exhaustive search over every rule's
// choices, coverSearch). So no rule serves a strict superset of what
// BestStart serves. The test also checks the counts against exhaustive
// search: BestStart serves as many small-first orders as the best online
// rule, and as many orders in all as the best rule that does (bestLex).
// The second check is the stronger one: Room and Capacity (the rules
// before) also lose only such unavoidable sequences, yet serve 370 and
// 316 of the 424 orders of an 8-slice GPU where BestStart serves 384.
func TestArrivalsServedOrUnavoidable(t *testing.T) {
	shapeNames, groups := shapeGroups(t)
	var golden strings.Builder
	golden.WriteString("# Arrival sequences BestStart does not place in full, minimal ones (the last\n" +
		"# request is the first that fails), per geometry shape, in the names of the\n" +
		"# shape's first model. Each is proved unavoidable by TestArrivalsServedOrUnavoidable:\n" +
		"# no online rule serves it and every sequence BestStart serves.\n")
	for _, name := range shapeNames {
		var ref []string
		for i, g := range groups[name] {
			at := newArrivalTree(g)
			served, lost := at.run(bestStartRule)
			total, best := at.total(), at.bestAnyOrder()
			sf, all := g.SmallFirst(Occupancy{})
			if int64(served) != all-1 || int64(best) != g.AnyOrder(Occupancy{})-1 {
				t.Errorf("%s: serves %d sequences, SmallFirst says %d; best online %d, AnyOrder says %d", g.Model, served, all-1, best, g.AnyOrder(Occupancy{})-1)
			}
			seqs := fittingMultisets(g)
			sfServed := 0
			for _, s := range seqs {
				if online(g, bestStartRule, s) == len(s) {
					sfServed++
				}
			}
			if bo := bestOnline(g, seqs); sfServed != bo || int64(sfServed) != sf-1 {
				t.Errorf("%s: serves %d of %d small-first multisets, best online %d, SmallFirst says %d", g.Model, sfServed, len(seqs), bo, sf-1)
			}
			if bs, ba := at.bestLex(); bs != sfServed || ba != served {
				t.Errorf("%s: serves (%d small-first, %d in all); the best online rule serves (%d, %d)", g.Model, sfServed, served, bs, ba)
			}
			cs := &coverSearch{t: at, rule: bestStartRule, memo: map[[2]Occupancy]bool{}}
			var lines []string
			for _, s := range lost {
				if cs.covers(Occupancy{}, Occupancy{}, true, s) {
					t.Errorf("%s: %s is not placed, yet some online rule places it and everything BestStart places", g.Model, names(groups[name][0], s))
				}
				lines = append(lines, names(groups[name][0], s)) // same shape: profile indexes match
			}
			sort.Strings(lines)
			if i == 0 {
				ref = lines
				fmt.Fprintf(&golden, "\n## %s (%s): %d of %d sequences served (best online rule %d), %d of %d small-first\n",
					name, modelsOf(groups[name]), served, total, best, sfServed, len(seqs))
				for _, l := range lines {
					golden.WriteString(l + "\n")
				}
				t.Logf("%s: %d of %d sequences served (best online %d, capacity rule %d); small-first %d of %d; %d minimal sequences lost",
					name, served, total, best, func() int { n, _ := at.run(capacityRule); return n }(), sfServed, len(seqs), len(lost))
			} else if !slices.Equal(lines, ref) {
				t.Errorf("%s loses %v, %s (same shape) %v", g.Model, lines, name, ref)
			}
		}
	}
	// the sequences BestStart loses
	testkit.Golden(t, filepath.Join("testdata", "unavoidable-arrivals.golden"), []byte(golden.String()))
}

func modelsOf(gs []*Geometry) string {
	var out []string
	for _, g := range gs {
		out = append(out, g.Model)
	}
	return strings.Join(out, ", ")
}

// Random arrival orders (seeded) of fitting multisets, on every model: each
// is placed in full or has a documented minimal failing prefix. The
// exhaustive test above covers these; this one reads as the issue asks and
// reports rates.
func TestRandomArrivalOrders(t *testing.T) {
	_, groups := shapeGroups(t)
	for name, gs := range groups {
		for _, g := range gs {
			at := newArrivalTree(g)
			_, lost := at.run(bestStartRule)
			unavoidable := map[string]bool{}
			for _, s := range lost {
				unavoidable[names(g, s)] = true
			}
			seqs := fittingMultisets(g)
			rng := rand.New(rand.NewPCG(27, 5))
			failed := 0
			const n = 2000
			for range n {
				s := slices.Clone(seqs[rng.IntN(len(seqs))])
				rng.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
				k := online(g, bestStartRule, s)
				if k == len(s) {
					continue
				}
				failed++
				if !unavoidable[names(g, s[:k+1])] {
					t.Errorf("%s: %s fails at request %d, not a known unavoidable sequence", g.Model, names(g, s), k+1)
				}
			}
			if g.Model == name {
				t.Logf("%s: %d random orders of fitting multisets (seed 27), %.1f%% not placed in full, each an unavoidable one", g.Model, n, 100*float64(failed)/n)
			}
		}
	}
}
