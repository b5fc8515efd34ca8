package draalloc

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
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
var knownAttributes = []string{dranames.AttrType, dranames.AttrUUID, dranames.AttrParentUUID, dranames.AttrModel,
	dranames.AttrProductName, dranames.AttrArchitecture, dranames.AttrIndex, dranames.AttrProfile}

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
	return name == dranames.ClassGPU || name == dranames.ClassShared || name == dranames.ClassMIG
}

// ClaimName is the allocator's name of a ResourceClaim: namespace/name.
func ClaimName(rc *resourceapi.ResourceClaim) string { return rc.Namespace + "/" + rc.Name }

// ToClaim is Translate for a claim without prioritized lists and
// allocationMode All: the allocator's claim, the same on every node.
// Such a claim needs a node to be decided (Claim.Allocate); ToClaim
// refuses it naming the field.
func ToClaim(rc *resourceapi.ResourceClaim, priority int) (alloc.Claim, error) {
	c, err := Translate(rc, priority)
	if err != nil {
		return alloc.Claim{}, err
	}
	for _, r := range c.reqs {
		a := r.alts[0]
		if len(r.alts) > 1 || a.sub != "" {
			return alloc.Claim{}, fmt.Errorf("ResourceClaim %s: %s.firstAvailable: a prioritized list is decided per node; use Translate and Claim.Allocate", c.Name, a.parentField)
		}
		if a.all {
			return alloc.Claim{}, fmt.Errorf("ResourceClaim %s: %s.allocationMode: All is decided per node; use Translate and Claim.Allocate", c.Name, a.field)
		}
	}
	return c.flatten(make([]int, len(c.reqs)), nil)
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
		out = strings.ReplaceAll(out, q+dranames.DriverName+q, q+allocDriver+q)
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
		if c != dranames.CapacityMemory {
			return "", fmt.Errorf("capacity %q is not one gpuslice-scheduler can select on; use %s", c, dranames.CapacityMemory)
		}
	}
	if _, err := alloc.CompileSelector(out); err != nil {
		return "", asWritten(err, out, expr)
	}
	return out, nil
}
