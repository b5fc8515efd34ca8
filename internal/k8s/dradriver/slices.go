package dradriver

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
	"github.com/gpuslice/gpuslice/internal/mig"
)

// Limits of resource.k8s.io/v1 a slice must keep (the API server
// refuses more): devices in a slice that consumes counters, counter sets
// in a slice, counters in a set.
const (
	maxDevicesWithCounters = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures
	maxCounterSets         = resourceapi.ResourceSliceMaxCounterSets
	maxCountersPerSet      = resourceapi.ResourceSliceMaxCountersPerCounterSet
)

// Counter names of a MIG-capable GPU's counter set. Each memory slice is
// a counter of 1, so two placements that overlap cannot both be allocated;
// the other counters carry the count limits NVIDIA's placement rules add
// (compute slices, instances, instances of one profile, one +me instance).
// Together they allow exactly the layouts mig.Geometry.CanAdd allows.
const (
	counterCompute   = "compute-slices"
	counterInstances = "instances"
	counterME        = "media-extensions"
)

func counterSlice(i int) string      { return fmt.Sprintf("memory-slice-%d", i) }
func counterProfile(p string) string { return "count-" + dranames.ProfileLabel(p) }

// Slices is the ResourceSlices gpuslice publishes for one node: one slice
// of devices per GPU (a MIG-capable GPU has up to a few dozen: every
// profile at every start, the whole GPU and the shared whole GPU) and the
// counter sets of the MIG-capable GPUs in slices of their own, eight to a
// slice, as the API requires. All slices form one pool named after the
// node, at generation gen.
//
// Each GPU's devices come in this order: the whole GPU, the shared GPU
// (or the tenants' copies of it), then the MIG placements smallest
// profile first and, among placements of one profile, in
// mig.Geometry.FirstFitOrder: the stock allocator takes the first device
// that fits, so the order decides where its instances go. The whole and
// shared GPUs come first because the stock allocator evaluates the
// claim's class selector on every device it walks past, on every node it
// filters: a share or whole-GPU claim then stops at the first devices
// instead of walking 25 MIG placements per GPU (docs/scheduler-cost.md).
// Each class selects one type, so this order changes no allocation.
//
// No static order serves every arrival order: on an A100 1g,1g,1g,4g needs
// the 1g devices in slices 4-6 and 1g,1g,2g,3g needs them in 0-3, and
// first fit always takes a profile's first free device in this order.
// FirstFitOrder is the order that serves the most: on the 8-slice models
// (A100, H100, H200, B200 and their kin) the one-slice 1g at 5, 4, 6, then
// 3 down to 0, and every other profile highest start first. First fit
// over it places 68 of the 77 fitting multisets arriving small-first (as
// many as any online rule; highest start first for every profile, the
// order before, placed 66) and 371 of the 424 arrival sequences in any
// order (316 before); gpuslice's own allocator, which places by
// mig.Geometry.BestStart, 384. TestStockFirstFitKeepsRoom runs the stock
// allocator over every sequence.
//
// Slices publishes one untainted shared device per GPU (no tenant
// isolation with the stock scheduler); SlicesFor with
// Options.TenantIsolation publishes per-tenant copies instead.
func Slices(node alloc.Node, gen int64, driverVersion string, cat *catalog.Catalog) ([]resourceapi.ResourceSlice, error) {
	return SlicesFor(node, gen, driverVersion, cat, Options{})
}

// SlicesFor is Slices with the shared devices as opts say. With tenant
// isolation each GPU's slice holds its whole GPU, the tenants' copies of
// its shared GPU (tenants in name order) as far as the API's 64 devices a
// slice allow, then its MIG devices; copies beyond that
// follow in slices of their own (GPU by GPU, 64 devices to a slice), all
// in the node's one pool, so the counter sets they consume are the same.
func SlicesFor(node alloc.Node, gen int64, driverVersion string, cat *catalog.Catalog, opts Options) ([]resourceapi.ResourceSlice, error) {
	if cat == nil {
		cat = catalog.Default()
	}
	tenants, err := normTenants(opts.Tenants)
	if err != nil {
		return nil, err
	}
	var devSlices []resourceapi.ResourceSlice
	var sets []resourceapi.CounterSet
	var copies []resourceapi.Device
	for _, g := range node.GPUs {
		model, err := cat.GPU(g.Model)
		if err != nil {
			return nil, fmt.Errorf("node %s GPU %d: %w", node.Name, g.Index, err)
		}
		var geo *mig.Geometry
		if model.MIG != nil {
			if geo, err = mig.New(model); err != nil {
				return nil, fmt.Errorf("node %s GPU %d: %w", node.Name, g.Index, err)
			}
		}
		devs, set := gpuDevices(g, model, geo, driverVersion, opts.MIGProfiles)
		if opts.TenantIsolation {
			i := slices.IndexFunc(devs, func(d resourceapi.Device) bool {
				return *d.Attributes[dranames.AttrType].StringValue == dranames.TypeShared
			})
			mine := tenantCopies(devs[i], g.Index, tenants)
			devs = slices.Delete(devs, i, i+1)
			// As many copies as the GPU's slice has room for go first in
			// it, the rest in slices of their own.
			room := min(max(maxDevicesWithCounters-len(devs), 0), len(mine))
			devs = slices.Insert(devs, i, mine[:room]...)
			copies = append(copies, mine[room:]...)
		}
		if len(devs) > maxDevicesWithCounters {
			return nil, fmt.Errorf("node %s GPU %d: %d devices, a slice holds at most %d", node.Name, g.Index, len(devs), maxDevicesWithCounters)
		}
		if set != nil {
			if len(set.Counters) > maxCountersPerSet {
				return nil, fmt.Errorf("node %s GPU %d: %d counters, a counter set holds at most %d", node.Name, g.Index, len(set.Counters), maxCountersPerSet)
			}
			sets = append(sets, *set)
		}
		devSlices = append(devSlices, resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Devices: devs}})
	}
	var out []resourceapi.ResourceSlice
	for i := 0; i < len(sets); i += maxCounterSets {
		out = append(out, resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{SharedCounters: sets[i:min(i+maxCounterSets, len(sets))]}})
	}
	out = append(out, devSlices...)
	for i := 0; i < len(copies); i += maxDevicesWithCounters {
		out = append(out, resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Devices: copies[i:min(i+maxDevicesWithCounters, len(copies))]}})
	}
	for i := range out {
		s := &out[i]
		s.ObjectMeta = metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s-%d", node.Name, strings.ReplaceAll(dranames.DriverName, ".", "-"), i),
			Labels: map[string]string{dranames.NodeLabel: node.Name}}
		s.Spec.Driver = dranames.DriverName
		name := node.Name
		s.Spec.NodeName = &name
		s.Spec.Pool = resourceapi.ResourcePool{Name: node.Name, Generation: gen, ResourceSliceCount: int64(len(out))}
	}
	return out, nil
}

// gpuDevices is one GPU's devices and, when it has MIG, its counter set.
//
// profiles, when not nil, are the MIG profiles published (others are
// left out, and so are their counters where no published profile needs
// them).
func gpuDevices(g alloc.GPU, model *catalog.GPU, geo *mig.Geometry, driverVersion string, profiles []string) ([]resourceapi.Device, *resourceapi.CounterSet) {
	base := dranames.DeviceName{Type: dranames.TypeGPU, Index: g.Index}.String()
	common := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		dranames.AttrIndex:        intAttr(int64(g.Index)),
		dranames.AttrProductName:  strAttr(productName(model)),
		dranames.AttrArchitecture: strAttr(model.Arch),
		dranames.AttrModel:        strAttr(model.ID),
	}
	if v, ok := semver(model.ComputeCapability); ok {
		common[dranames.AttrCUDAComputeCapability] = resourceapi.DeviceAttribute{VersionValue: &v}
	}
	if v, ok := semver(driverVersion); ok {
		common[dranames.AttrDriverVersion] = resourceapi.DeviceAttribute{VersionValue: &v}
	}
	attrs := func(typ string, extra map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
		m := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{dranames.AttrType: strAttr(typ)}
		for k, v := range common {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	mem := mib(model.MemoryMiB)
	whole := resourceapi.Device{Name: base, Attributes: attrs(dranames.TypeGPU, map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{dranames.AttrUUID: strAttr(g.UUID)}),
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{dranames.CapacityMemory: {Value: mem}}}
	yes := true
	step, minShare, def := mib(shareStepMiB), mib(shareStepMiB), mib(model.MemoryMiB/16)
	def = roundUp(def, 256)
	shared := resourceapi.Device{Name: dranames.DeviceName{Type: dranames.TypeShared, Index: g.Index}.String(), AllowMultipleAllocations: &yes,
		Attributes: attrs(dranames.TypeShared, map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{dranames.AttrUUID: strAttr(g.UUID)}),
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			// A claim asks for memory (default 1/16 of the GPU, as in serve)
			// and compute in percent of the GPU (default 0: best effort).
			dranames.CapacityMemory: {Value: mem, RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: &def,
				ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: &minShare, Max: &mem, Step: &step}}},
			dranames.CapacityCompute: {Value: resource.MustParse("100"), RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: ptrQ(resource.MustParse("0")),
				ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptrQ(resource.MustParse("0")), Max: ptrQ(resource.MustParse("100"))}}},
		}}
	if geo == nil {
		// Without MIG the whole GPU is either one exclusive claim's or
		// shared: a counter of 1 makes the two exclusive of each other.
		set := &resourceapi.CounterSet{Name: base, Counters: map[string]resourceapi.Counter{"gpu": {Value: resource.MustParse("1")}}}
		use := []resourceapi.DeviceCounterConsumption{{CounterSet: base, Counters: map[string]resourceapi.Counter{"gpu": {Value: resource.MustParse("1")}}}}
		whole.ConsumesCounters, shared.ConsumesCounters = use, use
		return []resourceapi.Device{shared, whole}, set
	}
	var publish []bool
	if profiles != nil {
		publish = make([]bool, len(geo.Shapes))
		for i := range geo.Shapes {
			publish[i] = slices.Contains(profiles, geo.Shapes[i].Name)
		}
	}
	plan := placementCounters(geo, publish)
	counters := func(m map[string]int) map[string]resourceapi.Counter {
		out := make(map[string]resourceapi.Counter, len(m))
		for k, v := range m {
			out[k] = resourceapi.Counter{Value: qty(v)}
		}
		return out
	}
	set := &resourceapi.CounterSet{Name: base, Counters: counters(plan.set)}
	// The whole GPU (MIG off) takes every instance, so nothing else on
	// the GPU can be allocated beside it; so does the shared GPU.
	whole.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: base, Counters: counters(plan.whole)}}
	shared.ConsumesCounters = whole.ConsumesCounters
	type placed struct {
		shape *mig.Shape
		start int
		rank  int // the start's place in the profile's first-fit order
		use   map[string]int
	}
	var ps []placed
	for i := range geo.Shapes {
		if publish != nil && !publish[i] {
			continue
		}
		for r, st := range geo.FirstFitOrder(i) {
			j := slices.Index(geo.Shapes[i].Starts, st)
			ps = append(ps, placed{&geo.Shapes[i], st, r, plan.mig[i][j]})
		}
	}
	sort.SliceStable(ps, func(i, j int) bool {
		a, b := ps[i], ps[j]
		if a.shape.Size != b.shape.Size {
			return a.shape.Size < b.shape.Size
		}
		if a.shape.Compute != b.shape.Compute {
			return a.shape.Compute < b.shape.Compute
		}
		if a.shape.ME != b.shape.ME {
			return !a.shape.ME
		}
		return a.rank < b.rank
	})
	var devs []resourceapi.Device
	for _, p := range ps {
		use := counters(p.use)
		devs = append(devs, resourceapi.Device{
			Name: dranames.DeviceName{Type: dranames.TypeMIG, Index: g.Index, Profile: p.shape.Name, Start: p.start}.String(),
			Attributes: attrs(dranames.TypeMIG, map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				dranames.AttrProfile:    strAttr(p.shape.Name),
				dranames.AttrStart:      intAttr(int64(p.start)),
				dranames.AttrParentUUID: strAttr(g.UUID),
			}),
			Capacity:         map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{dranames.CapacityMemory: {Value: mib(p.shape.MemoryMiB)}},
			ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: base, Counters: use}},
		})
	}
	return append([]resourceapi.Device{whole, shared}, devs...), set
}

func productName(m *catalog.GPU) string {
	if len(m.ProductNames) > 0 {
		return m.ProductNames[0]
	}
	return m.Name
}

// semver turns "8.0" or "580.65.06" into a semantic version the API
// accepts ("8.0.0", "580.65.6"): three numbers without leading zeros.
func semver(v string) (string, bool) {
	if v == "" {
		return "", false
	}
	parts := strings.Split(strings.SplitN(v, "-", 2)[0], ".")
	for len(parts) < 3 {
		parts = append(parts, "0")
	}
	for i, p := range parts[:3] {
		n := 0
		if _, err := fmt.Sscanf(p, "%d", &n); err != nil || n < 0 {
			return "", false
		}
		parts[i] = fmt.Sprint(n)
	}
	return strings.Join(parts[:3], "."), true
}

func strAttr(s string) resourceapi.DeviceAttribute {
	return resourceapi.DeviceAttribute{StringValue: &s}
}
func intAttr(n int64) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{IntValue: &n} }
func qty(n int) resource.Quantity                 { return *resource.NewQuantity(int64(n), resource.DecimalSI) }
func mib(n int64) resource.Quantity               { return *resource.NewQuantity(n<<20, resource.BinarySI) }
func ptrQ(q resource.Quantity) *resource.Quantity { return &q }

func roundUp(q resource.Quantity, stepMiB int64) resource.Quantity {
	m := q.Value() >> 20
	return mib((m + stepMiB - 1) / stepMiB * stepMiB)
}
