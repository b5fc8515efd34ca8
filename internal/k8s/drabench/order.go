package drabench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/k8s/draalloc"
	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// This file measures what issue #12 asks of the slices gpuslice's DRA
// driver publishes: the stock allocator takes the first device that fits,
// in ResourceSlice order, so the order of the MIG placements decides how
// well it packs. The same MIG claims are allocated by the stock structured
// allocator on the same fleet with the devices in three orders, and by
// gpuslice's allocator (draalloc, what gpuslice-scheduler runs) on the
// same slices and claims.

// Device orders of a GPU's MIG placements.
const (
	// OrderGPUSlice is dradriver.Slices' order: smallest profile first,
	// and among one profile's placements the highest start first, so the
	// small instances fill a GPU from the top and the low slices stay free
	// for the big profiles (KEP-4815's advice).
	OrderGPUSlice = "gpuslice"
	// OrderNVML is the order NVML enumerates: profiles smallest first, as
	// nvidia-smi mig -lgip lists them, each profile's placements by start
	// ascending, as -lgipp lists them. A driver that publishes what NVML
	// returns has this order.
	OrderNVML = "nvml"
	// OrderLargestFirst lists the biggest profiles first, starts ascending.
	OrderLargestFirst = "largest-first"
	// OrderKnownBiggestFirst is gpuslice's allocator given every claim
	// up front, biggest first (first-fit decreasing): planning, not
	// arrival order.
	OrderKnownBiggestFirst = "all-known-biggest-first"
	// OrderNVIDIAWhole is a memory-share mix served as NVIDIA's driver
	// serves separate claims: a whole GPU each.
	OrderNVIDIAWhole = "whole-gpu-per-claim"
)

// OrderMix is a seeded stream of MIG claims on one GPU model.
type OrderMix struct {
	Name  string
	Model string
	// Profiles and Weights: each claim draws one profile by weight.
	Profiles []string
	Weights  []int
	// SharesGiB, when set, makes the mix memory shares of one GPU instead
	// (shared.gpuslice.dev with a memory capacity request, drawn by
	// Weights); the NVIDIA-style side then gives each claim a whole GPU,
	// as NVIDIA's driver does for separate claims (its time-slicing and
	// MPS share a device among the pods of one claim only).
	SharesGiB []int
	// MIGMemoryGiB, when set, makes the claims MIG instances asked for by
	// memory (a capacity request on mig.gpuslice.dev, no profile named):
	// the first placement in device order that holds it is taken, so the
	// order of the profiles matters too.
	MIGMemoryGiB []int
}

// OrderMixes are the mixes of `gpuslice bench dra-order`: small instances
// mostly (inference), a spread over every size, and big instances mostly.
var OrderMixes = []OrderMix{
	{Name: "a100-small", Model: "A100-40GB", Profiles: []string{"1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb"}, Weights: []int{10, 4, 2, 1}},
	{Name: "a100-spread", Model: "A100-40GB", Profiles: []string{"1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"}, Weights: []int{4, 2, 3, 3, 2, 1}},
	{Name: "a100-by-memory", Model: "A100-40GB", MIGMemoryGiB: []int{5, 10, 20}, Weights: []int{4, 2, 1}},
	{Name: "a100-shares", Model: "A100-40GB", SharesGiB: []int{4, 10, 20}, Weights: []int{3, 2, 1}},
	{Name: "h100-large", Model: "H100-80GB-SXM", Profiles: []string{"1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}, Weights: []int{3, 2, 4, 3, 1}},
}

// OrderSide is one allocator and device order on the mix.
type OrderSide struct {
	Allocator string `json:"allocator"`
	Order     string `json:"order"`
	// Placed claims and the GPUs holding at least one of them.
	Placed   int `json:"placed"`
	Unplaced int `json:"unplaced"`
	GPUs     int `json:"gpus"`
}

// OrderResult is one mix: every side on the same claims and fleet.
type OrderResult struct {
	Mix    string      `json:"mix"`
	Model  string      `json:"model"`
	Nodes  int         `json:"nodes"`
	Claims int         `json:"claims"`
	Seed   uint64      `json:"seed"`
	Sides  []OrderSide `json:"sides"`
}

// CompareOrder allocates claims MIG claims of mix (seeded) one after the
// other on nodes nodes of GPUsPerNode GPUs: the stock allocator tries the
// nodes in order and takes the first that fits (first fit over nodes as
// well as devices: the packing it can do at best, with no scorer
// spreading pods), once per device order; gpuslice's allocator decides on
// the same slices.
func CompareOrder(mix OrderMix, nodes, claims int, seed uint64) (OrderResult, error) {
	res := OrderResult{Mix: mix.Name, Model: mix.Model, Nodes: nodes, Claims: claims, Seed: seed}
	if nodes <= 0 || claims <= 0 {
		return res, fmt.Errorf("nodes %d, claims %d: want both positive", nodes, claims)
	}
	kinds, set := 0, 0
	for _, l := range []int{len(mix.Profiles), len(mix.SharesGiB), len(mix.MIGMemoryGiB)} {
		if l > 0 {
			kinds, set = l, set+1
		}
	}
	if set != 1 || kinds != len(mix.Weights) {
		return res, fmt.Errorf("mix %s: %d profiles, %d shares, %d MIG memory sizes, %d weights: want one of profiles, shares or MIG memory sizes, as many as weights",
			mix.Name, len(mix.Profiles), len(mix.SharesGiB), len(mix.MIGMemoryGiB), len(mix.Weights))
	}
	cat := catalog.Default()
	if _, err := cat.GPU(mix.Model); err != nil {
		return res, fmt.Errorf("mix %s: %w", mix.Name, err)
	}
	var fleet []alloc.Node
	var sl []resourceapi.ResourceSlice
	for n := range nodes {
		node := alloc.Node{Name: nodeName(n)}
		for i := range GPUsPerNode {
			node.GPUs = append(node.GPUs, alloc.GPU{UUID: gpuUUID(node.Name, i), Index: i, Model: mix.Model, Healthy: true})
		}
		s, err := dradriver.Slices(node, 1, "", cat)
		if err != nil {
			return res, err
		}
		fleet = append(fleet, node)
		sl = append(sl, s...)
	}
	rcs, sizes := orderClaims(mix, claims, seed)
	if len(mix.SharesGiB) > 0 {
		side, err := upstreamOrder(reorder(sl, OrderGPUSlice), fleet, rcs)
		if err != nil {
			return res, fmt.Errorf("stock allocator, shares: %w", err)
		}
		side.Order = OrderGPUSlice
		res.Sides = append(res.Sides, side)
		whole := make([]*resourceapi.ResourceClaim, len(rcs))
		for i, rc := range rcs {
			w := rc.DeepCopy()
			w.Spec.Devices.Requests[0].Exactly.DeviceClassName = dranames.ClassGPU
			w.Spec.Devices.Requests[0].Exactly.Capacity = nil
			whole[i] = w
		}
		if side, err = upstreamOrder(reorder(sl, OrderGPUSlice), fleet, whole); err != nil {
			return res, fmt.Errorf("stock allocator, whole GPUs: %w", err)
		}
		side.Order = OrderNVIDIAWhole
		res.Sides = append(res.Sides, side)
	}
	for _, order := range []string{OrderGPUSlice, OrderNVML, OrderLargestFirst} {
		if len(mix.SharesGiB) > 0 {
			break
		}
		side, err := upstreamOrder(reorder(sl, order), fleet, rcs)
		if err != nil {
			return res, fmt.Errorf("stock allocator, %s order: %w", order, err)
		}
		side.Order = order
		res.Sides = append(res.Sides, side)
	}
	side, err := gpusliceOrder(sl, fleet, rcs, cat)
	if err != nil {
		return res, fmt.Errorf("gpuslice allocator: %w", err)
	}
	res.Sides = append(res.Sides, side)
	// The same claims known up front, biggest first (first-fit
	// decreasing through gpuslice's allocator): what planning them
	// together, rather than as they arrive, reaches.
	sorted := slices.Clone(rcs)
	sort.SliceStable(sorted, func(i, j int) bool { return sizes[sorted[i].Name] > sizes[sorted[j].Name] })
	if side, err = gpusliceOrder(sl, fleet, sorted, cat); err != nil {
		return res, fmt.Errorf("gpuslice allocator, biggest first: %w", err)
	}
	side.Order = OrderKnownBiggestFirst
	res.Sides = append(res.Sides, side)
	return res, nil
}

// orderClaims draws the mix's claims as a user writes them: ResourceClaims
// of the MIG class selecting a profile or a memory size, or of the shared
// class asking for memory.
//
// sizes orders the claims for first-fit decreasing: compute slices, then
// memory, of the profile; or the memory asked.
func orderClaims(mix OrderMix, n int, seed uint64) (claims []*resourceapi.ResourceClaim, sizes map[string]float64) {
	sizes = map[string]float64{}
	rng := rand.New(rand.NewPCG(seed, 0x6f72646572))
	total := 0
	for _, w := range mix.Weights {
		total += w
	}
	claims = make([]*resourceapi.ResourceClaim, 0, n)
	for i := range n {
		k, r := 0, rng.IntN(total)
		for r >= mix.Weights[k] {
			r -= mix.Weights[k]
			k++
		}
		name := fmt.Sprintf("claim-%d", i)
		req := resourceapi.ExactDeviceRequest{DeviceClassName: dranames.ClassMIG,
			AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}
		cel := func(expr string) []resourceapi.DeviceSelector {
			return []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}}
		}
		switch {
		case len(mix.SharesGiB) > 0:
			sizes[name] = float64(mix.SharesGiB[k])
			req.DeviceClassName = dranames.ClassShared
			req.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
				dranames.CapacityMemory: *resource.NewQuantity(int64(mix.SharesGiB[k])<<30, resource.BinarySI)}}
		case len(mix.MIGMemoryGiB) > 0:
			sizes[name] = float64(mix.MIGMemoryGiB[k])
			req.Selectors = cel(fmt.Sprintf("device.capacity[%q].memory.compareTo(quantity(%q)) >= 0", dranames.DriverName, fmt.Sprintf("%dGi", mix.MIGMemoryGiB[k])))
		default:
			var g, gb float64
			fmt.Sscanf(mix.Profiles[k], "%fg.%fgb", &g, &gb)
			sizes[name] = g*1000 + gb
			req.Selectors = cel(fmt.Sprintf("device.attributes[%q].profile == %q", dranames.DriverName, mix.Profiles[k]))
		}
		claims = append(claims, &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "bench", UID: types.UID("uid-" + name)},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name: "gpu", Exactly: &req}}}},
		})
	}
	return claims, sizes
}

// reorder copies slices with each GPU's MIG devices in order (the whole
// and shared devices keep their places after them).
func reorder(in []resourceapi.ResourceSlice, order string) []*resourceapi.ResourceSlice {
	out := make([]*resourceapi.ResourceSlice, len(in))
	for i := range in {
		s := in[i].DeepCopy()
		out[i] = s
		if order == OrderGPUSlice {
			continue
		}
		devs := s.Spec.Devices
		sort.SliceStable(devs, func(a, b int) bool {
			ma, mb := migKey(devs[a]), migKey(devs[b])
			if ma.mig != mb.mig {
				return ma.mig // MIG placements first, as published
			}
			if !ma.mig {
				return false
			}
			if ma.mem != mb.mem {
				if order == OrderLargestFirst {
					return ma.mem > mb.mem
				}
				return ma.mem < mb.mem
			}
			if ma.profile != mb.profile {
				return ma.profile < mb.profile
			}
			return ma.start < mb.start
		})
	}
	return out
}

type migSortKey struct {
	mig     bool
	mem     int64
	profile string
	start   int64
}

func migKey(d resourceapi.Device) migSortKey {
	t := d.Attributes[dranames.AttrType].StringValue
	if t == nil || *t != dranames.TypeMIG {
		return migSortKey{}
	}
	k := migSortKey{mig: true}
	if p := d.Attributes[dranames.AttrProfile].StringValue; p != nil {
		k.profile = *p
	}
	if s := d.Attributes[dranames.AttrStart].IntValue; s != nil {
		k.start = *s
	}
	if m, ok := d.Capacity[dranames.CapacityMemory]; ok {
		k.mem = m.Value.Value()
	}
	return k
}

// upstreamOrder runs the stock structured allocator, first fit over the
// nodes in order, committing each allocation as the scheduler's
// allocated-devices tracker does.
func upstreamOrder(slices []*resourceapi.ResourceSlice, fleet []alloc.Node, rcs []*resourceapi.ResourceClaim) (OrderSide, error) {
	side := OrderSide{Allocator: "stock " + UpstreamVersion()}
	ctx := context.Background()
	classes := classLister{}
	for _, c := range dradriver.DeviceClasses() {
		classes[c.Name] = &c
	}
	parent := map[structured.DeviceID]string{}
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			uuid := d.Attributes["parentUUID"].StringValue
			if uuid == nil {
				uuid = d.Attributes["uuid"].StringValue
			}
			if uuid != nil {
				parent[structured.MakeDeviceID(s.Spec.Driver, s.Spec.Pool.Name, d.Name)] = *uuid
			}
		}
	}
	nodes := make([]*corev1.Node, len(fleet))
	for i, n := range fleet {
		nodes[i] = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: map[string]string{"kubernetes.io/hostname": n.Name}}}
	}
	cache := cel.NewCache(10, cel.Features{})
	allocated := sets.New[structured.DeviceID]()
	state := structured.AllocatedState{AllocatedDevices: allocated, AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity: structured.NewConsumedCapacityCollection()}
	features := UpstreamFeatures
	features.ConsumableCapacity = true
	gpus := map[string]bool{}
	for _, rc := range rcs {
		a, err := structured.NewAllocator(ctx, features, state, classes, slices, cache)
		if err != nil {
			return side, err
		}
		placed := false
		for _, n := range nodes {
			res, err := a.Allocate(ctx, n, []*resourceapi.ResourceClaim{rc})
			if err != nil {
				if errors.Is(err, structured.ErrFailedAllocationOnNode) {
					continue
				}
				return side, fmt.Errorf("claim %s on %s: %w", rc.Name, n.Name, err)
			}
			if len(res) == 0 {
				continue
			}
			for _, d := range res[0].Devices.Results {
				id := structured.MakeDeviceID(d.Driver, d.Pool, d.Device)
				if d.ShareID != nil {
					// One share of a device several claims may hold.
					state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, d.ShareID))
					state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, d.ConsumedCapacity))
					gpus[parent[id]] = true
					continue
				}
				if allocated.Has(id) {
					return side, fmt.Errorf("claim %s: device %s allocated twice", rc.Name, id)
				}
				allocated.Insert(id)
				gpus[parent[id]] = true
			}
			placed = true
			break
		}
		if placed {
			side.Placed++
		} else {
			side.Unplaced++
		}
	}
	side.GPUs = len(gpus)
	return side, nil
}

// gpusliceOrder runs gpuslice's allocator on the same slices and claims
// (binpack, one tenant, as gpuslice-scheduler decides), then checks the
// state.
func gpusliceOrder(slices []resourceapi.ResourceSlice, fleet []alloc.Node, rcs []*resourceapi.ResourceClaim, cat *catalog.Catalog) (OrderSide, error) {
	side := OrderSide{Allocator: "gpuslice", Order: "-"}
	ptrs := make([]*resourceapi.ResourceSlice, len(slices))
	for i := range slices {
		ptrs[i] = &slices[i]
	}
	var nds []*draalloc.NodeDevices
	for _, n := range fleet {
		nd, err := draalloc.NodeFromSlices(n.Name, nil, ptrs, cat)
		if err != nil {
			return side, err
		}
		nds = append(nds, nd)
	}
	s, _, err := draalloc.NewState(nds, nil, draalloc.Policy("binpack"), cat)
	if err != nil {
		return side, err
	}
	gpus := map[string]bool{}
	for _, rc := range rcs {
		c, err := draalloc.ToClaim(rc, 0)
		if err != nil {
			return side, err
		}
		a, err := s.Allocate(&c)
		if err != nil {
			if nofit := (*alloc.NoFitError)(nil); errors.As(err, &nofit) {
				side.Unplaced++
				continue
			}
			return side, err
		}
		if err := s.Apply(a); err != nil {
			return side, err
		}
		for _, d := range a.Devices {
			gpus[d.GPU] = true
		}
		side.Placed++
	}
	if err := s.Check(); err != nil {
		return side, fmt.Errorf("state after the claims: %w", err)
	}
	side.GPUs = len(gpus)
	return side, nil
}
