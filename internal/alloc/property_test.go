package alloc

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
)

var propModels = []string{"A100-40GB", "H100-80GB-SXM", "A30", "T4", "L4", "A100-80GB"}

func randomFleet(rng *rand.Rand) Fleet {
	f := Fleet{Policy: Policy{AllowModeSwitch: rng.IntN(2) == 0}}
	if rng.IntN(3) == 0 {
		f.Policy.Placement = "spread"
	}
	for ni := range 2 + rng.IntN(5) {
		model := propModels[rng.IntN(len(propModels))]
		var opts []gpuOpt
		migCapable := model != "T4" && model != "L4"
		switch rng.IntN(5) {
		case 0:
			opts = append(opts, shared(TimeSlice, 2+rng.IntN(6)))
		case 1:
			opts = append(opts, shared(MPS, 2+rng.IntN(10)))
		case 2:
			opts = append(opts, shared(Exclusive, 0))
		}
		if migCapable && rng.IntN(2) == 0 {
			opts = append(opts, migDynamic)
		}
		n := gpuNode(fmt.Sprintf("n%d", ni), model, 1+rng.IntN(4), opts...)
		n.Labels["zone"] = []string{"a", "b"}[ni%2]
		n.Unschedulable = rng.IntN(10) == 0
		if rng.IntN(8) == 0 {
			n.GPUs[0].Healthy = false
		}
		if migCapable && rng.IntN(4) == 0 { // a static layout on the last GPU
			g := &n.GPUs[len(n.GPUs)-1]
			g.MIGEnabled, g.DynamicMIG = true, false
			switch model {
			case "A30":
				g.Instances = []MIGInstance{{UUID: "MIG-" + g.UUID + "-a", Profile: "2g.12gb", Start: 0, Sharing: Sharing{Mode: TimeSlice, Replicas: 3}},
					{UUID: "MIG-" + g.UUID + "-b", Profile: "1g.6gb", Start: 3}}
			case "A100-40GB":
				g.Instances = []MIGInstance{{UUID: "MIG-" + g.UUID + "-a", Profile: "3g.20gb", Start: 4, Sharing: Sharing{Mode: MPS, MaxClients: 4}},
					{UUID: "MIG-" + g.UUID + "-b", Profile: "1g.5gb", Start: 0}}
			default:
				g.MIGEnabled = false
			}
		}
		f.Nodes = append(f.Nodes, n)
	}
	return f
}

var profileNames = []string{"", "", "", "1g.5gb", "1g.10gb", "3g.40gb", "2g.12gb", "7g.80gb", "1g.6gb"}

func randomClaim(rng *rand.Rand, i int) *Claim {
	c := &Claim{Name: fmt.Sprintf("c%d", i), Tenant: fmt.Sprintf("t%d", rng.IntN(4))}
	c.Isolation = []Isolation{"", IsolationNone, IsolationTenant, IsolationHardware}[rng.IntN(4)]
	modes := []Mode{Auto, Auto, Exclusive, TimeSlice, TimeSlice, MPS, MIG}
	for r := range 1 + rng.IntN(2) {
		req := Request{Name: fmt.Sprintf("r%d", r), Count: rng.IntN(3)}
		req.Mode = modes[rng.IntN(len(modes))]
		if c.Isolation == IsolationHardware && (req.Mode == TimeSlice || req.Mode == MPS) {
			req.Mode = Auto
		}
		if rng.IntN(3) > 0 {
			req.MemoryMiB = int64(500 + rng.IntN(30000))
		}
		if rng.IntN(2) == 0 {
			req.ComputePercent = rng.IntN(101)
		}
		req.Profile = profileNames[rng.IntN(len(profileNames))]
		req.Workload = []Workload{"", WorkloadInference, WorkloadBatch, WorkloadInteractive}[rng.IntN(4)]
		req.LatencySensitive = rng.IntN(6) == 0
		switch rng.IntN(8) {
		case 0:
			req.Selector = "device.attributes['gpu.nvidia.com'].model != 'T4'"
		case 1:
			req.Selector = "node.name != 'n1' && device.attributes['gpu.nvidia.com'].index != 1"
		case 2:
			req.Selector = "node.labels['zone'] == 'a'"
		}
		c.Requests = append(c.Requests, req)
	}
	mpsCount := 0
	for i := range c.Requests {
		if c.Requests[i].Mode == MPS {
			mpsCount += max(c.Requests[i].Count, 1)
		}
	}
	if mpsCount > 1 {
		for i := range c.Requests {
			c.Requests[i].Mode = Auto
		}
	}
	if len(c.Requests) > 1 && rng.IntN(3) == 0 {
		c.Constraints = []Constraint{{Match: []string{"node", "gpu"}[rng.IntN(2)]}}
	}
	return c
}

// fingerprint summarises what Allocate must not change.
func fingerprint(s *State) string {
	out := fmt.Sprint(len(s.allocs), len(s.devs))
	for i := range s.devs {
		d := &s.devs[i]
		out += fmt.Sprint(d.alive, d.usedMem, d.usedComp, d.clients, d.sharing.Mode, ";")
	}
	for i := range s.gpus {
		out += fmt.Sprint(s.gpus[i].occ.Mask, s.gpus[i].migOn, s.gpus[i].touched)
	}
	return out
}

// Long random sequences of allocate / release across models and modes;
// every rule is checked after every step, Allocate never mutates, and the
// indexed search always agrees with the full scan.
func TestRandomSequencesKeepEveryRule(t *testing.T) {
	seeds := 60
	if testing.Short() {
		seeds = 10
	}
	stats := map[string]int{}
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		f := randomFleet(rng)
		s, err := NewState(f, nil, Options{})
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		var live []string
		for step := range 120 {
			if len(live) > 0 && rng.IntN(3) == 0 {
				k := rng.IntN(len(live))
				if err := s.Release(live[k]); err != nil {
					t.Fatalf("seed %d step %d: release %s: %v", seed, step, live[k], err)
				}
				live = append(live[:k], live[k+1:]...)
				stats["release"]++
			} else {
				c := randomClaim(rng, step)
				if step%4 == 3 { // class-level selectors: node labels (a workload pinned to a pool)
					for i := range c.Requests {
						c.Requests[i].Selector = []string{"node.labels['zone'] == 'a'",
							"node.labels['pool'] != 'L4' && device.attributes['gpu.nvidia.com'].memoryMiB >= 10000",
							c.Requests[i].Selector}[rng.IntN(3)]
					}
				}
				if step%4 == 1 { // a shareable replica, the kind AllocateAhead sizes for
					c = &Claim{Name: c.Name, Tenant: c.Tenant, Isolation: []Isolation{"", IsolationNone, IsolationTenant}[rng.IntN(3)],
						Requests: []Request{{Name: "r0", Mode: []Mode{Auto, TimeSlice, MPS}[rng.IntN(3)],
							MemoryMiB: 256 * int64(1+rng.IntN(40)), ComputePercent: rng.IntN(30),
							Workload: []Workload{"", WorkloadInference, WorkloadInteractive}[rng.IntN(3)]}}}
				}
				before := fingerprint(s)
				checkAgreement(t, s, c, fmt.Sprintf("seed %d step %d", seed, step))
				var a *Allocation
				var err error
				if step%2 == 1 {
					// Every other claim goes through AllocateAhead, with
					// claims to come of which some are the same tenant's.
					ahead := make([]Claim, 1+rng.IntN(6))
					for i := range ahead {
						ahead[i] = *randomClaim(rng, 1000+10*step+i)
						switch rng.IntN(3) {
						case 0:
							ahead[i].Tenant, ahead[i].Isolation = c.Tenant, c.Isolation
						case 1: // a replica of c, with its own size
							m := *c
							m.Name = ahead[i].Name
							m.Requests = append([]Request(nil), c.Requests...)
							if m.Requests[0].MemoryMiB > 0 {
								m.Requests[0].MemoryMiB = 256 * int64(1+rng.IntN(40))
								m.Requests[0].ComputePercent = rng.IntN(30)
							}
							ahead[i] = m
						}
					}
					a, err = s.AllocateAhead(c, ahead)
					q, quick := s.AllocateAheadQuick(c, ahead)
					switch {
					case IsNoFit(err) != (quick == ErrNoFit):
						t.Fatalf("seed %d step %d: AllocateAhead says %v, AllocateAheadQuick %v", seed, step, err, quick)
					case err == nil && !reflect.DeepEqual(q.Devices, a.Devices):
						t.Fatalf("seed %d step %d: AllocateAheadQuick chose %+v, AllocateAhead %+v", seed, step, q.Devices, a.Devices)
					}
					p, plain := s.Allocate(c)
					if (plain == nil) != (err == nil) {
						t.Fatalf("seed %d step %d: Allocate says %v, AllocateAhead %v", seed, step, plain, err)
					}
					stats["ahead"]++
					if err == nil && !reflect.DeepEqual(p.Devices, a.Devices) {
						stats["ahead sized a device"]++
					}
				} else {
					a, err = s.Allocate(c)
				}
				if fingerprint(s) != before {
					t.Fatalf("seed %d step %d: Allocate changed the state", seed, step)
				}
				switch {
				case err == nil:
					if err := s.Apply(a); err != nil {
						t.Fatalf("seed %d step %d: apply %s: %v\n%+v", seed, step, c.Name, err, a)
					}
					live = append(live, c.Name)
					for _, d := range a.Devices {
						stats["mode "+string(d.Mode)]++
					}
					for _, ch := range a.Changes {
						stats["change "+string(ch.Kind)]++
					}
				case IsNoFit(err):
					stats["nofit"]++
				default:
					stats["invalid"]++
				}
			}
			if err := s.Check(); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
		}
		for _, name := range live {
			if err := s.Release(name); err != nil {
				t.Fatal(err)
			}
		}
		for di := range s.devs {
			if d := &s.devs[di]; d.clients != 0 || d.usedMem != 0 || d.usedComp != 0 {
				t.Fatalf("seed %d: device %s still holds usage after releasing everything", seed, d.id)
			}
		}
		if err := s.Check(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%v", stats)
	for _, want := range []string{"mode timeslice", "mode mps", "mode mig", "mode exclusive", "change create-instance", "nofit", "release"} {
		if stats[want] == 0 {
			t.Errorf("the random sequences never exercised %q", want)
		}
	}
}

func (s *State) allNodes() []int {
	out := make([]int, len(s.nodes))
	for i := range out {
		out[i] = i
	}
	return out
}

// bestConstrainedScan is the reference for bestConstrained: every node (or
// GPU) in turn, its best device kept if the rest of the claim fits beside
// it.
func (p *placer) bestConstrainedScan(n *need, cons []Constraint, rest []step, a *Allocation) (cand, bool) {
	s := p.s
	perGPU := false
	for _, con := range cons {
		perGPU = perGPU || con.Match == "gpu"
	}
	var best cand
	found := false
	for ni := range s.nodes {
		m := *n
		m.onNode = ni
		gpus := []int{-1}
		if perGPU {
			gpus = s.nodes[ni].gpus
		}
		for _, gi := range gpus {
			m.onGPU = gi
			cd, ok := s.bestScan(&m, []int{ni})
			if ok && (!found || s.better(&cd, &best)) && p.restFits(n, cd, rest, a) {
				best, found = cd, true
			}
		}
	}
	if !found { // as bestConstrained: other candidates on every unit
		var units []int
		if perGPU {
			units = make([]int, len(s.gpus))
		} else {
			units = make([]int, len(s.nodes))
		}
		for u := range units {
			units[u] = u
		}
		return p.alternatives(n, rest, a, perGPU, units)
	}
	return best, found
}

// checkAgreement compares the indexed search with the full scan for the
// claim's first device (for a constrained claim: the first device of its
// first constrained group, against bestConstrainedScan).
func checkAgreement(t *testing.T, s *State, c *Claim, where string) {
	t.Helper()
	if ValidateClaim(c) != nil {
		return
	}
	iso := c.Isolation
	if iso == "" {
		iso = IsolationTenant
	}
	if len(c.Constraints) > 0 {
		steps := decisionOrder(c, iso)
		p := &placer{s: s, c: c, iso: iso, groups: constraintGroups(c)}
		cons := p.groups[steps[0].r.Name]
		if len(cons) == 0 {
			return
		}
		n := &need{claim: c, req: steps[0].r, iso: iso, choices: steps[0].d.choices, taken: map[int]bool{}, onNode: -1, onGPU: -1}
		a, okA := p.bestConstrained(n, cons, steps[1:], &Allocation{})
		b, okB := p.bestConstrainedScan(n, cons, steps[1:], &Allocation{})
		if okA != okB || (okA && (s.better(&a, &b) || s.better(&b, &a))) {
			t.Fatalf("%s: constrained: indexed %v %+v, scan %v %+v", where, okA, a, okB, b)
		}
		return
	}
	r := &c.Requests[0]
	d := decide(r, iso)
	n := &need{claim: c, req: r, iso: iso, choices: d.choices, taken: map[int]bool{}, onNode: -1, onGPU: -1}
	a, okA := s.bestIndexed(n)
	b, okB := s.bestScan(n, s.allNodes())
	if okA != okB {
		t.Fatalf("%s: indexed found=%v, scan found=%v (%+v / %+v)", where, okA, okB, a, b)
	}
	if okA && (s.better(&a, &b) || s.better(&b, &a)) {
		t.Fatalf("%s: indexed chose %+v, scan chose %+v", where, a, b)
	}
}

// Fleet() and the committed allocations rebuild an equivalent State.
func TestFleetSnapshotRebuilds(t *testing.T) {
	for seed := range 10 {
		rng := rand.New(rand.NewPCG(uint64(seed), 11))
		s, err := NewState(randomFleet(rng), nil, Options{})
		if err != nil {
			t.Fatal(err)
		}
		for step := range 60 {
			if a, err := s.Allocate(randomClaim(rng, step)); err == nil {
				if err := s.Apply(a); err != nil {
					t.Fatal(err)
				}
			}
		}
		var allocs []Allocation
		for _, a := range s.Allocations() {
			allocs = append(allocs, *a)
		}
		re, err := NewState(s.Fleet(), allocs, Options{})
		if err != nil {
			t.Fatalf("seed %d: rebuilding from the snapshot: %v", seed, err)
		}
		if err := re.Check(); err != nil {
			t.Fatal(err)
		}
		if len(re.Allocations()) != len(s.Allocations()) {
			t.Fatalf("seed %d: %d allocations after rebuild, want %d", seed, len(re.Allocations()), len(s.Allocations()))
		}
	}
}
