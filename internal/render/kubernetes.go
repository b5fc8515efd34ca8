package render

import (
	"fmt"
	"slices"
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

func init() {
	register("kubernetes", renderKubernetes)
	registerWarnings("kubernetes", func(s *model.Spec, p *plan.Plan) []string { return newKubePlan(s, p).warnings })
}

// Labels and keys the Kubernetes render puts on pods.
const (
	tenantLabel   = "gpuslice.dev/tenant"
	workloadLabel = "gpuslice.dev/workload"
	// sharedLabelPrefix + a device-plugin resource (without "nvidia.com/")
	// marks a pod that takes a replica of a shared (time-sliced) resource.
	sharedLabelPrefix = "shared.gpuslice.dev/"
	hostnameLabel     = "kubernetes.io/hostname"
)

// renderKubernetes writes a Namespace per tenant and a Deployment per
// workload: replicas, image, ports, CPU and memory, the GPU resource the
// NVIDIA device plugin advertises for the planned mechanism
// (nvidia.com/gpu, or nvidia.com/mig-<profile> under the mixed strategy),
// a node selector for the pool (instance type and pool label), a
// toleration for the GPU taint, and the affinity that makes the stock
// kube-scheduler place the pods as the plan does: replicas of a pool
// packed onto nodes (binpack) or spread (spread), and tenants that take
// replicas of a shared resource kept off each other's nodes (the device
// plugin cannot pin a pod to a GPU, so a node is the finest unit
// Kubernetes can keep tenants apart on). What it cannot express is
// written as WARNING comments (and by Warnings).
func renderKubernetes(s *model.Spec, p *plan.Plan) ([]byte, error) {
	kp := newKubePlan(s, p)
	var objs []obj
	var comments [][]string
	for _, ns := range namespaces(s) {
		objs = append(objs, namespace(ns))
		comments = append(comments, nil)
	}
	for i := range s.Workloads {
		o, notes := kp.deployment(&s.Workloads[i])
		pluginResources(o, s, &s.Workloads[i], p) // names under an imported device-plugin config (resourcename.go)
		objs = append(objs, o)
		comments = append(comments, notes)
	}
	header := []string{"Kubernetes workloads rendered by gpuslice from " + strings.Join(s.Sources, ", "),
		"GPU resources follow the NVIDIA device plugin config of target nvidia-device-plugin (render it too)"}
	for _, w := range kp.warnings {
		header = append(header, "WARNING: "+w)
	}
	return documents(header, objs, comments)
}

// kubePlan is what the Kubernetes render derives from the plan once: which
// resources the device plugin shares in each pool, and which tenants'
// pods the plan puts on one node with the same shared resource.
type kubePlan struct {
	s *model.Spec
	p *plan.Plan
	// shared[pool][resource]: the pool's device-plugin config replicates it.
	shared map[string]map[string]bool
	// together[pool][resource][tenant]: the plan puts this tenant's pods on
	// a node where another tenant's pods take the same shared resource.
	together map[string]map[string]map[string]bool
	warnings []string
}

// deviceResource is the device-plugin resource name of a planned device.
func deviceResource(profile string) string {
	if profile != "" {
		return migResourceName(profile)
	}
	return dpGPUResource
}

func newKubePlan(s *model.Spec, p *plan.Plan) *kubePlan {
	kp := &kubePlan{s: s, p: p, shared: map[string]map[string]bool{}, together: map[string]map[string]map[string]bool{}}
	for i := range p.Pools {
		c := dpPoolConfig(&p.Pools[i])
		sh := map[string]bool{}
		if c.mode != "" {
			sh[dpGPUResource] = true
		}
		for _, m := range c.mig {
			sh[migResourceName(m.profile)] = true
		}
		kp.shared[p.Pools[i].Name] = sh
	}
	isolation := map[string]alloc.Isolation{}
	for _, wl := range s.Workloads {
		isolation[wl.Name] = wl.Isolation
	}
	// Tenants per (pool, resource, node) among pods that take a shared
	// resource, in plan order.
	type key struct{ pool, res, node string }
	tenants := map[key][]string{}
	strict := map[key]bool{} // some pod there wants isolation from other tenants
	var keys []key
	for _, pl := range p.Placements {
		for _, d := range pl.Devices {
			res := deviceResource(d.Profile)
			if !kp.shared[pl.Pool][res] {
				continue
			}
			k := key{pl.Pool, res, d.Node}
			if _, ok := tenants[k]; !ok {
				keys = append(keys, k)
			}
			if !slices.Contains(tenants[k], pl.Tenant) {
				tenants[k] = append(tenants[k], pl.Tenant)
			}
			strict[k] = strict[k] || isolation[pl.Workload] != alloc.IsolationNone
		}
	}
	for _, k := range keys {
		ts := tenants[k]
		if len(ts) < 2 {
			continue
		}
		if kp.together[k.pool] == nil {
			kp.together[k.pool] = map[string]map[string]bool{}
		}
		if kp.together[k.pool][k.res] == nil {
			kp.together[k.pool][k.res] = map[string]bool{}
		}
		for _, t := range ts {
			kp.together[k.pool][k.res][t] = true
		}
		if strict[k] {
			kp.warnings = append(kp.warnings, fmt.Sprintf("node %s (pool %s): the plan gives tenants %s different devices of %s on one node; the device plugin cannot pin a pod to a GPU or MIG instance, so Kubernetes may give them the same shared device — their pods get no anti-affinity against each other (it would leave the planned pods unschedulable); give each tenant its own pool, or let gpuslice's agent assign devices",
				k.node, k.pool, strings.Join(ts, ", "), k.res))
		}
	}
	for i := range s.Workloads {
		kp.warnings = append(kp.warnings, kp.constraintWarnings(&s.Workloads[i])...)
	}
	return kp
}

// constraintWarnings says which of a workload's same-GPU constraints the
// device plugin cannot keep, and which shared requests it refuses.
func (kp *kubePlan) constraintWarnings(wl *model.Workload) []string {
	var out []string
	pp := poolOf(kp.p, wl)
	for _, c := range wl.Constraints {
		if c.Match != "gpu" {
			continue
		}
		n := 0
		for _, r := range wl.Requests {
			if len(c.Requests) == 0 || slices.Contains(c.Requests, r.Name) {
				n += max(r.Count, 1)
			}
		}
		if n < 2 || pp == nil || pp.GPUsPerNode < 2 {
			continue
		}
		out = append(out, fmt.Sprintf("workload %s: its requests must share one GPU, but the device plugin picks each resource's device on its own; on a node with %d GPUs they may land on different GPUs (the plan keeps them on one)", wl.Name, pp.GPUsPerNode))
	}
	if pp != nil {
		for _, r := range wl.Requests {
			res := kp.resourceOf(wl, r)
			if r.Count > 1 && kp.shared[pp.Name][res] {
				out = append(out, fmt.Sprintf("workload %s: request %s asks for %d of the shared resource %s, which the device plugin refuses (failRequestsGreaterThanOne)", wl.Name, r.Name, r.Count, res))
			}
		}
	}
	return out
}

// resourceOf is the device-plugin resource a request is planned on.
func (kp *kubePlan) resourceOf(wl *model.Workload, r alloc.Request) string {
	modes, _ := workloadModes(kp.p, wl)
	profile := r.Profile
	if got, ok := modes[r.Name]; ok {
		profile = got.Profile
	}
	return deviceResource(profile)
}

func (kp *kubePlan) deployment(wl *model.Workload) (obj, []string) {
	pod, notes := kp.podTemplate(wl, true)
	name := dnsName(wl.Name)
	return obj{"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": obj{"name": name, "namespace": tenantNamespace(wl.Tenant), "labels": workloadLabels(wl)},
		"spec": obj{"replicas": wl.Replicas, "selector": obj{"matchLabels": obj{"app.kubernetes.io/name": name}},
			"template": pod}}, notes
}

func workloadLabels(wl *model.Workload) obj {
	name := dnsName(wl.Name)
	return obj{"app.kubernetes.io/name": name, tenantLabel: dnsName(wl.Tenant), workloadLabel: name}
}

// podTemplate is a workload's pod template; with devicePlugin it requests
// the device plugin's resources (the DRA render adds claims instead).
func (kp *kubePlan) podTemplate(wl *model.Workload, devicePlugin bool) (obj, []string) {
	p := kp.p
	name := dnsName(wl.Name)
	labels := workloadLabels(wl)
	modes, _ := workloadModes(p, wl)
	pp := poolOf(p, wl)
	var notes []string
	limits := obj{}
	annotations := obj{}
	var env []obj
	var sharedRes []string
	for _, r := range wl.Requests {
		got, placed := modes[r.Name]
		mode, profile, mem, comp := r.Mode, r.Profile, r.MemoryMiB, r.ComputePercent
		if placed {
			mode, profile, mem, comp = got.Mode, got.Profile, got.MemoryMiB, got.ComputePercent
		}
		res := deviceResource(profile)
		if devicePlugin {
			count := max(r.Count, 1)
			if prev, ok := limits[res].(int); ok {
				count += prev
			}
			limits[res] = count
			if pp != nil && kp.shared[pp.Name][res] && !slices.Contains(sharedRes, res) {
				sharedRes = append(sharedRes, res)
			}
		}
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
	resources := obj{}
	if len(limits) > 0 {
		resources["limits"] = limits
	}
	if len(requests) > 0 {
		resources["requests"] = requests
	}
	container := obj{"name": name, "image": image, "resources": resources}
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
	if pp != nil {
		selector[plan.PoolLabel] = pp.Name
		labels[plan.PoolLabel] = pp.Name
		if pp.InstanceType != "" {
			selector[instanceTypeLabel] = pp.InstanceType
		}
	}
	pod := obj{"containers": []obj{container},
		"tolerations": []obj{{"key": gpuTaint, "operator": "Exists", "effect": "NoSchedule"}}}
	if len(selector) > 0 {
		pod["nodeSelector"] = selector
	}
	affinity, more := kp.affinity(wl, pp, sharedRes, labels)
	notes = append(notes, more...)
	if len(affinity) > 0 {
		pod["affinity"] = affinity
	}
	if wl.Priority != 0 {
		notes = append(notes, fmt.Sprintf("priority %d: map it to a PriorityClass of your cluster", wl.Priority))
	}
	return obj{"metadata": obj{"labels": labels, "annotations": annotations}, "spec": pod}, notes
}

// affinity is the pod affinity that reproduces the plan with the stock
// scheduler: packing (or spreading) a pool's pods over nodes, and keeping
// tenants that take replicas of a shared resource off each other's nodes.
// It adds the labels those terms select on to labels.
func (kp *kubePlan) affinity(wl *model.Workload, pp *plan.PoolPlan, sharedRes []string, labels obj) (obj, []string) {
	if pp == nil {
		return nil, nil
	}
	var notes []string
	all := obj{} // every namespace: pods of other tenants count too
	poolTerm := obj{"weight": 100, "podAffinityTerm": obj{
		"labelSelector": obj{"matchLabels": obj{plan.PoolLabel: pp.Name}}, "namespaceSelector": all, "topologyKey": hostnameLabel}}
	aff := obj{}
	anti := obj{}
	if kp.s.Policy.Placement == "spread" {
		anti["preferredDuringSchedulingIgnoredDuringExecution"] = []obj{poolTerm}
	} else {
		aff["preferredDuringSchedulingIgnoredDuringExecution"] = []obj{poolTerm}
	}
	var required []obj
	tenant := dnsName(wl.Tenant)
	for _, res := range sharedRes {
		key := sharedLabelPrefix + strings.TrimPrefix(res, "nvidia.com/")
		labels[key] = "true"
		if wl.Isolation == alloc.IsolationNone {
			continue
		}
		if kp.together[pp.Name][res][wl.Tenant] {
			notes = append(notes, fmt.Sprintf("%s is shared and the plan puts another tenant's pods on the same node: no anti-affinity keeps them off this workload's device (see the WARNING above)", res))
			continue
		}
		required = append(required, obj{
			"labelSelector": obj{"matchExpressions": []obj{
				{"key": key, "operator": "Exists"},
				{"key": tenantLabel, "operator": "NotIn", "values": []string{tenant}},
			}},
			"namespaceSelector": all, "topologyKey": hostnameLabel})
		notes = append(notes, fmt.Sprintf("%s is shared (time-sliced) on its nodes: other tenants' pods that take it are kept off the node (isolation %s)", res, isolationName(wl.Isolation)))
	}
	if len(required) > 0 {
		anti["requiredDuringSchedulingIgnoredDuringExecution"] = required
	}
	out := obj{}
	if len(aff) > 0 {
		out["podAffinity"] = aff
	}
	if len(anti) > 0 {
		out["podAntiAffinity"] = anti
	}
	return out, notes
}

func isolationName(i alloc.Isolation) string {
	if i == "" {
		return string(alloc.IsolationTenant)
	}
	return string(i)
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
