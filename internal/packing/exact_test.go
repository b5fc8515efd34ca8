package packing

import (
	"math/rand/v2"
	"testing"
)

// bruteVector finds the fewest bins for two-dimensional items with a count
// limit by trying every assignment (no pruning beyond the best so far):
// the oracle PackExact is checked against. It shares no code with it.
func bruteVector(items []Item, capMem, capComp int64, perBin int) int {
	best := len(items)
	type load struct {
		m, c int64
		n    int
	}
	var loads []load
	var place func(i int)
	place = func(i int) {
		if len(loads) >= best {
			return
		}
		if i == len(items) {
			best = len(loads)
			return
		}
		for b := range loads {
			l := loads[b]
			if l.m+items[i].Mem <= capMem && l.c+items[i].Comp <= capComp && (perBin == 0 || l.n < perBin) {
				loads[b] = load{l.m + items[i].Mem, l.c + items[i].Comp, l.n + 1}
				place(i + 1)
				loads[b] = l
			}
		}
		loads = append(loads, load{items[i].Mem, items[i].Comp, 1})
		place(i + 1)
		loads = loads[:len(loads)-1]
	}
	place(0)
	return best
}

// PackExact finds the optimum on small random vector-packing instances
// (checked against brute force), its packing is feasible, its bound never
// exceeds the optimum, and a search cut short by its node limit still
// returns a feasible packing and a valid bound.
func TestPackExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for trial := range 2000 {
		capMem, capComp := int64(20+rng.IntN(80)), int64(100)
		perBin := 0
		if rng.IntN(3) == 0 {
			perBin = 1 + rng.IntN(4)
		}
		items := make([]Item, 1+rng.IntN(9))
		for i := range items {
			items[i] = Item{Mem: 1 + rng.Int64N(capMem), Comp: rng.Int64N(101)}
			if rng.IntN(4) == 0 && i > 0 {
				items[i] = items[i-1] // identical items exercise the symmetry rule
			}
		}
		opt := bruteVector(items, capMem, capComp, perBin)
		for _, limit := range []int{0, 3} {
			ex := PackExact(items, capMem, capComp, perBin, limit, nil)
			if limit == 0 && (!ex.Optimal || ex.Bins != opt) {
				t.Fatalf("trial %d: %v cap (%d, %d) per bin %d: PackExact %+v, optimum %d", trial, items, capMem, capComp, perBin, ex, opt)
			}
			if ex.Bound > opt || ex.Bins < opt || (ex.Optimal && ex.Bins != opt) {
				t.Fatalf("trial %d limit %d: bins %d bound %d optimal %v, optimum %d", trial, limit, ex.Bins, ex.Bound, ex.Optimal, opt)
			}
			loads := make([]Item, ex.Bins)
			count := make([]int, ex.Bins)
			for i, b := range ex.Assign {
				if b < 0 || b >= ex.Bins {
					t.Fatalf("trial %d: item %d in bin %d of %d", trial, i, b, ex.Bins)
				}
				loads[b].Mem += items[i].Mem
				loads[b].Comp += items[i].Comp
				count[b]++
			}
			for b := range loads {
				if loads[b].Mem > capMem || loads[b].Comp > capComp || (perBin > 0 && count[b] > perBin) || count[b] == 0 {
					t.Fatalf("trial %d: bin %d holds %+v (%d items), cap (%d, %d, %d)", trial, b, loads[b], count[b], capMem, capComp, perBin)
				}
			}
		}
	}
}
