package plantest

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/model"
)

// nodeShape is a kind of node RandomSpec draws pools from: an instance
// type, or a GPU model and GPUs per node where no instance type exists.
type nodeShape struct {
	instanceType string
	gpu          string
	perNode      int
}

// drawn is a pool RandomSpec drew, with its GPU model.
type drawn struct {
	p   *model.Pool
	gpu *catalog.GPU
	mig bool
}

var shapes = []nodeShape{
	{instanceType: "p4d.24xlarge"}, {instanceType: "a2-highgpu-2g"}, {instanceType: "p4de.24xlarge"},
	{instanceType: "p5.48xlarge"}, {instanceType: "a3-highgpu-2g"}, {gpu: "A30", perNode: 4},
	{instanceType: "g6.xlarge"}, {instanceType: "g6.12xlarge"}, {instanceType: "g4dn.xlarge"},
	{instanceType: "g4dn.12xlarge"}, {instanceType: "g5.xlarge"}, {instanceType: "g5.12xlarge"},
	{instanceType: "g5.48xlarge"}, {instanceType: "g6e.xlarge"}, {instanceType: "g6e.12xlarge"},
	{instanceType: "g6e.48xlarge"},
}

// RandomSpec draws a small-to-medium spec from one seed, as wide as the
// planner's inputs go, for property tests and the plan-quality figures:
//
//   - 1–4 pools of A100 (40 and 80 GB), H100, A30, L4, T4, A10G or L40S
//     nodes of 1–8 GPUs; MIG off, dynamic, or a fixed layout (whose
//     instances may be time-sliced or MPS-shared: layered sharing); whole
//     GPUs dynamic, time-sliced, MPS or exclusive; sized "as needed",
//     capped by maxNodes (sometimes too few: capacity runs short) or fixed;
//   - 1–200 tenants, skewed (a few hold most workloads), some with quotas;
//   - workloads of every mode: auto inference and notebooks, time-sliced,
//     MPS with compute limits, exclusive whole GPUs, explicit MIG profiles,
//     mode mig without a profile, hardware isolation, isolation none,
//     two-device replicas constrained to one node or one GPU, selectors on
//     the GPU model; priorities; pinned to a pool or free;
//   - at most maxReplicas replicas in all (at least 1).
//
// Every claim is valid for the pool it is drawn for. The same (seed,
// maxReplicas) always gives the same spec.
func RandomSpec(seed uint64, maxReplicas int) *model.Spec {
	return randomSpec(rand.New(rand.NewPCG(seed, 0x51ce5eed)), maxReplicas, 0, drawAnyPool)
}

// MIGBesideWholeSpec draws a spec as RandomSpec does, but its 2–4 pools are
// all H100 nodes (p5.48xlarge, 8 GPUs, or a3-highgpu-2g, 2 GPUs): the
// first with dynamic MIG, the second with MIG off (whole GPUs, plain,
// time-sliced or MPS), the others either; so workloads pinned to a MIG
// pool, to a whole-GPU pool, or free to take either meet. Its seeds are a
// stream of their own (the same seed gives a different spec from
// RandomSpec's): the planner was tuned on RandomSpec seeds 1–500, and
// these are held out from that tuning.
func MIGBesideWholeSpec(seed uint64, maxReplicas int) *model.Spec {
	rng := rand.New(rand.NewPCG(seed, 0x4831303077686f6c))
	return randomSpec(rng, maxReplicas, 2+rng.IntN(3), drawH100Pool)
}

// drawAnyPool draws RandomSpec's pool i: any node shape, MIG on (dynamic
// or fixed) two times in three where the model has it.
func drawAnyPool(rng *rand.Rand, i int) (model.Pool, drawn) {
	sh := shapes[rng.IntN(len(shapes))]
	return drawPool(rng, i, sh, func(g *catalog.GPU) bool { return g.MIG != nil && rng.IntN(3) > 0 })
}

var h100Shapes = []nodeShape{{instanceType: "p5.48xlarge"}, {instanceType: "a3-highgpu-2g"}}

// drawH100Pool draws MIGBesideWholeSpec's pool i.
func drawH100Pool(rng *rand.Rand, i int) (model.Pool, drawn) {
	sh := h100Shapes[rng.IntN(len(h100Shapes))]
	return drawPool(rng, i, sh, func(*catalog.GPU) bool { return i == 0 || (i > 1 && rng.IntN(2) == 0) })
}

// drawPool makes pool i of node shape sh; migOn says whether its GPUs run
// MIG (asked only of models that have it).
func drawPool(rng *rand.Rand, i int, sh nodeShape, migOn func(*catalog.GPU) bool) (model.Pool, drawn) {
	cat := catalog.Default()
	p := model.Pool{Name: fmt.Sprintf("pool%d", i), InstanceType: sh.instanceType, GPU: sh.gpu, GPUsPerNode: sh.perNode}
	id := sh.gpu
	if sh.instanceType != "" {
		it, err := cat.InstanceType(sh.instanceType)
		if err != nil {
			panic(err) // the tables above name catalog instance types
		}
		id = it.GPU
	}
	g, err := cat.GPU(id)
	if err != nil {
		panic(err)
	}
	d := drawn{gpu: g}
	if g.MIG != nil && migOn(g) {
		d.mig = true
		if rng.IntN(4) == 0 {
			p.MIG = "fixed"
			p.MIGLayout = fixedLayout(g, rng)
			switch rng.IntN(3) {
			case 0:
				p.MIGSharing = alloc.Sharing{Mode: alloc.TimeSlice, Replicas: 2 + rng.IntN(6)}
			case 1:
				p.MIGSharing = alloc.Sharing{Mode: alloc.MPS, MaxClients: 2 + rng.IntN(8)}
			}
		} else {
			p.MIG = "dynamic"
		}
	} else {
		switch rng.IntN(5) {
		case 0:
			p.Sharing = alloc.Sharing{Mode: alloc.TimeSlice, Replicas: 2 + rng.IntN(10)}
		case 1:
			p.Sharing = alloc.Sharing{Mode: alloc.MPS, MaxClients: 2 + rng.IntN(20)}
		}
	}
	switch k := rng.IntN(10); {
	case k < 1:
		p.MaxNodes = 1 + rng.IntN(6)
	case k < 2:
		p.Nodes = 1 + rng.IntN(4)
	}
	return p, d
}

// randomSpec draws the spec: np pools from draw (np 0: 1–4 of them), then
// tenants and workloads.
func randomSpec(rng *rand.Rand, maxReplicas, np int, draw func(*rand.Rand, int) (model.Pool, drawn)) *model.Spec {
	maxReplicas = max(maxReplicas, 1)
	s := &model.Spec{Policy: alloc.Policy{Placement: "binpack"}}
	var pools []drawn
	if np <= 0 {
		np = 1 + rng.IntN(4)
	}
	for i := range np {
		p, d := draw(rng, i)
		pools = append(pools, d)
		s.Pools = append(s.Pools, p)
	}
	for i := range pools {
		pools[i].p = &s.Pools[i]
	}

	tenants := 1 + rng.IntN(min(200, max(1, maxReplicas/2)))
	if rng.IntN(3) == 0 {
		tenants = 1 + rng.IntN(min(5, tenants))
	}
	for t := range tenants {
		tn := model.Tenant{Name: fmt.Sprintf("t%03d", t)}
		if rng.IntN(8) == 0 {
			tn.MemoryMiB = int64(8+rng.IntN(120)) << 10
		}
		if rng.IntN(10) == 0 {
			tn.ComputePercent = 50 + rng.IntN(400)
		}
		s.Tenants = append(s.Tenants, tn)
	}
	left := 1 + rng.IntN(maxReplicas)
	for w := 0; left > 0; w++ {
		x := rng.Float64()
		t := int(x * x * x * float64(tenants)) // skewed towards t000
		if w < tenants && rng.IntN(2) == 0 {
			t = w
		}
		d := pools[rng.IntN(len(pools))]
		wl := model.Workload{Name: fmt.Sprintf("w%03d", w), Tenant: s.Tenants[t].Name, Pool: d.p.Name}
		mem := d.gpu.MemoryMiB
		gib := func(lo, hi float64) int64 { // a share of the GPU's memory, in 256 MiB steps
			v := int64((lo + rng.Float64()*(hi-lo)) * float64(mem))
			return max(256, v/256*256)
		}
		r := alloc.Request{Name: "gpu"}
		n := 1 + rng.IntN(8)
		excl := d.p.Sharing.Mode == alloc.Exclusive
		switch k := rng.IntN(100); {
		case k < 30: // inference, auto mode
			r.Workload, r.MemoryMiB, r.ComputePercent = alloc.WorkloadInference, gib(0.03, 0.4), 5+rng.IntN(45)
			r.LatencySensitive = rng.IntN(5) == 0
		case k < 42: // notebooks
			r.Workload, r.MemoryMiB = alloc.WorkloadInteractive, gib(0.05, 0.35)
			if d.p.Sharing.Mode == "" || d.p.Sharing.Mode == alloc.TimeSlice {
				r.Mode = alloc.TimeSlice
			}
		case k < 58: // MPS with limits (MPS-heavy tenants)
			r.Workload, r.MemoryMiB, r.ComputePercent = alloc.WorkloadBatch, gib(0.05, 0.5), 10+rng.IntN(50)
			if d.p.Sharing.Mode == "" || d.p.Sharing.Mode == alloc.MPS {
				r.Mode = alloc.MPS
			}
		case k < 68: // whole GPUs
			r.Mode, r.MemoryMiB, r.ComputePercent = alloc.Exclusive, gib(0.3, 0.95), 100
			n = 1 + rng.IntN(3)
		case k < 84 && d.mig: // explicit profiles, or mode mig
			prof := profileFor(d, rng)
			if prof == "" {
				r.Workload, r.MemoryMiB, r.ComputePercent = alloc.WorkloadInference, gib(0.05, 0.3), 10
				break
			}
			r.Mode, r.Profile = alloc.MIG, prof
			if d.p.MIG == "dynamic" && rng.IntN(3) == 0 {
				pr, _ := d.gpu.Profile(prof)
				r.Profile, r.MemoryMiB = "", pr.MemoryMiB*3/4
			} else if pr, err := d.gpu.Profile(prof); err == nil {
				r.MemoryMiB = pr.MemoryMiB
				r.ComputePercent = pr.ComputeSlices * 100 / d.gpu.MIG.ComputeSlices
			}
			if rng.IntN(3) == 0 {
				wl.Isolation = alloc.IsolationHardware
			}
		case k < 92: // two devices on one node, or one GPU on MIG
			r.Count = 2
			if d.mig && d.p.MIG == "dynamic" && rng.IntN(2) == 0 {
				r.Mode, r.Profile = alloc.MIG, smallProfile(d.gpu)
				if pr, err := d.gpu.Profile(r.Profile); err == nil {
					r.MemoryMiB = pr.MemoryMiB
				}
				wl.Constraints = []alloc.Constraint{{Match: "gpu"}}
			} else if perNode(d.p) >= 2 || d.p.InstanceType == "" {
				r.Mode, r.MemoryMiB, r.ComputePercent = alloc.Exclusive, gib(0.3, 0.9), 100
				wl.Constraints = []alloc.Constraint{{Match: "node"}}
				if perNode(d.p) < 2 {
					r.Count = 1
					wl.Constraints = nil
				}
			} else {
				r.Count = 1
				r.Mode, r.MemoryMiB, r.ComputePercent = alloc.Exclusive, gib(0.3, 0.9), 100
			}
			n = 1 + rng.IntN(2)
		default: // light work with isolation none
			r.Workload, r.MemoryMiB, r.ComputePercent = alloc.WorkloadInference, gib(0.02, 0.2), 5+rng.IntN(20)
			wl.Isolation = alloc.IsolationNone
		}
		if excl && r.Mode != alloc.MIG {
			r.Mode, r.ComputePercent = alloc.Exclusive, 100
		}
		if r.Mode == alloc.Exclusive {
			switch {
			case d.p.MIG == "dynamic":
				// A whole GPU of a MIG pool is its biggest instance (the
				// plan never switches MIG off).
				r.Mode, r.Profile = alloc.MIG, profileWith(d.gpu, fmt.Sprint(d.gpu.MIG.ComputeSlices))
				if pr, err := d.gpu.Profile(r.Profile); err == nil {
					r.MemoryMiB = pr.MemoryMiB
				}
			case d.p.MIG == "":
				if m := d.p.Sharing.Mode; m == alloc.TimeSlice || m == alloc.MPS {
					r.Mode = m // a GPU shared one way serves that way only
					if m == alloc.MPS {
						r.Count, wl.Constraints = 0, nil // an MPS client has one device
					}
				}
			}
		}
		if d.p.MIG == "fixed" && r.Profile == "" && r.Mode != alloc.Exclusive {
			// Fixed layouts: a shared claim must fit the layout's instances.
			r.MemoryMiB = min(r.MemoryMiB, smallestInstance(d))
			r.ComputePercent = min(r.ComputePercent, 100/d.gpu.MIG.ComputeSlices)
			if d.p.MIGSharing.Mode == alloc.TimeSlice && r.Mode == alloc.MPS {
				r.Mode = alloc.TimeSlice
			}
			if d.p.MIGSharing.Mode == alloc.MPS && r.Mode == alloc.TimeSlice {
				r.Mode = alloc.MPS
			}
		}
		if m := d.p.Sharing.Mode; d.p.MIG == "" && (m == alloc.TimeSlice || m == alloc.MPS) && r.Mode != alloc.Exclusive {
			r.Mode = m // auto could pick a mode the pool's GPUs do not serve
			if m == alloc.MPS {
				r.Count, wl.Constraints = 0, nil
			}
		}
		if m := d.p.MIGSharing.Mode; d.p.MIG == "fixed" && m != "" && r.Profile != "" {
			// Layered: the fixed instances are shared; a claim naming one
			// takes a share of it.
			if pr, err := d.gpu.Profile(r.Profile); err == nil {
				r.Mode, r.MemoryMiB = m, pr.MemoryMiB/4
				r.ComputePercent = pr.ComputeSlices * 100 / d.gpu.MIG.ComputeSlices / 4
			}
			wl.Isolation = ""
		}
		if d.p.MIG == "fixed" && r.Mode == alloc.Exclusive {
			r.Mode, r.MemoryMiB, r.ComputePercent = alloc.MIG, 0, 0
			r.Profile = largestInstance(d)
			wl.Constraints = nil
			r.Count = 1
			if m := d.p.MIGSharing.Mode; m != "" {
				if pr, err := d.gpu.Profile(r.Profile); err == nil {
					r.Mode, r.MemoryMiB = m, pr.MemoryMiB/2
				}
			}
		}
		switch p := rng.IntN(10); {
		case p < 2 && r.Profile == "" && r.Mode != alloc.MIG && len(wl.Constraints) == 0:
			wl.Pool = "" // free: any pool whose GPU holds it
			r.MemoryMiB = min(r.MemoryMiB, 15<<10)
			if r.Mode != alloc.Exclusive {
				r.Mode = ""
				r.ComputePercent = min(r.ComputePercent, 40)
				wl.Isolation = ""
			}
		case p < 3:
			r.Selector = "device.attributes['gpu.nvidia.com'].model == '" + d.gpu.ID + "'"
		}
		if rng.IntN(6) == 0 {
			wl.Priority = 1 + rng.IntN(3)*10
		}
		wl.Replicas = min(n, left)
		left -= wl.Replicas
		wl.Requests = []alloc.Request{r}
		s.Workloads = append(s.Workloads, wl)
	}
	return s
}

func perNode(p *model.Pool) int {
	if p.InstanceType == "" {
		return p.GPUsPerNode
	}
	it, err := catalog.Default().InstanceType(p.InstanceType)
	if err != nil {
		return 1
	}
	return it.GPUCount
}

// fixedLayout draws a valid MIG layout: a few profiles that fit one GPU.
func fixedLayout(g *catalog.GPU, rng *rand.Rand) map[string]int {
	layouts := [][]string{{"3", "2", "1"}, {"1", "1", "1", "1", "1", "1", "1"}, {"3", "3"}, {"4", "2", "1"}, {"2", "2", "2"}}
	if g.MIG.ComputeSlices == 4 {
		layouts = [][]string{{"2", "1", "1"}, {"1", "1", "1", "1"}, {"2", "2"}}
	}
	l := layouts[rng.IntN(len(layouts))]
	out := map[string]int{}
	for _, c := range l {
		out[profileWith(g, c)]++
	}
	return out
}

// profileWith is the model's first plain profile of c compute slices.
func profileWith(g *catalog.GPU, c string) string {
	for _, p := range g.MIG.Profiles {
		if strings.HasPrefix(p.Name, c+"g.") && !strings.Contains(p.Name, "+") && fmt.Sprint(p.ComputeSlices) == c {
			return p.Name
		}
	}
	return g.MIG.Profiles[0].Name
}

func smallProfile(g *catalog.GPU) string { return profileWith(g, "1") }

func profileFor(d drawn, rng *rand.Rand) string {
	if d.p.MIG == "fixed" {
		var names []string
		for n := range d.p.MIGLayout {
			names = append(names, n)
		}
		if len(names) == 0 {
			return ""
		}
		// Sorted for determinism.
		for i := range names {
			for j := i + 1; j < len(names); j++ {
				if names[j] < names[i] {
					names[i], names[j] = names[j], names[i]
				}
			}
		}
		return names[rng.IntN(len(names))]
	}
	cs := []string{"1", "1", "2", "3", "4"}
	if d.gpu.MIG.ComputeSlices == 4 {
		cs = []string{"1", "1", "2"}
	}
	return profileWith(d.gpu, cs[rng.IntN(len(cs))])
}

func smallestInstance(d drawn) int64 {
	best := d.gpu.MemoryMiB
	for n := range d.p.MIGLayout {
		if pr, err := d.gpu.Profile(n); err == nil {
			best = min(best, pr.MemoryMiB)
		}
	}
	return best
}

func largestInstance(d drawn) string {
	var best string
	var bm int64
	for n := range d.p.MIGLayout {
		if pr, err := d.gpu.Profile(n); err == nil && (pr.MemoryMiB > bm || (pr.MemoryMiB == bm && n < best)) {
			best, bm = n, pr.MemoryMiB
		}
	}
	return best
}
