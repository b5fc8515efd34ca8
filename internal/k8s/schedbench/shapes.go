package schedbench

import (
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
	"github.com/gpuslice/gpuslice/internal/mig"
)

// Shape is how a node's GPUs are published as ResourceSlices.
type Shape string

// The shapes a run compares.
const (
	// Gpuslice is what gpuslice's DRA driver publishes (dradriver.SlicesFor):
	// per GPU the whole GPU, the shared GPU (or one tainted copy per tenant)
	// and the MIG placements, all consuming one counter set per GPU.
	Gpuslice Shape = "gpuslice"
	// NVIDIAShares is one device per whole GPU that many claims share by
	// memory (consumable capacity), no counters: the cheapest shape a
	// sharing driver can publish.
	NVIDIAShares Shape = "nvidia-shares"
	// NVIDIAPartitionable is the shape NVIDIA's DRA driver publishes with
	// partitionable devices on Kubernetes 1.35+, without its MIG
	// partitions: one counter slice per node holding one counter set per
	// GPU (memory, multiprocessors and one counter per memory slice), and
	// per GPU a slice with the whole GPU consuming all of its set.
	NVIDIAPartitionable Shape = "nvidia-partitionable"
	// NVIDIADynamicMIG is NVIDIAPartitionable with every MIG profile at
	// every placement beside the whole GPU, each consuming its memory
	// slices and its share of the capacity counters (NVIDIA's DynamicMIG).
	NVIDIADynamicMIG Shape = "nvidia-dynamic-mig"
)

// Shapes are the valid shapes, in report order.
var Shapes = []Shape{Gpuslice, NVIDIAShares, NVIDIAPartitionable, NVIDIADynamicMIG}

// ParseShape reads a shape name.
func ParseShape(s string) (Shape, error) {
	for _, sh := range Shapes {
		if string(sh) == s {
			return sh, nil
		}
	}
	var names []string
	for _, sh := range Shapes {
		names = append(names, string(sh))
	}
	return "", fmt.Errorf("shape %q: want one of %s", s, strings.Join(names, ", "))
}

// NVIDIADriver is the driver name the NVIDIA-shaped slices are published
// under, and NVIDIAClass the DeviceClass their claims use (whole GPUs).
const (
	NVIDIADriver = "gpu.nvidia.com"
	NVIDIAClass  = "gpu.nvidia.com"
	// NVIDIAMIGClass selects the MIG partitions of NVIDIADynamicMIG.
	NVIDIAMIGClass = "mig.nvidia.com"
)

// NVIDIAClasses are the DeviceClasses of the NVIDIA-shaped slices.
func NVIDIAClasses() []resourceapi.DeviceClass {
	class := func(name, typ string) resourceapi.DeviceClass {
		return resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: fmt.Sprintf(`device.driver == %q && device.attributes[%q].type == %q`, NVIDIADriver, NVIDIADriver, typ)}}}}}
	}
	return []resourceapi.DeviceClass{class(NVIDIAClass, "gpu"), class(NVIDIAMIGClass, "mig")}
}

// Node is one simulated node: its name and GPUs.
type Node struct {
	Name  string
	Model string
	GPUs  int
}

// allocNode is the node as gpuslice's driver sees it.
func (n Node) allocNode() alloc.Node {
	out := alloc.Node{Name: n.Name}
	for i := range n.GPUs {
		out.GPUs = append(out.GPUs, alloc.GPU{UUID: gpuUUID(n.Name, i), Index: i, Model: n.Model, Healthy: true})
	}
	return out
}

func gpuUUID(node string, i int) string {
	return fmt.Sprintf("GPU-%08x-0000-4000-8000-%012d", hash32(node), i)
}

func hash32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

// DriverVersion is the NVIDIA driver version the slices carry.
const DriverVersion = "580.65.06"

// NodeSlices is what the shape publishes for node. tenants and
// migProfiles only matter for Gpuslice: tenants nil publishes one
// untainted shared device per GPU, else one tainted copy per tenant
// (dradriver.Options.TenantIsolation); migProfiles are
// dradriver.Options.MIGProfiles.
func NodeSlices(shape Shape, n Node, tenants, migProfiles []string) ([]resourceapi.ResourceSlice, error) {
	cat := catalog.Default()
	switch shape {
	case Gpuslice:
		sl, err := dradriver.SlicesFor(n.allocNode(), 1, DriverVersion, cat,
			dradriver.Options{TenantIsolation: tenants != nil, Tenants: tenants, MIGProfiles: migProfiles})
		if err != nil {
			return nil, err
		}
		// As the driver publishes them by default (--mig-binding-conditions).
		return dradriver.WithMIGBindingConditions(sl), nil
	case NVIDIAShares, NVIDIAPartitionable, NVIDIADynamicMIG:
		return nvidiaSlices(shape, n, cat)
	}
	_, err := ParseShape(string(shape))
	return nil, err
}

// nvidiaSlices renders the NVIDIA-shaped slices: our own rendering of the
// shape (device per whole GPU named gpu-N with NVIDIA's attribute names;
// counter sets gpu-N-counter-set), not NVIDIA's code.
func nvidiaSlices(shape Shape, n Node, cat *catalog.Catalog) ([]resourceapi.ResourceSlice, error) {
	model, err := cat.GPU(n.Model)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", n.Name, err)
	}
	var geo *mig.Geometry
	if shape != NVIDIAShares {
		if model.MIG == nil {
			return nil, fmt.Errorf("node %s: shape %s needs a MIG-capable GPU, %s is not", n.Name, shape, model.ID)
		}
		if geo, err = mig.New(model); err != nil {
			return nil, err
		}
	}
	mem := qtyBin(model.MemoryMiB << 20)
	var sets []resourceapi.CounterSet
	var devSlices []resourceapi.ResourceSlice
	yes := true
	for i := range n.GPUs {
		attrs := nvidiaAttrs("gpu", gpuUUID(n.Name, i), model, i)
		dev := resourceapi.Device{Name: fmt.Sprintf("gpu-%d", i), Attributes: attrs,
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: mem}}}
		if shape == NVIDIAShares {
			step := qtyBin(256 << 20)
			dev.AllowMultipleAllocations = &yes
			dev.Capacity["memory"] = resourceapi.DeviceCapacity{Value: mem, RequestPolicy: &resourceapi.CapacityRequestPolicy{
				Default: &step, ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: &step, Max: &mem, Step: &step}}}
			devSlices = append(devSlices, resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Devices: []resourceapi.Device{dev}}})
			continue
		}
		set := fmt.Sprintf("gpu-%d-counter-set", i)
		full := map[string]resourceapi.Counter{"memory": {Value: mem}, "multiprocessors": {Value: qtyBin(int64(model.SMs))}}
		for s := range geo.Slices {
			full[fmt.Sprintf("memory-slice-%d", s)] = resourceapi.Counter{Value: qtyBin(1)}
		}
		sets = append(sets, resourceapi.CounterSet{Name: set, Counters: full})
		dev.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: set, Counters: full}}
		devs := []resourceapi.Device{dev}
		if shape == NVIDIADynamicMIG {
			sms := max(model.MIG.SMsInMIGMode, 1) / max(geo.ComputeSlices, 1)
			for _, sh := range geo.Shapes {
				for _, st := range sh.Starts {
					use := map[string]resourceapi.Counter{"memory": {Value: qtyBin(sh.MemoryMiB << 20)},
						"multiprocessors": {Value: qtyBin(int64(sh.Compute * sms))}}
					for s := st; s < st+sh.Size; s++ {
						use[fmt.Sprintf("memory-slice-%d", s)] = resourceapi.Counter{Value: qtyBin(1)}
					}
					a := nvidiaAttrs("mig", gpuUUID(n.Name, i), model, i)
					a["profile"] = resourceapi.DeviceAttribute{StringValue: ptr(sh.Name)}
					devs = append(devs, resourceapi.Device{
						Name:       fmt.Sprintf("gpu-%d-mig-%s-%d", i, strings.NewReplacer(".", "", "+", "-").Replace(sh.Name), st),
						Attributes: a,
						Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: qtyBin(sh.MemoryMiB << 20)},
							"multiprocessors": {Value: qtyBin(int64(sh.Compute * sms))}},
						ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: set, Counters: use}},
					})
				}
			}
		}
		devSlices = append(devSlices, resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Devices: devs}})
	}
	var out []resourceapi.ResourceSlice
	if len(sets) > 0 {
		out = append(out, resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{SharedCounters: sets}})
	}
	out = append(out, devSlices...)
	for i := range out {
		s := &out[i]
		s.Name = fmt.Sprintf("%s-gpu-nvidia-com-%d", n.Name, i)
		s.Spec.Driver = NVIDIADriver
		s.Spec.NodeName = ptr(n.Name)
		s.Spec.Pool = resourceapi.ResourcePool{Name: n.Name, Generation: 1, ResourceSliceCount: int64(len(out))}
	}
	return out, nil
}

// nvidiaAttrs are the attributes NVIDIA's driver gives a GPU (its names,
// our values).
func nvidiaAttrs(typ, uuid string, m *catalog.GPU, index int) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	product := m.Name
	if len(m.ProductNames) > 0 {
		product = m.ProductNames[0]
	}
	cc := m.ComputeCapability + ".0"
	return map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"type":                  {StringValue: ptr(typ)},
		"uuid":                  {StringValue: ptr(uuid)},
		"productName":           {StringValue: ptr(product)},
		"brand":                 {StringValue: ptr("Nvidia")},
		"architecture":          {StringValue: ptr(strings.Fields(m.Arch + " x")[0])},
		"cudaComputeCapability": {VersionValue: ptr(cc)},
		"driverVersion":         {VersionValue: ptr("580.65.6")},
		"cudaDriverVersion":     {VersionValue: ptr("13.0.0")},
		"pciBusID":              {StringValue: ptr(fmt.Sprintf("0000:%02x:00.0", 0x07+index*0x10))},
	}
}

func ptr[T any](v T) *T { return &v }

func qtyBin(n int64) resource.Quantity { return *resource.NewQuantity(n, resource.BinarySI) }
