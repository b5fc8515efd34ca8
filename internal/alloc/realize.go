package alloc

import (
	"fmt"
	"slices"
)

// Realize returns the layout changes that make this state hold a's devices,
// derived from the devices themselves rather than from the changes a was
// decided with: MIG switched on where a MIG device needs it, idle instances
// that overlap a device's placement destroyed, the device's instance
// created at its start; MIG switched off (idle instances destroyed first)
// where a whole GPU is wanted. The configure-sharing changes of a are kept.
// The state is left as it was. Realize errs when a device cannot be made
// (its GPU is not in the fleet, an overlapping instance is in use, or an
// instance a already named by its uuid is gone: that is drift, not a plan).
//
// The server uses it when it rebuilds its state from the store, so that
// the layout an agent is asked for is a function of the live allocations:
// a claim released before its set-up was made leaves nothing half-made
// behind, and a claim that relied on that set-up gets it in its own
// changes.
func (s *State) Realize(a *Allocation) ([]Change, error) {
	var out []Change
	var undo []func()
	defer func() {
		touched := map[int]bool{}
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
		for _, ch := range out {
			if gi, ok := s.gpuIdx[ch.GPU]; ok {
				touched[gi] = true
			}
		}
		s.reindexTouched(touched)
	}()
	do := func(gi int, ch Change) error {
		u, err := s.change(gi, ch)
		if err != nil {
			return err
		}
		undo = append(undo, u)
		out = append(out, ch)
		return nil
	}
	for i := range a.Devices {
		d := &a.Devices[i]
		if di, ok := s.byUUID[d.Device]; ok && di >= 0 && s.devs[di].alive {
			continue
		}
		gi, ok := s.gpuIdx[d.GPU]
		if !ok {
			return nil, fmt.Errorf("claim %s: GPU %s is not in the fleet", a.Claim, d.GPU)
		}
		g := &s.gpus[gi]
		node := s.nodes[g.node].node.Name
		if d.Profile == "" {
			// A whole GPU: only reachable by switching MIG off.
			if !g.migOn || d.Device != g.spec.UUID {
				return nil, fmt.Errorf("claim %s: device %s does not exist", a.Claim, d.Device)
			}
			for len(s.gpus[gi].inst) > 0 {
				in := &s.devs[s.gpus[gi].inst[0]]
				if err := do(gi, Change{Kind: DestroyInstance, Node: node, GPU: d.GPU, Device: in.id}); err != nil {
					return nil, fmt.Errorf("claim %s: %w", a.Claim, err)
				}
			}
			if err := do(gi, Change{Kind: DisableMIG, Node: node, GPU: d.GPU, Disruptive: true}); err != nil {
				return nil, fmt.Errorf("claim %s: %w", a.Claim, err)
			}
			continue
		}
		if !IsPlanned(d.Device) && !createdBy(a, d.Device) {
			return nil, fmt.Errorf("claim %s: MIG instance %s is gone from GPU %s", a.Claim, d.Device, d.GPU)
		}
		if !g.migOn {
			if err := do(gi, Change{Kind: EnableMIG, Node: node, GPU: d.GPU, Disruptive: true}); err != nil {
				return nil, fmt.Errorf("claim %s: %w", a.Claim, err)
			}
			g = &s.gpus[gi]
		}
		if g.geo == nil {
			return nil, fmt.Errorf("claim %s: GPU %s has no MIG", a.Claim, d.GPU)
		}
		p, err := g.geo.Profile(d.Profile)
		if err != nil {
			return nil, fmt.Errorf("claim %s: %w", a.Claim, err)
		}
		lo, hi := d.Start, d.Start+g.geo.Shapes[p].Size
		var overlap []string
		for _, di := range g.inst {
			in := &s.devs[di]
			if in.start < hi && lo < in.start+g.geo.Shapes[in.profile].Size {
				overlap = append(overlap, in.id)
			}
		}
		for _, id := range overlap {
			if err := do(gi, Change{Kind: DestroyInstance, Node: node, GPU: d.GPU, Device: id}); err != nil {
				return nil, fmt.Errorf("claim %s: %w", a.Claim, err)
			}
		}
		create := Change{Kind: CreateInstance, Node: node, GPU: d.GPU, Device: d.Device, Profile: d.Profile, Start: d.Start}
		// An instance made for a shared claim is made with the sharing it
		// was decided with (sized for the claims that were to join it).
		create.Sharing = createdSharing(a, d.Device)
		if err := do(gi, create); err != nil {
			return nil, fmt.Errorf("claim %s: %w", a.Claim, err)
		}
	}
	for _, ch := range a.Changes {
		if ch.Kind == ConfigureShare {
			out = append(out, ch)
		}
	}
	return out, nil
}

// createdSharing is the sharing a's own changes create the instance id
// with (nil when a does not create it or gives none).
func createdSharing(a *Allocation, id string) *Sharing {
	for _, ch := range a.Changes {
		if ch.Kind == CreateInstance && ch.Device == id && ch.Sharing != nil {
			sh := *ch.Sharing
			return &sh
		}
	}
	return nil
}

// createdBy reports whether a's own changes create the instance id (an
// instance this allocation made, renamed to its uuid since).
func createdBy(a *Allocation, id string) bool {
	for _, ch := range a.Changes {
		if ch.Kind == CreateInstance && ch.Device == id {
			return true
		}
	}
	return false
}

// Restore applies live allocations to a state built from a reported fleet
// (a control plane's rebuild, after a restart or an inventory change),
// each with the changes Realize finds for it. It returns, per claim, the
// allocation as applied (its Changes realized) or the error that kept it
// out. The result does not depend on the caller's order: configuring a
// device's sharing needs the device idle, so the configure-sharing change
// a live allocation was decided with goes with whichever allocation
// touches that device first here (not necessarily the one that opened it,
// which may come later in the list); and a shared device no live
// allocation configures (the claim that opened it is gone) is sized so
// that every live claim's slot on it fits, instead of the fleet's
// defaults.
func (s *State) Restore(as []*Allocation) (applied map[string]*Allocation, failed map[string]error) {
	applied, failed = map[string]*Allocation{}, map[string]error{}
	slots := map[string]int{}        // shared device -> slots its live claims need
	configure := map[string]Change{} // device -> the configure-sharing change it was set up with
	for _, a := range as {
		for _, d := range a.Devices {
			if d.Mode == TimeSlice || d.Mode == MPS {
				slots[d.Device] = max(slots[d.Device], d.Slot+1)
			}
		}
		for _, ch := range a.Changes {
			if _, seen := configure[ch.Device]; ch.Kind == ConfigureShare && !seen {
				configure[ch.Device] = ch
			}
		}
	}
	created := map[string]Sharing{} // planned instance -> the sharing it was to be made with
	for _, a := range as {
		for _, ch := range a.Changes {
			if _, seen := created[ch.Device]; ch.Kind == CreateInstance && ch.Sharing != nil && !seen {
				created[ch.Device] = *ch.Sharing
			}
		}
	}
	configured := map[string]bool{} // devices whose configure change is applied
	for _, a := range as {
		rest := *a
		rest.Changes = slices.DeleteFunc(slices.Clone(a.Changes), func(ch Change) bool { return ch.Kind == ConfigureShare })
		changes, err := s.Realize(&rest)
		var mine []string
		if err == nil {
			// An instance another live claim was to make is made with its
			// sharing by whichever claim comes first here.
			for i := range changes {
				if sh, ok := created[changes[i].Device]; ok && changes[i].Kind == CreateInstance && changes[i].Sharing == nil {
					changes[i].Sharing = &sh
				}
			}
			for _, d := range a.Devices {
				ch, ok := configure[d.Device]
				if !ok || configured[d.Device] || slices.Contains(mine, d.Device) {
					continue
				}
				changes = append(changes, ch)
				mine = append(mine, d.Device)
			}
			rest.Changes = s.sizeShared(&rest, changes, slots)
			err = s.Apply(&rest)
		}
		if err != nil {
			failed[a.Claim] = err
			continue
		}
		for _, dev := range mine {
			configured[dev] = true
		}
		applied[a.Claim] = &rest
	}
	return applied, failed
}

// sizeShared adds a configure-sharing change for each existing shared
// device of a that is idle and dynamic here and that no change of a
// configures, when the fleet's defaults would give it fewer slots than its
// live claims use.
func (s *State) sizeShared(a *Allocation, changes []Change, slots map[string]int) []Change {
	set := map[string]bool{}
	for _, ch := range changes {
		if ch.Kind == ConfigureShare {
			set[ch.Device] = true
		}
	}
	for _, d := range a.Devices {
		if d.Mode != TimeSlice && d.Mode != MPS || set[d.Device] {
			continue
		}
		di, ok := s.byUUID[d.Device]
		if !ok || di < 0 || !s.devs[di].alive || !s.devs[di].idle() || normMode(s.devs[di].sharing.Mode) != Dynamic {
			continue
		}
		dev := &s.devs[di]
		sh := s.shareFor(d.Mode, dev.compute, dev.sharing)
		need := slots[d.Device]
		if slotLimit(sh) >= need {
			continue
		}
		if d.Mode == TimeSlice {
			sh.Replicas = need
		} else {
			sh.MaxClients = min(need, MaxMPSClients)
		}
		changes = append(changes, Change{Kind: ConfigureShare, Node: d.Node, GPU: d.GPU, Device: d.Device, Sharing: &sh})
		set[d.Device] = true
	}
	return changes
}
