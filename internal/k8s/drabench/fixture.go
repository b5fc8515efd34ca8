package drabench

import (
	"fmt"
	"math/rand/v2"

	"github.com/gpuslice/gpuslice/internal/catalog"
)

// Driver is the DRA driver name both sides use.
const Driver = "gpu.nvidia.com"

// GPUsPerNode is how many GPUs every benchmark node has.
const GPUsPerNode = 8

// FillFraction is how much of the fleet a claim sequence takes before the
// fleet is emptied again.
const FillFraction = 0.7

// Models is the model mix, by node: of every ten nodes, five have A100s,
// three H100s and two L4s (interleaved, so scanning nodes in order meets
// every model early).
var Models = []string{"A100-40GB", "H100-80GB-SXM", "A100-40GB", "L4", "A100-40GB",
	"H100-80GB-SXM", "A100-40GB", "L4", "A100-40GB", "H100-80GB-SXM"}

// nodeSpec is one node of the shared fleet description both sides are
// built from.
type nodeSpec struct {
	name  string
	model *catalog.GPU
}

// fleetSpec is the fleet and the claim sequence, independent of either
// allocator.
type fleetSpec struct {
	nodes []nodeSpec
	// claims is the model each claim asks for, in order.
	claims []string
}

func nodeName(i int) string          { return fmt.Sprintf("node-%05d", i) }
func gpuUUID(n string, i int) string { return fmt.Sprintf("GPU-%s-%d", n, i) }

// newFleetSpec lays out gpus GPUs (a multiple of GPUsPerNode) and a claim
// sequence: the models' shares of a FillFraction fill, shuffled with a
// fixed seed (each model gets at most FillFraction of its own GPUs, so a
// full sequence always fits). extra claims follow, drawn by the node mix,
// which may not fit (the equivalence test uses them).
func newFleetSpec(gpus, extra int) (*fleetSpec, error) {
	if gpus <= 0 || gpus%GPUsPerNode != 0 {
		return nil, fmt.Errorf("gpus %d: want a positive multiple of %d", gpus, GPUsPerNode)
	}
	cat := catalog.Default()
	f := &fleetSpec{}
	perModel := map[string]int{}
	for i := range gpus / GPUsPerNode {
		m, err := cat.GPU(Models[i%len(Models)])
		if err != nil {
			return nil, err
		}
		f.nodes = append(f.nodes, nodeSpec{name: nodeName(i), model: m})
		perModel[m.ID] += GPUsPerNode
	}
	for _, id := range uniqueModels() {
		for range int(float64(perModel[id]) * FillFraction) {
			f.claims = append(f.claims, id)
		}
	}
	rng := rand.New(rand.NewPCG(2024, 11))
	rng.Shuffle(len(f.claims), func(i, j int) { f.claims[i], f.claims[j] = f.claims[j], f.claims[i] })
	for range extra {
		f.claims = append(f.claims, Models[rng.IntN(len(Models))])
	}
	return f, nil
}

func uniqueModels() []string {
	var out []string
	seen := map[string]bool{}
	for _, m := range Models {
		if !seen[m] {
			seen[m] = true
			out = append(out, m)
		}
	}
	return out
}
