package sim

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/model"
)

func load(gpu string, nodes int, ws ...model.Profile) *model.Profiles {
	p := &model.Profiles{Fleet: model.ProfileFleet{GPU: gpu, GPUsPerNode: 8, Nodes: nodes},
		Sim: model.SimulationConfig{Duration: 48 * time.Hour, Seed: 1, SampleEvery: time.Hour}}
	p.Workloads = ws
	return p
}

var (
	chat  = model.Profile{Name: "chat", Kind: model.KindOnlineInference, Tenant: "a", MemoryMiB: 4096, Utilization: 20, LatencySensitive: true, Replicas: 8, ArrivalsPerHour: 6, Duration: 3 * time.Hour}
	batch = model.Profile{Name: "batch", Kind: model.KindSmallBatch, Tenant: "b", MemoryMiB: 2048, Utilization: 35, Replicas: 4, ArrivalsPerHour: 20, Duration: 30 * time.Minute}
	nb    = model.Profile{Name: "nb", Kind: model.KindNotebook, Tenant: "c", MemoryMiB: 6144, Utilization: 10, LatencySensitive: true, Replicas: 2, ArrivalsPerHour: 2, Duration: 4 * time.Hour}
	big   = model.Profile{Name: "big", Kind: model.KindTraining, Tenant: "c", MemoryMiB: 30000, Utilization: 95, ArrivalsPerHour: 0.5, Duration: 6 * time.Hour}
)

// The same seed gives the same result, byte for byte; another seed
// another one.
func TestDeterministic(t *testing.T) {
	run := func(seed uint64) []byte {
		p := load("A100-40GB", 4, chat, batch, nb, big)
		p.Sim.Seed = seed
		r, err := Run(p, Options{})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(r)
		return b
	}
	a, b, c := run(7), run(7), run(8)
	if !bytes.Equal(a, b) {
		t.Fatal("same seed, different results")
	}
	if bytes.Equal(a, c) {
		t.Fatal("another seed gave the same result")
	}
}

// Every job is accounted for, every strategy sees the same arrivals, and
// sharing needs fewer GPU-hours than dedicated GPUs on the same load.
func TestAccountingAndSharingSaves(t *testing.T) {
	r, err := Run(load("A100-40GB", 8, chat, batch, nb, big), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Strategies) != 5 || r.Arrivals == 0 {
		t.Fatalf("%d strategies, %d arrivals", len(r.Strategies), r.Arrivals)
	}
	by := map[string]Strategy{}
	for _, s := range r.Strategies {
		by[s.Name] = s
		running := 0
		if n := len(s.Series); n > 0 {
			running = s.Series[n-1].Running
		}
		if s.Started+s.Queued+s.Rejected != r.Arrivals {
			t.Errorf("%s: started %d + queued %d + rejected %d != %d arrivals", s.Name, s.Started, s.Queued, s.Rejected, r.Arrivals)
		}
		if s.Completed > s.Started || running > s.Started {
			t.Errorf("%s: completed %d of %d started", s.Name, s.Completed, s.Started)
		}
		if s.PeakGPUs > r.GPUs || s.MeanGPUs > float64(s.PeakGPUs) {
			t.Errorf("%s: peak %d mean %.1f of %d GPUs", s.Name, s.PeakGPUs, s.MeanGPUs, r.GPUs)
		}
		if len(s.Series) != 49 {
			t.Errorf("%s: %d samples, want 49 (hourly over 48h, both ends)", s.Name, len(s.Series))
		}
	}
	ded := by["dedicated"]
	for _, name := range []string{"advised", "mps", "time-slicing", "mig"} {
		if s := by[name]; s.GPUHours >= ded.GPUHours {
			t.Errorf("%s: %.0f GPU-hours, dedicated %.0f", name, s.GPUHours, ded.GPUHours)
		}
	}
	if ded.MeanSlowdown != 1 || by["mps"].MeanSlowdown < 1 {
		t.Errorf("slowdowns: dedicated %.3f, mps %.3f", ded.MeanSlowdown, by["mps"].MeanSlowdown)
	}
	if by["mig"].MIGChanges == 0 || by["dedicated"].MIGChanges != 0 {
		t.Errorf("MIG changes: mig %d, dedicated %d", by["mig"].MIGChanges, by["dedicated"].MIGChanges)
	}
}

// A fleet too small for dedicated GPUs queues jobs under "dedicated"
// and not under MPS; a workload no strategy can serve is rejected.
func TestQueueingAndRejection(t *testing.T) {
	small := load("A100-40GB", 1, chat, batch)
	r, err := Run(small, Options{Strategies: []string{"mps", "dedicated"}})
	if err != nil {
		t.Fatal(err)
	}
	mps, ded := r.Strategies[0], r.Strategies[1]
	if ded.DelayMean <= mps.DelayMean || ded.DelayMax == 0 {
		t.Fatalf("queue delay: dedicated %.0fs, mps %.0fs", ded.DelayMean, mps.DelayMean)
	}
	// No MIG on an L4: the "mig" strategy rejects everything.
	r, err = Run(load("L4", 2, chat), Options{Strategies: []string{"mig", "time-slicing"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Strategies[0].Rejected != r.Arrivals || r.Strategies[1].Rejected != 0 {
		t.Fatalf("rejected: mig %d, time-slicing %d of %d", r.Strategies[0].Rejected, r.Strategies[1].Rejected, r.Arrivals)
	}
	if _, err := Run(small, Options{Strategies: []string{"fair-share"}}); err == nil || !strings.Contains(err.Error(), "unknown strategy") {
		t.Fatalf("unknown strategy: %v", err)
	}
}

// The chart is well-formed SVG in small multiples: each strategy its own
// row (its two polylines in their own band, none overlapping another
// strategy's), the fleet's capacity drawn as a line in each GPU panel at
// the fleet's GPU count, and the time axis in the unit its ticks count.
func TestSVG(t *testing.T) {
	r, err := Run(load("A100-40GB", 4, chat, batch), Options{Strategies: []string{"advised", "mps", "time-slicing", "dedicated"}})
	if err != nil {
		t.Fatal(err)
	}
	b := SVG(r)
	type band struct{ lo, hi float64 }
	var lines []band
	var capacity []float64
	dec := xml.NewDecoder(bytes.NewReader(b))
	for {
		tok, err := dec.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("not XML: %v", err)
			}
			break
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		attr := map[string]string{}
		for _, a := range se.Attr {
			attr[a.Name.Local] = a.Value
		}
		switch {
		case se.Name.Local == "polyline":
			bd := band{lo: math.Inf(1), hi: math.Inf(-1)}
			for _, pt := range strings.Fields(attr["points"]) {
				var x, y float64
				fmt.Sscanf(pt, "%f,%f", &x, &y)
				bd.lo, bd.hi = math.Min(bd.lo, y), math.Max(bd.hi, y)
			}
			lines = append(lines, bd)
		case se.Name.Local == "line" && attr["class"] == "capacity":
			var y float64
			fmt.Sscanf(attr["y1"], "%f", &y)
			capacity = append(capacity, y)
		}
	}
	if len(lines) != 2*len(r.Strategies) {
		t.Fatalf("%d polylines, want 2 per strategy (%d)", len(lines), 2*len(r.Strategies))
	}
	// Rows: strategy k's lines lie below strategy k-1's, never in the
	// same band.
	for k := 1; k < len(r.Strategies); k++ {
		prevLow := math.Max(lines[2*k-2].hi, lines[2*k-1].hi)
		if lo := math.Min(lines[2*k].lo, lines[2*k+1].lo); lo <= prevLow {
			t.Errorf("strategy %s's lines (from y %.0f) overlap %s's (to y %.0f)", r.Strategies[k].Name, lo, r.Strategies[k-1].Name, prevLow)
		}
	}
	if len(capacity) != len(r.Strategies) {
		t.Fatalf("%d capacity lines, want one per strategy", len(capacity))
	}
	out := string(b)
	if !strings.Contains(out, fmt.Sprintf("capacity %d", r.GPUs)) {
		t.Errorf("no capacity label of %d GPUs", r.GPUs)
	}
	// A 2-day run counts days, and says so; no "hours" under day ticks.
	if !strings.Contains(out, "time (days)") || strings.Contains(out, "hours") || strings.Contains(out, ">2d<") {
		t.Errorf("time axis of a %s run: want days, labelled as days", Span(r.Duration))
	}
	for _, s := range r.Strategies {
		if !strings.Contains(out, ">"+s.Name+"<") {
			t.Errorf("no row title for %s", s.Name)
		}
	}
	short := load("A100-40GB", 4, chat, batch)
	short.Sim.Duration = 12 * time.Hour
	r2, err := Run(short, Options{Strategies: []string{"advised"}})
	if err != nil {
		t.Fatal(err)
	}
	if out := string(SVG(r2)); !strings.Contains(out, "time (hours)") || strings.Contains(out, "days") {
		t.Errorf("a 12h run's axis is not in hours")
	}
}

func TestProgress(t *testing.T) {
	var last float64
	calls := 0
	_, err := Run(load("A100-40GB", 4, chat, batch), Options{Strategies: []string{"mps", "dedicated"}, Progress: func(f float64) {
		if f < last || f > 1 {
			t.Fatalf("progress went from %v to %v", last, f)
		}
		last = f
		calls++
	}})
	if err != nil {
		t.Fatal(err)
	}
	if last != 1 || calls < 2 {
		t.Fatalf("progress ended at %v after %d calls", last, calls)
	}
}

// A workload sized by a trace runs for the trace's span when it gives no
// duration, and contends at the trace's mean utilization.
func TestTraceDrivenRuns(t *testing.T) {
	tr := &model.Trace{File: "t.csv"}
	for i := 0; i <= 12; i++ {
		tr.Samples = append(tr.Samples, model.TraceSample{At: time.Duration(i) * 30 * time.Minute, Utilization: float64(10 + 5*i), MemoryMiB: 4096})
	}
	w := model.Profile{Name: "traced", Kind: model.KindOfflineInference, Tenant: "a", Replicas: 3, ArrivalsPerHour: 1, Trace: tr}
	p := load("A100-40GB", 1, w)
	jobs := Arrivals(p)
	for _, j := range jobs {
		if j.runAlone != 6*time.Hour {
			t.Fatalf("a traced job runs %v, the trace spans 6h", j.runAlone)
		}
	}
	r, err := Run(p, Options{Strategies: []string{"dedicated"}})
	if err != nil {
		t.Fatal(err)
	}
	// Dedicated: no slowdown, so every job that started by 42h is done.
	if s := r.Strategies[0]; s.Completed == 0 || s.Started+s.Queued != len(jobs) {
		t.Fatalf("%+v", s)
	}
}
