package alloc

import "fmt"

// NoFitError says why a claim's device found no place, per node,
// aggregated the way kube-scheduler does ("0/40 nodes are available: 25
// insufficient GPU memory, 10 tenant isolation, 5 selector mismatch").
type NoFitError struct {
	Claim   string
	Request string
	// Device is the index of the device within the request (0-based).
	Device int
	Nodes  int
	// Reasons counts nodes by the furthest check their best GPU reached.
	Reasons map[string]int
	// PerNode gives each node's reason.
	PerNode map[string]string
	text    string
}

func (e *NoFitError) Error() string { return e.text }

// explain runs every check on every node for one device and reports the
// furthest each node got.
func (s *State) explain(c *Claim, r *Request, k int, n *need) error {
	counts := map[reason]int{}
	e := &NoFitError{Claim: c.Name, Request: r.Name, Device: k, Nodes: len(s.nodes),
		Reasons: map[string]int{}, PerNode: map[string]string{}}
	for ni := range s.nodes {
		far := rNone
		if s.nodes[ni].node.Unschedulable {
			far = rUnschedulable
		}
		for _, gi := range s.nodes[ni].gpus {
			if far == rUnschedulable {
				break
			}
			for rank, ch := range n.choices {
				for _, kd := range []kind{kindJoin, kindOpen, kindEvict, kindSwitch} {
					_, why := s.gpuCandidatesWhy(n, gi, ch, rank, kd)
					far = max(far, why)
				}
			}
		}
		switch {
		case far == rNone && len(s.nodes[ni].gpus) == 0:
			far = rNoGPU
		case far == rNone:
			far = rMode // a node without usable GPUs
		case far == rOK:
			far = rConstraint // fits alone, but not with the rest of the claim
		}
		counts[far]++
		e.Reasons[reasonText[far]]++
		e.PerNode[s.nodes[ni].node.Name] = reasonText[far]
	}
	of := ""
	if max(r.Count, 1) > 1 {
		of = fmt.Sprintf(" (device %d of %d)", k+1, r.Count)
	}
	e.text = fmt.Sprintf("claim %s request %s%s: 0/%d nodes are available", c.Name, r.Name, of, len(s.nodes))
	if len(counts) > 0 {
		e.text += ": " + sortedReasons(counts)
	}
	return e
}

// IsNoFit reports whether err says that nothing fits now: a *NoFitError,
// or ErrNoFit when no explanation was asked for.
func IsNoFit(err error) bool {
	_, ok := err.(*NoFitError)
	return ok || err == ErrNoFit
}
