package render

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/model"
	"github.com/gpuslice/gpuslice/internal/plan"
)

// DRA objects for NVIDIA's DRA driver (driver gpu.nvidia.com), API
// resource.k8s.io/v1, opaque config resource.nvidia.com/v1beta1.
const (
	draAPI        = "resource.k8s.io/v1"
	nvidiaConfig  = "resource.nvidia.com/v1beta1"
	gpuClass      = "gpu.nvidia.com"
	migClass      = "mig.nvidia.com"
	parentUUIDKey = "gpu.nvidia.com/parentUUID"
)

func init() { register("dra", renderDRA) }

// renderDRA writes the two DeviceClasses and, per workload, a namespace
// and a ResourceClaimTemplate whose requests, selectors, constraints and
// sharing config match what the plan decided for it.
func renderDRA(s *model.Spec, p *plan.Plan) ([]byte, error) {
	// NVIDIA's driver installs its DeviceClasses; RenderWith adds them on
	// request (dra_driver.go).
	var objs []obj
	var comments [][]string
	for _, ns := range namespaces(s) {
		objs = append(objs, namespace(ns))
		comments = append(comments, nil)
	}
	for i := range s.Workloads {
		wl := &s.Workloads[i]
		o, notes := claimTemplate(wl, p)
		if shared := sharedGroups(wl, p); len(shared) > 0 {
			// Replicas that share a device share one ResourceClaim: a
			// template would give every pod its own device.
			spec := o["spec"].(obj)["spec"]
			for k, replicas := range shared {
				objs = append(objs, obj{"apiVersion": draAPI, "kind": "ResourceClaim",
					"metadata": obj{"name": dnsName(fmt.Sprintf("%s-shared-%d", wl.Name, k)), "namespace": tenantNamespace(wl.Tenant),
						"labels": o["metadata"].(obj)["labels"]},
					"spec": spec})
				comments = append(comments, append(slices.Clip(notes), fmt.Sprintf("shared by replicas %v: reference it with resourceClaimName", replicas)))
			}
			continue
		}
		objs = append(objs, o)
		comments = append(comments, notes)
	}
	return documents(append([]string{"DRA ResourceClaimTemplates rendered by gpuslice from " + strings.Join(s.Sources, ", ")}, draHeaderNotes(p)...), objs, comments)
}

func deviceClass(name, typ string) obj {
	return obj{"apiVersion": draAPI, "kind": "DeviceClass", "metadata": obj{"name": name},
		"spec": obj{"selectors": []obj{{"cel": obj{"expression": fmt.Sprintf(
			"device.driver == '%s' && device.attributes['%s'].type == '%s'", gpuClass, gpuClass, typ)}}}}}
}

func namespaces(s *model.Spec) []string {
	seen := map[string]bool{}
	var out []string
	for _, wl := range s.Workloads {
		ns := tenantNamespace(wl.Tenant)
		if !seen[ns] {
			seen[ns] = true
			out = append(out, ns)
		}
	}
	return out
}

func namespace(name string) obj {
	return obj{"apiVersion": "v1", "kind": "Namespace", "metadata": obj{"name": name,
		"labels": obj{"gpuslice.dev/tenant": name}}}
}

// claimTemplate is one workload's ResourceClaimTemplate.
func claimTemplate(wl *model.Workload, p *plan.Plan) (obj, []string) {
	modes, mixed := workloadModes(p, wl)
	notes := []string{fmt.Sprintf("workload %s (tenant %s): %d replica(s), one claim each", wl.Name, wl.Tenant, wl.Replicas)}
	if mixed {
		notes = append(notes, "replicas were planned on different mechanisms; this template follows the first replica")
	}
	var requests, configs []obj
	for _, r := range wl.Requests {
		got, placed := modes[r.Name]
		mode := r.Mode
		profile := r.Profile
		if placed {
			mode, profile = got.Mode, got.Profile
		}
		class := gpuClass
		if profile != "" || mode == alloc.MIG {
			class = migClass
		}
		exactly := obj{"deviceClassName": class, "count": max(r.Count, 1), "allocationMode": "ExactCount"}
		var sel []string
		if profile != "" {
			sel = append(sel, fmt.Sprintf("device.attributes['%s'].profile == '%s'", gpuClass, profile))
		}
		if r.Selector != "" {
			expr, err := nvidiaSelector(r.Selector, catalog.Default())
			if err != nil {
				expr = r.Selector // the reader checked it; keep it as written
			}
			if expr != r.Selector {
				notes = append(notes, fmt.Sprintf("request %s: selector %s, in the names NVIDIA's DRA driver publishes", r.Name, r.Selector))
			}
			sel = append(sel, "("+expr+")")
			if n := foreignNames(expr); n != "" {
				notes = append(notes, fmt.Sprintf("request %s: its selector reads %s, which NVIDIA's DRA driver does not publish and gpuslice cannot translate; rewrite it before applying", r.Name, n))
			}
		}
		if m := draModelSelector(p, wl, r, class); m != "" {
			sel = append(sel, m) // the planned pool's model (dra_driver.go)
		}
		if r.MemoryMiB > 0 && !placed && profile == "" {
			sel = append(sel, fmt.Sprintf("device.capacity['%s'].memory.compareTo(quantity('%s')) >= 0", gpuClass, quantityMiB(r.MemoryMiB)))
		}
		if len(sel) > 0 {
			exactly["selectors"] = []obj{{"cel": obj{"expression": strings.Join(sel, " && ")}}}
		}
		requests = append(requests, obj{"name": r.Name, "exactly": exactly})
		if cfg := sharingConfig(r, mode, got, class); cfg != nil {
			configs = append(configs, obj{"requests": []string{r.Name}, "opaque": obj{"driver": gpuClass, "parameters": cfg}})
		}
		if !placed {
			notes = append(notes, fmt.Sprintf("request %s was not placed by the plan; its template follows the spec only", r.Name))
		}
	}
	devices := obj{"requests": requests}
	if len(configs) > 0 {
		devices["config"] = configs
	}
	var cons []obj
	for _, c := range wl.Constraints {
		attr := parentUUIDKey
		if c.Match == "node" {
			notes = append(notes, "a same-node constraint has no DRA attribute: claims of one pod always land on one node")
			continue
		}
		con := obj{"matchAttribute": attr}
		if len(c.Requests) > 0 {
			con["requests"] = c.Requests
		}
		cons = append(cons, con)
	}
	if len(cons) > 0 {
		devices["constraints"] = cons
	}
	return obj{"apiVersion": draAPI, "kind": "ResourceClaimTemplate",
		"metadata": obj{"name": dnsName(wl.Name), "namespace": tenantNamespace(wl.Tenant),
			"labels": obj{"gpuslice.dev/tenant": dnsName(wl.Tenant), "gpuslice.dev/workload": dnsName(wl.Name)}},
		"spec": obj{"spec": obj{"devices": devices}}}, notes
}

// sharedGroups groups a workload's replicas by the devices the plan gave
// them, when every device is shared (time-slicing or MPS); nil otherwise.
func sharedGroups(wl *model.Workload, p *plan.Plan) [][]int {
	index := map[string]int{}
	var out [][]int
	for _, pl := range p.Placements {
		if pl.Workload != wl.Name {
			continue
		}
		var key []string
		for _, d := range pl.Devices {
			if d.Mode != alloc.TimeSlice && d.Mode != alloc.MPS {
				return nil
			}
			key = append(key, d.Device)
		}
		k := strings.Join(key, ",")
		i, ok := index[k]
		if !ok {
			i = len(out)
			index[k] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], pl.Replica)
	}
	return out
}

// sharingConfig is NVIDIA's opaque GpuConfig / MigDeviceConfig for a
// shared request, or nil for one that holds its device alone.
func sharingConfig(r alloc.Request, mode alloc.Mode, got alloc.Assigned, class string) obj {
	kind := "GpuConfig"
	if class == migClass {
		kind = "MigDeviceConfig"
	}
	switch mode {
	case alloc.TimeSlice:
		if class == migClass {
			return nil // the DRA driver time-slices whole GPUs only
		}
		return obj{"apiVersion": nvidiaConfig, "kind": kind, "sharing": obj{"strategy": "TimeSlicing",
			"timeSlicingConfig": obj{"interval": "Default"}}}
	case alloc.MPS:
		mps := obj{}
		if got.MPS != nil {
			mps["defaultActiveThreadPercentage"] = got.MPS.ActiveThreadPercent
			mps["defaultPinnedDeviceMemoryLimit"] = quantityMiB(got.MPS.PinnedMemoryMiB)
		} else if r.MemoryMiB > 0 {
			mps["defaultPinnedDeviceMemoryLimit"] = quantityMiB(r.MemoryMiB)
		}
		return obj{"apiVersion": nvidiaConfig, "kind": kind, "sharing": obj{"strategy": "MPS", "mpsConfig": mps}}
	}
	return nil
}

// nvidiaAttributes and nvidiaCapacities are the names NVIDIA's DRA driver
// publishes on its devices (k8s-dra-driver-gpu, deviceinfo.go and mig.go).
var (
	nvidiaAttributes = []string{"type", "uuid", "productName", "brand", "architecture", "cudaComputeCapability",
		"driverVersion", "cudaDriverVersion", "addressingMode", "profile", "parentUUID", "gpuModuleID"}
	nvidiaCapacities = []string{"memory", "multiprocessors", "copyEngines", "decoders", "encoders", "jpegEngines", "ofaEngines"}
)

// foreignNames lists the gpu.nvidia.com attributes and capacities a
// selector reads that NVIDIA's driver does not publish ("" when none).
func foreignNames(selector string) string {
	attrs, caps, err := alloc.SelectorNames(selector)
	if err != nil {
		return ""
	}
	var out []string
	for _, a := range attrs {
		if !slices.Contains(nvidiaAttributes, a) {
			out = append(out, "attribute "+a)
		}
	}
	for _, c := range caps {
		if !slices.Contains(nvidiaCapacities, c) {
			out = append(out, "capacity "+c)
		}
	}
	return strings.Join(out, ", ")
}
