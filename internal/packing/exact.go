package packing

import (
	"sort"
)

// Exact is the outcome of PackExact.
type Exact struct {
	// Bins is the fewest bins of the best packing found; Assign gives each
	// item's bin in it (input order, bins numbered from 0).
	Bins   int
	Assign []int
	// Bound is the most bins proven necessary: Bins when the search
	// finished (Optimal), else the root bound.
	Bound   int
	Optimal bool
	// Nodes is how many search nodes were visited.
	Nodes int
}

// PackExact packs items into the fewest bins of capacity (capMem,
// capComp) holding at most perBin items each (0: no limit), by
// branch-and-bound: items in decreasing order of their larger share, each
// put into every open bin it fits (bins with the same room tried once)
// or one new bin, an item identical to the one before never into an
// earlier bin than it (both symmetries leave one packing of each shape),
// and a node pruned when the bins open plus what the items left need
// beyond the room the open bins have (in memory, compute and count) cannot
// beat the best packing found. It starts from first-fit decreasing and
// stops early when the root bound (volume, Martello and Toth's L2 in each
// dimension, count) is met. It gives up after maxNodes nodes (0: no
// limit) or when stop returns true (asked every 256 nodes; nil: never),
// returning the best packing found and the root bound. Items bigger than
// a bin are counted as filling one.
func PackExact(items []Item, capMem, capComp int64, perBin, maxNodes int, stop func() bool) Exact {
	n := len(items)
	if n == 0 {
		return Exact{Optimal: true}
	}
	capMem, capComp = max(capMem, 1), max(capComp, 1)
	its := make([]Item, n)
	for i, it := range items {
		its[i] = Item{Mem: min(max(it.Mem, 0), capMem), Comp: min(max(it.Comp, 0), capComp)}
	}
	share := func(it Item) float64 {
		return max(float64(it.Mem)/float64(capMem), float64(it.Comp)/float64(capComp))
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool {
		x, y := its[idx[a]], its[idx[b]]
		if sx, sy := share(x), share(y); sx != sy {
			return sx > sy
		}
		if x.Mem != y.Mem {
			return x.Mem > y.Mem
		}
		return x.Comp > y.Comp
	})
	sorted := make([]Item, n)
	for k, i := range idx {
		sorted[k] = its[i]
	}
	if perBin <= 0 {
		perBin = n
	}

	// Root bound.
	mems, comps := make([]int64, n), make([]int64, n)
	var sumMem, sumComp int64
	for k, it := range sorted {
		mems[k], comps[k] = it.Mem, it.Comp
		sumMem += it.Mem
		sumComp += it.Comp
	}
	root := int(max(ceilDiv(sumMem, capMem), ceilDiv(sumComp, capComp), binsL2(mems, capMem), binsL2(comps, capComp),
		ceilDiv(int64(n), int64(perBin)), 1))

	// First-fit decreasing: the first incumbent.
	type bin struct {
		mem, comp int64
		cnt       int
	}
	ffd := make([]int, n)
	var bins []bin
	for k, it := range sorted {
		placed := false
		for b := range bins {
			if bins[b].mem+it.Mem <= capMem && bins[b].comp+it.Comp <= capComp && bins[b].cnt < perBin {
				bins[b].mem += it.Mem
				bins[b].comp += it.Comp
				bins[b].cnt++
				ffd[k], placed = b, true
				break
			}
		}
		if !placed {
			ffd[k] = len(bins)
			bins = append(bins, bin{it.Mem, it.Comp, 1})
		}
	}
	best, bestAssign := len(bins), append([]int(nil), ffd...)
	res := Exact{}
	finished := best <= root

	if !finished {
		// Suffix sums for the node bound.
		sufMem, sufComp := make([]int64, n+1), make([]int64, n+1)
		for k := n - 1; k >= 0; k-- {
			sufMem[k], sufComp[k] = sufMem[k+1]+sorted[k].Mem, sufComp[k+1]+sorted[k].Comp
		}
		assign := make([]int, n)
		open := make([]bin, 0, n)
		var roomMem, roomComp int64
		var roomCnt int
		aborted := false
		var dfs func(k int)
		dfs = func(k int) {
			if aborted || best <= root {
				return
			}
			res.Nodes++
			if (maxNodes > 0 && res.Nodes >= maxNodes) || (stop != nil && res.Nodes%256 == 0 && stop()) {
				aborted = true
				return
			}
			if k == n {
				if len(open) < best {
					best = len(open)
					copy(bestAssign, assign)
				}
				return
			}
			lb := len(open) + int(max(ceilDiv(sufMem[k]-roomMem, capMem), ceilDiv(sufComp[k]-roomComp, capComp),
				ceilDiv(int64(n-k-roomCnt), int64(perBin)), 0))
			if lb >= best {
				return
			}
			it := sorted[k]
			from := 0
			if k > 0 && sorted[k-1] == it {
				from = assign[k-1]
			}
			for b := from; b < len(open); b++ {
				o := open[b]
				if o.mem+it.Mem > capMem || o.comp+it.Comp > capComp || o.cnt >= perBin {
					continue
				}
				dup := false
				for c := from; c < b; c++ {
					if open[c] == o {
						dup = true
						break
					}
				}
				if dup {
					continue
				}
				open[b] = bin{o.mem + it.Mem, o.comp + it.Comp, o.cnt + 1}
				roomMem, roomComp, roomCnt = roomMem-it.Mem, roomComp-it.Comp, roomCnt-1
				assign[k] = b
				dfs(k + 1)
				open[b] = o
				roomMem, roomComp, roomCnt = roomMem+it.Mem, roomComp+it.Comp, roomCnt+1
				if aborted {
					return
				}
			}
			if len(open)+1 < best {
				open = append(open, bin{it.Mem, it.Comp, 1})
				roomMem += capMem - it.Mem
				roomComp += capComp - it.Comp
				roomCnt += perBin - 1
				assign[k] = len(open) - 1
				dfs(k + 1)
				open = open[:len(open)-1]
				roomMem -= capMem - it.Mem
				roomComp -= capComp - it.Comp
				roomCnt -= perBin - 1
			}
		}
		dfs(0)
		finished = !aborted
	}
	res.Bins = best
	res.Assign = make([]int, n)
	for k, i := range idx {
		res.Assign[i] = bestAssign[k]
	}
	res.Optimal = finished
	res.Bound = root
	if finished {
		res.Bound = best
	}
	return res
}
