package draalloc

import (
	"crypto/sha1" //nolint:gosec // a name, not a secret: share ids only need to be unique per claim and device
	"fmt"
	"slices"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// ToResult is the status.allocation that records a on node nd for the
// claim rc: one device result per assigned device, naming the slice
// device (a share of a shared GPU with its consumed memory and compute
// and a share id), the configuration of the claim's classes and of the
// claim itself for the requests it applies to, and a node selector for
// nd's node. classes are the DeviceClasses by name (a class not there
// has no configuration).
func ToResult(a *alloc.Allocation, nd *NodeDevices, rc *resourceapi.ResourceClaim, classes map[string]*resourceapi.DeviceClass) (*resourceapi.AllocationResult, error) {
	out := &resourceapi.AllocationResult{NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{nd.Node.Name}}}}}}}
	for k := range a.Devices {
		d := &a.Devices[k]
		if d.Node != nd.Node.Name {
			return nil, fmt.Errorf("claim %s: device %s is on node %s, not %s", a.Claim, d.Device, d.Node, nd.Node.Name)
		}
		name, err := nd.deviceName(d, a.Tenant)
		if err != nil {
			return nil, fmt.Errorf("claim %s: %w", a.Claim, err)
		}
		r := resourceapi.DeviceRequestAllocationResult{Request: d.Request, Driver: dranames.DriverName, Pool: nd.Node.Name, Device: name}
		if nd.Devices[name].Type == dranames.TypeShared {
			id := shareID(rc.UID, d.Request, k)
			r.ShareID = &id
			r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{
				dranames.CapacityMemory:  *resource.NewQuantity(d.MemoryMiB<<20, resource.BinarySI),
				dranames.CapacityCompute: *resource.NewQuantity(int64(d.ComputePercent), resource.DecimalSI),
			}
		}
		out.Devices.Results = append(out.Devices.Results, r)
	}
	out.Devices.Config = resultConfig(rc, out.Devices.Results, classes)
	return out, nil
}

// resultConfig is the configuration of an allocation as the stock
// allocator records it: the configs of each request's class (for a
// prioritized list, the chosen subrequest's class) once per class,
// naming the requests (or chosen subrequests) of that class, then the
// claim's configs that apply (to every request, or naming an allocated
// request or chosen subrequest); a config naming every request names
// none (empty means all).
func resultConfig(rc *resourceapi.ResourceClaim, results []resourceapi.DeviceRequestAllocationResult, classes map[string]*resourceapi.DeviceClass) []resourceapi.DeviceAllocationConfiguration {
	got := map[string]bool{}
	for _, r := range results {
		got[r.Request] = true
	}
	// chosen is each allocated request's name and class: the request
	// itself, or its subrequest that was allocated.
	type pick struct{ parent, ref, class string }
	var chosen []pick
	for _, r := range rc.Spec.Devices.Requests {
		if r.Exactly != nil && got[r.Name] {
			chosen = append(chosen, pick{r.Name, r.Name, r.Exactly.DeviceClassName})
		}
		for _, s := range r.FirstAvailable {
			if ref := r.Name + "/" + s.Name; got[ref] {
				chosen = append(chosen, pick{r.Name, ref, s.DeviceClassName})
			}
		}
	}
	var out []resourceapi.DeviceAllocationConfiguration
	byClass := map[string][2]int{}
	for _, p := range chosen {
		dc := classes[p.class]
		if dc == nil {
			continue
		}
		if rg, ok := byClass[p.class]; ok {
			for i := rg[0]; i < rg[1]; i++ {
				out[i].Requests = append(out[i].Requests, p.ref)
			}
			continue
		}
		start := len(out)
		for _, cfg := range dc.Spec.Config {
			out = append(out, resourceapi.DeviceAllocationConfiguration{
				Source: resourceapi.AllocationConfigSourceClass, Requests: []string{p.ref}, DeviceConfiguration: cfg.DeviceConfiguration})
		}
		byClass[p.class] = [2]int{start, len(out)}
	}
	for _, cfg := range rc.Spec.Devices.Config {
		applies := len(cfg.Requests) == 0
		for _, p := range chosen {
			applies = applies || slices.Contains(cfg.Requests, p.parent) || slices.Contains(cfg.Requests, p.ref)
		}
		if applies {
			out = append(out, resourceapi.DeviceAllocationConfiguration{
				Source: resourceapi.AllocationConfigSourceClaim, Requests: cfg.Requests, DeviceConfiguration: cfg.DeviceConfiguration})
		}
	}
	for i := range out {
		if len(out[i].Requests) == 0 {
			continue
		}
		all := len(chosen) == len(rc.Spec.Devices.Requests)
		for _, p := range chosen {
			all = all && (slices.Contains(out[i].Requests, p.parent) || slices.Contains(out[i].Requests, p.ref))
		}
		if all {
			out[i].Requests = nil
		}
	}
	return out
}

// shareID is a UUID-shaped id unique per claim, request and device.
func shareID(claim types.UID, request string, k int) types.UID {
	h := sha1.Sum([]byte(string(claim) + "/" + request + "/" + strconv.Itoa(k))) //nolint:gosec // see import
	h[6] = h[6]&0x0f | 0x50                                                      // version 5
	h[8] = h[8]&0x3f | 0x80                                                      // RFC 4122 variant
	return types.UID(fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16]))
}

// FromResult reads the gpuslice devices of an allocation back as the
// allocator's allocation of claim name (tenant, isolation and sharing
// from the claim): nd must be the node the allocation is on. Results of
// other drivers are skipped; ok is false when none is gpuslice's. Slots
// on shared devices are left 0; Slots numbers them.
func FromResult(rc *resourceapi.ResourceClaim, res *resourceapi.AllocationResult, nd *NodeDevices, cat *catalog.Catalog) (a *alloc.Allocation, ok bool, err error) {
	if cat == nil {
		cat = catalog.Default()
	}
	iso := alloc.Isolation(rc.Annotations[AnnotationIsolation])
	if iso == "" {
		iso = alloc.IsolationTenant
	}
	share := alloc.TimeSlice
	if rc.Annotations[AnnotationSharing] == "mps" {
		share = alloc.MPS
	}
	a = &alloc.Allocation{Claim: ClaimName(rc), Tenant: rc.Namespace, Isolation: iso}
	models := map[string]string{}
	for _, g := range nd.Node.GPUs {
		models[g.UUID] = g.Model
	}
	for _, r := range res.Devices.Results {
		if r.Driver != dranames.DriverName {
			continue
		}
		if r.Pool != nd.Node.Name {
			return nil, false, fmt.Errorf("claim %s: device %s is in pool %s, not node %s", a.Claim, r.Device, r.Pool, nd.Node.Name)
		}
		dev, found := nd.Devices[r.Device]
		if !found {
			return nil, false, fmt.Errorf("claim %s: node %s publishes no device %s", a.Claim, nd.Node.Name, r.Device)
		}
		as := alloc.Assigned{Request: r.Request, Node: nd.Node.Name, GPU: dev.GPU, Device: dev.GPU}
		switch dev.Type {
		case dranames.TypeGPU:
			as.Mode, as.MemoryMiB, as.ComputePercent = alloc.Exclusive, modelMemory(cat, models[dev.GPU]), 100
		case dranames.TypeShared:
			as.Mode = share
			if q, ok := r.ConsumedCapacity[dranames.CapacityMemory]; ok {
				as.MemoryMiB = q.Value() >> 20
			}
			if q, ok := r.ConsumedCapacity[dranames.CapacityCompute]; ok {
				as.ComputePercent = int(q.Value())
			}
		case dranames.TypeMIG:
			mem, err := profileMemory(cat, models[dev.GPU], dev.Profile)
			if err != nil {
				return nil, false, fmt.Errorf("claim %s device %s: %w", a.Claim, r.Device, err)
			}
			as.Mode, as.Profile, as.Start, as.MemoryMiB = alloc.MIG, dev.Profile, dev.Start, mem
			as.Device = plannedMIG(dev.GPU, dev.Profile, dev.Start)
		}
		a.Devices = append(a.Devices, as)
	}
	return a, len(a.Devices) > 0, nil
}

// Slots numbers the claims on each shared device 0, 1, … in claim-name
// order, so that allocations read back from the API server can be
// restored into one State (each claim on a shared device holds a slot).
func Slots(as []*alloc.Allocation) {
	sort.Slice(as, func(i, j int) bool { return as[i].Claim < as[j].Claim })
	next := map[string]int{}
	for _, a := range as {
		for k := range a.Devices {
			d := &a.Devices[k]
			if d.Mode == alloc.TimeSlice || d.Mode == alloc.MPS {
				d.Slot = next[d.Device]
				next[d.Device]++
			}
		}
	}
}
