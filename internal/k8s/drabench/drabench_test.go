package drabench

import (
	"flag"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestEquivalentOutcome runs a small fleet through both allocators with
// more claims than fit and checks that both allocate the same number of
// claims per model, every one on a GPU of the model asked for.
func TestEquivalentOutcome(t *testing.T) {
	const gpus, extra = 64, 60
	f, err := newFleetSpec(gpus, extra) // a 70% fill, then more drawn by the mix
	if err != nil {
		t.Fatal(err)
	}
	capacity := map[string]int{}
	for _, n := range f.nodes {
		capacity[n.model.ID] += GPUsPerNode
	}
	demand := map[string]int{}
	for _, m := range f.claims {
		demand[m]++
	}
	want := map[string]int{}
	for m, d := range demand {
		want[m] = min(d, capacity[m])
	}
	g, err := newGPUSliceSide(f)
	if err != nil {
		t.Fatal(err)
	}
	u, err := newUpstreamSide(f)
	if err != nil {
		t.Fatal(err)
	}
	us, err := newUpstreamSide(f)
	if err != nil {
		t.Fatal(err)
	}
	sides := map[string]decider{"gpuslice": g, "upstream": u, "upstream-scheduler": schedulerSide{us}}
	got := map[string]map[string]int{}
	for name, d := range sides {
		got[name] = map[string]int{}
		for i, m := range f.claims {
			ok, err := d.decide(i)
			if err != nil {
				t.Fatalf("%s: claim %d: %v", name, i, err)
			}
			if !ok {
				if i < len(f.claims)-extra {
					t.Errorf("%s: claim %d (%s) of the first fill did not fit", name, i, m)
				}
				continue
			}
			if d.lastModel() != m {
				t.Errorf("%s: claim %d asked for %s, got %s", name, i, m, d.lastModel())
			}
			got[name][m]++
		}
	}
	t.Logf("capacity %v, demand %v, allocated %v", capacity, demand, got)
	for _, name := range []string{"upstream", "upstream-scheduler"} {
		if !maps.Equal(got["gpuslice"], got[name]) {
			t.Errorf("allocated per model: gpuslice %v, %s %v", got["gpuslice"], name, got[name])
		}
	}
	if !maps.Equal(got["gpuslice"], want) {
		t.Errorf("allocated per model %v, want min(demand, capacity) = %v", got["gpuslice"], want)
	}
	for m := range capacity {
		if demand[m] <= capacity[m] {
			t.Errorf("model %s: demand %d does not exceed capacity %d; the test should fill every model", m, demand[m], capacity[m])
		}
	}
	// After a reset, both start from an empty fleet again.
	for name, d := range sides {
		if err := d.reset(); err != nil {
			t.Fatal(err)
		}
		if ok, err := d.decide(0); err != nil || !ok {
			t.Errorf("%s: after reset claim 0: ok=%v err=%v", name, ok, err)
		}
	}
}

func TestCompare(t *testing.T) {
	r, err := Compare(160, 0)
	if err != nil {
		t.Fatal(err)
	}
	f, err := newFleetSpec(160, 0)
	if err != nil {
		t.Fatal(err)
	}
	fill := len(f.claims) // about 70% of 160
	if fill < 105 || fill > 112 {
		t.Errorf("a fill of 160 GPUs is %d claims, want about 112", fill)
	}
	if r.Nodes != 20 || r.Claims != fill || r.GPUSlice.Decisions != fill || r.Upstream.Decisions != fill {
		t.Errorf("result %+v: want 20 nodes and %d decisions each", r, fill)
	}
	if r.Ratio <= 0 || r.UpstreamNodeCalls < 1 || r.UpstreamVersion == "" {
		t.Errorf("result %+v: want a ratio, node calls and a version", r)
	}
	t.Logf("%+v", r)
	if _, err := Compare(100, 0); err == nil {
		t.Error("Compare(100): want an error for a GPU count that is not a multiple of 8")
	}
	// More claims than a fill: the fleet is emptied and the sequence repeats.
	if r, err := Compare(64, 100); err != nil || r.GPUSlice.Decisions != 100 || r.Upstream.Decisions != 100 {
		t.Errorf("Compare(64, 100) = %+v, %v", r, err)
	}
}

func TestNumFeasibleNodesToFind(t *testing.T) {
	for all, want := range map[int]int{8: 8, 99: 99, 125: 100, 1250: 500, 5000: 500, 10000: 500} {
		if got := numFeasibleNodesToFind(all); got != want {
			t.Errorf("numFeasibleNodesToFind(%d) = %d, want %d", all, got, want)
		}
	}
}

// TestUpstreamPinned keeps upstreamPinned in step with go.mod.
func TestUpstreamPinned(t *testing.T) {
	data, err := os.ReadFile("../../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	want := UpstreamModule + " " + upstreamPinned
	for line := range strings.Lines(string(data)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == UpstreamModule {
			if got := f[0] + " " + f[1]; got != want {
				t.Errorf("go.mod requires %s; update upstreamPinned (%s)", got, want)
			}
			return
		}
	}
	t.Errorf("go.mod does not require %s", UpstreamModule)
}

// schedulerMode adds BenchmarkDecisions/upstream-scheduler: decisions as
// kube-scheduler makes them (Filter until enough feasible nodes), which is
// slow at 10,000 GPUs, so it is off unless asked for.
var schedulerMode = flag.Bool("drabench.scheduler", false, "also benchmark upstream with kube-scheduler's feasible-node search")

var sizes = []int{1000, 10000}

// fixtures are built once per size and shared by every run of a benchmark.
var fixtures = struct {
	sync.Mutex
	spec     map[int]*fleetSpec
	gpuslice map[int]*gpusliceSide
	upstream map[int]*upstreamSide
}{spec: map[int]*fleetSpec{}, gpuslice: map[int]*gpusliceSide{}, upstream: map[int]*upstreamSide{}}

func spec(b *testing.B, gpus int) *fleetSpec {
	fixtures.Lock()
	defer fixtures.Unlock()
	if f, ok := fixtures.spec[gpus]; ok {
		return f
	}
	f, err := newFleetSpec(gpus, 0)
	if err != nil {
		b.Fatal(err)
	}
	fixtures.spec[gpus] = f
	return f
}

func side(b *testing.B, name string, gpus int) decider {
	f := spec(b, gpus)
	fixtures.Lock()
	defer fixtures.Unlock()
	var d decider
	var err error
	switch name {
	case "gpuslice":
		if g, ok := fixtures.gpuslice[gpus]; ok {
			return g
		}
		var g *gpusliceSide
		g, err = newGPUSliceSide(f)
		fixtures.gpuslice[gpus], d = g, g
	case "upstream", "upstream-scheduler":
		u, ok := fixtures.upstream[gpus]
		if !ok {
			u, err = newUpstreamSide(f)
			fixtures.upstream[gpus] = u
		}
		d = u
		if name == "upstream-scheduler" {
			d = schedulerSide{u}
		}
	}
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// BenchmarkDecisions times one decision (see the package doc) on fleets of
// 1,000 and 10,000 GPUs, cycling through a 70% fill and emptying the fleet
// (untimed) between fills, so decisions are averaged over 0-70% occupancy.
func BenchmarkDecisions(b *testing.B) {
	names := []string{"gpuslice", "upstream"}
	if *schedulerMode {
		names = append(names, "upstream-scheduler")
	}
	for _, gpus := range sizes {
		for _, name := range names {
			b.Run(name+"/"+strconv.Itoa(gpus), func(b *testing.B) {
				f := spec(b, gpus)
				d := side(b, name, gpus)
				if err := d.reset(); err != nil {
					b.Fatal(err)
				}
				var u *upstreamSide
				switch d := d.(type) {
				case *upstreamSide:
					u = d
				case schedulerSide:
					u = d.upstreamSide
				}
				var calls0 int64
				if u != nil {
					calls0 = u.calls
				}
				fill := len(f.claims)
				pos := 0
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					if pos == fill {
						b.StopTimer()
						if err := d.reset(); err != nil {
							b.Fatal(err)
						}
						pos = 0
						b.StartTimer()
					}
					if ok, err := d.decide(pos); err != nil || !ok {
						b.Fatalf("claim %d: ok=%v err=%v", pos, ok, err)
					}
					pos++
				}
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
				if u != nil {
					b.ReportMetric(float64(u.calls-calls0)/float64(b.N), "node-calls/decision")
				}
				if err := d.reset(); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

// BenchmarkUpstreamNodeAllocate times one upstream per-node Allocate call
// (one kube-scheduler Filter call for one node) on an empty fleet: "fit"
// asks node 0 for its own model, "miss" for a model it does not have.
func BenchmarkUpstreamNodeAllocate(b *testing.B) {
	for _, gpus := range sizes {
		for _, kind := range []string{"fit", "miss"} {
			b.Run(kind+"/"+strconv.Itoa(gpus), func(b *testing.B) {
				f := spec(b, gpus)
				u := side(b, "upstream", gpus).(*upstreamSide)
				if err := u.reset(); err != nil {
					b.Fatal(err)
				}
				want := f.nodes[0].model.ID
				i := slices.IndexFunc(f.claims, func(m string) bool { return (m == want) == (kind == "fit") })
				a, err := u.allocator()
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					res, err := u.allocateOn(a, i, 0)
					if err != nil || (len(res) == 1) != (kind == "fit") {
						b.Fatalf("claim %d on node 0: %d results, err %v", i, len(res), err)
					}
				}
			})
		}
	}
}
