package draalloc

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
	"github.com/gpuslice/gpuslice/internal/mig"
)

// Device is one device of a node's slices as the allocator sees it.
type Device struct {
	Name string
	// Type is dranames.TypeGPU, TypeShared or TypeMIG.
	Type string
	// GPU is the parent GPU's uuid, Index its index on the node.
	GPU   string
	Index int
	// Profile and Start place a MIG device.
	Profile string
	Start   int
	// Tenant is the tenant a shared GPU's copy is for ("" on others).
	Tenant string
}

// NodeDevices is one node's GPUs as published in its ResourceSlices.
type NodeDevices struct {
	Node alloc.Node
	// Devices by device name (the names in allocation results).
	Devices map[string]Device
	// raw are the devices as published, by name, and order their names
	// in the slices' order (allocationMode All matches selectors on
	// them as the stock allocator does).
	raw   map[string]*resourceapi.Device
	order []string
	// byKey finds a device name: "gpu/<uuid>", "shared/<uuid>" (or
	// "shared/<uuid>/<tenant>" for a tenant's copy),
	// "mig/<uuid>/<profile>@<start>".
	byKey map[string]string
	shape string
}

// NodeFromSlices reads the gpuslice devices of node from slices (any
// driver, any node: the others are skipped). Only the newest generation
// of the node's pool counts, as in the stock allocator. Every GPU is
// offered with MIG off and dynamic MIG on: on DRA a GPU's layout is a
// function of the devices allocated on it, so an idle GPU may become a
// whole GPU, a shared one or MIG instances (the fleet policy must allow
// mode switches; see Policy). A node without gpuslice slices has no GPUs.
func NodeFromSlices(node string, labels map[string]string, slices []*resourceapi.ResourceSlice, cat *catalog.Catalog) (*NodeDevices, error) {
	if cat == nil {
		cat = catalog.Default()
	}
	nd := &NodeDevices{Node: alloc.Node{Name: node, Labels: labels}, Devices: map[string]Device{}, byKey: map[string]string{},
		raw: map[string]*resourceapi.Device{}}
	gen := int64(-1)
	var mine []*resourceapi.ResourceSlice
	for _, s := range slices {
		if s.Spec.Driver != dranames.DriverName || s.Spec.NodeName == nil || *s.Spec.NodeName != node {
			continue
		}
		mine = append(mine, s)
		gen = max(gen, s.Spec.Pool.Generation)
	}
	gpus := map[string]*alloc.GPU{}
	known := map[string]bool{}
	for _, s := range mine {
		if s.Spec.Pool.Generation != gen {
			continue
		}
		for i := range s.Spec.Devices {
			d := &s.Spec.Devices[i]
			read, err := dradriver.ReadDevice(d)
			if err != nil {
				return nil, fmt.Errorf("ResourceSlice %s: %w", s.Name, err)
			}
			typ := read.Type
			dev := Device{Name: d.Name, Type: typ, GPU: read.GPU, Index: read.Index, Profile: read.Profile, Start: read.Start, Tenant: read.Tenant}
			model := read.Model
			if !known[model] {
				// once per model: the catalog hands out copies
				if _, err := cat.GPU(model); err != nil {
					return nil, fmt.Errorf("ResourceSlice %s device %s: attribute model: %w", s.Name, d.Name, err)
				}
				known[model] = true
			}
			g := gpus[dev.GPU]
			if g == nil {
				g = &alloc.GPU{UUID: dev.GPU, Index: dev.Index, Model: model, Healthy: true, DynamicMIG: true, Sharing: alloc.Sharing{Mode: alloc.Dynamic}}
				gpus[dev.GPU] = g
			} else if g.Model != model {
				return nil, fmt.Errorf("ResourceSlice %s device %s: GPU %s is model %s here and %s on another device", s.Name, d.Name, dev.GPU, model, g.Model)
			}
			key := deviceKey(typ, dev.GPU, dev.Profile, dev.Start)
			if t := read.Tenant; t != "" {
				// A tenant's copy of the shared GPU (dra-driver
				// --tenant-isolation): one per tenant.
				key += "/" + t
			}
			if other, dup := nd.byKey[key]; dup && other != d.Name {
				return nil, fmt.Errorf("ResourceSlice %s: devices %s and %s are the same device (%s)", s.Name, other, d.Name, key)
			}
			nd.byKey[key] = d.Name
			nd.Devices[d.Name] = dev
			if _, seen := nd.raw[d.Name]; !seen {
				nd.order = append(nd.order, d.Name)
			}
			nd.raw[d.Name] = d
		}
	}
	for _, g := range gpus {
		nd.Node.GPUs = append(nd.Node.GPUs, *g)
	}
	sort.Slice(nd.Node.GPUs, func(i, j int) bool { return nd.Node.GPUs[i].Index < nd.Node.GPUs[j].Index })
	nd.shape = shapeOf(nd)
	return nd, nil
}

// Shape is the node's devices without its names: GPUs by index with
// their models and the devices each offers (GPU uuids replaced by
// indices). Two nodes of one shape with nothing allocated give the same
// answer to any claim whose selectors read no uuid: a scheduler may
// decide for one and reuse the answer for the other.
func (nd *NodeDevices) Shape() string { return nd.shape }

func shapeOf(nd *NodeDevices) string {
	idx := map[string]string{}
	var b strings.Builder
	for _, g := range nd.Node.GPUs {
		idx[g.UUID] = strconv.Itoa(g.Index)
		fmt.Fprintf(&b, "%d:%s:%t:%t:%s;", g.Index, g.Model, g.Healthy, g.DynamicMIG, g.Sharing.Mode)
	}
	keys := make([]string, 0, len(nd.byKey))
	for k := range nd.byKey {
		typ, rest, _ := strings.Cut(k, "/")
		gpu, tail, _ := strings.Cut(rest, "/")
		if i, ok := idx[gpu]; ok {
			gpu = "#" + i
		}
		keys = append(keys, typ+"/"+gpu+"/"+tail)
	}
	sort.Strings(keys)
	b.WriteString(strings.Join(keys, ","))
	return b.String()
}

func deviceKey(typ, gpu, profile string, start int) string {
	if typ == dranames.TypeMIG {
		return fmt.Sprintf("mig/%s/%s@%d", gpu, profile, start)
	}
	return typ + "/" + gpu
}

// Policy is the fleet policy gpuslice-scheduler runs the allocator with:
// placement binpack or spread, and MIG mode switches allowed (a DRA GPU
// is switched by allocating its devices, never while in use).
func Policy(placement string) alloc.Policy {
	return alloc.Policy{Placement: placement, AllowModeSwitch: true}
}

// deviceName is the slice device an assigned device is.
//
// A share of a shared GPU is recorded on tenant's copy when the node
// publishes copies per tenant (the stock scheduler's isolation; this
// allocator enforces isolation itself, and the kubelet plugin refuses two
// tenants' copies of one GPU), else on the untainted shared device.
func (nd *NodeDevices) deviceName(a *alloc.Assigned, tenant string) (string, error) {
	typ := dranames.TypeMIG
	switch {
	case a.Profile != "":
	case a.Mode == alloc.TimeSlice || a.Mode == alloc.MPS:
		typ = dranames.TypeShared
	default:
		typ = dranames.TypeGPU
	}
	key := deviceKey(typ, a.GPU, a.Profile, a.Start)
	name, ok := nd.byKey[key]
	if typ == dranames.TypeShared {
		if copyName, found := nd.byKey[key+"/"+tenant]; found {
			name, ok = copyName, true
		}
	}
	if !ok && typ == dranames.TypeShared {
		return "", fmt.Errorf("node %s publishes no shared device for GPU %s of tenant %q (start dra-driver with --tenants or --watch-namespaces for it)", nd.Node.Name, a.GPU, tenant)
	}
	if !ok {
		return "", fmt.Errorf("node %s publishes no %s device for GPU %s%s", nd.Node.Name, typ, a.GPU, migSuffix(a))
	}
	return name, nil
}

func migSuffix(a *alloc.Assigned) string {
	if a.Profile == "" {
		return ""
	}
	return fmt.Sprintf(" profile %s at %d", a.Profile, a.Start)
}

// plannedMIG is the allocator's id of a MIG instance named by placement
// (DRA has no instance uuids before the kubelet plugin prepares it).
func plannedMIG(gpu, profile string, start int) string {
	return fmt.Sprintf("%s/%s@%d", gpu, profile, start)
}

// profileMemory is a MIG profile's memory on a model.
func profileMemory(cat *catalog.Catalog, model, profile string) (int64, error) {
	m, err := cat.GPU(model)
	if err != nil {
		return 0, err
	}
	if m.MIG == nil {
		return 0, fmt.Errorf("GPU model %s has no MIG", model)
	}
	geo, err := mig.New(m)
	if err != nil {
		return 0, err
	}
	p, err := geo.Profile(profile)
	if err != nil {
		return 0, err
	}
	return geo.Shapes[p].MemoryMiB, nil
}

func modelMemory(cat *catalog.Catalog, model string) int64 {
	m, err := cat.GPU(model)
	if err != nil {
		return 0
	}
	return m.MemoryMiB
}
