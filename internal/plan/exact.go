package plan

import (
	"sort"

	"github.com/gpuslice/gpuslice/internal/alloc"
)

// exactMoves realizes the exact search's packings: for each isolation
// group the search packed on fewer GPUs than the plan spreads it over,
// the group's claims are released and placed again bin by bin (each bin's
// claims together, the first with AllocateAheadQuick over its bin-mates,
// so the device it opens is sized for them), through the allocator. The
// move is kept only when the plan then holds work on fewer GPUs; the
// allocator's rules decide, not the search's model of them. It returns
// how many groups were improved.
func (m *mover) exactMoves(lb planBounds) (int, error) {
	improved := 0
	st := m.ps.state
	for _, pb := range lb.pools {
		for _, g := range pb.groups {
			if m.used <= lb.total {
				return improved, nil
			}
			// Multi-device claims are left alone: their devices are
			// decided together.
			seen := map[string]bool{}
			multi := false
			for _, c := range g.claims {
				if seen[c] {
					multi = true
				}
				seen[c] = true
			}
			if multi {
				continue
			}
			gpus := map[string]bool{}
			placed := true
			for _, c := range g.claims {
				a := st.Allocations()[c]
				if a == nil {
					placed = false
					break
				}
				for _, d := range a.Devices {
					gpus[d.GPU] = true
				}
			}
			if !placed || len(gpus) <= g.bins {
				continue
			}
			idx := make([]int, len(g.claims))
			for i := range idx {
				idx[i] = i
			}
			sort.SliceStable(idx, func(a, b int) bool { return g.assign[idx[a]] < g.assign[idx[b]] })
			order := make([]alloc.Claim, 0, len(idx))
			for _, i := range idx {
				order = append(order, *m.claimOf[g.claims[i]])
			}
			ok, err := m.try(order, nil, func(before, after int) bool { return after < before })
			if err != nil {
				return improved, err
			}
			if ok {
				improved++
			}
		}
	}
	return improved, nil
}
