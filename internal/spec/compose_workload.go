package spec

import (
	"cmp"
	"fmt"

	"github.com/compose-spec/compose-go/v2/types"
	"gopkg.in/yaml.v3"

	"github.com/gpuslice/gpuslice/internal/alloc"
)

// workload maps one service: replicas, the "gpu" request, container
// settings. sl is the x-gpuslice in force for the service, pool the pool
// it runs on (nil when none).
func (c *composeFile) workload(name string, key, sn *yaml.Node, as *Autoscaling, svc *types.ServiceConfig, sl composeSlice, pool *composePool, dev composeDevices, base string) Workload {
	w := c.w
	path := "services." + name
	wl := Workload{Name: name, Tenant: sl.tenant, Isolation: sl.isolation, Priority: sl.priority, Where: w.pos(key), Autoscaling: as}
	if wl.Tenant == "" {
		wl.Tenant = base
	}
	switch {
	case sl.set["replicas"] != nil:
		wl.Replicas = sl.replicas
	case wl.Autoscaling != nil && wl.Autoscaling.MaxReplicas > 0:
		wl.Replicas = wl.Autoscaling.MaxReplicas
	case svc != nil:
		wl.Replicas = max(svc.GetScale(), 0)
	default:
		wl.Replicas = 1
	}
	if wl.Autoscaling != nil {
		wl.MinReplicas = wl.Autoscaling.MinReplicas
	}
	wl.ScaleMetric, wl.TargetConcurrency = sl.metric, sl.target
	if n := sl.set["metric"]; n != nil && sl.metric == "requests" && (wl.Autoscaling == nil || wl.Autoscaling.TargetPort == 0) {
		w.errorf(n, sl.paths["metric"], "add x-omnistrate-capabilities.serverlessConfiguration.targetPort (the port the proxy listens on), or scale on gpu",
			"metric requests counts requests at the service's proxy, and %s has no targetPort", name)
	}
	if n := sl.set["targetConcurrency"]; n != nil && sl.metric != "requests" {
		w.warnf(n, sl.paths["targetConcurrency"], "set metric: requests, or remove targetConcurrency", "targetConcurrency applies to metric requests only; %s scales on %s", name, cmp.Or(sl.metric, "gpu"))
	}
	if svc != nil {
		wl.Image = svc.Image
		seen := map[int]bool{}
		for _, p := range svc.Ports {
			if t := int(p.Target); t > 0 && !seen[t] {
				seen[t] = true
				wl.Ports = append(wl.Ports, t)
			}
		}
		for k, v := range svc.Environment {
			if v != nil {
				if wl.Env == nil {
					wl.Env = map[string]string{}
				}
				wl.Env[k] = *v
			}
		}
	}
	wl.CPU, wl.Mem = composeLimit(sn, "cpus"), composeLimit(sn, "memory")
	wl.CPURequest, wl.MemRequest = composeReservation(sn, "cpus"), composeReservation(sn, "memory")
	if svc != nil && svc.Deploy != nil {
		// compose-go parsed both; Kubernetes refuses a request above its limit.
		lim, res := svc.Deploy.Resources.Limits, svc.Deploy.Resources.Reservations
		if lim != nil && res != nil && lim.NanoCPUs > 0 && res.NanoCPUs > lim.NanoCPUs {
			n := composeDig(sn, "deploy", "resources", "reservations", "cpus")
			w.errorf(n, path+".deploy.resources.reservations.cpus", "at most the limit, "+wl.CPU,
				"reservations.cpus %s is more than limits.cpus %s; Kubernetes refuses a request above its limit", wl.CPURequest, wl.CPU)
		}
		if lim != nil && res != nil && lim.MemoryBytes > 0 && res.MemoryBytes > lim.MemoryBytes {
			n := composeDig(sn, "deploy", "resources", "reservations", "memory")
			w.errorf(n, path+".deploy.resources.reservations.memory", "at most the limit, "+wl.Mem,
				"reservations.memory %s is more than limits.memory %s; Kubernetes refuses a request above its limit", wl.MemRequest, wl.Mem)
		}
	}

	req := alloc.Request{Name: "gpu", MemoryMiB: sl.memoryMiB, ComputePercent: sl.compute, Workload: sl.workload, LatencySensitive: sl.latency}
	if pool != nil {
		wl.Pool = pool.Name
		req.Mode = pool.mode
		if pool.g.profile != nil {
			req.Profile = pool.g.profile.Name
		}
	}
	if dev.count > 1 {
		req.Count = dev.count
	}
	if dev.all {
		n := composeDevicesNode(sn)
		per := 1
		if pool != nil && pool.GPUsPerNode > 0 {
			per = pool.GPUsPerNode
		}
		req.Count, req.Mode = max(req.Count, per), alloc.Exclusive
		w.warnf(n, path, "give a number (count: 1) to take one shared device per replica",
			"a GPU device request without a count takes every GPU of a node: read as %d whole GPU(s) per replica", per)
	}
	if sl.mode != "" {
		req.Mode = sl.mode
	}
	c.checkRequest(path, key, sl, pool, &req)
	wl.Requests = []alloc.Request{req}
	return wl
}

// checkRequest checks the request against its pool and x-gpuslice and
// fills the defaults: an equal time-slice share of memory, MPS limits.
func (c *composeFile) checkRequest(path string, at *yaml.Node, sl composeSlice, pool *composePool, req *alloc.Request) {
	w := c.w
	known := pool != nil && pool.devMiB > 0
	if known && sl.mode != "" {
		mn, mp := sl.set["mode"], sl.paths["mode"]
		switch {
		case sl.mode == alloc.MIG && pool.g.profile == nil:
			hint := "add migProfile to the multiTenantGpu"
			if pool.g.gpu.MIG == nil {
				hint = composeMIGTypesHint(pool.g.it, "")
			}
			w.errorf(mn, mp, hint, "mode mig, but pool %s has no MIG instances", pool.Name)
		case sl.mode == alloc.TimeSlice && pool.mode != alloc.TimeSlice:
			w.errorf(mn, mp, "add timeSlicingReplicas to the multiTenantGpu, or drop mode",
				"mode timeslice, but pool %s does not time-slice its devices (%s)", pool.Name, pool.mode)
		case sl.mode == alloc.MPS && pool.mode != alloc.MPS:
			w.errorf(mn, mp, "set mode: mps in the x-gpuslice beside the multiTenantGpu (top level) so the pool runs MPS, with timeSlicingReplicas clients per device",
				"mode mps, but pool %s runs %s devices", pool.Name, pool.mode)
		}
	}
	shared := req.Mode == alloc.TimeSlice || req.Mode == alloc.MPS
	if sl.isolation == alloc.IsolationHardware && shared {
		from := "x-gpuslice.mode"
		if sl.mode == "" && pool != nil {
			from = fmt.Sprintf("pool %s shares each device %d ways", pool.Name, pool.slots)
		}
		w.errorf(sl.set["isolation"], sl.paths["isolation"],
			"hardware isolation needs a MIG instance or a whole GPU: use migProfile without timeSlicingReplicas, mode exclusive, or isolation tenant",
			"isolation hardware with mode %s (%s): time-sliced and MPS devices are shared without hardware isolation", req.Mode, from)
	}
	mpsSet := sl.set["mps.activeThreadPercent"] != nil || sl.set["mps.pinnedMemory"] != nil
	if mpsSet && req.Mode != alloc.MPS && req.Mode != alloc.Auto && req.Mode != "" {
		k := "mps.activeThreadPercent"
		if sl.set[k] == nil {
			k = "mps.pinnedMemory"
		}
		w.warnf(sl.set[k], sl.paths[k], "set mode: mps, or drop mps", "mps settings are ignored: mode is %s", req.Mode)
	}
	if req.Mode == alloc.MPS {
		if req.ComputePercent == 0 {
			req.ComputePercent = sl.threads
		}
		if req.MemoryMiB == 0 {
			req.MemoryMiB = sl.pinnedMiB
		}
		if known && sl.pinnedMiB > pool.devMiB {
			w.errorf(sl.set["mps.pinnedMemory"], sl.paths["mps.pinnedMemory"], fmt.Sprintf("want at most %d MiB", pool.devMiB),
				"pinnedMemory %d MiB is more than the %d MiB of one %s", sl.pinnedMiB, pool.devMiB, pool.dev)
		}
	}
	if !known {
		return
	}
	n := pool.slots
	switch m := sl.memoryMiB; {
	case m > pool.devMiB:
		w.errorf(sl.set["memory"], sl.paths["memory"], fmt.Sprintf("want at most %d MiB, or a bigger GPU", pool.devMiB),
			"memory %d MiB is more than the %d MiB of one %s", m, pool.devMiB, pool.dev)
	case m > 0 && shared && n > 1 && m*int64(n) > pool.devMiB:
		fit := pool.devMiB / m
		w.warnf(sl.set["memory"], sl.paths["memory"],
			fmt.Sprintf("only %d of the %d replicas fit: lower memory to ≤ %d MiB or timeSlicingReplicas to %d", fit, n, pool.devMiB/int64(n), fit),
			"timeSlicingReplicas %d × memory %d MiB = %d MiB is more than the %d MiB of one %s", n, m, m*int64(n), pool.devMiB, pool.dev)
	case m == 0 && req.MemoryMiB == 0 && req.Mode == alloc.TimeSlice && n > 0:
		req.MemoryMiB = pool.devMiB / int64(n)
		w.warnf(at, path+".x-gpuslice.memory",
			fmt.Sprintf("1/%d of the %d MiB of one %s; set x-gpuslice.memory to what %s needs", n, pool.devMiB, pool.dev, path[len("services."):]),
			"no memory given: assuming an equal 1/%d share = %d MiB; time-slicing does not enforce it", n, req.MemoryMiB)
	}
}

// composeLimit is the user's string for deploy.resources.limits.<key>,
// else for reservations, else "".
func composeLimit(sn *yaml.Node, key string) string {
	for _, part := range []string{"limits", "reservations"} {
		if n := composeDig(sn, "deploy", "resources", part, key); n != nil && n.Kind == yaml.ScalarNode && n.Tag != "!!null" {
			return n.Value
		}
	}
	return ""
}

// composeReservation is the user's string for
// deploy.resources.reservations.<key>, or "".
func composeReservation(sn *yaml.Node, key string) string {
	if n := composeDig(sn, "deploy", "resources", "reservations", key); n != nil && n.Kind == yaml.ScalarNode && n.Tag != "!!null" {
		return n.Value
	}
	return ""
}

// devicesNode is where a service asks for GPUs, for diagnostics.
func composeDevicesNode(sn *yaml.Node) *yaml.Node {
	if n := composeDig(sn, "deploy", "resources", "reservations", "devices"); n != nil {
		return n
	}
	if n := composeDig(sn, "gpus"); n != nil {
		return n
	}
	return sn
}
