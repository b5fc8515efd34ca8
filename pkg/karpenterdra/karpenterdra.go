// Package karpenterdra tells a node autoscaler which DRA devices gpuslice's
// driver (gpu.gpuslice.dev) will publish on a node of a cloud instance type
// before the node exists, so it can simulate allocating pending pods'
// ResourceClaims on nodes it might buy. It is for Karpenter cloud providers
// written in Go: Karpenter (v1.15 on) takes the devices of a future node
// from the provider, per instance type
// (cloudprovider.InstanceType.DynamicResources.ResourceSliceTemplates), and
// its DRA allocator simulates claims on them, counting shares of a GPU
// (consumable capacity) and MIG placements (partitionable devices with
// shared counters) rather than whole GPUs.
//
// The slices are what the driver publishes (the same code,
// internal/k8s/dradriver), less the attributes only a running node knows
// (uuid, parentUUID), with every counter scaled by the most shares a GPU
// holds: Karpenter v1.15.0 charges a shared device's counters on every
// allocation where Kubernetes charges them once, and with the published
// counters it would put one share per node (see dradriver's
// scaleCounters). `gpuslice dra slices --instance-type NAME` prints the
// same objects as YAML for providers not written in Go.
//
// Converting a slice to Karpenter's template: Driver, Pool.Name, each
// device's Name, Attributes, Capacity, AllowMultipleAllocations and
// ConsumesCounters carry over as they are; a slice holds either devices or
// SharedCounters, never both, as Karpenter requires of templates.
package karpenterdra

import (
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// Driver is the DRA driver name the slices are published under.
const Driver = dranames.DriverName

// InstanceTypeLabel is the label each slice carries with its instance type.
const InstanceTypeLabel = dranames.InstanceTypeLabel

// ResourceSlices returns the resource.k8s.io/v1 ResourceSlices gpuslice's
// driver will publish on a node of the named instance type (any case),
// one pool named after the instance type (lowercase). An unknown instance
// type's error lists the valid names; one without GPUs is an error too.
func ResourceSlices(instanceType string) ([]resourcev1.ResourceSlice, error) {
	out, err := dradriver.InstanceTypeSlices(instanceType, "", nil)
	for i := range out {
		out[i].APIVersion, out[i].Kind = "resource.k8s.io/v1", "ResourceSlice"
	}
	return out, err
}

// InstanceTypes lists the instance types with GPUs that ResourceSlices
// knows, in catalog order, of one cloud provider ("aws", "azure", "gcp") or of all for "".
func InstanceTypes(provider string) ([]string, error) {
	its, err := catalog.Default().InstanceTypes(provider)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, it := range its {
		if it.GPUCount > 0 && it.GPU != "" {
			out = append(out, it.Name)
		}
	}
	return out, nil
}
