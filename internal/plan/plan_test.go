package plan

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/model"
	"github.com/gpuslice/gpuslice/internal/packing"
	"github.com/gpuslice/gpuslice/internal/plan/plantest"
	"github.com/gpuslice/gpuslice/internal/spec"
)

func readNative(t *testing.T, path string) *spec.Spec {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, diags := spec.ReadNative(path, data)
	if err := diags.Err(); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestExamplePlan(t *testing.T) {
	s := readNative(t, "../../examples/gpuslice.yaml")
	p, err := Make(s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", p.Cost)
	for _, pp := range p.Pools {
		t.Logf("pool %s: %d nodes, %d GPUs used", pp.Name, pp.Nodes, pp.GPUsUsed)
		for _, g := range pp.GPUs {
			t.Logf("  %+v", g)
		}
	}
	for _, w := range p.Warnings {
		t.Log("warning:", w)
	}
	for _, u := range p.Unplaced {
		t.Log("unplaced:", u)
	}
	if len(p.Unplaced) > 0 {
		t.Fatalf("%d unplaced", len(p.Unplaced))
	}
	// The showcase proves its plan good: its three 60% rankers need a
	// GPU each (L2 on compute, across tenants), and they may only run in
	// the A100 pool (their selector names the model).
	if q := p.Quality; q == nil || q.GPUs > q.LowerBound {
		t.Fatalf("quality %+v: the showcase plan should meet its lower bound", q)
	}
}

// The dedicated baseline gives each device the cheapest whole GPU that
// holds what it asks for, or its workload's own pool — not where the plan
// put it.
func TestDedicatedPool(t *testing.T) {
	cat := catalog.Default()
	mk := func(name, it string) *pool {
		x, err := cat.InstanceType(it)
		if err != nil {
			t.Fatal(err)
		}
		g, err := cat.GPU(x.GPU)
		if err != nil {
			t.Fatal(err)
		}
		return &pool{spec: &model.Pool{Name: name}, gpu: g, per: x.GPUCount, it: x}
	}
	pools := []*pool{mk("a100", "p4d.24xlarge"), mk("t4", "g4dn.xlarge"), mk("l4", "g6.xlarge")}
	wl := func(pool string, mem int64, profile string) *model.Workload {
		return &model.Workload{Name: "w", Pool: pool, Requests: []alloc.Request{{Name: "gpu", MemoryMiB: mem, Profile: profile}}}
	}
	dev := alloc.Assigned{Request: "gpu", MemoryMiB: 19968}
	for _, tc := range []struct {
		wl   *model.Workload
		want string
	}{
		{wl("", 4096, ""), "t4"},           // fits a T4, the cheapest GPU-hour
		{wl("", 20000, ""), "l4"},          // too big for a T4 (16 GiB)
		{wl("", 0, "3g.20gb"), "l4"},       // a profile asks for its memory
		{wl("a100", 4096, ""), "a100"},     // the workload's own pool
		{wl("", 60000, ""), "a100-placed"}, // nothing priced holds it
	} {
		if got := dedicatedPool(tc.wl, dev, "a100-placed", pools); got != tc.want {
			t.Errorf("%+v: %s, want %s", tc.wl.Requests[0], got, tc.want)
		}
	}
}

// A plan knows every replica, so the first replica's MIG instance is sized
// for the others: six 6 GiB replicas share instances on one A100 instead
// of taking six 1g.10gb instances over two GPUs.
func TestPlanSizesInstancesForReplicas(t *testing.T) {
	src := []byte(`apiVersion: gpuslice.dev/v1alpha1
kind: Spec
pools:
  - name: a100
    instanceType: p4d.24xlarge
    mig: dynamic
tenants:
  - name: search
workloads:
  - name: svc
    tenant: search
    replicas: 6
    gpu: {memory: 6GiB, compute: 10, mode: mps}
`)
	s, diags := spec.ReadNative("replicas.yaml", src)
	if err := diags.Err(); err != nil {
		t.Fatal(err)
	}
	p, err := Make(s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	devices := map[string]bool{}
	for _, pl := range p.Placements {
		for _, d := range pl.Devices {
			devices[d.Device] = true
		}
	}
	if len(p.Pools) != 1 || p.Pools[0].GPUsUsed != 1 || len(devices) >= 6 {
		t.Fatalf("plan used %d GPUs and %d devices for 6 replicas; want 1 GPU and fewer devices than replicas: %+v",
			p.Pools[0].GPUsUsed, len(devices), p.Placements)
	}
}

// The packing benchmark's mixes as plans: every replica is placed, refine
// never costs GPUs, the plan does as well as the benchmark's gpuslice-plan
// (it cannot beat the isolation bound), and no empty node is bought.
func TestPlanRefinesPackingMixes(t *testing.T) {
	for _, mix := range packing.Mixes() {
		for _, seed := range []uint64{1, 2} {
			claims, err := mix.Claims(seed)
			if err != nil {
				t.Fatal(err)
			}
			var wls []model.Workload
			for _, c := range claims {
				wls = append(wls, model.Workload{Name: c.Name, Tenant: c.Tenant, Replicas: 1, Isolation: c.Isolation,
					Requests: c.Requests})
			}
			spec := &model.Spec{Policy: alloc.Policy{Placement: "binpack"},
				Pools:     []model.Pool{{Name: "gpus", GPU: mix.GPU, GPUsPerNode: 8, MIG: migIfAny(t, mix.GPU)}},
				Workloads: wls}
			single := *spec
			p, err := Make(spec, Options{})
			if err != nil {
				t.Fatal(err)
			}
			one, err := makeOnePass(&single)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := packing.Run(mix, seed)
			if err != nil {
				t.Fatal(err)
			}
			got, first, bench := p.Pools[0].GPUsUsed, one.Pools[0].GPUsUsed, rep.Result(packing.GPUSlicePlan).GPUs
			t.Logf("%s seed %d: plan %d GPUs (first pass %d), benchmark %d, isolation bound %d", mix.Name, seed, got, first, bench, rep.IsolationLowerBound)
			switch {
			case len(p.Unplaced) > 0:
				t.Errorf("%s seed %d: %d unplaced", mix.Name, seed, len(p.Unplaced))
			case got > first:
				t.Errorf("%s seed %d: refining went from %d to %d GPUs", mix.Name, seed, first, got)
			case got < rep.IsolationLowerBound || got > bench:
				t.Errorf("%s seed %d: plan %d GPUs; benchmark %d, bound %d", mix.Name, seed, got, bench, rep.IsolationLowerBound)
			}
			if p.Pools[0].Nodes*8 < got || (p.Pools[0].Nodes-1)*8 >= got+8 {
				t.Errorf("%s seed %d: %d nodes for %d GPUs: empty nodes kept", mix.Name, seed, p.Pools[0].Nodes, got)
			}
		}
	}
}

func migIfAny(t *testing.T, gpu string) string {
	g, err := catalog.Default().GPU(gpu)
	if err != nil {
		t.Fatal(err)
	}
	if g.MIG != nil {
		return "dynamic"
	}
	return ""
}

// makeOnePass is Make without refine's extra passes.
func makeOnePass(s *model.Spec) (*Plan, error) {
	defer func(n int) { passes = n }(passes)
	passes = 0
	return Make(s, Options{})
}

// Realistic specs (plantest.RealisticSpec) of a few thousand replicas:
// every replica is placed, each pinned replica in its pool, the final
// state keeps every allocator rule (State.Check), every refine pass
// places everything (growing the fleet where its order needs more, rather
// than stopping at the first no-fit), and the plan uses no more GPUs than
// its first pass (on these specs refining saves 2 and 19 GPUs).
func TestRealisticSpecRefinesAtScale(t *testing.T) {
	defer func() { onPlanned = nil }()
	for _, tc := range []struct {
		n    int
		seed uint64
	}{{400, 1}, {2500, 2}} {
		s := plantest.RealisticSpec(tc.n, tc.seed)
		var stats []passStat
		onPlanned = func(final *alloc.State, passes []passStat) {
			if err := final.Check(); err != nil {
				t.Fatalf("%d replicas: %v", tc.n, err)
			}
			stats = passes
		}
		p, err := Make(s, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Unplaced) > 0 || len(p.Placements) != tc.n {
			t.Fatalf("%d replicas: %d placed, %d unplaced: %+v", tc.n, len(p.Placements), len(p.Unplaced), p.Unplaced[:min(3, len(p.Unplaced))])
		}
		pool := map[string]string{}
		for _, w := range s.Workloads {
			pool[w.Name] = w.Pool
		}
		for _, pl := range p.Placements {
			if want := pool[pl.Workload]; want != "" && pl.Pool != want {
				t.Fatalf("%s-%d pinned to %s placed in %s", pl.Workload, pl.Replica, want, pl.Pool)
			}
		}
		if len(stats) != passes+1 {
			t.Fatalf("%d replicas: %d passes, want %d", tc.n, len(stats), passes+1)
		}
		used := 0
		for _, pp := range p.Pools {
			used += pp.GPUsUsed
		}
		for i, st := range stats {
			if st.Unplaced > 0 {
				t.Errorf("%d replicas: pass %d left %d replicas out", tc.n, i+1, st.Unplaced)
			}
		}
		if used > stats[0].GPUs {
			t.Errorf("%d replicas: plan uses %d GPUs, its first pass %d", tc.n, used, stats[0].GPUs)
		}
		t.Logf("%d replicas: GPUs per pass %+v, plan %d", tc.n, stats, used)
	}
}

// A pool at maxNodes leaves replicas out, each with the allocator's
// reasons on the final fleet under its own name; a node that does not help
// is given back (the other pool is not grown for a replica pinned away
// from it).
func TestUnplacedAreExplained(t *testing.T) {
	s := &model.Spec{
		Pools: []model.Pool{{Name: "l4", InstanceType: "g6.xlarge", MaxNodes: 2}, {Name: "t4", InstanceType: "g4dn.xlarge"}},
		Workloads: []model.Workload{{Name: "big", Tenant: "a", Replicas: 4, Pool: "l4",
			Requests: []alloc.Request{{Name: "gpu", Mode: alloc.Exclusive, MemoryMiB: 20000, ComputePercent: 100}}}},
	}
	p, err := Make(s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Placements) != 2 || len(p.Unplaced) != 2 {
		t.Fatalf("%d placed, %d unplaced; want 2 and 2", len(p.Placements), len(p.Unplaced))
	}
	for _, u := range p.Unplaced {
		name := fmt.Sprintf("claim big-%d ", u.Replica)
		if !strings.HasPrefix(u.Reason, name) || !strings.Contains(u.Reason, "0/2 nodes are available") {
			t.Errorf("replica %d: reason %q", u.Replica, u.Reason)
		}
	}
	if p.Pools[0].Nodes != 2 || p.Pools[1].Nodes != 0 {
		t.Errorf("nodes: l4 %d, t4 %d; want 2 and 0", p.Pools[0].Nodes, p.Pools[1].Nodes)
	}
}

// Issue #11 item 7: a replica no pool can take says which pools exist and
// why none qualifies, not just "0/0 nodes are available".
func TestUnplacedSaysWhyEveryPoolFails(t *testing.T) {
	s := &model.Spec{
		Pools: []model.Pool{
			{Name: "l4", InstanceType: "g6.xlarge", Sharing: alloc.Sharing{Mode: alloc.TimeSlice, Replicas: 4}},
			{Name: "t4", InstanceType: "g4dn.xlarge", Sharing: alloc.Sharing{Mode: alloc.Exclusive}},
		},
		Workloads: []model.Workload{{Name: "infer", Tenant: "a", Replicas: 1,
			Requests: []alloc.Request{{Name: "gpu", MemoryMiB: 4096, Mode: alloc.MPS}}}},
	}
	p, err := Make(s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Unplaced) != 1 {
		t.Fatalf("unplaced %+v", p.Unplaced)
	}
	why := p.Unplaced[0].Reason
	for _, want := range []string{"asks for request gpu mode mps 4096 MiB", "pool l4 (L4, time-sliced ×4): a new node would not hold it either",
		"pool t4 (T4, whole GPUs unshared): a new node would not hold it either"} {
		if !strings.Contains(why, want) {
			t.Errorf("reason lacks %q:\n%s", want, why)
		}
	}
}
