package autoscale

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/gpuslice/gpuslice/internal/model"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// A scenario is a service under a policy driven through phases of
// simulated time; its .golden twin lists every change Decide made, with
// its reason, and the replica count at the end of each phase. The
// simulated service turns load into the metric: a phase's load is the
// work in percent of one replica, spread over the replicas running
// (capped at 100), or a fixed per-replica value; values cycle per sample.
type scenario struct {
	Autoscaling model.Autoscaling `json:"autoscaling"`
	Metric      string            `json:"metric,omitempty"`
	Replicas    int               `json:"replicas"`
	Interval    string            `json:"interval,omitempty"` // default 30s
	Phases      []struct {
		Name string `json:"name"`
		For  string `json:"for"`
		// Load (total, in percent of one replica) or Values (per replica,
		// cycled one per sample; "nan" for no measurement).
		Load   []float64 `json:"load,omitempty"`
		Values []string  `json:"values,omitempty"`
		// Requests per sample interval (cycled); Waiting requests held at
		// the proxy while no replica runs.
		Requests []int `json:"requests,omitempty"`
	} `json:"phases"`
}

func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/scenarios/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".yaml"), func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var sc scenario
			if err := yaml.UnmarshalStrict(raw, &sc); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			got := runScenario(t, sc)
			testkit.Golden(t, strings.TrimSuffix(file, ".yaml")+".golden", []byte(got))
		})
	}
}

func runScenario(t *testing.T, sc scenario) string {
	p := FromCapabilities(sc.Autoscaling)
	if err := p.WithDefaults().Validate(); err != nil {
		t.Fatalf("policy: %v", err)
	}
	metric, err := ParseMetric(sc.Metric)
	if err != nil {
		t.Fatal(err)
	}
	interval := 30 * time.Second
	if sc.Interval != "" {
		if interval, err = time.ParseDuration(sc.Interval); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	cur := Current{Replicas: sc.Replicas, Since: now}
	var window []Sample
	var out strings.Builder
	fmt.Fprintf(&out, "policy: min %d max %d, up >%.0f%% for %s, down <%.0f%% for %s, autoStop %v, metric %s\n",
		p.MinReplicas, p.WithDefaults().MaxReplicas, p.WithDefaults().UpThreshold, p.WithDefaults().UpAfter,
		p.WithDefaults().IdleThreshold, p.WithDefaults().DownAfter, p.AutoStop, metric)
	for _, ph := range sc.Phases {
		d, err := time.ParseDuration(ph.For)
		if err != nil {
			t.Fatalf("phase %q: %v", ph.Name, err)
		}
		fmt.Fprintf(&out, "--- %s (%s)\n", ph.Name, ph.For)
		changes := 0
		var last Decision
		for i, end := 0, now.Add(d); now.Before(end); i++ {
			now = now.Add(interval)
			s := Sample{Time: now, Value: math.NaN()}
			if cur.Replicas > 0 {
				switch {
				case len(ph.Load) > 0:
					s.Value = math.Min(100, ph.Load[i%len(ph.Load)]/float64(cur.Replicas))
				case len(ph.Values) > 0:
					v := ph.Values[i%len(ph.Values)]
					if v != "nan" {
						fmt.Sscan(v, &s.Value)
					}
				}
			}
			if len(ph.Requests) > 0 {
				s.Requests = ph.Requests[i%len(ph.Requests)]
				if cur.Replicas == 0 {
					s.Waiting = s.Requests
				}
			}
			window = Trim(p, append(window, s), now)
			dec := Decide(p, metric, cur, window, now)
			if dec.From != cur.Replicas || dec.Time != now {
				t.Fatalf("decision %+v does not start from %d at %s", dec, cur.Replicas, now)
			}
			// Purity: the same inputs give the same decision.
			if again := Decide(p, metric, cur, window, now); again != dec {
				t.Fatalf("Decide is not a function of its inputs: %v then %v", dec, again)
			}
			last = dec
			if dec.Changed() {
				if d := dec.To - dec.From; dec.Action != Stop && dec.Action != Wake && dec.Action != Clamp && (d > 1 || d < -1) {
					t.Fatalf("a step of %d: %v", d, dec)
				}
				fmt.Fprintf(&out, "%8s  %v\n", now.Sub(t0), dec)
				cur = Current{Replicas: dec.To, Since: now}
				changes++
			}
		}
		fmt.Fprintf(&out, "    end: %d replicas, %d changes; last: %v\n", cur.Replicas, changes, last)
	}
	return out.String()
}
