package render

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
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

func init() {
	register("dra", func(s *model.Spec, p *plan.Plan) ([]byte, error) { return renderDRAFor(nvidiaDRA, s, p) })
	registerWarnings("dra", func(s *model.Spec, p *plan.Plan) []string { return newDRAPlan(nvidiaDRA, s, p).warnings })
}

// renderDRA writes a namespace per tenant (the DeviceClasses only on
// request, see RenderWith); one
// ResourceClaim per device the plan shares (time-slicing or MPS), which
// every pod planned on that device references — a device is allocated to
// one claim, so replicas of several workloads that share it share the
// claim; per workload a ResourceClaimTemplate for its unshared devices
// (requests, selectors, same-GPU constraints); and per workload one
// Deployment per set of shared claims its replicas use, wiring the claims
// into the pods. drv is the DRA driver the objects are for (NVIDIA's or
// gpuslice's, dra_gpuslice.go).
func renderDRAFor(drv *draDriver, s *model.Spec, p *plan.Plan) ([]byte, error) {
	dp := newDRAPlan(drv, s, p)
	// NVIDIA's driver installs its DeviceClasses; RenderWith adds them on
	// request (dra_driver.go).
	var objs []obj
	var comments [][]string
	for _, ns := range namespaces(s) {
		objs = append(objs, namespace(ns))
		comments = append(comments, nil)
	}
	for _, c := range dp.claims {
		o, notes := c.object(drv, p)
		objs = append(objs, o)
		comments = append(comments, notes)
	}
	for i := range s.Workloads {
		wl := &s.Workloads[i]
		sharedReqs := dp.sharedRequests(wl)
		o, notes, hasTemplate := claimTemplate(drv, wl, p, sharedReqs)
		dp.warnings = append(dp.warnings, sharedConstraintWarnings(wl, sharedReqs)...)
		if hasTemplate {
			objs = append(objs, o)
			comments = append(comments, notes)
		}
		for _, d := range dp.deployments(wl, hasTemplate) {
			objs = append(objs, d.obj)
			comments = append(comments, d.notes)
		}
	}
	header := []string{"DRA objects rendered by gpuslice from " + strings.Join(s.Sources, ", ") + ": a ResourceClaim per shared device,",
		"ResourceClaimTemplates for unshared devices, and Deployments whose pods use them as planned"}
	if drv.gpuslice {
		header = gpusliceDRAHeader(s)
	} else {
		header = append(header, draHeaderNotes(p)...)
	}
	for _, w := range dp.warnings {
		header = append(header, "WARNING: "+w)
	}
	return documents(header, objs, comments)
}

// draPlan is what the DRA render derives from the plan: a claim per shared
// device and which claim each replica's request uses.
type draPlan struct {
	kp     *kubePlan
	claims []*sharedClaim
	// use[workload][replica][request] is the shared claim's name.
	use      map[string]map[int]map[string]string
	warnings []string
}

// sharedClaim is one ResourceClaim for a device the plan shares.
type sharedClaim struct {
	name, namespace string
	device, node    string
	profile         string
	mode            alloc.Mode
	users           []string // "workload[replica]", in plan order
	wls             []*model.Workload
	reqs            []alloc.Request
	got             []alloc.Assigned
}

func newDRAPlan(drv *draDriver, s *model.Spec, p *plan.Plan) *draPlan {
	dp := &draPlan{kp: newKubePlan(s, p), use: map[string]map[int]map[string]string{}}
	dp.kp.warnings = nil // the device plugin's limits are not DRA's
	wls := map[string]*model.Workload{}
	for i := range s.Workloads {
		wls[s.Workloads[i].Name] = &s.Workloads[i]
	}
	byKey := map[string]*sharedClaim{}
	perNS := map[string]int{}
	crossNS := map[string]bool{}
	for _, pl := range p.Placements {
		wl := wls[pl.Workload]
		if wl == nil {
			continue
		}
		ns := tenantNamespace(pl.Tenant)
		for _, d := range pl.Devices {
			if d.Mode != alloc.TimeSlice && d.Mode != alloc.MPS {
				continue
			}
			if drv.gpuslice && d.Profile == "" {
				continue // a share of a whole GPU is each pod's own claim on shared.gpuslice.dev
			}
			r, ok := requestNamed(wl, d.Request)
			if !ok {
				continue
			}
			key := d.Device + "\x00" + ns
			c := byKey[key]
			if c == nil {
				kind := "gpu"
				if d.Profile != "" {
					kind = d.Profile
				}
				c = &sharedClaim{name: dnsName(fmt.Sprintf("shared-%s-%d", kind, perNS[ns])), namespace: ns,
					device: d.Device, node: d.Node, profile: d.Profile, mode: d.Mode}
				perNS[ns]++
				byKey[key] = c
				dp.claims = append(dp.claims, c)
				for _, other := range dp.claims {
					if other != c && other.device == d.Device && !crossNS[d.Device] {
						crossNS[d.Device] = true
						dp.warnings = append(dp.warnings, fmt.Sprintf("the plan shares device %s between namespaces %s and %s (isolation none); a ResourceClaim lives in one namespace, so each gets its own claim and Kubernetes gives them different devices — the plan needs more devices than it says here",
							d.Device, other.namespace, ns))
					}
				}
			}
			user := fmt.Sprintf("%s[%d]", pl.Workload, pl.Replica)
			if !slices.Contains(c.users, user) {
				c.users = append(c.users, user)
			}
			c.wls, c.reqs, c.got = append(c.wls, wl), append(c.reqs, r), append(c.got, d)
			if dp.use[wl.Name] == nil {
				dp.use[wl.Name] = map[int]map[string]string{}
			}
			if dp.use[wl.Name][pl.Replica] == nil {
				dp.use[wl.Name][pl.Replica] = map[string]string{}
			}
			dp.use[wl.Name][pl.Replica][d.Request] = c.name
		}
	}
	return dp
}

func requestNamed(wl *model.Workload, name string) (alloc.Request, bool) {
	for _, r := range wl.Requests {
		if r.Name == name {
			return r, true
		}
	}
	return alloc.Request{}, false
}

// sharedRequests are the requests of a workload that shared claims serve.
func (dp *draPlan) sharedRequests(wl *model.Workload) map[string]bool {
	out := map[string]bool{}
	for _, reqs := range dp.use[wl.Name] {
		for r := range reqs {
			out[r] = true
		}
	}
	return out
}

// object is the ResourceClaim: one request for the planned kind of device,
// every user's selector, and the sharing config with the largest MPS
// limits its users were planned with (each pod sets its own lower ones).
func (c *sharedClaim) object(drv *draDriver, p *plan.Plan) (obj, []string) {
	class := drv.gpuClass
	if c.profile != "" {
		class = drv.migClass
	}
	notes := []string{fmt.Sprintf("device %s on %s, %s: shared by %s; their pods reference it with resourceClaimName %s",
		c.device, c.node, c.mode, strings.Join(c.users, " "), c.name)}
	var sel []string
	if c.profile != "" {
		sel = append(sel, fmt.Sprintf("device.attributes['%s'].profile == '%s'", drv.domain, c.profile))
	}
	got := c.got[0]
	var limits *alloc.MPSLimits
	for i, r := range c.reqs {
		if r.Selector != "" {
			expr, err := drv.selector(r.Selector)
			if err != nil {
				expr = r.Selector
			}
			if e := "(" + expr + ")"; !slices.Contains(sel, e) {
				sel = append(sel, e)
			}
		}
		if m := draModelSelector(drv, p, c.wls[i], r, class); m != "" && !slices.Contains(sel, m) {
			sel = append(sel, m) // the planned pool's model (dra_driver.go)
		}
		if m := c.got[i].MPS; m != nil {
			if limits == nil {
				limits = &alloc.MPSLimits{}
			}
			limits.ActiveThreadPercent = max(limits.ActiveThreadPercent, m.ActiveThreadPercent)
			limits.PinnedMemoryMiB = max(limits.PinnedMemoryMiB, m.PinnedMemoryMiB)
		}
	}
	got.MPS = limits
	exactly := obj{"deviceClassName": class, "count": 1, "allocationMode": "ExactCount"}
	if len(sel) > 0 {
		exactly["selectors"] = []obj{{"cel": obj{"expression": strings.Join(sel, " && ")}}}
	}
	devices := obj{"requests": []obj{{"name": "gpu", "exactly": exactly}}}
	if cfg := drv.config(c.reqs[0], c.mode, got, class); cfg != nil {
		devices["config"] = []obj{{"requests": []string{"gpu"}, "opaque": obj{"driver": drv.domain, "parameters": cfg}}}
	} else if c.mode == alloc.TimeSlice && class == migClass && !drv.gpuslice {
		notes = append(notes, "NVIDIA's DRA driver time-slices whole GPUs only: the pods share this MIG device without a time-slice setting")
	}
	labels := obj{tenantLabel: c.namespace}
	return obj{"apiVersion": draAPI, "kind": "ResourceClaim",
		"metadata": obj{"name": c.name, "namespace": c.namespace, "labels": labels},
		"spec":     obj{"devices": devices}}, notes
}

// sharedConstraintWarnings: a same-GPU constraint cannot reach across
// claims, so one that names a shared request is not kept.
func sharedConstraintWarnings(wl *model.Workload, shared map[string]bool) []string {
	var out []string
	for _, c := range wl.Constraints {
		if c.Match != "gpu" || len(shared) == 0 {
			continue
		}
		names := c.Requests
		if len(names) == 0 {
			for _, r := range wl.Requests {
				names = append(names, r.Name)
			}
		}
		var hit []string
		for _, n := range names {
			if shared[n] {
				hit = append(hit, n)
			}
		}
		if len(hit) > 0 && len(names) > 1 {
			out = append(out, fmt.Sprintf("workload %s: requests %s are served by shared ResourceClaims, and a same-GPU constraint cannot span claims; Kubernetes may put them on different GPUs (the plan keeps them on one)",
				wl.Name, strings.Join(hit, ", ")))
		}
	}
	return out
}

// draDeployment is one rendered Deployment with its comments.
type draDeployment struct {
	obj   obj
	notes []string
}

// deployments groups a workload's replicas by the shared claims they use
// and writes a Deployment per group; pods also get the workload's
// template when it has one.
func (dp *draPlan) deployments(wl *model.Workload, hasTemplate bool) []draDeployment {
	type group struct {
		claims   map[string]string // request → claim
		replicas []int
	}
	var groups []*group
	index := map[string]*group{}
	placed := 0
	for _, pl := range dp.kp.p.Placements {
		if pl.Workload != wl.Name {
			continue
		}
		placed++
		use := dp.use[wl.Name][pl.Replica]
		var key []string
		for _, r := range wl.Requests {
			key = append(key, use[r.Name])
		}
		k := strings.Join(key, ",")
		g := index[k]
		if g == nil {
			g = &group{claims: use}
			index[k] = g
			groups = append(groups, g)
		}
		g.replicas = append(g.replicas, pl.Replica)
	}
	var notes []string
	if placed == 0 {
		groups = []*group{{replicas: make([]int, wl.Replicas)}}
	} else if placed < wl.Replicas {
		dp.warnings = append(dp.warnings, fmt.Sprintf("workload %s: %d of %d replicas fit nowhere in the plan and are not rendered", wl.Name, wl.Replicas-placed, wl.Replicas))
		notes = append(notes, fmt.Sprintf("%d of %d replicas fit nowhere in the plan and are not rendered", wl.Replicas-placed, wl.Replicas))
	}
	var out []draDeployment
	for k, g := range groups {
		name := dnsName(wl.Name)
		if len(groups) > 1 {
			name = dnsName(fmt.Sprintf("%s-%d", wl.Name, k))
		}
		tmpl, more := dp.kp.podTemplate(wl, false)
		tmpl["metadata"].(obj)["labels"].(obj)["app.kubernetes.io/name"] = name
		spec := tmpl["spec"].(obj)
		var podClaims, containerClaims []obj
		var reqs []string
		for r := range g.claims {
			reqs = append(reqs, r)
		}
		sort.Strings(reqs)
		for _, r := range reqs {
			pc := dnsName("shared-" + r)
			podClaims = append(podClaims, obj{"name": pc, "resourceClaimName": g.claims[r]})
			containerClaims = append(containerClaims, obj{"name": pc})
		}
		if hasTemplate {
			podClaims = append(podClaims, obj{"name": "devices", "resourceClaimTemplateName": dnsName(wl.Name)})
			containerClaims = append(containerClaims, obj{"name": "devices"})
		}
		if len(podClaims) > 0 {
			spec["resourceClaims"] = podClaims
			c := spec["containers"].([]obj)[0]
			c["resources"].(obj)["claims"] = containerClaims
		}
		labels := workloadLabels(wl)
		labels["app.kubernetes.io/name"] = name
		n := append(slices.Clip(notes), more...)
		if placed > 0 {
			n = append(n, fmt.Sprintf("workload %s (tenant %s): replicas %v of the plan", wl.Name, wl.Tenant, g.replicas))
		}
		out = append(out, draDeployment{obj: obj{"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": obj{"name": name, "namespace": tenantNamespace(wl.Tenant), "labels": labels},
			"spec": obj{"replicas": len(g.replicas), "selector": obj{"matchLabels": obj{"app.kubernetes.io/name": name}},
				"template": tmpl}}, notes: n})
	}
	return out
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
		"labels": obj{dranames.TenantKey: name}}}
}

// claimTemplate is one workload's ResourceClaimTemplate for its requests
// that no shared claim serves; false when none is left.
func claimTemplate(drv *draDriver, wl *model.Workload, p *plan.Plan, shared map[string]bool) (obj, []string, bool) {
	modes, mixed := workloadModes(p, wl)
	notes := []string{fmt.Sprintf("workload %s (tenant %s): %d replica(s), one claim each", wl.Name, wl.Tenant, wl.Replicas)}
	if mixed {
		notes = append(notes, "replicas were planned on different mechanisms; this template follows the first replica")
	}
	var requests, configs []obj
	for _, r := range wl.Requests {
		if shared[r.Name] {
			continue
		}
		got, placed := modes[r.Name]
		mode := r.Mode
		profile := r.Profile
		if placed {
			mode, profile = got.Mode, got.Profile
		}
		class := drv.gpuClass
		if profile != "" || mode == alloc.MIG {
			class = drv.migClass
		} else if drv.gpuslice && (mode == alloc.TimeSlice || mode == alloc.MPS) {
			class = drv.sharedClass
		}
		exactly := obj{"deviceClassName": class, "count": max(r.Count, 1), "allocationMode": "ExactCount"}
		var sel []string
		if profile != "" {
			sel = append(sel, fmt.Sprintf("device.attributes['%s'].profile == '%s'", drv.domain, profile))
		}
		if r.Selector != "" {
			expr, err := drv.selector(r.Selector)
			if err != nil {
				expr = r.Selector // the reader checked it; keep it as written
			}
			if expr != r.Selector {
				notes = append(notes, fmt.Sprintf("request %s: selector %s, in the names %s publishes", r.Name, r.Selector, drv.title))
			}
			sel = append(sel, "("+expr+")")
			if n := drv.foreignNames(expr); n != "" {
				notes = append(notes, fmt.Sprintf("request %s: its selector reads %s, which %s does not publish and gpuslice cannot translate; rewrite it before applying", r.Name, n, drv.title))
			}
		}
		if m := draModelSelector(drv, p, wl, r, class); m != "" {
			sel = append(sel, m) // the planned pool's model (dra_driver.go)
		}
		if class == drv.sharedClass && drv.gpuslice {
			if r.MemoryMiB > 0 {
				// A share of the GPU: its memory, consumed from the shared device.
				exactly["capacity"] = obj{"requests": obj{"memory": quantityMiB(r.MemoryMiB)}}
			}
		} else if r.MemoryMiB > 0 && !placed && profile == "" {
			sel = append(sel, fmt.Sprintf("device.capacity['%s'].memory.compareTo(quantity('%s')) >= 0", drv.domain, quantityMiB(r.MemoryMiB)))
		}
		if len(sel) > 0 {
			exactly["selectors"] = []obj{{"cel": obj{"expression": strings.Join(sel, " && ")}}}
		}
		requests = append(requests, obj{"name": r.Name, "exactly": exactly})
		if cfg := drv.config(r, mode, got, class); cfg != nil {
			configs = append(configs, obj{"requests": []string{r.Name}, "opaque": obj{"driver": drv.domain, "parameters": cfg}})
		}
		if !placed {
			notes = append(notes, fmt.Sprintf("request %s was not placed by the plan; its template follows the spec only", r.Name))
		}
	}
	if len(requests) == 0 {
		return nil, nil, false
	}
	devices := obj{"requests": requests}
	if len(configs) > 0 {
		devices["config"] = configs
	}
	var cons []obj
	for _, c := range wl.Constraints {
		attr := drv.sameGPU
		if c.Match == "node" {
			notes = append(notes, "a same-node constraint has no DRA attribute: claims of one pod always land on one node")
			continue
		}
		con := obj{"matchAttribute": attr}
		var names []string
		for _, n := range c.Requests {
			if !shared[n] {
				names = append(names, n)
			}
		}
		if len(c.Requests) > 0 && len(names) < 2 {
			continue // nothing left in this claim to constrain
		}
		if len(names) > 0 {
			con["requests"] = names
		}
		cons = append(cons, con)
	}
	if len(cons) > 0 {
		devices["constraints"] = cons
	}
	return obj{"apiVersion": draAPI, "kind": "ResourceClaimTemplate",
		"metadata": obj{"name": dnsName(wl.Name), "namespace": tenantNamespace(wl.Tenant),
			"labels": obj{"gpuslice.dev/tenant": dnsName(wl.Tenant), "gpuslice.dev/workload": dnsName(wl.Name)}},
		"spec": obj{"spec": obj{"devices": devices}}}, notes, true
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
