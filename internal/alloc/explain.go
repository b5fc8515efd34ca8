package alloc

import (
	"fmt"
	"strings"
)

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
	// head is the text before the counts ("claim c request r"); tails
	// the profiles a node's models have, where the profile asked for is
	// not one of them.
	head  string
	tails map[string]string // per node
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
		if far == rProfile && r.Profile != "" {
			if e.tails == nil {
				e.tails = map[string]string{}
			}
			e.tails[s.nodes[ni].node.Name] = s.profileChoices(r.Profile, s.nodes[ni].gpus)
		}
		counts[far]++
		e.Reasons[reasonText[far]]++
		e.PerNode[s.nodes[ni].node.Name] = reasonText[far]
	}
	of := ""
	if max(r.Count, 1) > 1 {
		of = fmt.Sprintf(" (device %d of %d)", k+1, r.Count)
	}
	e.head = fmt.Sprintf("claim %s request %s%s", c.Name, r.Name, of)
	e.text = fmt.Sprintf("%s: 0/%d nodes are available", e.head, len(s.nodes))
	if len(counts) > 0 {
		e.text += ": " + sortedReasons(counts)
	}
	if r.Profile != "" && counts[rProfile] > 0 {
		var all []int
		for ni := range s.nodes {
			if e.tails[s.nodes[ni].node.Name] != "" {
				all = append(all, s.nodes[ni].gpus...)
			}
		}
		e.text += s.profileChoices(r.Profile, all)
	}
	return e
}

// On is the explanation of a claim that may only use one node (a pinned
// claim): that node's reason alone, in the same form ("0/1 nodes are
// available: 1 insufficient GPU memory"), without the other nodes, which
// the claim never asked for. ok is false when the node is not in the
// fleet.
func (e *NoFitError) On(node string) (string, bool) {
	why, ok := e.PerNode[node]
	if !ok {
		return "", false
	}
	return fmt.Sprintf("%s: 0/1 nodes are available (node %s): 1 %s%s", e.head, node, why, e.tails[node]), true
}

// profileChoices lists, for a profile some GPU models among gpus do not
// have, the profiles each of those models does have (or that it has no
// MIG): what a claim refused for its profile could ask for instead.
func (s *State) profileChoices(profile string, gpus []int) string {
	seen := map[string]bool{}
	var parts []string
	for _, gi := range gpus {
		g := &s.gpus[gi]
		if seen[g.model.ID] {
			continue
		}
		seen[g.model.ID] = true
		switch {
		case g.geo == nil:
			parts = append(parts, g.model.ID+" has no MIG")
		default:
			if _, ok := g.geo.Lookup(profile); !ok {
				parts = append(parts, g.model.ID+" has "+strings.Join(g.geo.ProfileNames(), ", "))
			}
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf(" (profile %s: %s)", profile, strings.Join(parts, "; "))
}

// IsNoFit reports whether err says that nothing fits now: a *NoFitError,
// or ErrNoFit when no explanation was asked for.
func IsNoFit(err error) bool {
	_, ok := err.(*NoFitError)
	return ok || err == ErrNoFit
}
