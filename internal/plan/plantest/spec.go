// Package plantest generates planning inputs for benchmarks and tests: a
// realistic fleet-scale spec of any size (RealisticSpec), seeded, so that
// plan.Make can be measured and checked on sizes and mixes no hand-written
// example covers.
package plantest

import (
	"fmt"
	"math/rand/v2"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/model"
)

// RealisticSpec returns a spec of exactly replicas replicas from one seed, shaped like a platform
// team's fleet:
//
//   - about replicas/20 tenants, a few of them big (skewed), some with quotas;
//   - pools, all sized "as needed" except one: A100 and H100 nodes with
//     dynamic MIG, 8×A10G and 8×L40S nodes (whole GPUs), 1×L4 nodes
//     time-sliced for notebooks, a small T4 pool capped by maxNodes (cheap
//     inference overflows from it to the next-cheapest pool), and a fixed
//     pool of A100s with a fixed MIG layout (reserved capacity that is there
//     whatever the plan says);
//   - workloads: inference services (auto mode, 1–12 GiB, 5–40% compute;
//     pinned to a pool, to a GPU model by a selector, or free), time-sliced
//     notebooks on the L4 pool, explicit MIG profiles (some hardware
//     isolated), whole GPUs, MPS batch jobs on the A10G pool, and training
//     jobs of two devices constrained to one node or one GPU; about one
//     workload in ten has a higher priority, a few inference services chose
//     isolation none.
//
// The same (replicas, seed) always gives the same spec.
func RealisticSpec(replicas int, seed uint64) *model.Spec {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	replicas = max(replicas, 1)
	tenants := max(1, replicas/20)
	big := max(1, replicas) // pools sized "as needed" never run out
	s := &model.Spec{
		Policy: alloc.Policy{Placement: "binpack"},
		Pools: []model.Pool{
			{Name: "a100", InstanceType: "p4d.24xlarge", MIG: "dynamic", MaxNodes: big},
			{Name: "h100", InstanceType: "p5.48xlarge", MIG: "dynamic", MaxNodes: big},
			{Name: "a10g", InstanceType: "g5.48xlarge", MaxNodes: big},
			{Name: "l40s", InstanceType: "g6e.48xlarge", MaxNodes: big},
			{Name: "l4", InstanceType: "g6.xlarge", MaxNodes: big,
				Sharing: alloc.Sharing{Mode: alloc.TimeSlice, Replicas: 8}},
			{Name: "t4", InstanceType: "g4dn.xlarge", MaxNodes: max(2, replicas/200)},
			{Name: "a100-reserved", InstanceType: "p4d.24xlarge", Nodes: max(1, replicas/2000), MIG: "fixed",
				MIGLayout: map[string]int{"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 1}, Labels: map[string]string{"reserved": "true"}},
		},
	}
	for t := range tenants {
		tn := model.Tenant{Name: fmt.Sprintf("team-%04d", t)}
		if t%7 == 3 {
			tn.MemoryMiB = int64(64+rng.IntN(192)) << 10
		}
		s.Tenants = append(s.Tenants, tn)
	}
	gib := func(lo, hi int) int64 { return int64(lo+rng.IntN(hi-lo+1)) << 10 }
	left := replicas
	for w := 0; left > 0; w++ {
		// Every tenant gets a workload first; then big tenants get more
		// (a square law skews the draw towards low tenant numbers).
		t := w
		if w >= tenants {
			x := rng.Float64()
			t = int(x * x * float64(tenants))
		}
		wl := model.Workload{Name: fmt.Sprintf("w%05d", w), Tenant: s.Tenants[t].Name}
		r := alloc.Request{Name: "gpu"}
		n := 1
		switch k := rng.IntN(100); {
		case k < 38: // inference service
			n = 2 + rng.IntN(14)
			r.Workload, r.MemoryMiB, r.ComputePercent = alloc.WorkloadInference, gib(1, 12), 5+rng.IntN(36)
			switch p := rng.IntN(10); {
			case p < 3:
				wl.Pool = "a100"
			case p < 5:
				wl.Pool = "h100"
			case p < 6:
				r.Selector = "device.attributes['gpu.nvidia.com'].model == 'A10G'"
			}
			if rng.IntN(20) == 0 {
				wl.Isolation = alloc.IsolationNone
			}
		case k < 58: // notebooks
			n = 1 + rng.IntN(8)
			wl.Pool = "l4"
			r.Mode, r.Workload, r.MemoryMiB = alloc.TimeSlice, alloc.WorkloadInteractive, gib(2, 8)
		case k < 72: // explicit MIG profiles
			n = 1 + rng.IntN(6)
			r.Mode = alloc.MIG
			if rng.IntN(2) == 0 {
				wl.Pool, r.Profile = "a100", []string{"1g.5gb", "2g.10gb", "3g.20gb"}[rng.IntN(3)]
			} else {
				wl.Pool, r.Profile = "h100", []string{"1g.10gb", "2g.20gb", "3g.40gb"}[rng.IntN(3)]
			}
			if rng.IntN(2) == 0 {
				wl.Isolation = alloc.IsolationHardware
			}
		case k < 80: // whole GPUs
			n = 1 + rng.IntN(4)
			r.Mode, r.MemoryMiB, r.ComputePercent = alloc.Exclusive, gib(16, 44), 100
			if rng.IntN(2) == 0 {
				wl.Pool = "l40s"
			}
		case k < 96: // MPS batch on A10G
			n = 1 + rng.IntN(10)
			wl.Pool = "a10g"
			r.Mode, r.Workload, r.MemoryMiB, r.ComputePercent = alloc.MPS, alloc.WorkloadBatch, gib(2, 10), 10+rng.IntN(41)
		default: // training: two devices on one node, or two instances on one GPU
			n = 1 + rng.IntN(3)
			if rng.IntN(2) == 0 {
				wl.Pool = "l40s"
				r.Count, r.Mode, r.MemoryMiB, r.ComputePercent = 2, alloc.Exclusive, gib(20, 44), 100
				wl.Constraints = []alloc.Constraint{{Match: "node"}}
			} else {
				wl.Pool = "h100"
				r.Count, r.Mode, r.Profile = 2, alloc.MIG, "3g.40gb"
				wl.Constraints = []alloc.Constraint{{Match: "gpu"}}
			}
		}
		if rng.IntN(10) == 0 {
			wl.Priority = 10
		}
		wl.Replicas = min(n, left)
		left -= wl.Replicas
		wl.Requests = []alloc.Request{r}
		s.Workloads = append(s.Workloads, wl)
	}
	return s
}
