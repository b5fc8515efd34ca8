package autoscale

import (
	"encoding/json"
	"fmt"
	"slices"
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
	if np.WholeGPU == nil || np.WholeGPU.Nodes != 4 || *np.WholeGPU.CostPerHour != 4**np.Grow[0].CostPerHour {
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
	if len(np.Grow) != 1 || np.Grow[0].Nodes != 2 || *np.Grow[0].CostPerHour != 2**np.WholeGPU.CostPerHour/4 {
		t.Fatalf("one for claims, two warm: %+v whole %+v", np.Grow, np.WholeGPU)
	}
	l4.Nodes, l4.Pool.MaxNodes = 1, 1
	np, _ = PlanNodes([]NodePool{l4}, nil, nil, time.Now(), nil)
	if len(np.Grow) != 0 {
		t.Fatalf("at maxNodes: %+v", np.Grow)
	}
}

// Nodes asked for and still booting are not bought again: the pending
// claims they will hold wait for them, only the rest buy nodes, and they
// count toward the warm minimum and maxNodes.
func TestBootingNodesAreNotBoughtAgain(t *testing.T) {
	l4 := NodePool{Pool: model.Pool{Name: "l4", InstanceType: "g6.xlarge", Sharing: alloc.Sharing{Mode: alloc.TimeSlice, Replicas: 4}}}
	four := claims(4, "web", alloc.Request{Mode: alloc.TimeSlice, MemoryMiB: 4096})
	np, err := PlanNodes([]NodePool{l4}, four, nil, time.Now(), nil)
	if err != nil || len(np.Grow) != 1 || np.Grow[0].Nodes != 1 {
		t.Fatalf("first decision: %+v %v", np, err)
	}
	// The node is booting; the same four claims are still pending.
	l4.Booting = 1
	np, err = PlanNodes([]NodePool{l4}, four, nil, time.Now(), nil)
	if err != nil || len(np.Grow) != 0 || np.WholeGPU != nil {
		t.Fatalf("bought again while one boots: %+v %v", np, err)
	}
	if !contains(fmt.Sprint(np.Reasons), "4 of 4 pending claim(s) fit on the 1 node(s) already booting") {
		t.Fatalf("reasons %q", np.Reasons)
	}
	// Twelve pending: the booting node holds four, two more are bought
	// for the other eight (not three).
	twelve := claims(12, "web", alloc.Request{Mode: alloc.TimeSlice, MemoryMiB: 4096})
	np, _ = PlanNodes([]NodePool{l4}, twelve, nil, time.Now(), nil)
	if len(np.Grow) != 1 || np.Grow[0].Nodes != 2 || np.WholeGPU == nil || np.WholeGPU.GPUs != 8 {
		t.Fatalf("twelve with one booting: %+v whole %+v; %q", np.Grow, np.WholeGPU, np.Reasons)
	}
	// A claim the booting node cannot hold (another pool's hardware)
	// still buys its own node.
	t4 := NodePool{Pool: model.Pool{Name: "a100", InstanceType: "p4d.24xlarge", MIG: "dynamic"}}
	mig := claims(1, "research", alloc.Request{Mode: alloc.MIG, Profile: "3g.20gb"})
	np, _ = PlanNodes([]NodePool{l4, t4}, append(slices.Clone(four), mig...), nil, time.Now(), nil)
	if len(np.Grow) != 1 || np.Grow[0].Pool != "a100" || np.Grow[0].Nodes != 1 {
		t.Fatalf("MIG claim beside a booting L4: %+v; %q", np.Grow, np.Reasons)
	}
	// Booting nodes count toward the warm minimum and maxNodes.
	l4.MinNodes = 2
	np, _ = PlanNodes([]NodePool{l4}, nil, nil, time.Now(), nil)
	if len(np.Grow) != 1 || np.Grow[0].Nodes != 1 {
		t.Fatalf("warm 2 with one booting: %+v", np.Grow)
	}
	l4.MinNodes, l4.Pool.MaxNodes = 0, 1
	np, _ = PlanNodes([]NodePool{l4}, twelve, nil, time.Now(), nil)
	if len(np.Grow) != 0 || len(np.Unplaced) != 8 {
		t.Fatalf("maxNodes 1 with one booting: grow %+v unplaced %d", np.Grow, len(np.Unplaced))
	}
}

// An instance type without a known price has no cost: JSON null with a
// note (never +Inf, which encoding/json refuses), and a priced pool that
// places the claims wins over it.
func TestUnpricedCostIsNullInJSON(t *testing.T) {
	unpriced := NodePool{Pool: model.Pool{Name: "gcp", InstanceType: "a2-highgpu-1g", Sharing: alloc.Sharing{Mode: alloc.TimeSlice, Replicas: 4}}}
	pending := claims(4, "web", alloc.Request{Mode: alloc.TimeSlice, MemoryMiB: 4096})
	np, err := PlanNodes([]NodePool{unpriced}, pending, nil, time.Now(), nil)
	if err != nil || len(np.Grow) != 1 {
		t.Fatalf("%+v %v", np, err)
	}
	b, err := json.Marshal(np)
	if err != nil {
		t.Fatalf("JSON of a plan with an unpriced pool: %v", err)
	}
	var back struct {
		Grow []struct {
			CostPerHour *float64 `json:"costPerHour"`
			PriceNote   string   `json:"priceNote"`
		} `json:"grow"`
		WholeGPU struct {
			CostPerHour *float64 `json:"costPerHour"`
			PriceNote   string   `json:"priceNote"`
		} `json:"wholeGPU"`
	}
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"costPerHour":null`) || back.Grow[0].CostPerHour != nil ||
		!strings.Contains(back.Grow[0].PriceNote, "no known price for a2-highgpu-1g") || back.WholeGPU.CostPerHour != nil {
		t.Fatalf("JSON %s", b)
	}
	if c := Total(np.Grow); c.Known || c.String() != "unknown" {
		t.Fatalf("total %+v %s", c, c)
	}
	priced := NodePool{Pool: model.Pool{Name: "l4", InstanceType: "g6.xlarge", Sharing: alloc.Sharing{Mode: alloc.TimeSlice, Replicas: 4}}}
	np, _ = PlanNodes([]NodePool{unpriced, priced}, pending, nil, time.Now(), nil)
	if len(np.Grow) != 1 || np.Grow[0].Pool != "l4" || np.Grow[0].CostPerHour == nil {
		t.Fatalf("priced vs unpriced: %+v", np.Grow)
	}
	if !contains(np.Reasons[0], "gcp: 1 node(s), 1 GPU(s), unknown $/h") {
		t.Fatalf("reason %q", np.Reasons[0])
	}
}
