package render

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/model"
	"github.com/gpuslice/gpuslice/internal/plan"
)

// What the dra target knows of NVIDIA's DRA driver (k8s-dra-driver-gpu),
// read from its source at DRADriverVersion:
//
//   - GpuConfig and MigDeviceConfig (resource.nvidia.com/v1beta1) accept
//     sharing strategy TimeSlicing only with the feature gate
//     TimeSlicingSettings and MPS only with MPSSupport
//     (api/nvidia.com/resource/v1beta1/validate.go); both gates are alpha
//     and off by default (pkg/featuregates), and the Helm chart's default
//     values set featureGates: {}. A claim whose config names a strategy
//     the driver has not enabled is rejected ("unknown GPU sharing
//     strategy") by its admission webhook, or when the kubelet prepares it.
//   - MPSSupport cannot be enabled together with DynamicMIG.
//   - The chart installs the DeviceClasses gpu.nvidia.com, mig.nvidia.com
//     and vfio.gpu.nvidia.com itself (templates/deviceclass-*.yaml), so the
//     dra target writes them only when asked (Options.DRADeviceClasses).

// DRADriverVersion is the NVIDIA DRA driver release the dra target was
// checked against.
const DRADriverVersion = "v25.12.0"

// Options are render settings the plan does not decide.
type Options struct {
	// DRADeviceClasses makes the dra target also write the DeviceClasses
	// of its driver: NVIDIA's (gpu.nvidia.com, mig.nvidia.com, which its
	// Helm chart installs itself) or gpuslice's (what "gpuslice dra
	// classes" prints), for a cluster that lacks them (render
	// --dra-device-classes).
	DRADeviceClasses bool
	// DRADriver is the driver the dra target's claims are for: "nvidia"
	// (also when empty) or "gpuslice" (render --dra-driver).
	DRADriver string
	// Namespace is the namespace of the nvidia-device-plugin target's
	// ConfigMap (render --namespace; "" is DevicePluginNamespace, the GPU
	// operator's): kube-system for a device plugin installed by its own
	// Helm chart there, as NVIDIA's and AWS's guides do. Other targets
	// put objects in their tenants' namespaces and refuse it.
	Namespace string
}

// RenderWith is Render with options.
func RenderWith(target string, s *model.Spec, p *plan.Plan, o Options) ([]byte, error) {
	drv := nvidiaDRA
	switch o.DRADriver {
	case "", DRADriverNVIDIA:
	case DRADriverGpuslice:
		drv = gpusliceDRA
	default:
		return nil, fmt.Errorf("DRA driver %q: valid are %s", o.DRADriver, strings.Join(DRADrivers(), ", "))
	}
	if o.Namespace != "" {
		if target != "nvidia-device-plugin" {
			return nil, fmt.Errorf("namespace %q: only the nvidia-device-plugin target takes a namespace (the %s target writes each tenant's objects in the tenant's namespace)", o.Namespace, target)
		}
		if err := checkNamespace(o.Namespace); err != nil {
			return nil, err
		}
		return renderDevicePluginIn(s, p, o.Namespace)
	}
	if target == "karpenter" && drv.gpuslice {
		return renderKarpenterFor(s, p, true)
	}
	if target != "dra" {
		return Render(target, s, p)
	}
	out, err := renderDRAFor(drv, s, p)
	if err != nil || !o.DRADeviceClasses {
		return out, err
	}
	// The DeviceClasses go first, after the header comments.
	var classes []byte
	if drv.gpuslice {
		classes, err = documents(nil, gpusliceDeviceClasses(), [][]string{{"whole GPUs of gpuslice's DRA driver (also serving nvidia.com/gpu)"},
			{"shares of a GPU by memory (consumable capacity)"}, {"MIG instances (select the profile)"}})
		if err != nil {
			return nil, err
		}
	} else {
		classes, err = documents(nil, []obj{deviceClass(gpuClass, "gpu"), deviceClass(migClass, "mig")},
			[][]string{{"whole GPUs published by NVIDIA's DRA driver (its Helm chart installs this class too)"},
				{"MIG devices published by NVIDIA's DRA driver (its Helm chart installs this class too)"}})
		if err != nil {
			return nil, err
		}
	}
	at := bytes.Index(out, []byte("---\n"))
	if at < 0 {
		return append(append(out, "---\n"...), classes...), nil
	}
	var b bytes.Buffer
	b.Write(out[:at])
	b.WriteString("---\n")
	b.Write(classes)
	b.Write(out[at:])
	return b.Bytes(), nil
}

// WarningsWith is Warnings with options (the dra target's depend on the
// driver).
func WarningsWith(target string, s *model.Spec, p *plan.Plan, o Options) []string {
	if target == "dra" && o.DRADriver == DRADriverGpuslice {
		return newDRAPlan(gpusliceDRA, s, p).warnings
	}
	return Warnings(target, s, p)
}

// draHeaderNotes are the dra target's header lines about the driver.
func draHeaderNotes(p *plan.Plan) []string {
	notes := []string{"For NVIDIA's DRA driver (checked against " + DRADriverVersion + "). Its Helm chart installs the DeviceClasses",
		"gpu.nvidia.com and mig.nvidia.com; render --dra-device-classes writes them here too."}
	if gates := plan.DRAFeatureGates(p); len(gates) > 0 {
		var set []string
		for _, g := range gates {
			set = append(set, g+": true")
		}
		notes = append(notes,
			"The sharing configs below (GpuConfig / MigDeviceConfig strategy "+draStrategies(gates)+") need the driver's feature gate(s) "+strings.Join(gates, " and ")+",",
			"alpha and off by default: install the driver with featureGates: {"+strings.Join(set, ", ")+"} (Helm values),",
			"or it rejects these claims (\"unknown GPU sharing strategy\").")
		if slices.Contains(gates, "MPSSupport") {
			notes = append(notes, "MPSSupport cannot be enabled together with the driver's DynamicMIG feature gate.")
		}
	}
	return notes
}

func draStrategies(gates []string) string {
	var out []string
	for _, g := range gates {
		switch g {
		case "TimeSlicingSettings":
			out = append(out, "TimeSlicing")
		case "MPSSupport":
			out = append(out, "MPS")
		}
	}
	return strings.Join(out, ", ")
}

// draModelSelector keeps a whole-GPU request on the GPU model of the pool
// the plan put the workload on: NVIDIA's driver publishes the model as the
// attribute productName (NVML's name, e.g. "NVIDIA L4", "Tesla T4"), and
// without it a claim meant for an L4 pool may get any GPU of the cluster.
// It is "" for MIG requests (the profile selects), when the pool or its
// product names are unknown, or when the request's own selector already
// reads productName.
func draModelSelector(drv *draDriver, p *plan.Plan, wl *model.Workload, r alloc.Request, class string) string {
	if drv.gpuslice {
		return gpusliceModelSelector(p, wl, r, class)
	}
	if class != gpuClass || strings.Contains(r.Selector, "productName") || strings.Contains(r.Selector, ".model") {
		return ""
	}
	pp := poolOf(p, wl)
	if pp == nil {
		return ""
	}
	g, err := catalog.Default().GPU(pp.GPU)
	if err != nil || len(g.ProductNames) == 0 {
		return ""
	}
	attr := fmt.Sprintf("device.attributes['%s'].productName", gpuClass)
	if len(g.ProductNames) == 1 {
		return fmt.Sprintf("%s == '%s'", attr, g.ProductNames[0])
	}
	quoted := make([]string, len(g.ProductNames))
	for i, n := range g.ProductNames {
		quoted[i] = "'" + n + "'"
	}
	return fmt.Sprintf("%s in [%s]", attr, strings.Join(quoted, ", "))
}
