package render

import (
	"fmt"
	"strings"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
	"github.com/gpuslice/gpuslice/internal/model"
	"github.com/gpuslice/gpuslice/internal/plan"
)

// DRA drivers the dra target writes for (render --dra-driver).
const (
	DRADriverNVIDIA   = "nvidia"   // NVIDIA's k8s-dra-driver-gpu (gpu.nvidia.com), the default
	DRADriverGpuslice = "gpuslice" // gpuslice's own driver (gpu.gpuslice.dev, "gpuslice dra-driver")
)

// DRADrivers lists the values of Options.DRADriver.
func DRADrivers() []string { return []string{DRADriverNVIDIA, DRADriverGpuslice} }

// draDriver is what the dra target needs to know of the driver its claims
// are for: its name in CEL and opaque configs, its classes, the attribute
// every device of one GPU shares (same-GPU constraints), and how a spec's
// selector and sharing become its names and config.
type draDriver struct {
	title                           string
	domain                          string
	gpuClass, migClass, sharedClass string
	sameGPU                         string
	gpuslice                        bool
	config                          func(r alloc.Request, mode alloc.Mode, got alloc.Assigned, class string) obj
	attributes, capacities          []string // what it publishes
	selector                        func(expr string) (string, error)
}

var (
	nvidiaDRA = &draDriver{
		title: "NVIDIA's DRA driver", domain: gpuClass, gpuClass: gpuClass, migClass: migClass,
		sameGPU: parentUUIDKey, config: sharingConfig,
		attributes: nvidiaAttributes, capacities: nvidiaCapacities,
		selector: func(expr string) (string, error) { return nvidiaSelector(expr, catalog.Default()) },
	}
	// gpusliceDRA: a whole GPU held alone is gpu.gpuslice.dev; a share of
	// a whole GPU (time-sliced or MPS) is each pod's own claim on
	// shared.gpuslice.dev consuming the memory it was planned with (the
	// device allows many allocations); a MIG instance is mig.gpuslice.dev,
	// shared by one ResourceClaim when the plan shares it. Every device of
	// a GPU carries its index, so same-GPU constraints match on it.
	gpusliceDRA = &draDriver{
		title: "gpuslice's DRA driver", domain: dranames.DriverName, gpuslice: true,
		gpuClass: dranames.ClassGPU, migClass: dranames.ClassMIG, sharedClass: dranames.ClassShared,
		sameGPU: dranames.DriverName + "/" + dranames.AttrIndex, config: sliceConfig,
		attributes: dranames.Attributes(), capacities: dranames.Capacities(),
		selector: gpusliceSelector,
	}
)

// gpusliceSelector is nvidiaSelector's rewrite (model to productName,
// memoryMiB to the memory capacity: gpuslice's driver publishes both under
// the same names) in gpuslice's driver's domain.
func gpusliceSelector(expr string) (string, error) {
	out, err := nvidiaSelector(expr, catalog.Default())
	return toDomain(out, gpuClass, dranames.DriverName), err
}

// toDomain renames a driver domain quoted in a CEL expression.
func toDomain(expr, from, to string) string {
	return strings.NewReplacer("'"+from+"'", "'"+to+"'", `"`+from+`"`, `"`+to+`"`).Replace(expr)
}

// foreignNames lists the attributes and capacities of the driver's domain
// a selector reads that the driver does not publish ("" when none).
func (d *draDriver) foreignNames(selector string) string {
	attrs, caps, err := alloc.SelectorNames(toDomain(selector, d.domain, gpuClass))
	if err != nil {
		return ""
	}
	var out []string
	for _, a := range attrs {
		if !contains(d.attributes, a) {
			out = append(out, "attribute "+a)
		}
	}
	for _, c := range caps {
		if !contains(d.capacities, c) {
			out = append(out, "capacity "+c)
		}
	}
	return strings.Join(out, ", ")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// sliceConfig is the SliceConfig of a shared request, or nil for one that
// holds its device alone: mode timeslice or mps; for MPS the planned
// thread percentage and pinned-memory limit (else the request's memory);
// for time-slicing with a memory amount, memoryPolicy kill, since
// time-slicing does not limit memory and the plan promised the other
// claims on the GPU theirs.
func sliceConfig(r alloc.Request, mode alloc.Mode, got alloc.Assigned, _ string) obj {
	cfg := obj{"apiVersion": dranames.SliceAPIVersion, "kind": dranames.SliceKind}
	switch mode {
	case alloc.TimeSlice:
		cfg["mode"] = "timeslice"
		if r.MemoryMiB > 0 {
			cfg["memoryPolicy"] = "kill"
		}
	case alloc.MPS:
		cfg["mode"] = "mps"
		if got.MPS != nil {
			if got.MPS.ActiveThreadPercent > 0 {
				cfg["threadPercent"] = got.MPS.ActiveThreadPercent
			}
			if got.MPS.PinnedMemoryMiB > 0 {
				cfg["pinnedMemory"] = quantityMiB(got.MPS.PinnedMemoryMiB)
			}
		} else if r.MemoryMiB > 0 {
			cfg["pinnedMemory"] = quantityMiB(r.MemoryMiB)
		}
	default:
		return nil
	}
	return cfg
}

// gpusliceModelSelector keeps a whole-GPU or shared request on the model
// of the pool the plan put the workload on: gpuslice's driver publishes
// the catalog's id as the attribute model. "" for MIG requests, an
// unknown pool, or a request whose selector already names the model.
func gpusliceModelSelector(p *plan.Plan, wl *model.Workload, r alloc.Request, class string) string {
	if class == dranames.ClassMIG || strings.Contains(r.Selector, "productName") || strings.Contains(r.Selector, ".model") {
		return ""
	}
	pp := poolOf(p, wl)
	if pp == nil {
		return ""
	}
	g, err := catalog.Default().GPU(pp.GPU)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("device.attributes['%s'].model == '%s'", dranames.DriverName, g.ID)
}

// gpusliceDRAHeader is the dra target's header for gpuslice's driver.
func gpusliceDRAHeader(s *model.Spec) []string {
	return []string{"DRA objects rendered by gpuslice from " + strings.Join(s.Sources, ", ") + " for gpuslice's DRA driver (" + dranames.DriverName + "):",
		"per workload a ResourceClaimTemplate (whole GPUs: " + dranames.ClassGPU + "; shares of a GPU: " + dranames.ClassShared + ", each pod's",
		"claim consuming its memory; MIG: " + dranames.ClassMIG + "), a ResourceClaim per MIG device the plan shares, and",
		"Deployments whose pods use them as planned. The DeviceClasses come with the Helm chart (deploy/helm/gpuslice)",
		"or gpuslice dra classes; render --dra-device-classes writes them here too. Sharing is set by SliceConfig",
		"(" + dranames.SliceAPIVersion + "). Pods may set schedulerName: gpuslice-scheduler to have gpuslice's allocator place them."}
}

// gpusliceDeviceClasses are the driver's classes (dradriver.DeviceClasses,
// what "gpuslice dra classes" prints).
func gpusliceDeviceClasses() []obj {
	class := func(name, typ string) obj {
		return obj{"apiVersion": draAPI, "kind": "DeviceClass", "metadata": obj{"name": name},
			"spec": obj{"selectors": []obj{{"cel": obj{"expression": fmt.Sprintf(
				`device.driver == %q && device.attributes[%q].%s == %q`, dranames.DriverName, dranames.DriverName, dranames.AttrType, typ)}}}}}
	}
	gpu := class(dranames.ClassGPU, dranames.TypeGPU)
	gpu["spec"].(obj)["extendedResourceName"] = dranames.LegacyGPUResource
	return []obj{gpu, class(dranames.ClassShared, dranames.TypeShared), class(dranames.ClassMIG, dranames.TypeMIG)}
}
