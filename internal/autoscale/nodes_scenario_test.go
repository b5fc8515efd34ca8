package autoscale

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/model"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// A node scenario is the input of PlanNodes written down: the pools with
// their nodes now, how long each node has been empty, the pending claims
// (n alike per line) and the time; steps then move the clock and change
// what is pending, each step fed the previous step's decision applied
// (nodes added, nodes removed). Its .golden twin is every decision with
// its reasons and the whole-GPU comparison.
type nodeScenario struct {
	Now   time.Time `json:"now"`
	Pools []struct {
		Pool     model.Pool `json:"pool"`
		Nodes    int        `json:"nodes,omitempty"`
		MinNodes int        `json:"minNodes,omitempty"`
		EmptyTTL string     `json:"emptyTTL,omitempty"`
	} `json:"pools"`
	// Busy names the nodes that hold claims (the others are empty since
	// Now minus EmptyFor, default 0).
	Busy     []string          `json:"busy,omitempty"`
	EmptyFor map[string]string `json:"emptyFor,omitempty"`
	Steps    []struct {
		Name    string `json:"name"`
		After   string `json:"after,omitempty"` // clock moves this much first
		Pending []struct {
			Tenant    string        `json:"tenant"`
			Count     int           `json:"count"`
			Isolation string        `json:"isolation,omitempty"`
			Request   alloc.Request `json:"request"`
		} `json:"pending,omitempty"`
		// Busy replaces the busy nodes from this step on.
		Busy *[]string `json:"busy,omitempty"`
	} `json:"steps"`
}

func TestNodeScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/nodes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no node scenarios: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".yaml"), func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var sc nodeScenario
			if err := yaml.UnmarshalStrict(raw, &sc); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			got := runNodeScenario(t, sc)
			testkit.Golden(t, strings.TrimSuffix(file, ".yaml")+".golden", []byte(got))
		})
	}
}

func runNodeScenario(t *testing.T, sc nodeScenario) string {
	dur := func(s string) time.Duration {
		if s == "" {
			return 0
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("duration %q: %v", s, err)
		}
		return d
	}
	now := sc.Now
	var pools []NodePool
	busy := map[string]bool{}
	for _, n := range sc.Busy {
		busy[n] = true
	}
	emptySince := map[string]time.Time{}
	var nodes []PoolNode
	next := map[string]int{} // the next node number of each pool
	for _, p := range sc.Pools {
		next[p.Pool.Name] = p.Nodes
		pools = append(pools, NodePool{Pool: p.Pool, Nodes: p.Nodes, MinNodes: p.MinNodes, EmptyTTL: dur(p.EmptyTTL)})
		for i := range p.Nodes {
			name := fmt.Sprintf("%s-%d", p.Pool.Name, i)
			nodes = append(nodes, PoolNode{Name: name, Pool: p.Pool.Name})
			emptySince[name] = now.Add(-dur(sc.EmptyFor[name]))
		}
	}
	var b strings.Builder
	for _, st := range sc.Steps {
		now = now.Add(dur(st.After))
		if st.Busy != nil {
			busy = map[string]bool{}
			for _, n := range *st.Busy {
				busy[n] = true
			}
		}
		for i := range nodes {
			switch {
			case busy[nodes[i].Name]:
				nodes[i].EmptySince = time.Time{}
				emptySince[nodes[i].Name] = time.Time{}
			case emptySince[nodes[i].Name].IsZero():
				emptySince[nodes[i].Name] = now // just emptied
				nodes[i].EmptySince = now
			default:
				nodes[i].EmptySince = emptySince[nodes[i].Name]
			}
		}
		var pending []alloc.Claim
		for _, p := range st.Pending {
			for i := range max(p.Count, 1) {
				r := p.Request
				if r.Name == "" {
					r.Name = "gpu"
				}
				pending = append(pending, alloc.Claim{Name: fmt.Sprintf("%s-%d", p.Tenant, i), Tenant: p.Tenant,
					Isolation: alloc.Isolation(p.Isolation), Requests: []alloc.Request{r}})
			}
		}
		np, err := PlanNodes(pools, pending, nodes, now, nil)
		if err != nil {
			t.Fatalf("step %s: %v", st.Name, err)
		}
		fmt.Fprintf(&b, "== %s (%s, %d pending)\n", st.Name, now.Format("15:04"), len(pending))
		for _, g := range np.Grow {
			fmt.Fprintf(&b, "grow %s by %d × %s: %d GPU(s), %s\n", g.Pool, g.Nodes, g.InstanceType, g.GPUs, money(g.CostPerHour))
		}
		if w := np.WholeGPU; w != nil {
			fmt.Fprintf(&b, "whole-GPU autoscaler: %d × %s: %d GPU(s), %s\n", w.Nodes, w.InstanceType, w.GPUs, money(w.CostPerHour))
		}
		for _, r := range np.Remove {
			fmt.Fprintf(&b, "remove %s (pool %s): %s\n", r.Node, r.Pool, r.Reason)
		}
		for _, u := range np.Unplaced {
			fmt.Fprintf(&b, "unplaced %s\n", u)
		}
		for _, r := range np.Reasons {
			fmt.Fprintf(&b, "  because %s\n", r)
		}
		// Apply the decision: new nodes join empty (busy once the
		// scenario says so), removed nodes go.
		for _, g := range np.Grow {
			for i := range pools {
				if pools[i].Pool.Name != g.Pool {
					continue
				}
				for range g.Nodes {
					name := fmt.Sprintf("%s-%d", g.Pool, next[g.Pool])
					next[g.Pool]++
					nodes = append(nodes, PoolNode{Name: name, Pool: g.Pool})
				}
				pools[i].Nodes += g.Nodes
			}
		}
		for _, r := range np.Remove {
			for i := range pools {
				if pools[i].Pool.Name == r.Pool {
					pools[i].Nodes--
				}
			}
			for i := range nodes {
				if nodes[i].Name == r.Node {
					nodes = append(nodes[:i], nodes[i+1:]...)
					delete(emptySince, r.Node)
					break
				}
			}
		}
	}
	return b.String()
}
