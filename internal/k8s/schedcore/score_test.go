package schedcore

import "testing"

// Nodes where a pod's prioritized lists get earlier subrequests rank
// above the others whatever their placement score (as the stock scheduler
// prefers them); among nodes of the same choice placement decides; a
// pod without lists keeps its placement scores.
func TestPreferEarlierSubrequests(t *testing.T) {
	scores := []NodeScore{{Name: "first-full", Score: 10}, {Name: "first-empty", Score: 90}, {Name: "second", Score: 100}, {Name: "none"}}
	results := map[string]*NodeResult{"first-full": {pref: 8}, "first-empty": {pref: 8}, "second": {pref: 7}}
	PreferEarlierSubrequests(scores, results)
	got := map[string]int64{}
	for _, s := range scores {
		got[s.Name] = s.Score
	}
	if !(got["first-empty"] > got["first-full"] && got["first-full"] > got["second"] && got["second"] > got["none"]) || got["first-empty"] > MaxNodeScore {
		t.Fatalf("scores %v: want first-empty > first-full > second > none, within range", got)
	}
	plain := []NodeScore{{Name: "a", Score: 10}, {Name: "b", Score: 90}}
	PreferEarlierSubrequests(plain, map[string]*NodeResult{"a": {}, "b": {}})
	if plain[0].Score != 10 || plain[1].Score != 90 {
		t.Fatalf("scores without lists changed: %v", plain)
	}
}
