package schedcore

// MaxNodeScore is kube-scheduler's highest node score
// (framework.MaxNodeScore; the plugin's tests check they agree).
const MaxNodeScore int64 = 100

// Score is a node's score for a pod's claims: binpack scores a node
// higher the less GPU share the placement newly holds there and the
// fuller the node's GPUs are after it; spread the emptier they are.
func Score(placement string, r *NodeResult) int64 {
	newly := min(r.share, 1)
	used := min(r.used, 1)
	if placement == "spread" {
		return int64(float64(MaxNodeScore) * (1 - used))
	}
	return int64(float64(MaxNodeScore) * (0.7*(1-newly) + 0.3*used))
}

// NodeScore is a node's score (framework.NodeScore).
type NodeScore struct {
	Name  string
	Score int64
}

// PreferEarlierSubrequests ranks the nodes by the subrequests of the
// pod's prioritized lists they can give before their placement score, as
// the stock scheduler prefers them (its DynamicResources scores a node
// by the subrequests chosen there): the nodes giving the best choice
// keep their placement score halved and raised by 50, the others score
// below 50 in proportion to their choice's score. Without prioritized
// lists the scores are left as they are.
func PreferEarlierSubrequests(scores []NodeScore, results map[string]*NodeResult) {
	var best int64
	for _, s := range scores {
		if r := results[s.Name]; r != nil {
			best = max(best, r.pref)
		}
	}
	if best == 0 {
		return
	}
	for i := range scores {
		r := results[scores[i].Name]
		switch {
		case r == nil:
			scores[i].Score = 0
		case r.pref == best:
			scores[i].Score = MaxNodeScore/2 + scores[i].Score/2
		default:
			scores[i].Score = (MaxNodeScore/2 - 1) * r.pref / best
		}
	}
}
