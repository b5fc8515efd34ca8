package plan

import (
	"errors"
	"fmt"
	"sort"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/model"
)

// mover re-places claims of a pass's state through the allocator and
// undoes a move that does not help. It keeps, per GPU, how many devices
// of live claims it holds, so that "GPUs holding work" is known without a
// scan.
type mover struct {
	ps    *pass
	onGPU map[string]int // GPU uuid -> devices of claims on it
	used  int
	// replaced is set once a claim was moved: the state then may hold
	// idle MIG instances nothing uses (clean rebuilds without them).
	replaced bool
	// work counts claims re-placed (the budget).
	work int
	// claimOf is each claim as the pass ordered it (its selector may
	// carry a heuristic's MIG cap); memOf a GPU model's memory.
	claimOf map[string]*alloc.Claim
	memOf   map[string]int64
}

func newMover(ps *pass, pools []*pool) *mover {
	m := &mover{ps: ps, onGPU: map[string]int{}, claimOf: make(map[string]*alloc.Claim, len(ps.order)), memOf: map[string]int64{}}
	for i := range ps.order {
		m.claimOf[ps.order[i].Name] = &ps.order[i]
	}
	for _, pl := range pools {
		m.memOf[pl.gpu.ID] = max(pl.gpu.MemoryMiB, 1)
	}
	for _, a := range ps.state.Allocations() {
		m.count(a, 1)
	}
	return m
}

func (m *mover) count(a *alloc.Allocation, d int) {
	for _, dv := range a.Devices {
		before := m.onGPU[dv.GPU]
		m.onGPU[dv.GPU] = before + d
		switch {
		case before == 0 && d > 0:
			m.used++
		case before+d == 0:
			m.used--
			delete(m.onGPU, dv.GPU)
		}
	}
}

// errUndo is a move whose undo failed: the state is no longer the pass's.
var errUndo = errors.New("plan: a move could not be undone")

// try releases the named claims and places them again in order (each with
// AllocateAheadQuick over the ones after it), refusing any device on a
// forbidden GPU. It keeps the move when accept(GPUs used before, after)
// says so and every claim found a place; else it puts every claim back
// where it was. It reports whether the move was kept.
func (m *mover) try(order []alloc.Claim, forbid map[string]bool, accept func(before, after int) bool) (bool, error) {
	st := m.ps.state
	old := make([]*alloc.Allocation, 0, len(order))
	for i := range order {
		a := st.Allocations()[order[i].Name]
		if a == nil {
			return false, fmt.Errorf("plan: claim %s is not placed", order[i].Name)
		}
		old = append(old, a)
	}
	before := m.used
	for _, a := range old {
		if err := st.Release(a.Claim); err != nil {
			return false, err
		}
		m.count(a, -1)
	}
	var made []*alloc.Allocation
	ok := true
	for i := range order {
		m.work++
		a, err := st.AllocateAheadQuick(&order[i], order[i+1:])
		if err == nil {
			for _, d := range a.Devices {
				if forbid[d.GPU] {
					err = alloc.ErrNoFit
				}
			}
		}
		if err == nil {
			err = st.Apply(a)
		}
		if err != nil {
			ok = false
			break
		}
		made = append(made, a)
		m.count(a, 1)
	}
	if ok && accept(before, m.used) {
		m.replaced = true
		return true, nil
	}
	for i := len(made) - 1; i >= 0; i-- {
		if err := st.Release(made[i].Claim); err != nil {
			return false, errUndo
		}
		m.count(made[i], -1)
	}
	applied, failed := st.Restore(restorable(old))
	if len(failed) > 0 {
		return false, errUndo
	}
	for _, a := range old {
		m.count(applied[a.Claim], 1)
	}
	m.replaced = true // Restore realized changes afresh; instances may linger
	return false, nil
}

// emptyGPUs is the local search: it takes the GPUs holding work from the
// least filled up and tries to move all of a GPU's claims onto the other
// GPUs (never onto it), keeping a move that frees the GPU; it repeats
// while a round frees one, within budget claims re-placed in all. A GPU
// whose claims do not fit elsewhere is simply skipped, so the search
// never stops at its first failure.
func (m *mover) emptyGPUs(budget int) (int, error) {
	st := m.ps.state
	freed := 0
	memOf := map[string]int64{} // GPU uuid -> its memory
	for _, n := range st.Fleet().Nodes {
		for _, g := range n.GPUs {
			memOf[g.UUID] = max(m.memOf[g.Model], 1)
		}
	}
	for rounds := 0; rounds < maxRounds; rounds++ {
		type gpuFill struct {
			uuid   string
			fill   float64
			claims []string
		}
		byGPU := map[string]*gpuFill{}
		var gs []*gpuFill
		names := make([]string, 0, len(st.Allocations()))
		for name := range st.Allocations() {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			a := st.Allocations()[name]
			for _, d := range a.Devices {
				g := byGPU[d.GPU]
				if g == nil {
					g = &gpuFill{uuid: d.GPU}
					byGPU[d.GPU] = g
					gs = append(gs, g)
				}
				g.fill += max(float64(d.MemoryMiB)/float64(memOf[d.GPU]), float64(d.ComputePercent)/100)
				if len(g.claims) == 0 || g.claims[len(g.claims)-1] != name {
					g.claims = append(g.claims, name)
				}
			}
		}
		sort.SliceStable(gs, func(i, j int) bool {
			if gs[i].fill != gs[j].fill {
				return gs[i].fill < gs[j].fill
			}
			return len(gs[i].claims) < len(gs[j].claims)
		})
		round := 0
		for _, g := range gs {
			if g.fill >= 0.999 || m.work >= budget {
				break
			}
			if m.onGPU[g.uuid] == 0 {
				continue // emptied by an earlier move of this round
			}
			var order []alloc.Claim
			for _, name := range g.claims {
				if a := st.Allocations()[name]; a != nil {
					order = append(order, *m.claimOf[name])
				}
			}
			if m.work+len(order) > budget {
				break
			}
			alloc.SortForPlacement(order)
			ok, err := m.try(order, map[string]bool{g.uuid: true}, func(before, after int) bool { return after < before })
			if err != nil {
				return freed, err
			}
			if ok {
				round++
			}
		}
		freed += round
		if round == 0 || m.work >= budget {
			return freed, nil
		}
	}
	return freed, nil
}

// maxRounds bounds the local search's rounds (each sorts the GPUs once).
const maxRounds = 8

// cleanState rebuilds a pass's state from its allocations on a fresh
// fleet of the same nodes (so MIG instances left idle by moves are gone),
// through alloc.State.Restore: every allocation is checked again on the
// way in. It returns an error when one does not go back in.
func cleanState(s *model.Spec, pools []*pool, ps *pass) error {
	for i, pl := range pools {
		pl.nodes = ps.nodes[i]
	}
	st, err := build(s, pools, nil, nil)
	if err != nil {
		return err
	}
	var as []*alloc.Allocation
	for i := range ps.order {
		if a := ps.state.Allocations()[ps.order[i].Name]; a != nil {
			as = append(as, a)
		}
	}
	applied, failed := st.Restore(restorable(as))
	for name, err := range failed {
		return fmt.Errorf("plan: rebuilding %s: %w", name, err)
	}
	allocs := make([]*alloc.Allocation, 0, len(as))
	for _, a := range as {
		allocs = append(allocs, applied[a.Claim])
	}
	ps.state, ps.allocs = st, allocs
	return nil
}

// restorable returns allocations for alloc.State.Restore that keep the
// sharing their MIG instances were created with: Restore re-creates an
// instance from the device alone (with no sharing of its own), so the
// sharing a create-instance change carried is added as a configure-sharing
// change for that device, which Restore applies right after creating it.
func restorable(as []*alloc.Allocation) []*alloc.Allocation {
	out := make([]*alloc.Allocation, len(as))
	for i, a := range as {
		out[i] = a
		var extra []alloc.Change
		for _, ch := range a.Changes {
			if ch.Kind == alloc.CreateInstance && ch.Sharing != nil && !configures(a, ch.Device) {
				extra = append(extra, alloc.Change{Kind: alloc.ConfigureShare, Node: ch.Node, GPU: ch.GPU, Device: ch.Device, Sharing: ch.Sharing})
			}
		}
		if len(extra) > 0 {
			c := *a
			c.Changes = append(append([]alloc.Change(nil), a.Changes...), extra...)
			out[i] = &c
		}
	}
	return out
}

func configures(a *alloc.Allocation, dev string) bool {
	for _, ch := range a.Changes {
		if ch.Kind == alloc.ConfigureShare && ch.Device == dev {
			return true
		}
	}
	return false
}
