package draalloc

import (
	"context"
	"fmt"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	dracel "k8s.io/dynamic-resource-allocation/cel"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// classType is the device type each of gpuslice's DeviceClasses selects
// (dradriver.DeviceClasses: device.driver and the type attribute).
var classType = map[string]string{dranames.ClassGPU: dranames.TypeGPU, dranames.ClassShared: dranames.TypeShared, dranames.ClassMIG: dranames.TypeMIG}

// expand is an allocationMode All alternative on node nd: as the stock
// allocator reads it, every device of the node its class and selectors
// match whose capacity can hold the request (selectors are evaluated by
// Kubernetes' DRA CEL on the devices as published), all of which must be
// allocated together or the request fails on the node. gpuslice's
// devices share counters (a whole GPU, its shared device and its MIG
// placements exclude one another), so "all" is taken literally: a
// selector that matches MIG placements that overlap fails, as it does
// on the stock scheduler, and so does any matching device already in use
// (a whole GPU, a MIG placement) — except a shared GPU, which takes one
// more share if it has room (and, here, holds only the claim's tenant).
// A node that publishes a copy of each shared GPU per tenant offers the
// claim one shared device per GPU (its tenant's copy; the stock
// allocator would also select the other tenants' copies, whose taints
// the claim does not tolerate, and fail).
//
// Each matching device becomes a request of its own, pinned to it (MIG
// placements of one profile on one GPU as one request of that count:
// selectors cannot tell placements of one profile apart), named
// <ref>#<k>; Claim.try names the results back.
func (a *alt) expand(nd *NodeDevices, tenant string) ([]alloc.Request, error) {
	typ := classType[a.class]
	var progs []dracel.CompilationResult
	for _, e := range a.selectors {
		r := dracel.GetCompiler(dracel.Features{EnableConsumableCapacity: true}).CompileCELExpression(e, dracel.Options{})
		if r.Error != nil {
			return nil, fmt.Errorf("selector %q: %s", e, r.Error.Detail)
		}
		progs = append(progs, r)
	}
	type pin struct {
		gpu     string
		index   int
		profile string
	}
	var pins []pin
	count := map[pin]int{}
	sharedSeen := map[string]bool{}
	total := 0
	for _, name := range nd.order {
		d, raw := nd.Devices[name], nd.raw[name]
		if d.Type != typ {
			continue
		}
		if d.Type == dranames.TypeShared && d.Tenant != "" && d.Tenant != tenant {
			continue // another tenant's copy
		}
		ok := true
		for i, p := range progs {
			m, _, err := p.DeviceMatches(context.Background(), dracel.Device{Driver: dranames.DriverName,
				AllowMultipleAllocations: raw.AllowMultipleAllocations, Attributes: raw.Attributes, Capacity: raw.Capacity})
			if err != nil {
				return nil, fmt.Errorf("selector %q on device %s of node %s: %w", a.selectors[i], name, nd.Node.Name, err)
			}
			if !m {
				ok = false
				break
			}
		}
		if !ok || !holds(raw, a.capacity) {
			continue
		}
		if d.Type == dranames.TypeShared {
			if sharedSeen[d.GPU] {
				continue
			}
			sharedSeen[d.GPU] = true
		}
		k := pin{gpu: d.GPU, index: d.Index, profile: d.Profile}
		if count[k] == 0 {
			pins = append(pins, k)
		}
		count[k]++
		total++
	}
	if total == 0 {
		return nil, fmt.Errorf("allocationMode All%s: no device of class %s on node %s matches", sels(a.selectors), a.class, nd.Node.Name)
	}
	if total > resourceapi.AllocationResultsMaxSize {
		return nil, fmt.Errorf("allocationMode All%s: %d devices of class %s on node %s match; an allocation holds at most %d",
			sels(a.selectors), total, a.class, nd.Node.Name, resourceapi.AllocationResultsMaxSize)
	}
	sort.SliceStable(pins, func(i, j int) bool { return pins[i].index < pins[j].index })
	var out []alloc.Request
	for k, p := range pins {
		q := a.req
		q.Name = fmt.Sprintf("%s#%d", a.ref, k)
		q.Count = count[p]
		if typ == dranames.TypeMIG {
			q.Profile, q.MemoryMiB = p.profile, 0
			q.Selector = fmt.Sprintf("device.attributes[%q].parentUUID == %q && device.attributes[%q].profile == %q", allocDriver, p.gpu, allocDriver, p.profile)
		} else {
			q.Selector = fmt.Sprintf("device.attributes[%q].type == %q && device.attributes[%q].uuid == %q", allocDriver, "gpu", allocDriver, p.gpu)
		}
		out = append(out, q)
	}
	return out, nil
}

// holds is the stock allocator's check of a request's capacity against
// a device's (its static capacity, before what is in use): every
// capacity asked for is one the device has, and no more than it has
// (within its request policy's range).
func holds(d *resourceapi.Device, req *resourceapi.CapacityRequirements) bool {
	if req == nil {
		return true
	}
	for name, q := range req.Requests {
		c, ok := d.Capacity[name]
		if !ok || q.Cmp(c.Value) > 0 {
			return false
		}
		if p := c.RequestPolicy; p != nil && p.ValidRange != nil && p.ValidRange.Max != nil && q.Cmp(*p.ValidRange.Max) > 0 {
			return false
		}
	}
	return true
}

func sels(selectors []string) string {
	if len(selectors) == 0 {
		return ""
	}
	q := make([]string, len(selectors))
	for i, s := range selectors {
		q[i] = fmt.Sprintf("%q", s)
	}
	return " (selector " + strings.Join(q, " && ") + ")"
}
