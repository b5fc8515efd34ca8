package mig

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// samples picks up to n valid layouts of the oracle at random (all of them
// when there are fewer), always including the empty one.
func samples(o *oracle, rng *rand.Rand, n int) [][]bfInst {
	if len(o.all) <= n {
		return o.all
	}
	out := [][]bfInst{nil}
	for len(out) < n {
		out = append(out, o.all[rng.IntN(len(o.all))])
	}
	return out
}

func randomLayout(o *oracle, rng *rand.Rand) Layout {
	n := rng.IntN(o.g.Slices + 2)
	l := make(Layout, n)
	for i := range l {
		pr := o.pairs[rng.IntN(len(o.pairs))]
		start := pr.start
		if rng.IntN(8) == 0 { // sometimes a start the profile may not use
			start = rng.IntN(o.g.Slices)
		}
		l[i] = Instance{Profile: o.g.Shapes[pr.p].Name, Start: start}
	}
	return l
}

func TestValidateMatchesBruteForce(t *testing.T) {
	for model, g := range migModels(t) {
		t.Run(model, func(t *testing.T) {
			o := newOracle(g)
			rng := rand.New(rand.NewPCG(1, uint64(len(model))))
			valid := 0
			for range 5000 {
				l := randomLayout(o, rng)
				err := g.Validate(l)
				want := o.valid(o.fromLayout(t, l))
				if (err == nil) != want {
					t.Fatalf("Validate(%s) = %v, brute force says valid=%v", l, err, want)
				}
				if err != nil && !IsLayoutError(err) {
					t.Fatalf("Validate(%s) returned %T, want *LayoutError", l, err)
				}
				if want {
					valid++
				}
			}
			// Every layout the oracle enumerates must validate too.
			for _, l := range o.all {
				if err := g.Validate(o.toLayout(l)); err != nil {
					t.Fatalf("oracle layout %s rejected: %v", o.toLayout(l), err)
				}
			}
			t.Logf("%d random layouts (%d valid), %d enumerated layouts", 5000, valid, len(o.all))
		})
	}
}

func TestMaximalLayoutsMatchBruteForce(t *testing.T) {
	for model, g := range migModels(t) {
		t.Run(model, func(t *testing.T) {
			o := newOracle(g)
			for _, includeME := range []bool{false, true} {
				want := map[string]bool{}
				for _, l := range o.all {
					hasME := false
					for _, a := range l {
						hasME = hasME || g.Shapes[a.p].ME
					}
					if len(l) > 0 && (includeME || !hasME) && o.maximal(l, includeME) {
						want[o.multiset(l)] = true
					}
				}
				got := map[string]bool{}
				for _, l := range g.MaximalLayouts(includeME) {
					if err := g.Validate(l); err != nil {
						t.Fatalf("maximal layout %s invalid: %v", l, err)
					}
					bl := o.fromLayout(t, l)
					if !o.maximal(bl, includeME) {
						t.Fatalf("layout %s is not maximal", l)
					}
					key := o.multiset(bl)
					if got[key] {
						t.Fatalf("multiset %s listed twice", key)
					}
					got[key] = true
				}
				if len(got) != len(want) {
					t.Fatalf("includeME=%v: %d maximal multisets, brute force finds %d", includeME, len(got), len(want))
				}
				for k := range want {
					if !got[k] {
						t.Fatalf("includeME=%v: maximal multiset %s missing", includeME, k)
					}
				}
			}
		})
	}
}

func TestPlaceMatchesBruteForce(t *testing.T) {
	for model, g := range migModels(t) {
		t.Run(model, func(t *testing.T) {
			o := newOracle(g)
			a := newArrivalOracle(o)
			rng := rand.New(rand.NewPCG(2, uint64(len(model))))
			for _, have := range samples(o, rng, 400) {
				hl := o.toLayout(have)
				last := -1
				for _, x := range have {
					if last < 0 || a.before(last, x.p) {
						last = x.p
					}
				}
				for p, s := range g.Shapes {
					// Best is the highest (small-first sequences served,
					// sequences served, Room, Capacity), sequences in any
					// order first when p breaks small-first order; lowest
					// start on ties.
					var best []int64
					bestStart, feasible := -1, map[int][]int64{}
					for _, st := range s.Starts {
						next := append(slices.Clone(have), bfInst{p, st})
						if !o.valid(next) {
							continue
						}
						sf := a.smallFirst(next)
						sc := []int64{sf[0], sf[1], int64(o.room(next)), int64(o.capacity(next)), 0}
						if last >= 0 && a.before(p, last) {
							sc = append([]int64{a.anyOrder(next)}, sc[:4]...)
						}
						feasible[st] = sc
						if bestStart < 0 || slices.Compare(sc, best) > 0 {
							best, bestStart = sc, st
						}
					}
					got, err := g.Place(hl, s.Name)
					if bestStart < 0 {
						if !IsNoFit(err) {
							t.Fatalf("Place(%s, %s) = %v, %v; brute force: no start fits", hl, s.Name, got, err)
						}
						continue
					}
					if err != nil {
						t.Fatalf("Place(%s, %s): %v; brute force fits at %v", hl, s.Name, err, feasible)
					}
					if got.Instance.Start != bestStart || int64(got.Capacity) != int64(o.capacity(append(slices.Clone(have), bfInst{p, bestStart}))) {
						t.Fatalf("Place(%s, %s) = %+v; brute force scores by start %v (best %d)", hl, s.Name, got, feasible, bestStart)
					}
				}
			}
		})
	}
}

func TestFitMatchesBruteForce(t *testing.T) {
	for model, g := range migModels(t) {
		t.Run(model, func(t *testing.T) {
			o := newOracle(g)
			bestByMultiset := map[string]int{}
			for _, l := range o.all {
				k := o.multiset(l)
				if c, ok := bestByMultiset[k]; !ok || o.capacity(l) > c {
					bestByMultiset[k] = o.capacity(l)
				}
			}
			rng := rand.New(rand.NewPCG(3, uint64(len(model))))
			check := func(want []string) {
				res, err := g.Fit(want)
				best, exists := bestByMultiset[sortedMultiset(want)]
				if !exists {
					if !IsNoFit(err) {
						t.Fatalf("Fit(%v) = %v, %v; brute force: impossible", want, res, err)
					}
					return
				}
				if err != nil {
					t.Fatalf("Fit(%v): %v; brute force finds a layout", want, err)
				}
				if err := g.Validate(res.Layout); err != nil {
					t.Fatalf("Fit(%v) gave invalid %s: %v", want, res.Layout, err)
				}
				bl := o.fromLayout(t, res.Layout)
				if o.multiset(bl) != sortedMultiset(want) || o.capacity(bl) != best || res.Capacity != best {
					t.Fatalf("Fit(%v) = %s capacity %d; want multiset %s with capacity %d", want, res.Layout, res.Capacity, sortedMultiset(want), best)
				}
				// Creation order: never a smaller instance before a bigger one.
				for i := 1; i < len(res.Layout); i++ {
					a, _ := g.Profile(res.Layout[i-1].Profile)
					b, _ := g.Profile(res.Layout[i].Profile)
					if g.Shapes[a].Size < g.Shapes[b].Size {
						t.Fatalf("Fit(%v) creation order %s puts a smaller instance first", want, res.Layout)
					}
				}
			}
			for range 1500 {
				n := 1 + rng.IntN(g.Slices)
				want := make([]string, n)
				for i := range want {
					want[i] = g.Shapes[rng.IntN(len(g.Shapes))].Name
				}
				check(want)
			}
			for _, l := range samples(o, rng, 500) {
				names := make([]string, len(l))
				for i, a := range l {
					names[i] = g.Shapes[a.p].Name
				}
				rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
				check(names)
			}
		})
	}
}

type bfCost struct{ n, slices, capacity int }

func TestEvictMatchesBruteForce(t *testing.T) {
	for model, g := range migModels(t) {
		t.Run(model, func(t *testing.T) {
			o := newOracle(g)
			rng := rand.New(rand.NewPCG(4, uint64(len(model))))
			for _, have := range samples(o, rng, 300) {
				held := make([]Held, len(have))
				for i, a := range have {
					held[i] = Held{Instance: Instance{Profile: g.Shapes[a.p].Name, Start: a.start}, InUse: rng.IntN(2) == 0}
				}
				for p, s := range g.Shapes {
					// Brute force: every subset of idle instances, every start.
					best := bfCost{n: -1}
					for sub := 0; sub < 1<<len(have); sub++ {
						var kept []bfInst
						cost := bfCost{}
						ok := true
						for i, a := range have {
							if sub&(1<<i) != 0 {
								if held[i].InUse {
									ok = false
									break
								}
								cost.n++
								cost.slices += g.Shapes[a.p].Size
							} else {
								kept = append(kept, a)
							}
						}
						if !ok {
							continue
						}
						for _, st := range s.Starts {
							next := append(slices.Clone(kept), bfInst{p, st})
							if !o.valid(next) {
								continue
							}
							c := cost
							c.capacity = o.capacity(next)
							if best.n < 0 || c.n < best.n || (c.n == best.n && (c.slices < best.slices || (c.slices == best.slices && c.capacity > best.capacity))) {
								best = c
							}
						}
					}
					plan, err := g.Evict(held, s.Name)
					if best.n < 0 {
						if !IsNoFit(err) {
							t.Fatalf("Evict(%v, %s) = %+v, %v; brute force: impossible", held, s.Name, plan, err)
						}
						continue
					}
					if err != nil {
						t.Fatalf("Evict(%v, %s): %v; brute force cost %+v", held, s.Name, err, best)
					}
					got := bfCost{n: len(plan.Destroy), capacity: plan.Capacity}
					var kept Layout
					for _, h := range held {
						if slices.Contains(plan.Destroy, h.Instance) {
							if h.InUse {
								t.Fatalf("Evict(%v, %s) destroys in-use %s", held, s.Name, h.Instance)
							}
							p2, _ := g.Profile(h.Profile)
							got.slices += g.Shapes[p2].Size
						} else {
							kept = append(kept, h.Instance)
						}
					}
					if err := g.Validate(append(kept, plan.Place)); err != nil {
						t.Fatalf("Evict(%v, %s) = %+v leaves an invalid layout: %v", held, s.Name, plan, err)
					}
					if got != best {
						t.Fatalf("Evict(%v, %s) = %+v cost %+v; brute force %+v", held, s.Name, plan, got, best)
					}
				}
			}
		})
	}
}
