package autoscale

import (
	"fmt"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/model"
)

// NodeMix is a named set of pending claims and the pools that could take
// them: what `gpuslice bench nodes` feeds PlanNodes to compare counting
// slices with counting whole GPUs.
type NodeMix struct {
	Name    string
	Pools   []NodePool
	Pending []alloc.Claim
}

// NodeMixes are the mixes of `gpuslice bench nodes`.
func NodeMixes() []NodeMix {
	share := func(n int, tenant string, r alloc.Request) []alloc.Claim {
		var out []alloc.Claim
		for i := range n {
			r.Name = "gpu"
			out = append(out, alloc.Claim{Name: fmt.Sprintf("%s-%d", tenant, i), Tenant: tenant, Requests: []alloc.Request{r}})
		}
		return out
	}
	cat := func(cs ...[]alloc.Claim) []alloc.Claim {
		var out []alloc.Claim
		for _, c := range cs {
			out = append(out, c...)
		}
		return out
	}
	l4 := NodePool{Pool: model.Pool{Name: "l4", InstanceType: "g6.xlarge", Sharing: alloc.Sharing{Mode: alloc.TimeSlice, Replicas: 4}}}
	a10g := NodePool{Pool: model.Pool{Name: "a10g", InstanceType: "g5.xlarge", Sharing: alloc.Sharing{Mode: alloc.MPS, MaxClients: 8}}}
	t4 := NodePool{Pool: model.Pool{Name: "t4", InstanceType: "g4dn.xlarge"}}
	a100 := NodePool{Pool: model.Pool{Name: "a100", InstanceType: "p4d.24xlarge", MIG: "dynamic"}}
	h100 := NodePool{Pool: model.Pool{Name: "h100", InstanceType: "p5.48xlarge", MIG: "dynamic"}}
	l40s := NodePool{Pool: model.Pool{Name: "l40s", InstanceType: "g6e.12xlarge", Sharing: alloc.Sharing{Mode: alloc.TimeSlice, Replicas: 8}}}
	return []NodeMix{
		{Name: "4 notebooks, 4 GiB time-sliced", Pools: []NodePool{l4, t4},
			Pending: share(4, "lab", alloc.Request{Mode: alloc.TimeSlice, MemoryMiB: 4096})},
		{Name: "24 inference, 2 tenants, MPS 2 GiB", Pools: []NodePool{a10g, l4},
			Pending: cat(share(12, "search", alloc.Request{Mode: alloc.MPS, MemoryMiB: 2048, ComputePercent: 10}),
				share(12, "ads", alloc.Request{Mode: alloc.MPS, MemoryMiB: 2048, ComputePercent: 10}))},
		{Name: "14 MIG 1g.10gb + 2 × 3g.40gb", Pools: []NodePool{t4, a100, h100},
			Pending: cat(share(14, "research", alloc.Request{Mode: alloc.MIG, Profile: "1g.10gb"}),
				share(2, "train", alloc.Request{Mode: alloc.MIG, Profile: "3g.40gb"}))},
		{Name: "32 inference 6 GiB, 4 tenants", Pools: []NodePool{l40s, l4},
			Pending: cat(share(8, "a", alloc.Request{Mode: alloc.TimeSlice, MemoryMiB: 6144}), share(8, "b", alloc.Request{Mode: alloc.TimeSlice, MemoryMiB: 6144}),
				share(8, "c", alloc.Request{Mode: alloc.TimeSlice, MemoryMiB: 6144}), share(8, "d", alloc.Request{Mode: alloc.TimeSlice, MemoryMiB: 6144}))},
	}
}
