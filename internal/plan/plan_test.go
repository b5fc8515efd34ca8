package plan

import (
	"os"
	"testing"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/model"
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
