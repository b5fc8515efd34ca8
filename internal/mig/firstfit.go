package mig

import (
	"slices"
	"sync"
)

// A first-fit allocator (the stock Kubernetes DRA allocator over a
// ResourceSlice) cannot run BestStart: it takes the first device, in the
// order published, whose counters are still free. What it places then
// depends only on the order of each profile's starts. FirstFitOrder is
// the order that serves the most arrival orders under first fit, by the
// same counts BestStart maximises (arrivals.go): small-first sequences
// first, then sequences in any order. It is found by local search (move
// one start to another position while that serves more), from two
// orders: highest start first (KEP-4815's advice) and the order BestStart
// itself fills an empty GPU with one profile. On the 8-slice models the
// result serves 68 of the 77 small-first sequences, as BestStart does and
// as no online rule can beat, and 371 of the 424 sequences in any order
// (BestStart 384; highest start first 66 and 316); an exhaustive search
// over all 1.45 million orders of the 8-slice shape finds no better one
// (TestFirstFitOrderExhaustive).

// firstFitTables is FirstFitOrder's cache, per geometry shape.
type firstFitTables struct {
	once   sync.Once
	orders [][]int
}

var firstFitByShape sync.Map // shape signature → *firstFitTables

// FirstFitOrder returns profile p's allowed starts in the order a
// first-fit allocator should try them. The slice is shared: do not modify
// it. A "+me" profile gets the order of the plain profile with the same
// starts and size, where there is one.
func (g *Geometry) FirstFitOrder(p int) []int {
	v, _ := firstFitByShape.LoadOrStore(shapeSignature(g), &firstFitTables{})
	t := v.(*firstFitTables)
	t.once.Do(func() { t.orders = g.searchFirstFitOrders() })
	return t.orders[p]
}

// firstFitServed counts the arrival sequences first fit over orders
// serves: small-first ones (each a fitting multiset in small-first order)
// and all of them.
func (g *Geometry) firstFitServed(orders [][]int) (smallFirst, all int) {
	var rec func(o Occupancy, sorted bool, last int)
	rec = func(o Occupancy, sorted bool, last int) {
		for p := range g.Shapes {
			if g.Shapes[p].ME || !g.fitsWith(o, p) || !g.countsAllow(&o, p) {
				continue
			}
			for _, st := range orders[p] {
				if o.Mask&rangeMask(st, g.Shapes[p].Size) != 0 {
					continue
				}
				s := sorted && (last < 0 || !g.smallerFirst(p, last))
				all++
				if s {
					smallFirst++
				}
				rec(g.Add(o, p, st), s, p)
				break
			}
		}
	}
	rec(Occupancy{}, true, -1)
	return smallFirst, all
}

func (g *Geometry) searchFirstFitOrders() [][]int {
	desc := make([][]int, len(g.Shapes))
	fill := make([][]int, len(g.Shapes))
	for p := range g.Shapes {
		desc[p] = slices.Clone(g.Shapes[p].Starts)
		slices.Reverse(desc[p])
		// The starts BestStart takes for one profile after another on an
		// empty GPU, then the rest highest first.
		o := Occupancy{}
		for {
			st, ok := g.BestStart(o, p)
			if !ok {
				break
			}
			fill[p] = append(fill[p], st)
			o = g.Add(o, p, st)
		}
		for _, st := range desc[p] {
			if !slices.Contains(fill[p], st) {
				fill[p] = append(fill[p], st)
			}
		}
	}
	var best [][]int
	var bestSF, bestAll int
	for _, start := range [][][]int{desc, fill} {
		o, sf, all := g.improveFirstFit(start)
		if best == nil || sf > bestSF || (sf == bestSF && all > bestAll) {
			best, bestSF, bestAll = o, sf, all
		}
	}
	// A +me profile takes its plain twin's order.
	for p := range g.Shapes {
		if !g.Shapes[p].ME {
			continue
		}
		for q := range g.Shapes {
			if !g.Shapes[q].ME && g.Shapes[q].Size == g.Shapes[p].Size && slices.Equal(g.Shapes[q].Starts, g.Shapes[p].Starts) {
				best[p] = best[q]
				break
			}
		}
	}
	return best
}

// improveFirstFit moves one start of one profile to another position
// while that serves more (best move first), and returns the local
// optimum with its counts.
func (g *Geometry) improveFirstFit(orders [][]int) ([][]int, int, int) {
	cur := make([][]int, len(orders))
	for p := range orders {
		cur[p] = slices.Clone(orders[p])
	}
	sf, all := g.firstFitServed(cur)
	for {
		var move [][]int
		msf, mall := sf, all
		for p := range cur {
			if g.Shapes[p].ME {
				continue
			}
			n := len(cur[p])
			for i := range n {
				for j := range n {
					if i == j {
						continue
					}
					cand := slices.Clone(cur[p])
					st := cand[i]
					cand = slices.Insert(slices.Delete(cand, i, i+1), j, st)
					was := cur[p]
					cur[p] = cand
					s, a := g.firstFitServed(cur)
					cur[p] = was
					if s > msf || (s == msf && a > mall) {
						msf, mall = s, a
						move = make([][]int, len(cur))
						copy(move, cur)
						move[p] = cand
					}
				}
			}
		}
		if move == nil {
			return cur, sf, all
		}
		cur, sf, all = move, msf, mall
	}
}
