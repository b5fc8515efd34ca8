package alloc

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
	return s.bestSlow(n, s.allNodes())
}

func (s *State) allNodes() []int {
	out := make([]int, len(s.nodes))
	for i := range out {
		out[i] = i
	}
	return out
}

func (s *State) bestJoin(n *need) (cand, bool) {
	var best cand
	found := false
	for rank, ch := range n.choices {
		if ch.mode != TimeSlice && ch.mode != MPS {
			continue
		}
		keys := []joinKey{{ch.mode, n.claim.Tenant}}
		if n.iso == IsolationNone {
			keys = append(keys, joinKey{ch.mode, ""})
		}
		for _, k := range keys {
			for di := range s.idx.join[k] {
				if c, r := s.tryJoin(n, di, ch, rank); r == rOK && (!found || s.better(&c, &best)) {
					best, found = c, true
				}
			}
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
	tiers := s.tierOrder()
	for rank, ch := range n.choices {
		// Idle existing devices: within one shape and tier every device
		// offers the same fit, so the first that passes is the class's best.
		for key, byTier := range s.idx.idle {
			if !modeFits(key.sharing, ch.mode) || (ch.inMIG && key.profile < 0) ||
				(ch.mode == Exclusive && !ch.inMIG && key.profile >= 0) {
				continue
			}
			for _, t := range tiers {
				done := false
				byTier[t].each(func(di int) bool {
					c, r := s.tryOpen(n, di, ch, rank)
					done = consider(c, r)
					// A failure that is not about this very device fails
					// the whole class.
					return !done && deviceSpecific(r)
				})
				if done {
					break
				}
			}
		}
		// New MIG instances: GPUs with the same occupancy place a profile
		// identically, so each class is tried once per tier.
		if ch.mode == Exclusive && !ch.inMIG {
			continue
		}
		for _, byOcc := range s.idx.free {
			var profiles []int
			profilesKnown := false
			for _, byTier := range byOcc {
				for _, t := range tiers {
					done := false
					byTier[t].each(func(gi int) bool {
						if !profilesKnown {
							profiles, _ = s.profilesFor(n, gi)
							profilesKnown = true
						}
						ok, specific := false, false
						for _, p := range profiles {
							c, r := s.tryCreate(n, gi, p, ch, rank)
							ok = consider(c, r) || ok
							specific = specific || deviceSpecific(r)
						}
						done = ok
						return !ok && specific
					})
					if done {
						break
					}
				}
			}
		}
	}
	return best, found
}

// deviceSpecific reports whether a rejection depends on the particular
// device or GPU rather than on its class (shape, occupancy).
func deviceSpecific(r reason) bool { return r == rSelector || r == rConstraint }

// bestSlow scans nodes for evictions and mode switches.
func (s *State) bestSlow(n *need, nodes []int) (cand, bool) {
	var best cand
	found := false
	for _, k := range []kind{kindEvict, kindSwitch} {
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
		if g.geo != nil && g.migOn && g.dynamic && !(ch.mode == Exclusive && !ch.inMIG) {
			ps, r := s.profilesFor(n, gi)
			far = max(far, r)
			for _, p := range ps {
				note(s.tryCreate(n, gi, p, ch, rank))
			}
		}
	case kindEvict:
		if g.geo != nil && g.migOn && g.dynamic && !(ch.mode == Exclusive && !ch.inMIG) {
			ps, r := s.profilesFor(n, gi)
			far = max(far, r)
			for _, p := range ps {
				if c, r := s.tryEvict(n, gi, p, ch, rank); r != rOK || c.kind == kindEvict {
					note(c, r)
				}
			}
		}
	case kindSwitch:
		note(s.trySwitch(n, gi, ch, rank))
	}
	return out, far
}

// bestScan is the reference search: every candidate on the given nodes,
// best by the same order. Constrained claims use it per node; tests hold
// bestIndexed to it.
func (s *State) bestScan(n *need, nodes []int) (cand, bool) {
	var best cand
	found := false
	for _, k := range []kind{kindJoin, kindOpen} {
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
	return s.bestSlow(n, nodes)
}
