package mig

import (
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/catalog"
)

// The brute-force oracle below shares no code with the package: it works on
// (profile, start) pairs with interval arithmetic instead of masks, and
// enumerates by plain recursion. Every answer of the package is checked
// against it.

type bfInst struct {
	p, start int
}

type oracle struct {
	g     *Geometry // only its Shapes and limits are read
	all   [][]bfInst
	pairs []bfInst

	capacities map[string]int // capacity by layoutKey
}

func newOracle(g *Geometry) *oracle {
	o := &oracle{g: g}
	for p, s := range g.Shapes {
		for _, st := range s.Starts {
			o.pairs = append(o.pairs, bfInst{p, st})
		}
	}
	var cur []bfInst
	var rec func(k int)
	rec = func(k int) {
		if k == len(o.pairs) {
			if o.valid(cur) {
				o.all = append(o.all, append([]bfInst(nil), cur...))
			}
			return
		}
		rec(k + 1)
		cur = append(cur, o.pairs[k])
		if o.valid(cur) { // validity is monotone: prune invalid prefixes
			rec(k + 1)
		}
		cur = cur[:len(cur)-1]
	}
	rec(0)
	return o
}

func (o *oracle) valid(l []bfInst) bool {
	g := o.g
	counts := map[int]int{}
	compute, me := 0, 0
	for i, a := range l {
		s := g.Shapes[a.p]
		allowed := false
		for _, st := range s.Starts {
			allowed = allowed || st == a.start
		}
		if !allowed {
			return false
		}
		for _, b := range l[:i] {
			sb := g.Shapes[b.p]
			if a.start < b.start+sb.Size && b.start < a.start+s.Size {
				return false
			}
		}
		counts[a.p]++
		compute += s.Compute
		if s.ME {
			me++
		}
	}
	for p, n := range counts {
		if n > g.Shapes[p].MaxCount {
			return false
		}
	}
	return me <= 1 && len(l) <= g.MaxInstances && compute <= g.ComputeSlices
}

// maxAdd is the most instances of p that can join l, by exhaustive search.
func (o *oracle) maxAdd(l []bfInst, p int) int {
	best := 0
	var rec func(cur []bfInst, from, n int)
	rec = func(cur []bfInst, from, n int) {
		best = max(best, n)
		for _, st := range o.g.Shapes[p].Starts {
			if st < from {
				continue
			}
			next := append(append([]bfInst(nil), cur...), bfInst{p, st})
			if o.valid(next) {
				rec(next, st+1, n+1)
			}
		}
	}
	rec(l, 0, 0)
	return best
}

// capacity is what maxAdd says for every plain profile, weighted by its
// size; it depends only on the set l (valid ignores order), so each set is
// searched once per oracle.
func (o *oracle) capacity(l []bfInst) int {
	k := layoutKey(l)
	if c, ok := o.capacities[k]; ok {
		return c
	}
	c := o.searchCapacity(l)
	if o.capacities == nil {
		o.capacities = map[string]int{}
	}
	o.capacities[k] = c
	return c
}

func (o *oracle) searchCapacity(l []bfInst) int {
	total := 0
	for p, s := range o.g.Shapes {
		if !s.ME {
			total += s.Size * o.maxAdd(l, p)
		}
	}
	return total
}

func (o *oracle) maximal(l []bfInst, includeME bool) bool {
	for _, pr := range o.pairs {
		if o.g.Shapes[pr.p].ME && !includeME {
			continue
		}
		if o.valid(append(append([]bfInst(nil), l...), pr)) {
			return false
		}
	}
	return true
}

func (o *oracle) multiset(l []bfInst) string {
	names := make([]string, len(l))
	for i, a := range l {
		names[i] = o.g.Shapes[a.p].Name
	}
	sort.Strings(names)
	return strings.Join(names, "+")
}

func (o *oracle) toLayout(l []bfInst) Layout {
	out := make(Layout, len(l))
	for i, a := range l {
		out[i] = Instance{Profile: o.g.Shapes[a.p].Name, Start: a.start}
	}
	return out
}

func (o *oracle) fromLayout(t *testing.T, l Layout) []bfInst {
	t.Helper()
	out := make([]bfInst, len(l))
	for i, in := range l {
		p, err := o.g.Profile(in.Profile)
		if err != nil {
			t.Fatalf("layout %s: %v", l, err)
		}
		out[i] = bfInst{p, in.Start}
	}
	return out
}

func sortedMultiset(names []string) string {
	s := append([]string(nil), names...)
	sort.Strings(s)
	return strings.Join(s, "+")
}

// migModels returns a geometry and an oracle for every MIG-capable model in
// the built-in catalog.
func migModels(t testing.TB) map[string]*Geometry {
	t.Helper()
	out := map[string]*Geometry{}
	for _, gpu := range catalog.Default().GPUs() {
		if gpu.MIG == nil {
			continue
		}
		geo, err := New(&gpu)
		if err != nil {
			t.Fatalf("model %s: %v", gpu.ID, err)
		}
		out[gpu.ID] = geo
	}
	if len(out) < 8 {
		t.Fatalf("only %d MIG-capable models in the catalog", len(out))
	}
	return out
}

// room counts the distinct multisets of non-+me profiles that some valid
// layout adds to l: every layout of the oracle that contains l and adds
// only non-+me instances, keyed by what it adds.
func (o *oracle) room(l []bfInst) int {
	have := make([][]bool, len(o.g.Shapes)) // by profile, then start
	for p := range have {
		have[p] = make([]bool, o.g.Slices)
	}
	for _, a := range l {
		have[a.p][a.start] = true
	}
	seen := map[string]bool{}
	var added []bfInst
	for _, full := range o.all {
		// First whether full contains l and adds no +me instance (most
		// layouts do not), then what it adds.
		n := 0
		ok := true
		for _, a := range full {
			switch {
			case have[a.p][a.start]:
				n++
			case o.g.Shapes[a.p].ME:
				ok = false
			}
		}
		if !ok || n != len(l) {
			continue
		}
		added = added[:0]
		for _, a := range full {
			if !have[a.p][a.start] {
				added = append(added, a)
			}
		}
		seen[o.multiset(added)] = true
	}
	return len(seen)
}

// arrivalOracle computes AnyOrder and SmallFirst from their definitions on
// the oracle's layouts: a sequence may follow l when the multiset of l and
// the sequence is that of some valid layout; the best online play is the
// maximum over each request's valid starts.
type arrivalOracle struct {
	*oracle
	fits  map[string]bool
	any   map[string]int64
	small map[string][2]int64
}

func newArrivalOracle(o *oracle) *arrivalOracle {
	a := &arrivalOracle{oracle: o, fits: map[string]bool{}, any: map[string]int64{}, small: map[string][2]int64{}}
	for _, l := range o.all {
		a.fits[o.multiset(l)] = true
	}
	return a
}

func layoutKey(l []bfInst) string {
	s := make([]string, len(l))
	for i, a := range l {
		s[i] = strconv.Itoa(a.p) + "@" + strconv.Itoa(a.start)
	}
	sort.Strings(s)
	return strings.Join(s, ",")
}

// next lists, for each plain profile whose addition to l still fits some
// layout, the layouts reached by placing it at each valid start (possibly
// none).
func (a *arrivalOracle) next(l []bfInst) map[int][][]bfInst {
	out := map[int][][]bfInst{}
	for p, s := range a.g.Shapes {
		if s.ME {
			continue
		}
		with := append(slices.Clone(l), bfInst{p, -1})
		if !a.fits[a.multiset(with)] {
			continue
		}
		out[p] = [][]bfInst{}
		for _, st := range s.Starts {
			n := append(slices.Clone(l), bfInst{p, st})
			if a.valid(n) {
				out[p] = append(out[p], n)
			}
		}
	}
	return out
}

func (a *arrivalOracle) anyOrder(l []bfInst) int64 {
	k := layoutKey(l)
	if v, ok := a.any[k]; ok {
		return v
	}
	n := int64(1)
	for _, ls := range a.next(l) {
		best := int64(0)
		for _, c := range ls {
			best = max(best, a.anyOrder(c))
		}
		n += best
	}
	a.any[k] = n
	return n
}

// before is the small-first order of two profiles.
func (a *arrivalOracle) before(p, q int) bool {
	sp, sq := a.g.Shapes[p], a.g.Shapes[q]
	return sp.Size < sq.Size || (sp.Size == sq.Size && (sp.Compute < sq.Compute || (sp.Compute == sq.Compute && p < q)))
}

func (a *arrivalOracle) smallFirst(l []bfInst) [2]int64 {
	k := layoutKey(l)
	if v, ok := a.small[k]; ok {
		return v
	}
	last := -1
	for _, x := range l {
		if last < 0 || a.before(last, x.p) {
			last = x.p
		}
	}
	v := [2]int64{1, 1}
	for p, ls := range a.next(l) {
		var best [2]int64
		for _, c := range ls {
			if last >= 0 && a.before(p, last) {
				best[1] = max(best[1], a.anyOrder(c))
				continue
			}
			if s := a.smallFirst(c); s[0] > best[0] || (s[0] == best[0] && s[1] > best[1]) {
				best = s
			}
		}
		v[0] += best[0]
		v[1] += best[1]
	}
	a.small[k] = v
	return v
}
