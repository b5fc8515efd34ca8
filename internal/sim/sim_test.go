package sim

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
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

// The chart is well-formed SVG with one line per strategy and panel.
func TestSVG(t *testing.T) {
	r, err := Run(load("A100-40GB", 4, chat, batch), Options{Strategies: []string{"advised", "dedicated"}})
	if err != nil {
		t.Fatal(err)
	}
	b := SVG(r)
	dec := xml.NewDecoder(bytes.NewReader(b))
	lines := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("not XML: %v", err)
			}
			break
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			lines++
		}
	}
	if lines != 4 {
		t.Fatalf("%d polylines, want 4", lines)
	}
	if !strings.Contains(string(b), "advised") || !strings.Contains(string(b), "2d") {
		t.Fatal("legend or axis missing")
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
