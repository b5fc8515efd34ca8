package render

import (
	"fmt"
	"testing"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/mig"
	"github.com/gpuslice/gpuslice/internal/model"
	"github.com/gpuslice/gpuslice/internal/plan"
)

// The plans of the NVIDIA render tests are written by hand, as the planner
// would report them, so the tests do not depend on the planner's choices.

func nvTS(n int) alloc.Sharing { return alloc.Sharing{Mode: alloc.TimeSlice, Replicas: n} }
func nvMPS(n int) alloc.Sharing {
	return alloc.Sharing{Mode: alloc.MPS, MaxClients: n, DefaultThreadPercent: 100 / n}
}

var (
	nvExcl = alloc.Sharing{Mode: alloc.Exclusive}
	nvDyn  = alloc.Sharing{Mode: alloc.Dynamic}
)

func nvWhole(node string, idx int, sh alloc.Sharing) plan.GPUPlan {
	return plan.GPUPlan{Node: node, Index: idx, UUID: fmt.Sprintf("GPU-%s-%d", node, idx), Sharing: sh}
}

func nvMIG(node string, idx int, ins ...plan.InstancePlan) plan.GPUPlan {
	return plan.GPUPlan{Node: node, Index: idx, UUID: fmt.Sprintf("GPU-%s-%d", node, idx), MIG: true, Instances: ins}
}

func nvInst(profile string, start int, sh alloc.Sharing) plan.InstancePlan {
	return plan.InstancePlan{Profile: profile, Start: start, Sharing: sh}
}

// nvA100Node is one a100-mig node: three MIG GPUs in two layouts and one
// whole GPU.
func nvA100Node(node string) []plan.GPUPlan {
	var out []plan.GPUPlan
	for i := 0; i < 2; i++ {
		out = append(out, nvMIG(node, i,
			nvInst("3g.20gb", 4, nvExcl), nvInst("2g.10gb", 0, nvExcl),
			nvInst("1g.5gb", 2, nvTS(2)), nvInst("1g.5gb", 3, nvTS(2))))
	}
	out = append(out, nvMIG(node, 2,
		nvInst("3g.20gb", 0, nvExcl), nvInst("2g.10gb", 4, nvTS(2)), nvInst("1g.5gb+me", 6, nvTS(2))))
	out = append(out, nvWhole(node, 3, nvTS(3)))
	return out
}

// nvPlan covers every case the NVIDIA targets handle: time-slicing with
// uneven replicas, MPS, fixed MIG with layered time-slicing and a whole
// GPU, dynamic MIG whose nodes differ, MPS next to MIG, and no sharing.
func nvPlan() *plan.Plan {
	a100 := append(nvA100Node("a100-mig-0"), nvA100Node("a100-mig-1")...)
	return &plan.Plan{Pools: []plan.PoolPlan{
		{Name: "t4-shared", InstanceType: "g4dn.12xlarge", GPU: "T4", GPUsPerNode: 4, Nodes: 2, GPUsUsed: 7, GPUs: []plan.GPUPlan{
			nvWhole("t4-shared-0", 0, nvTS(4)), nvWhole("t4-shared-0", 1, nvTS(4)),
			nvWhole("t4-shared-0", 2, nvTS(6)), nvWhole("t4-shared-0", 3, nvDyn),
			nvWhole("t4-shared-1", 0, nvTS(4)), nvWhole("t4-shared-1", 1, nvTS(4)),
			nvWhole("t4-shared-1", 2, nvTS(4)), nvWhole("t4-shared-1", 3, nvTS(4)),
		}},
		{Name: "l4-mps", GPU: "L4", GPUsPerNode: 4, Nodes: 1, GPUsUsed: 3, GPUs: []plan.GPUPlan{
			nvWhole("l4-mps-0", 0, nvMPS(8)), nvWhole("l4-mps-0", 1, nvMPS(8)),
			nvWhole("l4-mps-0", 2, nvMPS(8)), nvWhole("l4-mps-0", 3, nvDyn),
		}},
		{Name: "a100-mig", InstanceType: "p4d.24xlarge", GPU: "A100-40GB", GPUsPerNode: 4, Nodes: 2, GPUsUsed: 8, GPUs: a100},
		{Name: "h100-dyn", GPU: "H100-80GB-SXM", GPUsPerNode: 2, Nodes: 2, GPUsUsed: 3, GPUs: []plan.GPUPlan{
			nvMIG("h100-dyn-0", 0, nvInst("7g.80gb", 0, nvExcl)),
			nvMIG("h100-dyn-0", 1, nvInst("1g.10gb", 0, nvTS(4)), nvInst("1g.10gb", 1, nvTS(4)), nvInst("1g.10gb", 2, nvDyn)),
			nvMIG("h100-dyn-1", 0, nvInst("3g.40gb", 4, nvTS(2)), nvInst("3g.40gb", 0, nvMPS(4))),
			nvMIG("h100-dyn-1", 1),
		}},
		{Name: "a30-mixed", GPU: "A30", GPUsPerNode: 2, Nodes: 1, GPUsUsed: 2, GPUs: []plan.GPUPlan{
			nvWhole("a30-mixed-0", 0, nvMPS(4)),
			nvMIG("a30-mixed-0", 1, nvInst("2g.12gb", 0, nvTS(2)), nvInst("2g.12gb", 2, nvExcl)),
		}},
		{Name: "plain", GPU: "T4", GPUsPerNode: 2, Nodes: 1, GPUsUsed: 1, GPUs: []plan.GPUPlan{
			nvWhole("plain-0", 0, nvExcl), nvWhole("plain-0", 1, nvTS(1)),
		}},
	}}
}

// nvSpec is the spec behind nvPlan (only what the targets read).
func nvSpec() *model.Spec {
	return &model.Spec{Pools: []model.Pool{
		{Name: "t4-shared", GPU: "T4", GPUsPerNode: 4, Sharing: nvTS(4)},
		{Name: "l4-mps", GPU: "L4", GPUsPerNode: 4, Sharing: nvMPS(8)},
		{Name: "a100-mig", InstanceType: "p4d.24xlarge", MIG: "fixed"},
		{Name: "h100-dyn", GPU: "H100-80GB-SXM", GPUsPerNode: 2, MIG: "dynamic"},
		{Name: "a30-mixed", GPU: "A30", GPUsPerNode: 2, MIG: "dynamic"},
		{Name: "plain", GPU: "T4", GPUsPerNode: 2},
	}}
}

// TestNVIDIAFixturesAreValidLayouts keeps the hand-written plan honest:
// every MIG GPU's layout is valid on its model.
func TestNVIDIAFixturesAreValidLayouts(t *testing.T) {
	for _, pp := range nvPlan().Pools {
		g, err := catalog.Default().GPU(pp.GPU)
		if err != nil {
			t.Fatal(err)
		}
		for _, gp := range pp.GPUs {
			if !gp.MIG {
				continue
			}
			geo, err := mig.New(g)
			if err != nil {
				t.Fatal(err)
			}
			var l mig.Layout
			for _, in := range gp.Instances {
				l = append(l, mig.Instance{Profile: in.Profile, Start: in.Start})
			}
			if err := geo.Validate(l); err != nil {
				t.Errorf("%s %s GPU %d: %v", pp.Name, gp.Node, gp.Index, err)
			}
		}
	}
}
