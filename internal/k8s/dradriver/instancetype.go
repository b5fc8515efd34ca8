package dradriver

import (
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
)

// InstanceTypeLabel labels the slices InstanceTypeSlices returns with the
// instance type they are for, so a stream of several types can be split.
const InstanceTypeLabel = "gpuslice.dev/instance-type"

// runtimeAttributes are the attributes whose values exist only once the
// node runs (a GPU's UUID): InstanceTypeSlices leaves them out.
var runtimeAttributes = []resourceapi.QualifiedName{"uuid", "parentUUID"}

// InstanceTypeSlices is what gpuslice's driver will publish on a node of a
// catalog instance type, before that node exists: Slices of the instance
// type's GPUs (healthy, MIG off, every MIG placement offered), for the
// node named node (the instance type's name when ""), without the
// attributes only a running node knows (uuid, parentUUID) nor a driver
// version. A node autoscaler simulates allocation on these (Karpenter's
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
	for i := range out {
		out[i].Labels[InstanceTypeLabel] = it.Name
		for j := range out[i].Spec.Devices {
			for _, a := range runtimeAttributes {
				delete(out[i].Spec.Devices[j].Attributes, a)
			}
		}
	}
	return out, nil
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
