package draalloc

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
)

// Annotations a ResourceClaim may carry to reach allocator settings DRA
// has no field for.
const (
	// AnnotationIsolation is none, tenant (the default) or hardware.
	AnnotationIsolation = "gpuslice.dev/isolation"
	// AnnotationSharing is how a shared.gpuslice.dev device is shared:
	// timeslice (the default) or mps.
	AnnotationSharing = "gpuslice.dev/sharing"
)

// StepMiB is the granularity of the shared device's memory request
// policy (dradriver): requests are rounded up to it, as the stock
// allocator does, so what is consumed is exactly what is promised.
const StepMiB = 256

// allocDriver is the driver name the allocator's selectors read
// (alloc's selector model names NVIDIA's driver).
const allocDriver = "gpu.nvidia.com"

// knownAttributes are the attributes both dradriver publishes and the
// allocator's selectors can read; a request selector naming another
// gpuslice attribute is refused rather than silently never matching.
var knownAttributes = []string{"type", "uuid", "parentUUID", "model", "productName", "architecture", "index", "profile"}

// IsOurs reports whether a claim names any of gpuslice's DeviceClasses.
func IsOurs(rc *resourceapi.ResourceClaim) bool {
	for _, r := range rc.Spec.Devices.Requests {
		if r.Exactly != nil && ourClass(r.Exactly.DeviceClassName) {
			return true
		}
		for _, s := range r.FirstAvailable {
			if ourClass(s.DeviceClassName) {
				return true
			}
		}
	}
	return false
}

func ourClass(name string) bool {
	return name == dradriver.ClassGPU || name == dradriver.ClassShared || name == dradriver.ClassMIG
}

// ClaimName is the allocator's name of a ResourceClaim: namespace/name.
func ClaimName(rc *resourceapi.ResourceClaim) string { return rc.Namespace + "/" + rc.Name }

// ToClaim translates a ResourceClaim whose requests name gpuslice's
// DeviceClasses into the allocator's claim: tenant = namespace, the
// given priority (the pod's), isolation from AnnotationIsolation; per
// request: gpu.gpuslice.dev → an exclusive whole GPU, shared.gpuslice.dev
// → a time-sliced (or MPS) share with the requested memory (rounded up to
// StepMiB; none: the allocator's equal share, 1/16 of the GPU) and
// compute, mig.gpuslice.dev → a MIG instance (a capacity request on
// memory picks the smallest profile that holds it). Request selectors
// are kept, read through the allocator's selector model. All devices of
// a claim are on one node (a DRA allocation has one node selector).
//
// What DRA can say and this cannot yet is an error naming the field:
// prioritized lists (firstAvailable), allocationMode All, admin access,
// gpuslice classes mixed with others. Constraints (matchAttribute,
// distinctAttribute) on gpuslice's attributes are kept across the
// requests they name (all when empty).
func ToClaim(rc *resourceapi.ResourceClaim, priority int) (alloc.Claim, error) {
	c := alloc.Claim{Name: ClaimName(rc), Tenant: rc.Namespace, Priority: priority}
	field := func(i int, rest string) string { return fmt.Sprintf("spec.devices.requests[%d]%s", i, rest) }
	switch iso := alloc.Isolation(rc.Annotations[AnnotationIsolation]); iso {
	case "", alloc.IsolationTenant, alloc.IsolationNone, alloc.IsolationHardware:
		c.Isolation = iso
	default:
		return c, fmt.Errorf("ResourceClaim %s: annotation %s %q: want none, tenant or hardware", c.Name, AnnotationIsolation, iso)
	}
	share := alloc.TimeSlice
	switch m := rc.Annotations[AnnotationSharing]; m {
	case "", "timeslice":
	case "mps":
		share = alloc.MPS
	default:
		return c, fmt.Errorf("ResourceClaim %s: annotation %s %q: want timeslice or mps", c.Name, AnnotationSharing, m)
	}
	var names []string
	for i, r := range rc.Spec.Devices.Requests {
		if len(r.FirstAvailable) > 0 {
			return c, fmt.Errorf("ResourceClaim %s: %s: prioritized lists are not supported by gpuslice-scheduler yet; use exactly", c.Name, field(i, ".firstAvailable"))
		}
		e := r.Exactly
		if e == nil {
			return c, fmt.Errorf("ResourceClaim %s: %s: neither exactly nor firstAvailable", c.Name, field(i, ""))
		}
		if !ourClass(e.DeviceClassName) {
			return c, fmt.Errorf("ResourceClaim %s: %s %q: a claim with gpuslice devices may only name %s, %s or %s",
				c.Name, field(i, ".exactly.deviceClassName"), e.DeviceClassName, dradriver.ClassGPU, dradriver.ClassShared, dradriver.ClassMIG)
		}
		if e.AllocationMode == resourceapi.DeviceAllocationModeAll {
			return c, fmt.Errorf("ResourceClaim %s: %s: allocationMode All is not supported by gpuslice-scheduler; ask for a count", c.Name, field(i, ".exactly.allocationMode"))
		}
		if e.AdminAccess != nil && *e.AdminAccess {
			return c, fmt.Errorf("ResourceClaim %s: %s: admin access is not supported by gpuslice-scheduler", c.Name, field(i, ".exactly.adminAccess"))
		}
		req := alloc.Request{Name: r.Name, Count: int(max(e.Count, 1))}
		var sels []string
		switch e.DeviceClassName {
		case dradriver.ClassGPU:
			req.Mode = alloc.Exclusive
			sels = append(sels, fmt.Sprintf("device.attributes[%q].type == %q", allocDriver, "gpu"))
		case dradriver.ClassShared:
			req.Mode = share
			sels = append(sels, fmt.Sprintf("device.attributes[%q].type == %q", allocDriver, "gpu"))
		case dradriver.ClassMIG:
			req.Mode = alloc.MIG
		}
		if e.Capacity != nil {
			for name, q := range e.Capacity.Requests {
				switch name {
				case "memory":
					mib := (q.Value() + 1<<20 - 1) >> 20
					if e.DeviceClassName == dradriver.ClassShared {
						mib = (mib + StepMiB - 1) / StepMiB * StepMiB
					}
					req.MemoryMiB = mib
				case "compute":
					if e.DeviceClassName != dradriver.ClassShared {
						return c, fmt.Errorf("ResourceClaim %s: %s: compute is requested from %s devices only", c.Name, field(i, ".exactly.capacity.requests.compute"), dradriver.ClassShared)
					}
					req.ComputePercent = int(q.Value())
				default:
					return c, fmt.Errorf("ResourceClaim %s: %s: capacity %q; gpuslice devices have memory and (shared) compute", c.Name, field(i, ".exactly.capacity.requests"), name)
				}
			}
		}
		for j, s := range e.Selectors {
			if s.CEL == nil {
				continue
			}
			expr, err := selector(s.CEL.Expression)
			if err != nil {
				return c, fmt.Errorf("ResourceClaim %s: %s: %w", c.Name, field(i, fmt.Sprintf(".exactly.selectors[%d].cel.expression", j)), err)
			}
			sels = append(sels, "("+expr+")")
		}
		req.Selector = strings.Join(sels, " && ")
		c.Requests = append(c.Requests, req)
		names = append(names, r.Name)
	}
	if len(c.Requests) == 0 {
		return c, fmt.Errorf("ResourceClaim %s: spec.devices.requests is empty", c.Name)
	}
	c.Constraints = []alloc.Constraint{{Match: "node"}}
	for i, con := range rc.Spec.Devices.Constraints {
		for _, r := range con.Requests {
			if !slices.Contains(names, r) {
				return c, fmt.Errorf("ResourceClaim %s: spec.devices.constraints[%d].requests: no request %q", c.Name, i, r)
			}
		}
		var full, fld string
		match := alloc.MatchAttribute
		switch {
		case con.MatchAttribute != nil:
			full, fld = string(*con.MatchAttribute), "matchAttribute"
		case con.DistinctAttribute != nil:
			full, fld, match = string(*con.DistinctAttribute), "distinctAttribute", alloc.MatchDistinct
		default:
			return c, fmt.Errorf("ResourceClaim %s: spec.devices.constraints[%d]: neither matchAttribute nor distinctAttribute; gpuslice-scheduler supports those two", c.Name, i)
		}
		// As Kubernetes looks attributes up: domain/name, where the
		// driver's own attributes are published under its domain.
		domain, name, ok := strings.Cut(full, "/")
		if !ok || domain != dradriver.DriverName || !slices.Contains(knownAttributes, name) {
			return c, fmt.Errorf("ResourceClaim %s: spec.devices.constraints[%d].%s %q: gpuslice devices have %s/<name> for name in %s",
				c.Name, i, fld, full, dradriver.DriverName, strings.Join(knownAttributes, ", "))
		}
		if match == alloc.MatchAttribute && name == "parentUUID" {
			// one physical GPU: the allocator's fast path
			c.Constraints = append(c.Constraints, alloc.Constraint{Requests: con.Requests, Match: "gpu"})
			continue
		}
		c.Constraints = append(c.Constraints, alloc.Constraint{Requests: con.Requests, Match: match, Attribute: name})
	}
	if err := alloc.ValidateClaim(&c); err != nil {
		return c, fmt.Errorf("ResourceClaim %s: %w", c.Name, err)
	}
	return c, nil
}

// selector rewrites a DRA selector over gpuslice's devices into the
// allocator's model: the driver name in attribute and capacity keys (and
// device.driver comparisons) becomes the one the allocator's model uses.
// Attributes the allocator cannot read are refused.
func selector(expr string) (string, error) {
	if r, ok := selectors.Load(expr); ok {
		t := r.(translated)
		return t.out, t.err
	}
	out, err := translate(expr)
	if selectorCount.Load() < maxSelectors {
		if _, loaded := selectors.LoadOrStore(expr, translated{out, err}); !loaded {
			selectorCount.Add(1)
		}
	}
	return out, err
}

// selectors are the translations made (a scheduler translates a claim
// in every cycle of its pod, and most claims share a few selectors);
// bounded: past maxSelectors new ones are translated and not kept.
var (
	selectors     sync.Map // expr -> translated
	selectorCount atomic.Int64
)

const maxSelectors = 4096

type translated struct {
	out string
	err error
}

func translate(expr string) (string, error) {
	if err := compileDRA(expr); err != nil {
		return "", err
	}
	out := expr
	for _, q := range []string{`"`, `'`} {
		out = strings.ReplaceAll(out, q+dradriver.DriverName+q, q+allocDriver+q)
	}
	attrs, caps, err := alloc.SelectorNames(out)
	if err != nil {
		return "", asWritten(err, out, expr)
	}
	for _, a := range attrs {
		if !slices.Contains(knownAttributes, a) {
			return "", fmt.Errorf("attribute %q is not one gpuslice-scheduler can select on; use %s", a, strings.Join(knownAttributes, ", "))
		}
	}
	for _, c := range caps {
		if c != "memory" {
			return "", fmt.Errorf("capacity %q is not one gpuslice-scheduler can select on; use memory", c)
		}
	}
	if _, err := alloc.CompileSelector(out); err != nil {
		return "", asWritten(err, out, expr)
	}
	return out, nil
}
