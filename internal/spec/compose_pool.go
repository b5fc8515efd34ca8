package spec

import (
	"fmt"
	"strings"

	"github.com/compose-spec/compose-go/v2/types"
	"gopkg.in/yaml.v3"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/mig"
)

// composePool is a pool read from a multiTenantGpu with what its
// workloads need to know about one of its devices.
type composePool struct {
	Pool
	g      *composeGPU
	mode   alloc.Mode // how one device is used: timeslice, mps, mig, exclusive
	dev    string     // "T4", "1g.5gb instance of A100-40GB"
	devMiB int64      // 0 when the GPU is unknown
	slots  int        // claims one device takes (time-slice replicas, MPS clients)
}

// read maps the file onto s: pools from multiTenantGpu, a workload per
// service, the tenants they name.
func (c *composeFile) read(project *types.Project, s *Spec) {
	w := c.w
	plan := ""
	if n := c.top.get("x-omnistrate-service-plan"); n != nil {
		f := w.mapping(n, "x-omnistrate-service-plan")
		plan, _ = w.str(f, "name")
		w.str(f, "tenancyType")
	}
	top := composeSlice{set: map[string]*yaml.Node{}, paths: map[string]string{}}
	if n := c.top.get("x-gpuslice"); n != nil {
		top = c.readSlice(n, "x-gpuslice")
	}
	base := composeSlug(plan)
	if base == "" {
		base = "default"
	}
	var topPool *composePool
	if g := c.integrationGPU(c.top, "x-internal-integrations"); g != nil {
		topPool = c.pool(g, base, top, "x-internal-integrations.multiTenantGpu")
		s.Pools = append(s.Pools, topPool.Pool)
	}
	svcs := c.services()
	for _, name := range svcs.keys {
		path := "services." + name
		sn := svcs.get(name)
		if sn.Kind != yaml.MappingNode {
			continue // compose-go says why
		}
		saved := len(w.diags)
		sf := w.mapping(sn, path)
		w.diags = w.diags[:saved]
		var as *Autoscaling
		if n := sf.get("x-omnistrate-capabilities"); n != nil {
			as = c.readCapabilities(n, path+".x-omnistrate-capabilities")
		}
		sl, own := top, false
		if n := sf.get("x-gpuslice"); n != nil {
			sl, own = c.readSlice(n, path+".x-gpuslice").merge(top), true
		}
		pool := topPool
		if g := c.integrationGPU(sf, path+".x-internal-integrations"); g != nil {
			pool = c.pool(g, base+"-"+composeSlug(name), sl, path+".x-internal-integrations.multiTenantGpu")
			s.Pools = append(s.Pools, pool.Pool)
			own = true
		}
		var svc *types.ServiceConfig
		if project != nil {
			sc, ok := project.Services[name]
			if !ok {
				continue // disabled by a profile
			}
			svc = &sc
		}
		dev := composeGPUDevices(svc)
		if pool == nil && !own && !dev.any {
			continue
		}
		wl := c.workload(name, svcs.knode[name], sn, as, svc, sl, pool, dev, base)
		s.Workloads = append(s.Workloads, wl)
	}
	seen := map[string]bool{}
	for _, wl := range s.Workloads {
		if !seen[wl.Tenant] {
			seen[wl.Tenant] = true
			s.Tenants = append(s.Tenants, Tenant{Name: wl.Tenant})
		}
	}
}

// integrationGPU reads x-internal-integrations.multiTenantGpu under f.
func (c *composeFile) integrationGPU(f *fields, path string) *composeGPU {
	n := f.get("x-internal-integrations")
	if n == nil {
		return nil
	}
	g := c.w.mapping(n, path).get("multiTenantGpu")
	if g == nil {
		return nil
	}
	return c.readGPU(g, path+".multiTenantGpu")
}

// pool builds the pool of a multiTenantGpu; sl is the x-gpuslice in force
// where it is declared (its mode mps turns time-slicing into MPS).
func (c *composeFile) pool(g *composeGPU, name string, sl composeSlice, path string) *composePool {
	w := c.w
	p := &composePool{g: g, mode: alloc.Exclusive}
	p.Name, p.Where = name, w.pos(g.node)
	if g.it != nil {
		p.InstanceType, p.GPUsPerNode = g.it.Name, g.it.GPUCount
	}
	if g.gpu != nil {
		p.GPU, p.dev, p.devMiB = g.gpu.ID, g.gpu.ID, g.gpu.MemoryMiB
	}
	if g.profile != nil {
		p.dev, p.devMiB, p.mode = g.profile.Name+" instance of "+g.gpu.ID, g.profile.MemoryMiB, alloc.MIG
		p.MIG, p.MIGLayout = "fixed", map[string]int{g.profile.Name: composeMaxFit(g)}
	}
	var sh alloc.Sharing
	switch {
	case sl.mode == alloc.MPS:
		clients, why, node, npath := g.replicas, fmt.Sprintf("timeSlicingReplicas %d", g.replicas), g.f.get("timeSlicingReplicas"), join(path, "timeSlicingReplicas")
		switch {
		case clients > 0:
		case sl.memoryMiB > 0 && p.devMiB > 0:
			clients, why, node, npath = int(p.devMiB/sl.memoryMiB), fmt.Sprintf("%d MiB of %s / memory %d MiB", p.devMiB, p.dev, sl.memoryMiB), sl.set["memory"], sl.paths["memory"]
		case sl.compute > 0:
			clients, why, node, npath = 100/sl.compute, fmt.Sprintf("100%% / compute %d%%", sl.compute), sl.set["compute"], sl.paths["compute"]
		default:
			clients = alloc.MaxMPSClients
		}
		if clients > alloc.MaxMPSClients {
			w.errorf(node, npath, fmt.Sprintf("%s implies %d MPS clients per device; want at most %d", why, clients, alloc.MaxMPSClients),
				"MPS takes at most %d clients per device", alloc.MaxMPSClients)
			clients = alloc.MaxMPSClients
		}
		sh = alloc.Sharing{Mode: alloc.MPS, MaxClients: max(clients, 1), DefaultThreadPercent: sl.threads, DefaultPinnedMiB: sl.pinnedMiB}
	case g.replicas > 0:
		sh = alloc.Sharing{Mode: alloc.TimeSlice, Replicas: g.replicas}
	case !g.hasMIG:
		w.warnf(g.node, path, "add timeSlicingReplicas: 2 to share each GPU, or migProfile to partition it",
			"neither timeSlicingReplicas nor migProfile: every GPU goes to one replica")
	}
	// Compose decides every pool's sharing: what it sets is where it says
	// so, and no timeSlicingReplicas means one replica per device, decided
	// at the multiTenantGpu (an imported config that differs is a conflict).
	shWhere := w.pos(g.node)
	if n := g.f.get("timeSlicingReplicas"); n != nil {
		shWhere = w.pos(n)
	} else if sl.mode == alloc.MPS && sl.set["mode"] != nil {
		shWhere = w.pos(sl.set["mode"])
	}
	if g.profile != nil {
		p.MIGWhere = w.pos(g.f.get("migProfile"))
	}
	if sh.Mode != "" {
		p.mode, p.slots = sh.Mode, max(sh.Replicas, sh.MaxClients)
		if g.profile != nil {
			p.MIGSharing, p.MIGSharingWhere = sh, shWhere
		} else if !g.hasMIG {
			p.Sharing, p.SharingWhere = sh, shWhere
		}
	} else if g.profile == nil && !g.hasMIG {
		p.Sharing, p.SharingWhere = alloc.Sharing{Mode: alloc.Exclusive}, shWhere
	} else if g.profile != nil {
		p.MIGSharingWhere = shWhere
	}
	return p
}

// composeMaxFit is how many instances of g's profile fit on one GPU.
func composeMaxFit(g *composeGPU) int {
	geo, err := mig.New(g.gpu)
	if err != nil {
		return g.profile.MaxCount
	}
	for n := g.profile.MaxCount; n > 1; n-- {
		want := make([]string, n)
		for i := range want {
			want[i] = g.profile.Name
		}
		if _, err := geo.Fit(want); err == nil {
			return n
		}
	}
	return 1
}

// composeDevices sums a service's compose GPU device requests.
type composeDevices struct {
	any, all bool
	count    int
}

func composeGPUDevices(svc *types.ServiceConfig) composeDevices {
	var d composeDevices
	if svc == nil {
		return d
	}
	reqs := append([]types.DeviceRequest(nil), svc.Gpus...)
	if svc.Deploy != nil && svc.Deploy.Resources.Reservations != nil {
		for _, r := range svc.Deploy.Resources.Reservations.Devices {
			if contains(r.Capabilities, "gpu") || r.Driver == "nvidia" {
				reqs = append(reqs, r)
			}
		}
	}
	for _, r := range reqs {
		d.any = true
		switch {
		case len(r.IDs) > 0:
			d.count += len(r.IDs)
		case r.Count > 0:
			d.count += int(min(r.Count, 1024))
		default:
			d.all = true
		}
	}
	return d
}

// composeSlug lower-cases s and turns every run of other characters than
// letters and digits into one dash.
func composeSlug(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			b.WriteRune(r)
			dash = false
		} else {
			dash = true
		}
	}
	return b.String()
}
