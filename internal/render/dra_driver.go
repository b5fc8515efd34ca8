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
	// NVIDIA's DRA driver installs itself (gpu.nvidia.com, mig.nvidia.com),
	// for a cluster that lacks them (render --dra-device-classes).
	DRADeviceClasses bool
}

// RenderWith is Render with options.
func RenderWith(target string, s *model.Spec, p *plan.Plan, o Options) ([]byte, error) {
	out, err := Render(target, s, p)
	if err != nil || target != "dra" || !o.DRADeviceClasses {
		return out, err
	}
	// The DeviceClasses go first, after the header comments.
	classes, err := documents(nil, []obj{deviceClass(gpuClass, "gpu"), deviceClass(migClass, "mig")},
		[][]string{{"whole GPUs published by NVIDIA's DRA driver (its Helm chart installs this class too)"},
			{"MIG devices published by NVIDIA's DRA driver (its Helm chart installs this class too)"}})
	if err != nil {
		return nil, err
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
func draModelSelector(p *plan.Plan, wl *model.Workload, r alloc.Request, class string) string {
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
