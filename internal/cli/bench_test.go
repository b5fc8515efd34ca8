package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

// bench packing's table is followed by a legend naming every column.
func TestBenchPackingLegend(t *testing.T) {
	t.Parallel()
	out := run("bench", "packing", "--seeds", "1", "--mix", "inference-l4")
	lines := strings.Split(out, "\n")
	if len(lines) < 3 || !strings.HasPrefix(lines[1], "mix ") {
		t.Fatalf("no table:\n%s", out)
	}
	legend := map[string]bool{}
	for _, l := range lines[2:] {
		if strings.HasPrefix(l, "  ") {
			if f := strings.Fields(l); len(f) > 1 {
				legend[f[0]] = true
			}
		}
	}
	for _, col := range strings.Fields(lines[1]) {
		if !legend[col] {
			t.Errorf("column %s is not explained:\n%s", col, out)
		}
	}
	if !strings.Contains(out, "(4 over)") || !strings.Contains(out, `"N(k over)": N GPUs, k of them`) {
		t.Errorf("the overcommit cell is not explained:\n%s", out)
	}
}

// bench plan prints one row per size with the GPUs the plan used, the
// fitted exponent, and refuses sizes that are not numbers.
func TestBenchPlan(t *testing.T) {
	t.Parallel()
	out := run("bench", "plan", "--sizes", "100,300")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[1], "REPLICAS") || !strings.HasPrefix(lines[2], "100 ") ||
		!strings.HasPrefix(lines[3], "300 ") || !strings.HasPrefix(lines[4], "growth exponent ") {
		t.Fatalf("unexpected output:\n%s", out)
	}
	for _, l := range lines[2:4] {
		if f := strings.Fields(l); f[len(f)-1] != "0" || f[len(f)-2] == "0" {
			t.Errorf("want GPUs used and nothing unplaced: %q", l)
		}
	}
	if err := runErr(t, "bench", "plan", "--sizes", "10,x"); !strings.Contains(err, `"x" is not a positive number of replicas`) {
		t.Errorf("bad size: %q", err)
	}
}

// bench plan-quality compares the plan with every heuristic over random
// specs: a row per heuristic, and the plan never loses to one (the
// planner tries every such order on specs this small).
func TestBenchPlanQuality(t *testing.T) {
	t.Parallel()
	out := run("bench", "plan-quality", "--specs", "12", "--max-replicas", "60")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 5 || !strings.HasPrefix(lines[1], "HEURISTIC") || !strings.Contains(out, "ffd-memory ") || !strings.Contains(out, "proved optimal: plan ") {
		t.Fatalf("unexpected output:\n%s", out)
	}
	for _, l := range lines[2:] {
		f := strings.Fields(l)
		if len(f) == 8 && strings.HasPrefix(f[0], "ffd-") && f[4] != "0" {
			t.Errorf("the plan lost to a heuristic: %q", l)
		}
	}
	held := run("bench", "plan-quality", "--mix", "h100-mig-beside-whole", "--first-seed", "20001", "--specs", "6", "--max-replicas", "60")
	if !strings.Contains(held, "plantest.MIGBesideWholeSpec seeds 20001-20006") {
		t.Errorf("held-out mix:\n%s", held)
	}
	for _, l := range strings.Split(held, "\n") {
		if f := strings.Fields(l); len(f) == 8 && strings.HasPrefix(f[0], "ffd-") && f[4] != "0" {
			t.Errorf("the plan lost to a heuristic on a held-out mix: %q", l)
		}
	}
	for _, bad := range [][]string{{"--mix", "h200"}, {"--first-seed", "0"}} {
		if err := runErr(t, append([]string{"bench", "plan-quality", "--specs", "1"}, bad...)...); !strings.Contains(err, bad[0]) {
			t.Errorf("%v: %q", bad, err)
		}
	}
}

// bench nodes -o json is each mix with its decision (it was null), and
// every cost in it is a number or null, never a value JSON cannot carry.
func TestBenchNodesJSON(t *testing.T) {
	t.Parallel()
	out := run("bench", "nodes", "-o", "json")
	out = out[strings.Index(out, "\n")+1:] // the "$ gpuslice ..." line
	var mixes []struct {
		Mix  string `json:"mix"`
		Plan struct {
			Grow []struct {
				Pool        string   `json:"pool"`
				CostPerHour *float64 `json:"costPerHour"`
			} `json:"grow"`
		} `json:"plan"`
	}
	if err := json.Unmarshal([]byte(out), &mixes); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if len(mixes) < 4 || mixes[0].Mix == "" || len(mixes[0].Plan.Grow) == 0 || mixes[0].Plan.Grow[0].CostPerHour == nil {
		t.Fatalf("mixes %+v", mixes)
	}
}
