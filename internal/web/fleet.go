package web

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/catalog"
)

// Fleet is every node and GPU as the dashboard draws it.
type Fleet struct {
	Time  time.Time   `json:"time"`
	Nodes []FleetNode `json:"nodes"`
	// Viewer is the tenant the view was made for ("" for an admin): other
	// tenants' claims appear without id or name.
	Viewer string `json:"viewer,omitempty"`
}

// FleetNode is one node.
type FleetNode struct {
	Name          string    `json:"name"`
	State         string    `json:"state"`
	Simulated     bool      `json:"simulated"`
	LastHeartbeat time.Time `json:"lastHeartbeat"`
	// Pool is the node's pool: its gpuslice.dev/pool label, else its
	// instance type ("" when it has neither).
	Pool string     `json:"pool,omitempty"`
	GPUs []FleetGPU `json:"gpus"`
}

// PoolLabel is the node label that names a node's pool (plan.PoolLabel,
// restated: web does not import the planner).
const PoolLabel = "gpuslice.dev/pool"

// PoolOf is a node's pool: its PoolLabel, else its instance type.
func PoolOf(n alloc.Node) string {
	if p := n.Labels[PoolLabel]; p != "" {
		return p
	}
	return n.InstanceType
}

// FleetGPU is one physical GPU with its geometry.
type FleetGPU struct {
	UUID        string `json:"uuid"`
	Index       int    `json:"index"`
	Model       string `json:"model"`
	ProductName string `json:"productName,omitempty"`
	Healthy     bool   `json:"healthy"`
	MemoryMiB   int64  `json:"memoryMiB"`
	// MemorySlices and ComputeSlices are the model's MIG geometry (8 and 7
	// on A100/H100-class, 4 and 4 on A30); 0 when it has no MIG.
	MemorySlices  int `json:"memorySlices"`
	ComputeSlices int `json:"computeSlices"`
	// MIG is true when the GPU is in MIG mode, or will be once the layout
	// changes its claims need are made.
	MIG bool `json:"mig"`
	// Devices are the whole GPU as one device, or its MIG instances (real
	// and planned) in start order.
	Devices []FleetDevice `json:"devices"`
}

// FleetDevice is a whole GPU or a MIG instance, with the claims on it.
type FleetDevice struct {
	ID      string `json:"id"`
	Profile string `json:"profile,omitempty"`
	// Start and Size are memory slices (0 and the GPU's slices for a whole
	// GPU of a MIG-capable model; 0 and 1 for a GPU without MIG).
	Start int `json:"start"`
	Size  int `json:"size"`
	// Planned is an instance the allocator decided on that the node's
	// agent has not reported yet.
	Planned bool `json:"planned,omitempty"`
	// Mode is exclusive, timeslice or mps for a device with claims, else
	// the device's configured sharing ("idle" when unconfigured).
	Mode      string `json:"mode"`
	MemoryMiB int64  `json:"memoryMiB"`
	// ComputePercent is the device's compute as a percent of its GPU.
	ComputePercent float64      `json:"computePercent"`
	Claims         []FleetShare `json:"claims,omitempty"`
}

// FleetShare is one claim's part of a device.
type FleetShare struct {
	// Claim and Tenant are empty for another tenant's claim in a
	// tenant's view.
	Claim  string `json:"claim,omitempty"`
	Tenant string `json:"tenant,omitempty"`
	State  string `json:"state"`
	Mode   string `json:"mode"`
	// MemoryMiB and ComputePercent are what the claim was promised;
	// ComputePercent is a percent of the whole GPU.
	MemoryMiB      int64 `json:"memoryMiB"`
	ComputePercent int   `json:"computePercent"`
	// MemoryShare and ComputeShare are the promise as a fraction of the
	// device (an exclusive or MIG claim holds all of it).
	MemoryShare  float64 `json:"memoryShare"`
	ComputeShare float64 `json:"computeShare"`
	// UsedMiB is what its processes use, as the agent last reported; -1
	// when not reported.
	UsedMiB int64 `json:"usedMiB"`
}

// FleetInput is what BuildFleet reads.
type FleetInput struct {
	Time    time.Time
	Nodes   []api.Node
	Claims  []api.Claim // live (allocated, running) claims; others are ignored
	UsedMiB map[string]int64
	// Viewer is the tenant whose view this is; "" sees every tenant.
	Viewer  string
	Catalog *catalog.Catalog
}

// BuildFleet draws the fleet: each GPU's devices at their placements, with
// the claims on each as shares of its memory and compute.
func BuildFleet(in FleetInput) Fleet {
	cat := in.Catalog
	if cat == nil {
		cat = catalog.Default()
	}
	f := Fleet{Time: in.Time, Viewer: in.Viewer, Nodes: []FleetNode{}}
	// assigned devices per GPU uuid
	type held struct {
		c *api.Claim
		d alloc.Assigned
	}
	byGPU := map[string][]held{}
	for i := range in.Claims {
		c := &in.Claims[i]
		if c.Allocation == nil || (c.State != api.Allocated && c.State != api.Running) {
			continue
		}
		for _, d := range c.Allocation.Devices {
			byGPU[d.GPU] = append(byGPU[d.GPU], held{c, d})
		}
	}
	for _, n := range in.Nodes {
		fn := FleetNode{Name: n.Name, State: string(n.State), Simulated: n.Simulated, LastHeartbeat: n.LastHeartbeat,
			Pool: PoolOf(n.Inventory), GPUs: []FleetGPU{}}
		for _, g := range n.Inventory.GPUs {
			fg := FleetGPU{UUID: g.UUID, Index: g.Index, Model: g.Model, Healthy: g.Healthy, MIG: g.MIGEnabled}
			model, _ := cat.GPU(g.Model)
			var spec *catalog.MIGSpec
			if model != nil {
				fg.MemoryMiB = model.MemoryMiB
				if len(model.ProductNames) > 0 {
					fg.ProductName = model.ProductNames[0]
				}
				spec = model.MIG
			}
			if spec != nil {
				fg.MemorySlices, fg.ComputeSlices = spec.MemorySlices, spec.ComputeSlices
			}
			hs := byGPU[g.UUID]
			for _, h := range hs {
				if h.d.Profile != "" {
					fg.MIG = true // MIG goes on for it
				}
			}
			if !fg.MIG {
				size := max(fg.MemorySlices, 1)
				dev := FleetDevice{ID: g.UUID, Start: 0, Size: size, MemoryMiB: fg.MemoryMiB, ComputePercent: 100, Mode: sharingMode(g.Sharing)}
				for _, h := range hs {
					dev.Claims = append(dev.Claims, share(h.c, h.d, dev, in))
				}
				fg.Devices = append(fg.Devices, finish(dev))
			} else {
				devs := []FleetDevice{}
				find := func(pred func(FleetDevice) bool) int { return slices.IndexFunc(devs, pred) }
				for _, inst := range g.Instances {
					devs = append(devs, instanceDevice(inst.UUID, inst.Profile, inst.Start, model, sharingMode(inst.Sharing)))
				}
				for _, h := range hs {
					i := find(func(d FleetDevice) bool { return d.ID == h.d.Device })
					if i < 0 && h.d.Profile != "" {
						i = find(func(d FleetDevice) bool { return d.Profile == h.d.Profile && d.Start == h.d.Start })
					}
					if i < 0 {
						profile, start := h.d.Profile, h.d.Start
						if profile == "" { // a planned id "GPU-…/PROFILE@START"
							profile, start = parsePlanned(h.d.Device)
						}
						dev := instanceDevice(h.d.Device, profile, start, model, "idle")
						dev.Planned = true
						devs = append(devs, dev)
						i = len(devs) - 1
					}
					devs[i].Claims = append(devs[i].Claims, share(h.c, h.d, devs[i], in))
				}
				for i := range devs {
					devs[i] = finish(devs[i])
				}
				slices.SortFunc(devs, func(a, b FleetDevice) int { return cmp.Or(cmp.Compare(a.Start, b.Start), strings.Compare(a.ID, b.ID)) })
				fg.Devices = devs
			}
			fn.GPUs = append(fn.GPUs, fg)
		}
		f.Nodes = append(f.Nodes, fn)
	}
	return f
}

func parsePlanned(id string) (string, int) {
	_, rest, ok := strings.Cut(id, "/")
	if !ok {
		return "", 0
	}
	p, s, _ := strings.Cut(rest, "@")
	n := 0
	for _, r := range s {
		if r < '0' || r > '9' {
			return p, 0
		}
		n = n*10 + int(r-'0')
	}
	return p, n
}

func instanceDevice(id, profile string, start int, model *catalog.GPU, mode string) FleetDevice {
	d := FleetDevice{ID: id, Profile: profile, Start: start, Size: 1, Mode: mode}
	if model == nil || model.MIG == nil {
		return d
	}
	if p, err := model.Profile(profile); err == nil {
		d.Size = p.Placement.Size
		d.MemoryMiB = p.MemoryMiB
		if model.MIG.ComputeSlices > 0 {
			d.ComputePercent = 100 * float64(p.ComputeSlices) / float64(model.MIG.ComputeSlices)
		}
	}
	return d
}

func sharingMode(s alloc.Sharing) string {
	switch s.Mode {
	case "", alloc.Dynamic:
		return "idle"
	case alloc.MIG:
		return "exclusive"
	}
	return string(s.Mode)
}

// share is one claim's part of dev; another tenant's claim is anonymous
// in a tenant's view.
func share(c *api.Claim, d alloc.Assigned, dev FleetDevice, in FleetInput) FleetShare {
	s := FleetShare{Claim: c.ID, Tenant: c.Tenant, State: string(c.State), Mode: string(d.Mode),
		MemoryMiB: d.MemoryMiB, ComputePercent: d.ComputePercent, UsedMiB: -1}
	if d.Mode == alloc.MIG {
		s.Mode = string(alloc.Exclusive)
	}
	if u, ok := in.UsedMiB[c.ID]; ok {
		s.UsedMiB = u
	}
	if s.Mode == string(alloc.Exclusive) {
		s.MemoryShare, s.ComputeShare = 1, 1
	} else {
		if dev.MemoryMiB > 0 {
			s.MemoryShare = min(1, float64(d.MemoryMiB)/float64(dev.MemoryMiB))
		}
		if dev.ComputePercent > 0 {
			s.ComputeShare = min(1, float64(d.ComputePercent)/dev.ComputePercent)
		}
	}
	if in.Viewer != "" && c.Tenant != in.Viewer {
		s.Claim, s.Tenant, s.UsedMiB = "", "", -1
	}
	return s
}

// finish sets a device's mode from its claims.
func finish(d FleetDevice) FleetDevice {
	if len(d.Claims) > 0 {
		d.Mode = d.Claims[0].Mode
	}
	return d
}
