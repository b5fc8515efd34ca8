package alloc

import "slices"

// bestIndexed finds the best candidate for one device through the index:
// joins from the tenant's shared devices, then idle devices and new MIG
// instances by class, and only when none exists, evictions and mode
// switches by a scan. It returns the same candidate as bestScan over every
// node (a property test holds it to that).
func (s *State) bestIndexed(n *need) (cand, bool) {
	if c, ok := s.bestJoin(n); ok {
		return c, true
	}
	if c, ok := s.bestOpen(n); ok {
		return c, true
	}
	if n.room != (room{}) {
		// Room for claims to come is sought in free space only: evicting
		// or switching for it is a scan of the fleet per attempt, and the
		// claim's own size (tried without room) may still do both.
		return cand{}, false
	}
	return s.bestSlow(n)
}

// bestJoin looks at the devices a claim may share. Every such device is on
// a GPU in use (the same tier) and takes no new GPU share, so the order
// reduces to mechanism preference, then fit: the first preference with a
// feasible device wins, and within it the join sets are walked best fit
// first, so under binpack the first feasible device of each set is that
// set's best (spread, which wants the loosest fit, tries them all).
func (s *State) bestJoin(n *need) (cand, bool) {
	var best cand
	found := false
	for rank, ch := range n.choices {
		if ch.mode != TimeSlice && ch.mode != MPS {
			continue
		}
		keys := [2]joinKey{{ch.mode, n.claim.Tenant}, {ch.mode, ""}}
		nkeys := 1
		if n.iso == IsolationNone {
			nkeys = 2
		}
		for _, k := range keys[:nkeys] {
			set := s.idx.join[k]
			if set == nil {
				continue
			}
			// With no memory asked, the promise depends on the device
			// (an equal share), so fit order is not free-memory order;
			// spread wants the loosest fit, so it walks the whole set.
			exact := n.req.MemoryMiB > 0 && s.policy.Placement != "spread"
			set.from(n.req.MemoryMiB, func(di int) bool {
				c, r := s.tryJoin(n, di, ch, rank)
				if r == rOK && (!found || s.better(&c, &best)) {
					best, found = c, true
				}
				return !(r == rOK && exact)
			})
		}
		if found {
			return best, true
		}
	}
	return best, found
}

// tierOrder is the order tiers are searched in under the policy.
func (s *State) tierOrder() [numTiers]int {
	if s.policy.Placement == "spread" {
		return [numTiers]int{tierNone, tierNode, tierGPU}
	}
	return [numTiers]int{tierGPU, tierNode, tierNone}
}

func (s *State) bestOpen(n *need) (cand, bool) {
	n.selPerDevice = s.selectorPerDevice(n.req.Selector)
	var best cand
	found := false
	consider := func(c cand, r reason) bool {
		if r != rOK {
			return false
		}
		if !found || s.better(&c, &best) {
			best, found = c, true
		}
		return true
	}
	// promising reports whether a candidate holding this GPU share at this
	// preference could still beat the best so far (branch and bound on the
	// first two keys of the order).
	promising := func(locked, rank int) bool {
		if !found || locked != best.locked {
			return !found || locked < best.locked
		}
		return rank <= best.modeRank
	}
	tiers := s.tierOrder()
	occs := s.occBuf[:0]
	defer func() { s.occBuf = occs[:0] }()
	var profs []modelProfiles // what fits a model depends on the need only
	for rank, ch := range n.choices {
		// Idle existing devices: within one shape and tier every device
		// offers the same fit, so the first that passes is the class's best.
		for key, byTier := range s.idx.idle {
			if !modeFits(key.sharing, ch.mode) || (ch.inMIG && key.profile < 0) ||
				(ch.mode == Exclusive && !ch.inMIG && key.profile >= 0) {
				continue
			}
			if !promising(s.lockedOfShape(key), rank) {
				continue
			}
			for _, t := range tiers {
				done := false
				byTier[t].each(func(di int) bool {
					c, r := s.tryOpen(n, di, ch, rank)
					done = consider(c, r)
					// A failure that is not about this very device fails
					// the whole class.
					return !done && n.deviceSpecific(r)
				})
				if done {
					break
				}
			}
		}
		// New MIG instances: GPUs with the same occupancy place a profile
		// identically; profiles are tried smallest first, tiers in policy
		// order, and the search stops as soon as nothing can do better.
		if ch.mode == Exclusive && !ch.inMIG {
			continue
		}
		for fk, byOcc := range s.idx.free {
			if len(byOcc) == 0 {
				continue
			}
			model := s.models[fk.model]
			geo := s.geos[model.ID]
			// Node classes of one model share its profiles' answer.
			var profiles []int
			if k := slices.IndexFunc(profs, func(p modelProfiles) bool { return p.model == fk.model }); k >= 0 {
				profiles = profs[k].profiles
			} else {
				profiles, _ = profilesForModel(n, model, geo)
				profs = append(profs, modelProfiles{fk.model, profiles})
			}
			// The occupancies are walked once here, not once per profile
			// and tier (a map walk costs more than a slice's).
			occs = occs[:0]
			for occ, cl := range byOcc {
				occs = append(occs, occEntry{occ, cl})
			}
			for _, p := range profiles {
				if !promising(lockedShare(geo, p), rank) {
					continue
				}
				for _, t := range tiers {
					foundHere := false
					for _, oe := range occs {
						occ, cl := oe.occ, oe.cl
						if cl.tiers[t].empty() {
							continue
						}
						if _, _, ok := cl.placeOf(geo, occ, p); !ok {
							continue
						}
						cl.tiers[t].each(func(gi int) bool {
							c, r := s.tryCreate(n, gi, p, ch, rank)
							ok := consider(c, r)
							foundHere = foundHere || ok
							return !ok && n.deviceSpecific(r)
						})
					}
					if foundHere {
						break
					}
				}
			}
		}
	}
	return best, found
}

// modelProfiles is the profiles a need may take on one model.
type modelProfiles struct {
	model    string
	profiles []int
}

// occEntry is one occupancy class of a model's GPUs.
type occEntry struct {
	occ occKey
	cl  *occClass
}

// lockedOfShape is the GPU share a device of this shape holds.
func (s *State) lockedOfShape(k shapeKey) int {
	if k.profile < 0 {
		return lockedUnits
	}
	return lockedShare(s.geos[k.model], k.profile)
}

// deviceSpecific reports whether a rejection depends on the particular
// device or GPU rather than on its class (shape, occupancy).
func (n *need) deviceSpecific(r reason) bool {
	return r == rConstraint || (r == rSelector && n.selPerDevice)
}

// bestSlow looks for evictions on the GPUs that have an idle MIG instance
// to destroy, then (when the policy allows them) for mode switches on the
// idle MIG-capable GPUs: the only GPUs where scan could find either, so
// it returns what scan over every node would.
func (s *State) bestSlow(n *need) (cand, bool) {
	var best cand
	found := false
	visit := func(k kind) func(gi int) bool {
		return func(gi int) bool {
			for rank, ch := range n.choices {
				for _, c := range s.gpuCandidates(n, gi, ch, rank, k) {
					if !found || s.better(&c, &best) {
						best, found = c, true
					}
				}
			}
			return true
		}
	}
	s.idx.evict.each(visit(kindEvict))
	if !found && s.policy.AllowModeSwitch {
		s.idx.switchable.each(visit(kindSwitch))
	}
	return best, found
}

// scan tries the kinds in order over every GPU of the nodes and returns the
// best candidate of the first kind that has any.
func (s *State) scan(n *need, nodes []int, kinds ...kind) (cand, bool) {
	var best cand
	found := false
	for _, k := range kinds {
		for _, ni := range nodes {
			for _, gi := range s.nodes[ni].gpus {
				for rank, ch := range n.choices {
					for _, c := range s.gpuCandidates(n, gi, ch, rank, k) {
						if !found || s.better(&c, &best) {
							best, found = c, true
						}
					}
				}
			}
		}
		if found {
			return best, true
		}
	}
	return best, false
}

// gpuCandidates lists every feasible candidate of kind k on one GPU for one
// mechanism; it is the scan path's (and the explanation's) building block.
func (s *State) gpuCandidates(n *need, gi int, ch choice, rank int, k kind) []cand {
	out, _ := s.gpuCandidatesWhy(n, gi, ch, rank, k)
	return out
}

func (s *State) gpuCandidatesWhy(n *need, gi int, ch choice, rank int, k kind) ([]cand, reason) {
	g := &s.gpus[gi]
	var out []cand
	far := rNone
	note := func(c cand, r reason) {
		if r == rOK {
			out = append(out, c)
		}
		far = max(far, r)
	}
	devs := g.inst
	if g.whole >= 0 {
		devs = []int{g.whole}
	}
	switch k {
	case kindJoin:
		for _, di := range devs {
			if !s.devs[di].idle() {
				note(s.tryJoin(n, di, ch, rank))
			}
		}
	case kindOpen:
		for _, di := range devs {
			if s.devs[di].idle() {
				note(s.tryOpen(n, di, ch, rank))
			}
		}
		if n.req.Profile != "" {
			// A profile the model does not have, whatever its MIG state.
			if g.geo == nil {
				far = max(far, rProfile)
			} else if _, ok := g.geo.Lookup(n.req.Profile); !ok {
				far = max(far, rProfile)
			}
		}
		if (ch.inMIG || ch.mode == MIG) && g.geo != nil && !g.migOn && !s.policy.AllowModeSwitch {
			far = max(far, rMIGOff) // MIG is off, and the allocator may not turn it on
		}
		if g.geo != nil && g.migOn && g.dynamic && !(ch.mode == Exclusive && !ch.inMIG) {
			ps, r := s.profilesFor(n, gi)
			if r != rOK {
				far = max(far, r)
			}
			for _, p := range ps {
				c, r := s.tryCreate(n, gi, p, ch, rank)
				note(c, r)
				if r == rOK && n.allStarts {
					out = append(out, s.otherStarts(n, gi, p, ch, rank)...)
				}
			}
		}
	case kindEvict:
		if g.geo != nil && g.migOn && g.dynamic && !(ch.mode == Exclusive && !ch.inMIG) {
			ps, r := s.profilesFor(n, gi)
			if r != rOK {
				far = max(far, r)
			}
			for _, p := range ps {
				if c, r := s.tryEvict(n, gi, p, ch, rank); r != rOK || c.kind == kindEvict {
					note(c, r)
				}
			}
		}
	case kindSwitch:
		note(s.trySwitch(n, gi, ch, rank))
		if n.allStarts {
			out = append(out, n.alts...)
			n.alts = nil
		}
	}
	return out, far
}

// bestScan is the reference search: every candidate on the given nodes,
// best by the same order. Constrained claims use it per node; tests hold
// bestIndexed to it.
func (s *State) bestScan(n *need, nodes []int) (cand, bool) {
	return s.scan(n, nodes, kindJoin, kindOpen, kindEvict, kindSwitch)
}
