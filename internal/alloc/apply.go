package alloc

import (
	"fmt"
	"slices"
)

// Apply commits an allocation: its layout changes first, then every
// device's usage. It re-checks every rule and changes nothing when one
// would break (so an allocation decided on a stale state is refused, never
// half-applied).
func (s *State) Apply(a *Allocation) error {
	if _, dup := s.allocs[a.Claim]; dup {
		return fmt.Errorf("claim %s is already allocated", a.Claim)
	}
	if _, err := s.apply(a, true); err != nil {
		return err
	}
	s.allocs[a.Claim] = a
	return nil
}

// Release returns everything a claim holds. MIG instances it created stay
// (idle) so the next claim can reuse them; dynamic MIG destroys them when
// the room is needed.
func (s *State) Release(claim string) error {
	a, ok := s.allocs[claim]
	if !ok {
		return fmt.Errorf("claim %s is not allocated", claim)
	}
	touched := map[int]bool{}
	for i := range a.Devices {
		di, ok := s.byUUID[a.Devices[i].Device]
		if !ok || di < 0 {
			return fmt.Errorf("claim %s: device %s is gone", claim, a.Devices[i].Device)
		}
		s.removeUse(di, a, &a.Devices[i])
		touched[s.devs[di].gpu] = true
	}
	delete(s.allocs, claim)
	s.reindexTouched(touched)
	return nil
}

// apply performs an allocation (its changes too when withChanges) and
// returns how to undo it exactly.
func (s *State) apply(a *Allocation, withChanges bool) (func(), error) {
	var log []func()
	undo := func() {
		for i := len(log) - 1; i >= 0; i-- {
			log[i]()
		}
	}
	touched := map[int]bool{}
	fail := func(err error) (func(), error) {
		undo()
		s.reindexTouched(touched)
		return nil, fmt.Errorf("claim %s: %w", a.Claim, err)
	}
	for _, ch := range a.Changes {
		if !withChanges {
			break
		}
		gi, err := s.gpuByUUID(ch.GPU)
		if err != nil {
			return fail(err)
		}
		touched[gi] = true
		u, err := s.change(gi, ch)
		if err != nil {
			return fail(err)
		}
		log = append(log, u)
	}
	for i := range a.Devices {
		as := &a.Devices[i]
		di, ok := s.byUUID[as.Device]
		if !ok || di < 0 || !s.devs[di].alive {
			return fail(fmt.Errorf("device %s does not exist", as.Device))
		}
		if d := &s.devs[di]; d.idle() && d.sharing.Mode == Dynamic && (as.Mode == TimeSlice || as.Mode == MPS) {
			// A device the fleet reports as dynamic takes the mode of its
			// first claim with the policy's defaults, as the allocator
			// configured it (agents do not report sharing).
			old := d.sharing
			d.sharing = s.shareFor(as.Mode, d.compute, old)
			log = append(log, func() { s.devs[di].sharing = old })
		}
		if err := s.checkUse(di, a, as); err != nil {
			return fail(fmt.Errorf("device %s: %w", as.Device, err))
		}
		s.addUse(di, a, as)
		touched[s.devs[di].gpu] = true
		log = append(log, func() { s.removeUse(di, a, as) })
	}
	s.reindexTouched(touched)
	return func() { undo(); s.reindexTouched(touched) }, nil
}

func (s *State) gpuByUUID(uuid string) (int, error) {
	if gi, ok := s.gpuIdx[uuid]; ok {
		return gi, nil
	}
	return -1, fmt.Errorf("GPU %s is not in the fleet", uuid)
}

// reindexTouched refreshes the index for changed GPUs, and for every GPU
// on a node whose touch tier changed (it went from idle to used or back).
func (s *State) reindexTouched(gpus map[int]bool) {
	for gi := range gpus {
		s.reindexGPU(gi)
		ni := s.gpus[gi].node
		if busy := s.nodes[ni].touched > 0; busy != s.nodes[ni].indexedBusy {
			s.nodes[ni].indexedBusy = busy
			for _, gj := range s.nodes[ni].gpus {
				if !gpus[gj] {
					s.reindexGPU(gj)
				}
			}
		}
	}
}

// change applies one layout change and returns its undo.
func (s *State) change(gi int, ch Change) (func(), error) {
	g := &s.gpus[gi]
	switch ch.Kind {
	case CreateInstance:
		if !g.migOn || g.geo == nil {
			return nil, fmt.Errorf("create %s@%d: MIG is off on GPU %s", ch.Profile, ch.Start, g.spec.UUID)
		}
		p, err := g.geo.Profile(ch.Profile)
		if err != nil {
			return nil, err
		}
		if !g.geo.CanAdd(g.occ, p, ch.Start) {
			return nil, fmt.Errorf("create %s@%d on GPU %s: does not fit next to %s", ch.Profile, ch.Start, g.spec.UUID, s.layoutString(gi))
		}
		sh := Sharing{Mode: Dynamic}
		if ch.Sharing != nil {
			sh = *ch.Sharing
		}
		id := ch.Device
		if id == "" {
			id = plannedID(g.spec.UUID, g.geo.Shapes[p].Name, ch.Start)
		}
		if _, dup := s.byUUID[id]; dup {
			return nil, fmt.Errorf("create %s: device id %s already exists", ch.Profile, id)
		}
		d := s.migDevice(gi, p, ch.Start, id, sh)
		d.dynamic = true // made for a claim: no sharing of its own
		di := s.addDevice(d)
		g = &s.gpus[gi]
		g.inst = append(g.inst, di)
		g.occ = g.geo.Add(g.occ, p, ch.Start)
		s.byUUID[id] = di
		return func() {
			g := &s.gpus[gi]
			g.inst = slices.DeleteFunc(g.inst, func(x int) bool { return x == di })
			g.occ = g.geo.Remove(g.occ, p, ch.Start)
			s.dropDevice(di)
			delete(s.byUUID, id)
		}, nil
	case DestroyInstance:
		di, ok := s.byUUID[ch.Device]
		if !ok || di < 0 || !s.devs[di].alive || !s.devs[di].isMIG || s.devs[di].gpu != gi {
			return nil, fmt.Errorf("destroy %s: no such MIG instance on GPU %s", ch.Device, g.spec.UUID)
		}
		d := &s.devs[di]
		if !d.idle() {
			return nil, fmt.Errorf("destroy %s: the instance is in use", ch.Device)
		}
		g.inst = slices.DeleteFunc(g.inst, func(x int) bool { return x == di })
		g.occ = g.geo.Remove(g.occ, d.profile, d.start)
		d.alive = false
		delete(s.byUUID, ch.Device)
		return func() {
			g := &s.gpus[gi]
			d := &s.devs[di]
			g.inst = append(g.inst, di)
			g.occ = g.geo.Add(g.occ, d.profile, d.start)
			d.alive = true
			s.byUUID[ch.Device] = di
		}, nil
	case EnableMIG:
		if g.migOn || g.geo == nil || g.whole < 0 || !s.devs[g.whole].idle() {
			return nil, fmt.Errorf("enable MIG on GPU %s: needs an idle MIG-capable GPU with MIG off", g.spec.UUID)
		}
		whole, dyn := g.whole, g.dynamic
		s.devs[whole].alive = false
		g.whole, g.migOn, g.dynamic = -1, true, true
		s.migOn++
		s.byUUID[g.spec.UUID] = -1 - gi
		return func() {
			g := &s.gpus[gi]
			s.devs[whole].alive = true
			g.whole, g.migOn, g.dynamic = whole, false, dyn
			s.migOn--
			s.byUUID[g.spec.UUID] = whole
		}, nil
	case DisableMIG:
		if !g.migOn || len(g.inst) > 0 {
			return nil, fmt.Errorf("disable MIG on GPU %s: destroy its instances first", g.spec.UUID)
		}
		sh := Sharing{Mode: Dynamic}
		if ch.Sharing != nil {
			sh = *ch.Sharing
		}
		di := s.addDevice(devState{gpu: gi, alive: true, id: g.spec.UUID, memMiB: g.model.MemoryMiB, compute: 100, sharing: sh, dynamic: true})
		g = &s.gpus[gi]
		g.whole, g.migOn = di, false
		s.migOn--
		s.byUUID[g.spec.UUID] = di
		return func() {
			g := &s.gpus[gi]
			s.dropDevice(di)
			g.whole, g.migOn = -1, true
			s.migOn++
			s.byUUID[g.spec.UUID] = -1 - gi
		}, nil
	case ConfigureShare:
		di, ok := s.byUUID[ch.Device]
		if !ok || di < 0 || !s.devs[di].alive || ch.Sharing == nil {
			return nil, fmt.Errorf("configure %s: no such device", ch.Device)
		}
		d := &s.devs[di]
		if !d.idle() {
			return nil, fmt.Errorf("configure %s: the device is in use", ch.Device)
		}
		if err := checkSharing(*ch.Sharing, "sharing"); err != nil {
			return nil, err
		}
		old := d.sharing
		d.sharing = *ch.Sharing
		return func() { s.devs[di].sharing = old }, nil
	}
	return nil, fmt.Errorf("unknown change %q", ch.Kind)
}

// dropDevice undoes addDevice: the last device is removed outright so an
// undone decision leaves no trace; any other is only marked dead.
func (s *State) dropDevice(di int) {
	d := &s.devs[di]
	d.alive = false
	if di != len(s.devs)-1 {
		return
	}
	g := &s.gpus[d.gpu]
	g.allDevs = slices.DeleteFunc(g.allDevs, func(x int) bool { return x == di })
	if r := s.idx.devIdle; di < len(r) && r[di].ok {
		s.idx.idle[r[di].key][r[di].tier].clear(di)
	}
	jk := s.idx.devJoin
	if di < len(jk) {
		for k := 0; k < jk[di].n; k++ {
			s.idx.join[jk[di].keys[k]].remove(jk[di].free, di)
		}
	}
	if di < len(s.idx.devIdle) {
		s.idx.devIdle = s.idx.devIdle[:di]
		s.idx.devJoin = s.idx.devJoin[:di]
	}
	s.devs = s.devs[:di]
}

func (s *State) layoutString(gi int) string {
	g := &s.gpus[gi]
	out := ""
	for i, di := range g.inst {
		if i > 0 {
			out += ","
		}
		d := &s.devs[di]
		out += fmt.Sprintf("%s@%d", g.geo.Shapes[d.profile].Name, d.start)
	}
	if out == "" {
		return "nothing"
	}
	return out
}

// checkUse enforces every capacity and isolation rule for one assignment.
func (s *State) checkUse(di int, a *Allocation, as *Assigned) error {
	d := &s.devs[di]
	g := &s.gpus[d.gpu]
	if s.nodes[g.node].node.Name != as.Node {
		return fmt.Errorf("is on node %s, not %s", s.nodes[g.node].node.Name, as.Node)
	}
	exclusive := as.Mode == Exclusive || as.Mode == MIG || a.Isolation == IsolationHardware
	switch {
	case exclusive && !d.idle():
		return fmt.Errorf("%s use needs the device alone; it serves %d claims", as.Mode, d.clients)
	case d.hardware:
		return fmt.Errorf("is held alone by another claim")
	case !d.idle() && d.mode != as.Mode:
		return fmt.Errorf("serves %s claims, not %s", d.mode, as.Mode)
	case !d.idle() && !tenancyAllows(d, a.Tenant, a.Isolation):
		return fmt.Errorf("tenant isolation: it serves other tenants")
	case as.MemoryMiB < 0 || d.usedMem+as.MemoryMiB > d.memMiB:
		return fmt.Errorf("memory: %d MiB promised + %d MiB asked > %d MiB", d.usedMem, as.MemoryMiB, d.memMiB)
	case as.ComputePercent < 0 || d.usedComp+as.ComputePercent > d.compute:
		return fmt.Errorf("compute: %d%% promised + %d%% asked > %d%%", d.usedComp, as.ComputePercent, d.compute)
	}
	if !exclusive {
		if normMode(d.sharing.Mode) != as.Mode {
			return fmt.Errorf("is configured for %s, not %s", normMode(d.sharing.Mode), as.Mode)
		}
		limit := slotLimit(d.sharing)
		if d.clients >= limit {
			return fmt.Errorf("all %d %s slots are taken", limit, as.Mode)
		}
		if as.Slot < 0 || as.Slot >= limit || d.slots&(1<<as.Slot) != 0 {
			return fmt.Errorf("slot %d is not free (limit %d)", as.Slot, limit)
		}
	}
	return nil
}

func (s *State) addUse(di int, a *Allocation, as *Assigned) {
	d := &s.devs[di]
	d.mode = as.Mode
	d.usedMem += as.MemoryMiB
	d.usedComp += as.ComputePercent
	d.clients++
	if as.Slot >= 0 && as.Slot < 64 {
		d.slots |= 1 << as.Slot
	}
	if as.Mode == Exclusive || as.Mode == MIG || a.Isolation == IsolationHardware {
		d.hardware = true
	}
	if a.Isolation != IsolationNone {
		d.strict++
	}
	found := false
	for i := range d.tenants {
		if d.tenants[i].name == a.Tenant {
			d.tenants[i].n++
			found = true
		}
	}
	if !found {
		d.tenants = append(d.tenants, tenantUse{a.Tenant, 1})
	}
	s.gpus[d.gpu].touched++
	s.nodes[s.gpus[d.gpu].node].touched++
}

func (s *State) removeUse(di int, a *Allocation, as *Assigned) {
	d := &s.devs[di]
	d.usedMem -= as.MemoryMiB
	d.usedComp -= as.ComputePercent
	d.clients--
	if as.Slot >= 0 && as.Slot < 64 {
		d.slots &^= 1 << as.Slot
	}
	if a.Isolation != IsolationNone {
		d.strict--
	}
	for i := range d.tenants {
		if d.tenants[i].name == a.Tenant {
			d.tenants[i].n--
			if d.tenants[i].n == 0 {
				d.tenants = slices.Delete(d.tenants, i, i+1)
			}
			break
		}
	}
	if d.clients == 0 {
		d.mode, d.hardware, d.slots = "", false, 0
		if d.dynamic {
			d.sharing = Sharing{Mode: Dynamic}
		}
	}
	s.gpus[d.gpu].touched--
	s.nodes[s.gpus[d.gpu].node].touched--
}
