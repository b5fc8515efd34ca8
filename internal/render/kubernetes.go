package render

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/model"
	"github.com/gpuslice/gpuslice/internal/plan"
)

// GPU node taint and the labels that tie workloads to pools.
const (
	gpuTaint          = "nvidia.com/gpu"
	instanceTypeLabel = "node.kubernetes.io/instance-type"
	devicePluginLabel = "nvidia.com/device-plugin.config"
	migConfigLabel    = "nvidia.com/mig.config"
	placeholderImage  = "registry.invalid/set-me:latest"
)

func init() { register("kubernetes", renderKubernetes) }

// renderKubernetes writes a Namespace per tenant and a Deployment per
// workload: replicas, image, ports, CPU and memory, the GPU resource the
// NVIDIA device plugin advertises for the planned mechanism
// (nvidia.com/gpu, or nvidia.com/mig-<profile> under the mixed strategy),
// a node selector for the pool (instance type and pool label) and a
// toleration for the GPU taint.
func renderKubernetes(s *model.Spec, p *plan.Plan) ([]byte, error) {
	var objs []obj
	var comments [][]string
	for _, ns := range namespaces(s) {
		objs = append(objs, namespace(ns))
		comments = append(comments, nil)
	}
	for i := range s.Workloads {
		o, notes := deployment(&s.Workloads[i], p)
		pluginResources(o, s, &s.Workloads[i], p) // names under an imported device-plugin config (resourcename.go)
		objs = append(objs, o)
		comments = append(comments, notes)
	}
	return documents([]string{"Kubernetes workloads rendered by gpuslice from " + strings.Join(s.Sources, ", "),
		"GPU resources follow the NVIDIA device plugin config of target nvidia-device-plugin (render it too)"}, objs, comments)
}

func deployment(wl *model.Workload, p *plan.Plan) (obj, []string) {
	name := dnsName(wl.Name)
	labels := obj{"app.kubernetes.io/name": name, "gpuslice.dev/tenant": dnsName(wl.Tenant), "gpuslice.dev/workload": name}
	modes, _ := workloadModes(p, wl)
	var notes []string
	limits := obj{}
	annotations := obj{}
	var env []obj
	for _, r := range wl.Requests {
		got, placed := modes[r.Name]
		res := "nvidia.com/gpu"
		mode, profile, mem, comp := r.Mode, r.Profile, r.MemoryMiB, r.ComputePercent
		if placed {
			mode, profile, mem, comp = got.Mode, got.Profile, got.MemoryMiB, got.ComputePercent
		}
		if profile != "" {
			res = migResourceName(profile) // "+me" is ".me" (resourcename.go)
		}
		count := max(r.Count, 1)
		if prev, ok := limits[res].(int); ok {
			count += prev
		}
		limits[res] = count
		annotations["gpuslice.dev/"+r.Name+".mode"] = string(mode)
		annotations["gpuslice.dev/"+r.Name+".memory-mib"] = strconv.FormatInt(mem, 10)
		annotations["gpuslice.dev/"+r.Name+".compute-percent"] = strconv.Itoa(comp)
		if mode == alloc.MPS && placed && got.MPS != nil {
			env = append(env, obj{"name": "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "value": strconv.Itoa(got.MPS.ActiveThreadPercent)},
				obj{"name": "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "value": fmt.Sprintf("0=%dM", got.MPS.PinnedMemoryMiB)})
		}
		if mode == alloc.TimeSlice {
			notes = append(notes, fmt.Sprintf("request %s is time-sliced: the device plugin does not limit its memory; gpuslice planned %d MiB", r.Name, mem))
		}
	}
	keys := make([]string, 0, len(wl.Env))
	for k := range wl.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, obj{"name": k, "value": wl.Env[k]})
	}
	// Requests are the reservations where given, else the limits; a
	// limit without a request is left to Kubernetes (it defaults the
	// request to the limit).
	requests := obj{}
	if wl.CPU != "" {
		limits["cpu"], requests["cpu"] = wl.CPU, wl.CPU
	}
	if wl.CPURequest != "" {
		requests["cpu"] = wl.CPURequest
	}
	if wl.Mem != "" {
		limits["memory"], requests["memory"] = kubeMemory(wl.Mem), kubeMemory(wl.Mem)
	}
	if wl.MemRequest != "" {
		requests["memory"] = kubeMemory(wl.MemRequest)
	}
	image := wl.Image
	if image == "" {
		image = placeholderImage
		notes = append(notes, "the spec names no image: replace "+placeholderImage)
	}
	container := obj{"name": name, "image": image, "resources": obj{"limits": limits}}
	if len(requests) > 0 {
		container["resources"].(obj)["requests"] = requests
	}
	if len(env) > 0 {
		container["env"] = env
	}
	if len(wl.Ports) > 0 {
		var ports []obj
		for _, port := range wl.Ports {
			ports = append(ports, obj{"containerPort": port})
		}
		container["ports"] = ports
	}
	selector := obj{}
	if pp := poolOf(p, wl); pp != nil {
		selector[plan.PoolLabel] = pp.Name
		if pp.InstanceType != "" {
			selector[instanceTypeLabel] = pp.InstanceType
		}
	}
	pod := obj{"containers": []obj{container},
		"tolerations": []obj{{"key": gpuTaint, "operator": "Exists", "effect": "NoSchedule"}}}
	if len(selector) > 0 {
		pod["nodeSelector"] = selector
	}
	if wl.Priority != 0 {
		notes = append(notes, fmt.Sprintf("priority %d: map it to a PriorityClass of your cluster", wl.Priority))
	}
	return obj{"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": obj{"name": name, "namespace": tenantNamespace(wl.Tenant), "labels": labels},
		"spec": obj{"replicas": wl.Replicas, "selector": obj{"matchLabels": obj{"app.kubernetes.io/name": name}},
			"template": obj{"metadata": obj{"labels": labels, "annotations": annotations}, "spec": pod}}}, notes
}

// kubeMemory turns compose-style sizes ("100M", "1g") into Kubernetes
// quantities ("100M", "1G"); Kubernetes quantities pass through.
func kubeMemory(s string) string {
	t := strings.TrimSpace(s)
	switch {
	case strings.HasSuffix(t, "b") || strings.HasSuffix(t, "B"):
		t = strings.TrimRight(t, "bB")
		if strings.HasSuffix(t, "i") {
			return t
		}
	}
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k':
			return t[:n-1] + "k"
		case 'm', 'g', 't':
			return t[:n-1] + strings.ToUpper(t[n-1:])
		}
	}
	return t
}
