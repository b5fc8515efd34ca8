package mig

import (
	"slices"
	"strings"
	"testing"
)

// onlineRule picks a start for profile p next to o, or false.
type onlineRule func(g *Geometry, o Occupancy, p int) (int, bool)

// capacityRule is the rule before Room: highest Capacity, lowest start.
func capacityRule(g *Geometry, o Occupancy, p int) (int, bool) {
	if !g.countsAllow(&o, p) {
		return 0, false
	}
	best, bestCap := 0, -1
	for si, m := range g.Shapes[p].masks {
		if o.Mask&m == 0 {
			if c := g.Capacity(g.Add(o, p, g.Shapes[p].Starts[si])); c > bestCap {
				best, bestCap = g.Shapes[p].Starts[si], c
			}
		}
	}
	return best, bestCap >= 0
}

// bestStartRule is the rule now: BestStart (arrivals.go).
func bestStartRule(g *Geometry, o Occupancy, p int) (int, bool) { return g.BestStart(o, p) }

// fittingMultisets lists every multiset of non-+me profiles that some valid
// layout holds, each small-first: memory slices, then compute slices.
func fittingMultisets(g *Geometry) [][]int {
	seen := map[[maxProfiles]uint8]bool{}
	var out [][]int
	g.walk(false, func(o Occupancy, l Layout) {
		if len(l) == 0 || seen[o.Counts] {
			return
		}
		seen[o.Counts] = true
		var ps []int
		for _, in := range l {
			ps = append(ps, g.byName[strings.ToLower(in.Profile)])
		}
		slices.SortFunc(ps, func(a, b int) int {
			if d := g.Shapes[a].Size - g.Shapes[b].Size; d != 0 {
				return d
			}
			if d := g.Shapes[a].Compute - g.Shapes[b].Compute; d != 0 {
				return d
			}
			return a - b
		})
		out = append(out, ps)
	})
	return out
}

// online places seq one request at a time and returns how many it placed.
func online(g *Geometry, rule onlineRule, seq []int) int {
	o := Occupancy{}
	for i, p := range seq {
		st, ok := rule(g, o, p)
		if !ok {
			return i
		}
		o = g.Add(o, p, st)
	}
	return len(seq)
}

// bestOnline is how many of the sequences the best online rule serves: a
// rule sees only the requests so far, so sequences with a common prefix
// share its choices; the search tries every start at every prefix.
func bestOnline(g *Geometry, seqs [][]int) int {
	var rec func(prefix []int, o Occupancy) int
	rec = func(prefix []int, o Occupancy) int {
		n, next := 0, map[int]bool{}
		for _, s := range seqs {
			if len(s) >= len(prefix) && slices.Equal(s[:len(prefix)], prefix) {
				if len(s) == len(prefix) {
					n++
				} else {
					next[s[len(prefix)]] = true
				}
			}
		}
		for p := range next {
			best := 0
			if g.countsAllow(&o, p) {
				for si, m := range g.Shapes[p].masks {
					if o.Mask&m == 0 {
						best = max(best, rec(append(slices.Clone(prefix), p), g.Add(o, p, g.Shapes[p].Starts[si])))
					}
				}
			}
			n += best
		}
		return n
	}
	return rec(nil, Occupancy{})
}

func names(g *Geometry, seq []int) string {
	var n []string
	for _, p := range seq {
		n = append(n, g.Shapes[p].Name)
	}
	return strings.Join(n, ",")
}

// The property: for small-first arrivals (each multiset that fits, in
// non-decreasing size), BestStart serves exactly as many multisets as the
// best online rule can (exhaustive search over all online rules); no rule
// serves all of them on an 8-slice GPU, so this is the strongest
// guarantee there is. On the A30 every one is served.
// TestArrivalsServedOrUnavoidable holds every order, on every model.
func TestBestStartIsBestOnlineSmallFirst(t *testing.T) {
	for model, want := range map[string][3]int{
		// served by BestStart, by Capacity (the rule before Room), multisets
		"A100-40GB":     {68, 66, 77},
		"H100-80GB-SXM": {68, 66, 77},
		"A30":           {9, 9, 9},
	} {
		g := geometry(t, model)
		seqs := fittingMultisets(g)
		best := bestOnline(g, seqs)
		served := map[string]int{}
		for name, rule := range map[string]onlineRule{"beststart": bestStartRule, "capacity": capacityRule} {
			var lost []string
			for _, s := range seqs {
				if online(g, rule, s) == len(s) {
					served[name]++
				} else {
					lost = append(lost, names(g, s))
				}
			}
			t.Logf("%s %s: small-first serves %d of %d multisets (best online %d); loses %s", model, name, served[name], len(seqs), best, strings.Join(lost, " | "))
		}
		if served["beststart"] != best || [3]int{served["beststart"], served["capacity"], len(seqs)} != want {
			t.Errorf("%s: BestStart %d, capacity %d of %d, best online %d; want %v", model, served["beststart"], served["capacity"], len(seqs), best, want)
		}
	}
}

// No online rule serves both 1g,1g,1g,4g and 1g,1g,2g,3g: the first needs
// the first 1g in slices 4-6, the second in 0-3.
func TestSmallFirstConflict(t *testing.T) {
	g := geometry(t, "A100-40GB")
	for st := range 7 {
		a := fitsAfter(t, g, "1g.5gb@"+itoa(st), []string{"1g.5gb", "1g.5gb", "4g.20gb"})
		b := fitsAfter(t, g, "1g.5gb@"+itoa(st), []string{"1g.5gb", "2g.10gb", "3g.20gb"})
		if a && b {
			t.Fatalf("1g@%d serves both", st)
		}
	}
}

func itoa(i int) string { return string(rune('0' + i)) }

func fitsAfter(t *testing.T, g *Geometry, have string, want []string) bool {
	_, err := g.FitInto(mustParse(t, have), want)
	return err == nil
}

// The arrival orders of issue 27, online: each request placed before the
// next arrives. Where a sequence is not placed in full, another sequence
// with the same first requests needs the opposite choice, and BestStart
// serves the one more arrival orders depend on (the lost ones are in
// testdata/unavoidable-arrivals.golden).
func TestArrivalOrders(t *testing.T) {
	cases := []struct {
		model string
		seq   string
		want  bool // all placed
	}{
		{"A100-40GB", "3g.20gb,4g.20gb", true},
		{"A100-40GB", "4g.20gb,3g.20gb", true},
		{"A100-40GB", "1g.5gb,1g.5gb,1g.5gb,4g.20gb", true},
		{"A100-40GB", "1g.5gb,1g.5gb,1g.5gb,3g.20gb", true},
		{"A100-40GB", "1g.5gb,1g.5gb,2g.10gb,2g.10gb", true},
		{"A100-40GB", "2g.10gb,2g.10gb,3g.20gb", true}, // lost by Room
		{"A100-40GB", "1g.10gb,1g.10gb,3g.20gb", true},
		{"A100-40GB", "1g.5gb,2g.10gb,4g.20gb", false},         // vs 1g,2g,2g,2g
		{"A100-40GB", "1g.5gb,1g.5gb,2g.10gb,3g.20gb", false},  // vs 1g,1g,1g,4g
		{"A100-40GB", "2g.10gb,4g.20gb", false},                // vs 2g,2g,3g
		{"A100-80GB", "1g.10gb,1g.10gb,1g.10gb,4g.40gb", true}, // A100-80GB's 1g is 1g.10gb
		{"H100-80GB-SXM", "3g.40gb,4g.40gb", true},
		{"H100-80GB-SXM", "1g.10gb,1g.10gb,1g.10gb,4g.40gb", true},
		{"H100-80GB-SXM", "1g.20gb,2g.20gb,3g.40gb", true},
		{"H100-80GB-SXM", "1g.10gb,1g.10gb,2g.20gb,3g.40gb", false},
		{"H100-NVL-94GB", "1g.12gb,1g.12gb,1g.12gb,4g.47gb", true},
		{"H200-141GB", "1g.18gb,1g.18gb,1g.18gb,4g.71gb", true},
		{"A30", "1g.6gb,1g.6gb,2g.12gb", true},
		{"A30", "2g.12gb,2g.12gb", true},
		{"A30", "1g.6gb,2g.12gb,1g.6gb", true},
		{"A30", "1g.6gb,1g.6gb,1g.6gb,1g.6gb", true},
		{"A30", "4g.24gb", true},
	}
	for _, c := range cases {
		g := geometry(t, c.model)
		var seq []int
		for _, n := range strings.Split(c.seq, ",") {
			p, err := g.Profile(n)
			if err != nil {
				t.Fatal(err)
			}
			seq = append(seq, p)
		}
		if got := online(g, bestStartRule, seq) == len(seq); got != c.want {
			t.Errorf("%s %s: all placed %v, want %v", c.model, c.seq, got, c.want)
		}
	}
}
