package alloc

import (
	"errors"
	"fmt"
	"slices"

	"github.com/gpuslice/gpuslice/internal/mig"
)

// Check verifies every rule the allocator promises, recomputing usage from
// the committed allocations rather than trusting the running totals:
//
//   - capacity: no device has more memory or compute promised than it has,
//     time-sliced devices included; clients never exceed replicas or the MPS
//     client limit; a device held alone (exclusive, mig, hardware) has one
//     claim;
//   - isolation: a time-sliced or MPS device serves one tenant unless every
//     claim on it chose isolation none;
//   - MIG: every GPU's live instances form a valid layout;
//   - bookkeeping: running totals and the search index match a rebuild.
//
// Simulations and property tests call it after every step.
func (s *State) Check() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	type use struct {
		mem, comp, clients, strict int64
		tenants                    map[string]int
		alone                      bool
		modes                      map[Mode]bool
		slots                      uint64
	}
	uses := map[int]*use{}
	for name, a := range s.allocs {
		for _, as := range a.Devices {
			di, ok := s.byUUID[as.Device]
			if !ok || di < 0 || !s.devs[di].alive {
				bad("claim %s holds device %s which does not exist", name, as.Device)
				continue
			}
			u := uses[di]
			if u == nil {
				u = &use{tenants: map[string]int{}, modes: map[Mode]bool{}}
				uses[di] = u
			}
			u.mem += as.MemoryMiB
			u.comp += int64(as.ComputePercent)
			u.clients++
			u.tenants[a.Tenant]++
			u.modes[as.Mode] = true
			if a.Isolation != IsolationNone {
				u.strict++
			}
			if as.Mode == Exclusive || as.Mode == MIG || a.Isolation == IsolationHardware {
				u.alone = true
			}
			if u.slots&(1<<as.Slot) != 0 && (as.Mode == TimeSlice || as.Mode == MPS) {
				bad("device %s: slot %d given twice", as.Device, as.Slot)
			}
			u.slots |= 1 << as.Slot
		}
	}
	for di := range s.devs {
		d := &s.devs[di]
		u := uses[di]
		if u == nil {
			u = &use{}
		}
		if !d.alive {
			if u.clients > 0 {
				bad("dead device %s has claims", d.id)
			}
			continue
		}
		if u.mem > d.memMiB {
			bad("device %s: %d MiB promised of %d", d.id, u.mem, d.memMiB)
		}
		if u.comp > int64(d.compute) {
			bad("device %s: %d%% compute promised of %d%%", d.id, u.comp, d.compute)
		}
		if u.alone && u.clients > 1 {
			bad("device %s is held alone but serves %d claims", d.id, u.clients)
		}
		if !u.alone && u.clients > 0 && u.clients > int64(slotLimit(d.sharing)) {
			bad("device %s: %d clients over the limit %d", d.id, u.clients, slotLimit(d.sharing))
		}
		if len(u.modes) > 1 {
			bad("device %s serves several modes %v", d.id, u.modes)
		}
		if len(u.tenants) > 1 && u.strict > 0 {
			bad("device %s: tenants %v share it but not all chose isolation none", d.id, u.tenants)
		}
		if d.usedMem != u.mem || int64(d.usedComp) != u.comp || int64(d.clients) != u.clients ||
			int64(d.strict) != u.strict || d.hardware != u.alone {
			bad("device %s: running totals (mem %d comp %d clients %d strict %d alone %v) drifted from the allocations (%d %d %d %d %v)",
				d.id, d.usedMem, d.usedComp, d.clients, d.strict, d.hardware, u.mem, u.comp, u.clients, u.strict, u.alone)
		}
	}
	for gi := range s.gpus {
		g := &s.gpus[gi]
		if !g.migOn {
			continue
		}
		var l mig.Layout
		for _, di := range g.inst {
			d := &s.devs[di]
			l = append(l, mig.Instance{Profile: g.geo.Shapes[d.profile].Name, Start: d.start})
		}
		o, err := g.geo.Occupancy(l)
		if err != nil {
			bad("GPU %s: %v", g.spec.UUID, err)
		} else if o != g.occ {
			bad("GPU %s: occupancy drifted from its instances", g.spec.UUID)
		}
	}
	if err := s.checkIndex(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// checkIndex compares the incremental index with one built from scratch.
func (s *State) checkIndex() error {
	c := *s
	c.idx = index{}
	fresh := newIndex(&c)
	count := func(ix index) (join, idle, free int) {
		for _, set := range ix.join {
			join += len(set.e)
		}
		for _, t := range ix.idle {
			for i := range t {
				t[i].each(func(int) bool { idle++; return true })
			}
		}
		for _, byOcc := range ix.free {
			for _, cl := range byOcc {
				for i := range cl.tiers {
					cl.tiers[i].each(func(int) bool { free++; return true })
				}
			}
		}
		return
	}
	j1, i1, f1 := count(s.idx)
	j2, i2, f2 := count(fresh)
	if j1 != j2 || i1 != i2 || f1 != f2 {
		return fmt.Errorf("index drifted: join %d/%d idle %d/%d free %d/%d (incremental/rebuilt)", j1, j2, i1, i2, f1, f2)
	}
	members := func(b *bitset) []int {
		var out []int
		b.each(func(i int) bool { out = append(out, i); return true })
		return out
	}
	if !slices.Equal(members(&s.idx.evict), members(&fresh.evict)) {
		return fmt.Errorf("index drifted: GPUs with idle MIG instances %v, rebuilt %v", members(&s.idx.evict), members(&fresh.evict))
	}
	if !slices.Equal(members(&s.idx.switchable), members(&fresh.switchable)) {
		return fmt.Errorf("index drifted: switchable GPUs %v, rebuilt %v", members(&s.idx.switchable), members(&fresh.switchable))
	}
	for k, set := range fresh.join {
		mine := s.idx.join[k]
		if mine == nil || !slices.Equal(mine.e, set.e) {
			return fmt.Errorf("index drifted: join set %v differs", k)
		}
	}
	return nil
}
