package alloc

import (
	"fmt"
	"testing"
)

// Fixture builders: gpuNode("n1", "A100-40GB", 8, migDynamic) etc.

type gpuOpt func(*GPU)

func migDynamic(g *GPU) { g.MIGEnabled, g.DynamicMIG = true, true }

func shared(mode Mode, n int) gpuOpt {
	return func(g *GPU) {
		switch mode {
		case TimeSlice:
			g.Sharing = Sharing{Mode: TimeSlice, Replicas: n}
		case MPS:
			g.Sharing = Sharing{Mode: MPS, MaxClients: n}
		default:
			g.Sharing = Sharing{Mode: mode}
		}
	}
}

func withInstances(layout ...MIGInstance) gpuOpt {
	return func(g *GPU) { g.MIGEnabled, g.Instances = true, layout }
}

func gpuNode(name, model string, count int, opts ...gpuOpt) Node {
	n := Node{Name: name, Labels: map[string]string{"pool": model}}
	for i := 0; i < count; i++ {
		g := GPU{UUID: fmt.Sprintf("GPU-%s-%d", name, i), Index: i, Model: model, Healthy: true, Sharing: Sharing{Mode: Dynamic}}
		for _, o := range opts {
			o(&g)
		}
		n.GPUs = append(n.GPUs, g)
	}
	return n
}

func newState(t testing.TB, policy Policy, nodes ...Node) *State {
	t.Helper()
	s, err := NewState(Fleet{Nodes: nodes, Policy: policy}, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func claim(name, tenant string, reqs ...Request) *Claim {
	for i := range reqs {
		if reqs[i].Name == "" {
			reqs[i].Name = fmt.Sprintf("r%d", i)
		}
	}
	return &Claim{Name: name, Tenant: tenant, Requests: reqs}
}

// must allocates and commits, failing the test on error.
func must(t testing.TB, s *State, c *Claim) *Allocation {
	t.Helper()
	a, err := s.Allocate(c)
	if err != nil {
		t.Fatalf("allocate %s: %v", c.Name, err)
	}
	if err := s.Apply(a); err != nil {
		t.Fatalf("apply %s: %v", c.Name, err)
	}
	return a
}
