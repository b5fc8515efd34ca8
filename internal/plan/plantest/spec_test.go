package plantest

import (
	"reflect"
	"testing"

	"github.com/gpuslice/gpuslice/internal/alloc"
)

// The generated spec has exactly the replicas asked for, about N/20
// tenants, every kind of workload the benchmark claims to cover, valid
// claims, and the same spec for the same seed.
func TestRealisticSpec(t *testing.T) {
	for _, n := range []int{1, 19, 20, 1000, 5000} {
		s := RealisticSpec(n, 3)
		if !reflect.DeepEqual(s, RealisticSpec(n, 3)) {
			t.Fatalf("%d: not deterministic", n)
		}
		total := 0
		for _, w := range s.Workloads {
			total += w.Replicas
			c := alloc.Claim{Name: w.Name, Tenant: w.Tenant, Isolation: w.Isolation, Requests: w.Requests, Constraints: w.Constraints}
			if err := alloc.ValidateClaim(&c); err != nil {
				t.Fatalf("%d: workload %s: %v", n, w.Name, err)
			}
			if w.Replicas < 1 {
				t.Fatalf("%d: workload %s has %d replicas", n, w.Name, w.Replicas)
			}
		}
		if total != n {
			t.Fatalf("%d replicas asked, %d generated", n, total)
		}
		if want := max(1, n/20); len(s.Tenants) != want {
			t.Fatalf("%d: %d tenants, want %d", n, len(s.Tenants), want)
		}
	}
	s := RealisticSpec(5000, 1)
	seen := map[string]bool{}
	for _, w := range s.Workloads {
		r := w.Requests[0]
		switch {
		case w.Pool == "l4" && r.Mode == alloc.TimeSlice:
			seen["time-sliced notebooks on L4"] = true
		case r.Profile != "" && len(w.Constraints) == 0:
			seen["explicit MIG profiles"] = true
		case r.Mode == alloc.Exclusive && len(w.Constraints) == 0:
			seen["whole GPUs"] = true
		case w.Pool == "a10g" && r.Mode == alloc.MPS:
			seen["MPS batch on A10G"] = true
		case r.Workload == alloc.WorkloadInference && r.Mode == "":
			seen["inference shares"] = true
		}
		for _, c := range w.Constraints {
			seen["constraint "+c.Match] = true
		}
		if r.Selector != "" {
			seen["selector"] = true
		}
		if w.Priority > 0 {
			seen["priority"] = true
		}
		if w.Isolation != "" {
			seen["isolation "+string(w.Isolation)] = true
		}
	}
	for _, p := range s.Pools {
		switch {
		case p.MIG == "dynamic":
			seen["dynamic MIG pool"] = true
		case p.MIG == "fixed" && p.Nodes > 0:
			seen["fixed pool"] = true
		}
		if p.MaxNodes > 0 && p.MaxNodes < 100 {
			seen["capped pool"] = true
		}
	}
	for _, want := range []string{"time-sliced notebooks on L4", "explicit MIG profiles", "whole GPUs", "MPS batch on A10G",
		"inference shares", "constraint node", "constraint gpu", "selector", "priority", "isolation none", "isolation hardware",
		"dynamic MIG pool", "fixed pool", "capped pool"} {
		if !seen[want] {
			t.Errorf("no %s in the generated spec", want)
		}
	}
}

// MIGBesideWholeSpec: deterministic, 2-4 pools all of H100 nodes, the
// first with MIG, the second without; valid claims; workloads pinned to a
// MIG pool, to a whole-GPU pool, and free, over a few seeds; and not
// RandomSpec's spec for the same seed.
func TestMIGBesideWholeSpec(t *testing.T) {
	seen := map[string]bool{}
	for seed := uint64(1); seed <= 30; seed++ {
		s := MIGBesideWholeSpec(seed, 120)
		if !reflect.DeepEqual(s, MIGBesideWholeSpec(seed, 120)) {
			t.Fatalf("seed %d: not deterministic", seed)
		}
		if reflect.DeepEqual(s, RandomSpec(seed, 120)) {
			t.Fatalf("seed %d: the same spec as RandomSpec's", seed)
		}
		if len(s.Pools) < 2 || len(s.Pools) > 4 || s.Pools[0].MIG == "" || s.Pools[1].MIG != "" {
			t.Fatalf("seed %d: pools %+v", seed, s.Pools)
		}
		mig := map[string]bool{}
		for _, p := range s.Pools {
			if p.InstanceType != "p5.48xlarge" && p.InstanceType != "a3-highgpu-2g" {
				t.Fatalf("seed %d: pool %s of %s, want H100 nodes", seed, p.Name, p.InstanceType)
			}
			mig[p.Name] = p.MIG != ""
		}
		for _, w := range s.Workloads {
			c := alloc.Claim{Name: w.Name, Tenant: w.Tenant, Isolation: w.Isolation, Requests: w.Requests, Constraints: w.Constraints}
			if err := alloc.ValidateClaim(&c); err != nil {
				t.Fatalf("seed %d: workload %s: %v", seed, w.Name, err)
			}
			switch {
			case w.Pool == "":
				seen["free"] = true
			case mig[w.Pool]:
				seen["on MIG"] = true
			default:
				seen["on whole GPUs"] = true
			}
		}
	}
	for _, want := range []string{"free", "on MIG", "on whole GPUs"} {
		if !seen[want] {
			t.Errorf("no workload %s in 30 specs", want)
		}
	}
}
