package alloc

// Fleet returns the fleet as it stands after every committed change: MIG
// modes and layouts (instances in creation order, planned ones under their
// planned ids) and each device's sharing. NewState(s.Fleet(), allocations)
// rebuilds an equivalent State.
func (s *State) Fleet() Fleet {
	f := Fleet{Policy: s.policy}
	for ni := range s.nodes {
		n := *s.nodes[ni].node
		n.GPUs = nil
		for _, gi := range s.nodes[ni].gpus {
			g := &s.gpus[gi]
			out := *g.spec
			out.MIGEnabled, out.DynamicMIG = g.migOn, g.dynamic
			out.Instances = nil
			if g.whole >= 0 {
				out.Sharing = s.devs[g.whole].sharing
			}
			for _, di := range g.inst {
				d := &s.devs[di]
				out.Instances = append(out.Instances, MIGInstance{UUID: d.id, Profile: g.geo.Shapes[d.profile].Name,
					Start: d.start, Sharing: d.sharing})
			}
			n.GPUs = append(n.GPUs, out)
		}
		f.Nodes = append(f.Nodes, n)
	}
	return f
}
