package autoscale

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/model"
)

func claims(n int, tenant string, r alloc.Request) []alloc.Claim {
	var out []alloc.Claim
	for i := range n {
		r.Name = "gpu"
		out = append(out, alloc.Claim{Name: fmt.Sprintf("%s-%d", tenant, i), Tenant: tenant, Requests: []alloc.Request{r}})
	}
	return out
}

// Pending MIG claims grow a pool whose GPUs have MIG (the A100 pool, the
// cheaper of the two that can: one p4d holds all three 3g.20gb), never
// the T4 pool, however cheap.
func TestPendingMIGClaimsChooseAMIGPool(t *testing.T) {
	pools := []NodePool{
		{Pool: model.Pool{Name: "t4", InstanceType: "g4dn.xlarge"}},
		{Pool: model.Pool{Name: "a100", InstanceType: "p4d.24xlarge", MIG: "dynamic"}},
		{Pool: model.Pool{Name: "h100", InstanceType: "p5.48xlarge", MIG: "dynamic"}},
	}
	np, err := PlanNodes(pools, claims(3, "research", alloc.Request{Mode: alloc.MIG, Profile: "3g.20gb"}), nil, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(np.Grow) != 1 || np.Grow[0].Pool != "a100" || np.Grow[0].Nodes != 1 {
		t.Fatalf("grow %+v; reasons %q", np.Grow, np.Reasons)
	}
	if len(np.Unplaced) != 0 {
		t.Fatalf("unplaced %q", np.Unplaced)
	}
}

// Four time-sliced 4 GiB claims of one tenant buy one L4 node, where an
// autoscaler that counts whole GPUs buys four (the AKS complaint).
func TestTimeSlicedClaimsBuyOneNodeNotFour(t *testing.T) {
	pools := []NodePool{{Pool: model.Pool{Name: "l4", InstanceType: "g6.xlarge", Sharing: alloc.Sharing{Mode: alloc.TimeSlice, Replicas: 4}}}}
	np, err := PlanNodes(pools, claims(4, "web", alloc.Request{Mode: alloc.TimeSlice, MemoryMiB: 4096}), nil, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(np.Grow) != 1 || np.Grow[0].Nodes != 1 || np.Grow[0].GPUs != 1 {
		t.Fatalf("grow %+v; reasons %q", np.Grow, np.Reasons)
	}
	if np.WholeGPU == nil || np.WholeGPU.Nodes != 4 || np.WholeGPU.CostPerHour != 4*np.Grow[0].CostPerHour {
		t.Fatalf("whole-GPU comparison %+v", np.WholeGPU)
	}
}

// A pool at its maxNodes is not grown; what no pool can hold is listed
// with the planner's reason.
func TestNoRoomIsSaid(t *testing.T) {
	pools := []NodePool{{Pool: model.Pool{Name: "l4", InstanceType: "g6.xlarge", MaxNodes: 2}, Nodes: 2},
		{Pool: model.Pool{Name: "t4", InstanceType: "g4dn.xlarge"}}}
	np, err := PlanNodes(pools, claims(1, "a", alloc.Request{Mode: alloc.Exclusive, MemoryMiB: 20000}), nil, time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(np.Grow) != 0 || len(np.Unplaced) != 1 {
		t.Fatalf("grow %+v unplaced %q", np.Grow, np.Unplaced)
	}
	if r := np.Reasons[0]; !contains(r, "l4: at its maxNodes (2)") || !contains(r, "t4: 1 of 1 pending claims would not fit") {
		t.Fatalf("reason %q", r)
	}
}

// Empty nodes go after their pool's TTL, oldest first, never below the
// pool's warm minimum; a node empty for less than the TTL stays.
func TestEmptyNodesGoAfterTheirTTL(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	pools := []NodePool{{Pool: model.Pool{Name: "l4", InstanceType: "g6.xlarge"}, Nodes: 4, MinNodes: 2, EmptyTTL: 10 * time.Minute}}
	nodes := []PoolNode{
		{Name: "l4-0", Pool: "l4"}, // busy
		{Name: "l4-1", Pool: "l4", EmptySince: now.Add(-30 * time.Minute)},
		{Name: "l4-2", Pool: "l4", EmptySince: now.Add(-20 * time.Minute)},
		{Name: "l4-3", Pool: "l4", EmptySince: now.Add(-5 * time.Minute)},
	}
	np, err := PlanNodes(pools, nil, nodes, now, nil)
	if err != nil {
		t.Fatal(err)
	}
	// 4 nodes, 2 warm: two may go, but l4-3 is not past its TTL, and of
	// l4-1 and l4-2 both may go while 2 stay.
	if len(np.Remove) != 2 || np.Remove[0].Node != "l4-1" || np.Remove[1].Node != "l4-2" {
		t.Fatalf("remove %+v; reasons %q", np.Remove, np.Reasons)
	}
	pools[0].MinNodes = 3
	np, _ = PlanNodes(pools, nil, nodes, now, nil)
	if len(np.Remove) != 1 || np.Remove[0].Node != "l4-1" {
		t.Fatalf("with 3 warm: remove %+v", np.Remove)
	}
	if !contains(fmt.Sprint(np.Reasons), "keeps 3 warm (minimumNodesInPool)") {
		t.Fatalf("reasons %q", np.Reasons)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// A pool below its warm minimum grows to it; nodes bought for pending
// claims in the same pool count toward it (the larger of the two, not the
// sum), and maxNodes bounds it.
func TestWarmMinimumGrowsAPool(t *testing.T) {
	l4 := NodePool{Pool: model.Pool{Name: "l4", InstanceType: "g6.xlarge", Sharing: alloc.Sharing{Mode: alloc.TimeSlice, Replicas: 4}}, MinNodes: 2}
	np, err := PlanNodes([]NodePool{l4}, nil, nil, time.Now(), nil)
	if err != nil || len(np.Grow) != 1 || np.Grow[0].Nodes != 2 || np.Grow[0].GPUs != 2 || np.WholeGPU != nil {
		t.Fatalf("nothing pending: %+v %v", np, err)
	}
	// Twelve 4 GiB claims need three L4s: three, not 2+3.
	np, _ = PlanNodes([]NodePool{l4}, claims(12, "a", alloc.Request{Mode: alloc.TimeSlice, MemoryMiB: 4096}), nil, time.Now(), nil)
	if len(np.Grow) != 1 || np.Grow[0].Nodes != 3 {
		t.Fatalf("pending and warm: %+v", np.Grow)
	}
	// Four need one: the minimum makes it two.
	np, _ = PlanNodes([]NodePool{l4}, claims(4, "a", alloc.Request{Mode: alloc.TimeSlice, MemoryMiB: 4096}), nil, time.Now(), nil)
	if len(np.Grow) != 1 || np.Grow[0].Nodes != 2 || np.Grow[0].CostPerHour != 2*np.WholeGPU.CostPerHour/4 {
		t.Fatalf("one for claims, two warm: %+v whole %+v", np.Grow, np.WholeGPU)
	}
	l4.Nodes, l4.Pool.MaxNodes = 1, 1
	np, _ = PlanNodes([]NodePool{l4}, nil, nil, time.Now(), nil)
	if len(np.Grow) != 0 {
		t.Fatalf("at maxNodes: %+v", np.Grow)
	}
}
