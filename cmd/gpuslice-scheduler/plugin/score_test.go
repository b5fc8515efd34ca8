package plugin

import (
	"testing"

	fwk "k8s.io/kube-scheduler/framework"
)

// Nodes where a pod's prioritized lists get earlier subrequests rank
// above the others whatever their placement score (as the stock scheduler
// prefers them); among nodes of the same choice placement decides; a
// pod without lists keeps its placement scores.
func TestPreferEarlierSubrequests(t *testing.T) {
	scores := fwk.NodeScoreList{{Name: "first-full", Score: 10}, {Name: "first-empty", Score: 90}, {Name: "second", Score: 100}, {Name: "none"}}
	results := map[string]*nodeResult{"first-full": {pref: 8}, "first-empty": {pref: 8}, "second": {pref: 7}}
	preferEarlierSubrequests(scores, results)
	got := map[string]int64{}
	for _, s := range scores {
		got[s.Name] = s.Score
	}
	if !(got["first-empty"] > got["first-full"] && got["first-full"] > got["second"] && got["second"] > got["none"]) || got["first-empty"] > fwk.MaxNodeScore {
		t.Fatalf("scores %v: want first-empty > first-full > second > none, within range", got)
	}
	plain := fwk.NodeScoreList{{Name: "a", Score: 10}, {Name: "b", Score: 90}}
	preferEarlierSubrequests(plain, map[string]*nodeResult{"a": {}, "b": {}})
	if plain[0].Score != 10 || plain[1].Score != 90 {
		t.Fatalf("scores without lists changed: %v", plain)
	}
}
