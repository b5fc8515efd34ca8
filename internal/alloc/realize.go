package alloc

import "fmt"

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
		if err := do(gi, Change{Kind: CreateInstance, Node: node, GPU: d.GPU, Device: d.Device, Profile: d.Profile, Start: d.Start}); err != nil {
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
