package alloc

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// poolNode is a node of a named pool, labelled as a planner labels them.
func poolNode(pool string, i int, model string, gpus int, opts ...gpuOpt) Node {
	n := gpuNode(fmt.Sprintf("%s-%d", pool, i), model, gpus, opts...)
	n.Labels = map[string]string{"gpuslice.dev/pool": pool}
	return n
}

func pinned(pool string) string { return "node.labels['gpuslice.dev/pool'] == '" + pool + "'" }

// A claim pinned to a pool by a node label is rejected by the other pools
// class by class: one selector evaluation per class of identical nodes,
// not one per GPU. And the answer is the full scan's.
func TestPinnedClaimRejectsOtherPoolsByClass(t *testing.T) {
	var nodes []Node
	for i := range 100 {
		nodes = append(nodes, poolNode("big", i, "L4", 8), poolNode("mig", i, "A100-40GB", 8, migDynamic))
	}
	nodes = append(nodes, poolNode("small", 0, "L4", 8))
	s := newState(t, Policy{}, nodes...)
	c := claim("c", "t", Request{MemoryMiB: 4096, Mode: TimeSlice, Selector: pinned("small")})
	checkAgreement(t, s, c, "pinned")
	a := must(t, s, c)
	if a.Devices[0].Node != "small-0" {
		t.Fatalf("placed on %s", a.Devices[0].Node)
	}
	sc, err := s.sel.get(pinned("small"))
	if err != nil {
		t.Fatal(err)
	}
	if !sc.classLevel {
		t.Fatal("a selector on node labels is not class-level")
	}
	before := sc.evals
	c2 := claim("c2", "u", Request{MemoryMiB: 4096, Mode: TimeSlice, Selector: pinned("small")})
	if _, err := s.Allocate(c2); err != nil {
		t.Fatal(err)
	}
	if sc.evals != before {
		t.Fatalf("answers are not kept: %d more evaluations", sc.evals-before)
	}
	fresh := newState(t, Policy{}, nodes...)
	sc, _ = fresh.sel.get(pinned("small"))
	if _, err := fresh.Allocate(c); err != nil {
		t.Fatal(err)
	}
	if sc.evals > 20 {
		t.Fatalf("Allocate of a pinned claim evaluated its selector %d times over 201 nodes in 3 classes", sc.evals)
	}
	for _, expr := range []string{"node.name == 'x'", "device.attributes['gpu.nvidia.com'].uuid != ''",
		"device.attributes['gpu.nvidia.com'].index == 0", "node.labels.exists(k, k == 'a')"} {
		if sc, err := s.sel.get(expr); err != nil || sc.classLevel {
			t.Errorf("%s: class-level %v (%v), want per-device", expr, sc != nil && sc.classLevel, err)
		}
	}
	for _, expr := range []string{"node.labels['zone'] == 'a' && device.attributes['gpu.nvidia.com'].memoryMiB >= 10000",
		"node.instanceType == 'g6.xlarge' || device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('10Gi')) >= 0"} {
		if sc, err := s.sel.get(expr); err != nil || !sc.classLevel {
			t.Errorf("%s: per-device (%v), want class-level", expr, err)
		}
	}
}

// Nodes of two pools with the same model and shape: a claim pinned to one
// pool never lands on the other, whichever comes first in the index, and
// the indexed search agrees with the scan at every step.
func TestPoolsOfOneModelStayApart(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var nodes []Node
	for i := range 6 {
		nodes = append(nodes, poolNode("a", i, "A100-40GB", 2, migDynamic), poolNode("b", i, "A100-40GB", 2, migDynamic),
			poolNode("la", i, "L4", 2), poolNode("lb", i, "L4", 2))
	}
	s := newState(t, Policy{}, nodes...)
	for i := range 200 {
		pool := []string{"a", "b", "la", "lb"}[rng.IntN(4)]
		r := Request{MemoryMiB: int64(1024 * (1 + rng.IntN(10))), ComputePercent: rng.IntN(40), Selector: pinned(pool)}
		if rng.IntN(3) == 0 {
			r.Mode, r.MemoryMiB, r.Profile = MIG, 0, []string{"1g.5gb", "2g.10gb", "3g.20gb"}[rng.IntN(3)]
		}
		c := claim(fmt.Sprint("c", i), fmt.Sprint("t", rng.IntN(5)), r)
		checkAgreement(t, s, c, fmt.Sprint("step ", i))
		a, err := s.Allocate(c)
		if err != nil {
			continue
		}
		for _, d := range a.Devices {
			if s.nodes[s.nodeIdx[d.Node]].node.Labels["gpuslice.dev/pool"] != pool {
				t.Fatalf("claim pinned to %s placed on %s", pool, d.Node)
			}
		}
		if err := s.Apply(a); err != nil {
			t.Fatal(err)
		}
		if err := s.Check(); err != nil {
			t.Fatal(err)
		}
	}
}

// AddNode gives the same State as building it with the node; RemoveNode
// undoes AddNode exactly, and refuses nodes in use or not added last.
func TestAddAndRemoveNode(t *testing.T) {
	for seed := range 30 {
		rng := rand.New(rand.NewPCG(uint64(seed), 99))
		f := randomFleet(rng)
		s, err := NewState(Fleet{Nodes: f.Nodes[:1], Policy: f.Policy}, nil, Options{})
		if err != nil {
			t.Fatal(err)
		}
		added := 1
		var live []string
		for step := range 150 {
			switch x := rng.IntN(10); {
			case x == 0 && added < len(f.Nodes):
				before := fingerprint(s)
				if err := s.AddNode(f.Nodes[added]); err != nil {
					t.Fatalf("seed %d: add %s: %v", seed, f.Nodes[added].Name, err)
				}
				if rng.IntN(2) == 0 { // a planner's try: add, decide, give back
					if a, err := s.Allocate(randomClaim(rng, step)); err == nil {
						_ = a
					}
					if err := s.RemoveNode(f.Nodes[added].Name); err != nil {
						t.Fatalf("seed %d: remove the node just added: %v", seed, err)
					}
					if fingerprint(s) != before {
						t.Fatalf("seed %d: add and remove changed the state", seed)
					}
					break
				}
				added++
			case x == 1 && added > 1:
				last := f.Nodes[added-1].Name
				inUse := s.nodes[s.nodeIdx[last]].touched > 0
				if err := s.RemoveNode(last); err == nil {
					if inUse {
						t.Fatalf("seed %d: removed node %s in use", seed, last)
					}
					if _, ok := s.nodeIdx[last]; ok {
						t.Fatalf("seed %d: node %s still indexed", seed, last)
					}
					added--
				} else if !inUse && !strings.Contains(err.Error(), "made elsewhere") {
					t.Fatalf("seed %d: remove %s: %v", seed, last, err)
				}
				if err := s.RemoveNode(f.Nodes[0].Name); err == nil && added > 1 {
					t.Fatalf("seed %d: removed a node that was not added last", seed)
				}
			case x < 4 && len(live) > 0:
				k := rng.IntN(len(live))
				if err := s.Release(live[k]); err != nil {
					t.Fatal(err)
				}
				live = append(live[:k], live[k+1:]...)
			default:
				c := randomClaim(rng, step)
				checkAgreement(t, s, c, fmt.Sprintf("seed %d step %d", seed, step))
				if a, err := s.Allocate(c); err == nil {
					if err := s.Apply(a); err != nil {
						t.Fatal(err)
					}
					live = append(live, c.Name)
				}
			}
			if err := s.Check(); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
		}
		// The grown State decides like one built from its snapshot (ties
		// between equal devices may break differently: device numbers
		// follow creation order).
		var allocs []Allocation
		for _, a := range s.Allocations() {
			allocs = append(allocs, *a)
		}
		re, err := NewState(s.Fleet(), allocs, Options{})
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		c := randomClaim(rng, 9999)
		a1, e1 := s.Allocate(c)
		a2, e2 := re.Allocate(c)
		if (e1 == nil) != (e2 == nil) || (e1 == nil && len(a1.Devices) != len(a2.Devices)) {
			t.Fatalf("seed %d: grown state decides %v %v, rebuilt %v %v", seed, a1, e1, a2, e2)
		}
	}
	s := newState(t, Policy{}, gpuNode("n0", "L4", 1))
	for _, bad := range []Node{{Name: ""}, gpuNode("n0", "L4", 1), {Name: "x", GPUs: []GPU{{UUID: "GPU-n0-0", Model: "L4"}}},
		{Name: "y", GPUs: []GPU{{UUID: "u1", Model: "L4"}, {UUID: "u2", Model: "nope"}}}} {
		before := fingerprint(s)
		if err := s.AddNode(bad); err == nil {
			t.Errorf("AddNode(%+v) accepted", bad)
		}
		if fingerprint(s) != before || len(s.nodes) != 1 || len(s.gpuIdx) != 1 {
			t.Errorf("a refused AddNode(%s) changed the state", bad.Name)
		}
		if err := s.Check(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AddNode(gpuNode("y", "L4", 1)); err != nil {
		t.Fatalf("the GPU uuid of a refused node stayed taken: %v", err)
	}
	must(t, s, claim("c", "t", Request{MemoryMiB: 1024, Selector: "node.name == 'y'"}))
	if err := s.RemoveNode("y"); err == nil {
		t.Fatal("removed a node in use")
	}
}

// Replicas of constrained claims (two MIG instances on one GPU, two whole
// GPUs on one node) between other claims: bestConstrained, which remembers
// where the previous replica's group did not fit, always agrees with the
// scan over every node and GPU.
func TestConstrainedReplicasAgreeWithScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	var nodes []Node
	for i := range 5 {
		nodes = append(nodes, poolNode("h", i, "H100-80GB-SXM", 4, migDynamic), poolNode("l", i, "L40S", 4))
	}
	s := newState(t, Policy{}, nodes...)
	shapes := []*Claim{
		{Tenant: "a", Requests: []Request{{Name: "g", Count: 2, Mode: MIG, Profile: "3g.40gb"}}, Constraints: []Constraint{{Match: "gpu"}}},
		{Tenant: "b", Requests: []Request{{Name: "g", Count: 2, Mode: Exclusive, MemoryMiB: 30000}}, Constraints: []Constraint{{Match: "node"}}},
		{Tenant: "c", Requests: []Request{{Name: "g", Count: 3, Mode: MIG, Profile: "2g.20gb"}}, Constraints: []Constraint{{Match: "gpu"}}},
	}
	placed := 0
	var live []string
	for i := range 300 {
		if len(live) > 0 && rng.IntN(4) == 0 { // room comes back where a group did not fit
			k := rng.IntN(len(live))
			if err := s.Release(live[k]); err != nil {
				t.Fatal(err)
			}
			live = append(live[:k], live[k+1:]...)
		}
		var c *Claim
		if rng.IntN(3) == 0 {
			c = claim(fmt.Sprint("x", i), fmt.Sprint("t", rng.IntN(4)), Request{Mode: MIG,
				Profile: []string{"1g.10gb", "2g.20gb", "3g.40gb"}[rng.IntN(3)]})
		} else {
			cp := *shapes[min(i/40, len(shapes)-1)]
			cp.Name = fmt.Sprint("c", i)
			c = &cp
		}
		checkAgreement(t, s, c, fmt.Sprint("step ", i))
		if a, err := s.Allocate(c); err == nil {
			if err := s.Apply(a); err != nil {
				t.Fatal(err)
			}
			placed++
			live = append(live, c.Name)
		}
		if err := s.Check(); err != nil {
			t.Fatal(err)
		}
	}
	if placed < 20 {
		t.Fatalf("only %d claims placed", placed)
	}
}
