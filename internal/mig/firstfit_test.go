package mig

import (
	"flag"
	"slices"
	"testing"
)

var exhaustiveOrders = flag.Bool("exhaustive-orders", false, "TestFirstFitOrderExhaustive: try every start order of the 8-slice shape (about 1.45 million; a minute of CPU)")

// firstFitRule is first fit over orders: the first start in p's order
// where an instance fits.
func firstFitRule(orders [][]int) onlineRule {
	return func(g *Geometry, o Occupancy, p int) (int, bool) {
		for _, st := range orders[p] {
			if g.CanAdd(o, p, st) {
				return st, true
			}
		}
		return 0, false
	}
}

func firstFitOrders(g *Geometry) [][]int {
	out := make([][]int, len(g.Shapes))
	for p := range g.Shapes {
		out[p] = g.FirstFitOrder(p)
	}
	return out
}

// On every MIG model: FirstFitOrder is a permutation of each profile's
// starts; first fit over it, run over every arrival sequence by the
// test's own tree walk, serves what firstFitServed counts; it serves as
// many small-first multisets as BestStart (the best online rule) and at
// least as many sequences in all as highest-start-first (the order
// before) and as Room (the rule before BestStart).
func TestFirstFitOrder(t *testing.T) {
	shapeNames, groups := shapeGroups(t)
	for _, name := range shapeNames {
		for _, g := range groups[name] {
			orders := firstFitOrders(g)
			desc := make([][]int, len(g.Shapes))
			for p := range g.Shapes {
				if !slices.Equal(slices.Sorted(slices.Values(orders[p])), g.Shapes[p].Starts) {
					t.Fatalf("%s %s: order %v is not a permutation of %v", g.Model, g.Shapes[p].Name, orders[p], g.Shapes[p].Starts)
				}
				desc[p] = slices.Clone(g.Shapes[p].Starts)
				slices.Reverse(desc[p])
			}
			at := newArrivalTree(g)
			served, _ := at.run(firstFitRule(orders))
			descServed, _ := at.run(firstFitRule(desc))
			best, _ := at.run(bestStartRule)
			seqs := fittingMultisets(g)
			sf, descSF, bestSF := 0, 0, 0
			for _, s := range seqs {
				if online(g, firstFitRule(orders), s) == len(s) {
					sf++
				}
				if online(g, firstFitRule(desc), s) == len(s) {
					descSF++
				}
				if online(g, bestStartRule, s) == len(s) {
					bestSF++
				}
			}
			if s, a := g.firstFitServed(orders); s != sf || a != served {
				t.Errorf("%s: firstFitServed says (%d, %d), the tree walk (%d, %d)", g.Model, s, a, sf, served)
			}
			if sf != bestSF || served < descServed || sf < descSF {
				t.Errorf("%s: first fit over FirstFitOrder serves %d small-first, %d in all; BestStart %d; highest start first %d, %d", g.Model, sf, served, bestSF, descSF, descServed)
			}
			if g.Slices == 8 && served < 371 {
				t.Errorf("%s: first fit serves %d of the sequences, want the 371 of the exhaustive search", g.Model, served)
			}
			if g.Model == name {
				t.Logf("%s: first fit over %v serves %d of %d small-first multisets, %d of %d sequences (highest start first %d, %d; BestStart %d, %d)",
					name, orders, sf, len(seqs), served, at.total(), descSF, descServed, bestSF, best)
			}
		}
	}
}

// No order of starts serves more under first fit, on the 8-slice shape
// (lexicographically: small-first multisets, then sequences). Every
// permutation of every plain profile's starts is tried.
func TestFirstFitOrderExhaustive(t *testing.T) {
	if !*exhaustiveOrders {
		t.Skip("go test ./internal/mig -run FirstFitOrderExhaustive -exhaustive-orders")
	}
	g := geometry(t, "A100-40GB")
	orders := firstFitOrders(g)
	wantSF, wantAll := g.firstFitServed(orders)
	cur := firstFitOrders(g)
	for p := range cur {
		cur[p] = slices.Clone(cur[p])
	}
	var ps []int
	for p := range g.Shapes {
		if !g.Shapes[p].ME && len(g.Shapes[p].Starts) > 1 {
			ps = append(ps, p)
		}
	}
	tried := 0
	var rec func(k int)
	rec = func(k int) {
		if k == len(ps) {
			tried++
			if s, a := g.firstFitServed(cur); s > wantSF || (s == wantSF && a > wantAll) {
				t.Errorf("order %v serves (%d, %d), FirstFitOrder %v only (%d, %d)", cur, s, a, orders, wantSF, wantAll)
			}
			return
		}
		p := ps[k]
		var perm func(i int)
		perm = func(i int) {
			if i == len(cur[p]) {
				rec(k + 1)
				return
			}
			for j := i; j < len(cur[p]); j++ {
				cur[p][i], cur[p][j] = cur[p][j], cur[p][i]
				perm(i + 1)
				cur[p][i], cur[p][j] = cur[p][j], cur[p][i]
			}
		}
		perm(0)
	}
	rec(0)
	t.Logf("%d orders tried; none beats FirstFitOrder's (%d, %d)", tried, wantSF, wantAll)
}
