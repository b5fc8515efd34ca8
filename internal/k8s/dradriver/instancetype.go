package dradriver

import (
	"fmt"
	"maps"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// runtimeAttributes are the attributes whose values exist only once the
// node runs (a GPU's UUID): InstanceTypeSlices leaves them out.
var runtimeAttributes = []resourceapi.QualifiedName{dranames.AttrUUID, dranames.AttrParentUUID}

// InstanceTypeSlices is what gpuslice's driver will publish on a node of a
// catalog instance type, before that node exists: Slices of the instance
// type's GPUs (healthy, MIG off, every MIG placement offered), for the
// node named node (the instance type's name when ""), without the
// attributes only a running node knows (uuid, parentUUID) nor a driver
// version, and with the counters scaled so that an allocator charging a
// shared device's counters on every allocation decides as Kubernetes'
// does (scaleCounters). A node autoscaler simulates allocation on these (Karpenter's
// ResourceSliceTemplates). An unknown instance type is a
// *catalog.NotFoundError naming the valid ones.
func InstanceTypeSlices(instanceType, node string, cat *catalog.Catalog) ([]resourceapi.ResourceSlice, error) {
	if cat == nil {
		cat = catalog.Default()
	}
	it, err := cat.InstanceType(instanceType)
	if err != nil {
		return nil, err
	}
	if it.GPUCount <= 0 || it.GPU == "" {
		return nil, fmt.Errorf("instance type %s has no GPUs", it.Name)
	}
	if node == "" {
		node = nodeName(it.Name)
	}
	n := alloc.Node{Name: node, InstanceType: it.Name}
	for i := range it.GPUCount {
		n.GPUs = append(n.GPUs, alloc.GPU{Index: i, Model: it.GPU, Healthy: true})
	}
	out, err := Slices(n, 1, "", cat)
	if err != nil {
		return nil, fmt.Errorf("instance type %s: %w", it.Name, err)
	}
	model, err := cat.GPU(it.GPU)
	if err != nil {
		return nil, fmt.Errorf("instance type %s: %w", it.Name, err)
	}
	k := maxShares(model.MemoryMiB)
	sets := map[string]resourceapi.CounterSet{}
	for _, sl := range out {
		for _, cs := range sl.Spec.SharedCounters {
			sets[cs.Name] = cs
		}
	}
	for i := range out {
		out[i].Labels[dranames.InstanceTypeLabel] = it.Name
		for j := range out[i].Spec.SharedCounters {
			scaleCounters(out[i].Spec.SharedCounters[j].Counters, k)
		}
		for j := range out[i].Spec.Devices {
			d := &out[i].Spec.Devices[j]
			for _, a := range runtimeAttributes {
				delete(d.Attributes, a)
			}
			if d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations {
				// A share: one unit of each counter per allocation, and
				// one of each memory slice, so that a MIG placement
				// (which takes all of one) excludes it: charged per
				// allocation, "instances" alone cannot say that.
				use := make([]resourceapi.DeviceCounterConsumption, len(d.ConsumesCounters))
				for c, dc := range d.ConsumesCounters {
					use[c] = resourceapi.DeviceCounterConsumption{CounterSet: dc.CounterSet, Counters: maps.Clone(dc.Counters)}
					for name := range sets[dc.CounterSet].Counters {
						if strings.HasPrefix(name, "memory-slice-") {
							use[c].Counters[name] = resourceapi.Counter{Value: qty(1)}
						}
					}
				}
				d.ConsumesCounters = use
				continue
			}
			// Copies: Slices shares one consumption between the whole GPU
			// and its shared device.
			use := make([]resourceapi.DeviceCounterConsumption, len(d.ConsumesCounters))
			for c, dc := range d.ConsumesCounters {
				use[c] = resourceapi.DeviceCounterConsumption{CounterSet: dc.CounterSet, Counters: maps.Clone(dc.Counters)}
				scaleCounters(use[c].Counters, k)
			}
			d.ConsumesCounters = use
		}
	}
	return out, nil
}

// shareStepMiB is the shared device's smallest memory request and step.
const shareStepMiB = 256

// maxShares is how many shares a GPU of memMiB can hold.
func maxShares(memMiB int64) int64 { return max(memMiB/shareStepMiB, 1) }

// scaleCounters multiplies every counter by k.
//
// Why templates scale their counters: the shared device (many
// allocations, by memory) consumes the GPU's counters so that it excludes
// the whole GPU and every MIG placement. Kubernetes' allocator charges a
// multi-allocatable device's counters once, when it is first allocated
// (later allocations skip the counter check while its capacity is in
// use), but Karpenter v1.15.0's simulation charges them on every
// allocation (pkg/scheduling/dynamicresources, tryDevice), so with the
// published counters it puts one share per node: four 4 GiB shares would
// buy four nodes. In the templates every counter and every exclusive
// device's consumption is k times the published one (k the most shares a
// GPU holds) while a share consumes one unit per allocation: the whole
// GPU and MIG placements exclude each other exactly as before, any share
// still excludes both, and up to k shares fit, which the memory capacity
// bounds anyway — the same decisions under either way of charging.
func scaleCounters(cs map[string]resourceapi.Counter, k int64) {
	for name, c := range cs {
		cs[name] = resourceapi.Counter{Value: *resource.NewQuantity(c.Value.Value()*k, resource.DecimalSI)}
	}
}

// nodeName makes an instance type's name a node name (a DNS subdomain):
// Standard_NC24ads_A100_v4 → standard-nc24ads-a100-v4.
func nodeName(it string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '.', r == '-':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return '-'
	}, it)
}
