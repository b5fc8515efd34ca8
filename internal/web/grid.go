package web

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/catalog"
)

// Modes are the device modes a grid cell names by index.
var Modes = []string{"idle", "exclusive", "timeslice", "mps"}

// Grid is the whole fleet in a form small enough to send at 8,000 GPUs:
// one flat list of numbers per GPU (see GPUs), names sent once in the
// lists the numbers index. The dashboard draws it as a heat map.
type Grid struct {
	Time   time.Time   `json:"time"`
	Viewer string      `json:"viewer,omitempty"`
	Nodes  []GridNode  `json:"nodes"`
	Models []GridModel `json:"models"`
	// Tenants are the tenants named in cells; a tenant's view names only
	// itself (other tenants' shares carry -1).
	Tenants []string `json:"tenants"`
	Modes   []string `json:"modes"`
	// GPUs holds one cell per GPU, in node then index order:
	//
	//	node, index, model, flags (1 healthy, 2 MIG), memory promised ‰,
	//	memory used ‰ (-1 not reported), compute promised ‰, device count,
	//	then per device: start, size (memory slices), mode, planned (0/1),
	//	share count, then per share: tenant (-1: another tenant's),
	//	memory ‰ of the device, compute ‰ of the device.
	GPUs [][]int `json:"gpus"`
}

// GridNode is a node of the grid.
type GridNode struct {
	Name  string `json:"name"`
	State string `json:"state"`
	Pool  string `json:"pool,omitempty"`
}

// GridModel is a GPU model of the grid.
type GridModel struct {
	Name      string `json:"name"`
	MemoryMiB int64  `json:"memoryMiB"`
	// Slices is the model's memory slices (0: no MIG).
	Slices int `json:"slices"`
}

// Cell flags.
const (
	CellHealthy = 1
	CellMIG     = 2
)

func permille(x float64) int { return int(math.Round(1000 * x)) }

// BuildGrid encodes a fleet (BuildFleet's, already made for its viewer)
// as a Grid, its tenants sorted by name.
func BuildGrid(f Fleet) Grid {
	var e GridEncoder
	return e.Encode(f)
}

// GridEncoder encodes fleets one after another for one stream: a model or
// tenant keeps its index from one grid to the next (new ones are added at
// the end, so a client that has the earlier lists can read the new cells).
type GridEncoder struct {
	models  []GridModel
	tenants []string
	mi, ti  map[string]int
}

// Adopt starts the encoder from a grid it would have made (BuildGrid's,
// of the same fleet): the next Encode keeps its lists' indices.
func (e *GridEncoder) Adopt(g Grid) {
	e.models, e.tenants = append([]GridModel{}, g.Models...), append([]string{}, g.Tenants...)
	e.mi, e.ti = make(map[string]int, len(g.Models)), make(map[string]int, len(g.Tenants))
	for i, m := range g.Models {
		e.mi[m.Name] = i
	}
	for i, t := range g.Tenants {
		e.ti[t] = i
	}
}

// Encode encodes f; its lists are the encoder's, the earlier names first.
func (e *GridEncoder) Encode(f Fleet) Grid {
	if e.mi == nil {
		e.mi, e.ti = map[string]int{}, map[string]int{}
	}
	var newModels []GridModel
	var newTenants []string
	for _, n := range f.Nodes {
		for _, gpu := range n.GPUs {
			if _, ok := e.mi[gpu.Model]; !ok && !slices.ContainsFunc(newModels, func(m GridModel) bool { return m.Name == gpu.Model }) {
				newModels = append(newModels, GridModel{Name: gpu.Model, MemoryMiB: gpu.MemoryMiB, Slices: gpu.MemorySlices})
			}
			for _, d := range gpu.Devices {
				for _, s := range d.Claims {
					if _, ok := e.ti[s.Tenant]; !ok && s.Tenant != "" {
						e.ti[s.Tenant] = -1
						newTenants = append(newTenants, s.Tenant)
					}
				}
			}
		}
	}
	slices.SortFunc(newModels, func(a, b GridModel) int { return cmp.Compare(a.Name, b.Name) })
	for _, m := range newModels {
		e.mi[m.Name] = len(e.models)
		e.models = append(e.models, m)
	}
	slices.Sort(newTenants)
	for _, t := range newTenants {
		e.ti[t] = len(e.tenants)
		e.tenants = append(e.tenants, t)
	}
	g := Grid{Time: f.Time, Viewer: f.Viewer, Nodes: make([]GridNode, 0, len(f.Nodes)), Models: append([]GridModel{}, e.models...),
		Tenants: append([]string{}, e.tenants...), Modes: Modes, GPUs: [][]int{}}
	for ni, n := range f.Nodes {
		g.Nodes = append(g.Nodes, GridNode{Name: n.Name, State: n.State, Pool: n.Pool})
		for _, gpu := range n.GPUs {
			g.GPUs = append(g.GPUs, cell(ni, gpu, e.mi, e.ti))
		}
	}
	return g
}

// GridDelta is what changed from one grid to the next of one encoder,
// when the nodes are the same (else a stream sends the whole grid).
type GridDelta struct {
	Time time.Time `json:"time"`
	// Models and Tenants are the names added to the lists, in order.
	Models  []GridModel `json:"models,omitempty"`
	Tenants []string    `json:"tenants,omitempty"`
	// Cells are the changed cells: each is its position in the grid's
	// GPUs followed by the cell.
	Cells [][]int `json:"cells"`
}

// Diff is the delta from old to new (both from this encoder), and false
// when the nodes or their GPU counts differ: then only a whole grid will do.
func Diff(old, new Grid) (GridDelta, bool) {
	if len(old.GPUs) != len(new.GPUs) || !slices.Equal(old.Nodes, new.Nodes) {
		return GridDelta{}, false
	}
	d := GridDelta{Time: new.Time, Models: new.Models[len(old.Models):], Tenants: new.Tenants[len(old.Tenants):], Cells: [][]int{}}
	for i := range new.GPUs {
		if new.GPUs[i][0] != old.GPUs[i][0] || new.GPUs[i][1] != old.GPUs[i][1] {
			return GridDelta{}, false
		}
		if !slices.Equal(old.GPUs[i], new.GPUs[i]) {
			d.Cells = append(d.Cells, append([]int{i}, new.GPUs[i]...))
		}
	}
	return d, true
}

func cell(node int, gpu FleetGPU, models, tenants map[string]int) []int {
	flags := 0
	if gpu.Healthy {
		flags |= CellHealthy
	}
	if gpu.MIG {
		flags |= CellMIG
	}
	u := Use(gpu)
	used := -1
	if u.UsedMiB >= 0 && gpu.MemoryMiB > 0 {
		used = permille(float64(u.UsedMiB) / float64(gpu.MemoryMiB))
	}
	var mem, comp int
	if gpu.MemoryMiB > 0 {
		mem = permille(float64(u.PromisedMiB) / float64(gpu.MemoryMiB))
	}
	comp = permille(u.ComputePromised)
	c := []int{node, gpu.Index, models[gpu.Model], flags, mem, used, comp, len(gpu.Devices)}
	for _, d := range gpu.Devices {
		planned := 0
		if d.Planned {
			planned = 1
		}
		c = append(c, d.Start, d.Size, max(0, slices.Index(Modes, d.Mode)), planned, len(d.Claims))
		for _, s := range d.Claims {
			t := -1
			if s.Tenant != "" {
				t = tenants[s.Tenant]
			}
			c = append(c, t, permille(s.MemoryShare), permille(s.ComputeShare))
		}
	}
	return c
}

// GPUUse is what one GPU's live claims were promised and use.
type GPUUse struct {
	PromisedMiB int64
	// UsedMiB is the memory reported in use; -1 when no claim on the
	// GPU reported any (or the viewer may not see it).
	UsedMiB int64
	// ComputePromised is the compute promised as a fraction of the GPU
	// (exclusive and MIG claims hold their device's part).
	ComputePromised float64
	Claims          int
}

// Use sums a GPU's shares.
func Use(gpu FleetGPU) GPUUse {
	u := GPUUse{UsedMiB: -1}
	for _, d := range gpu.Devices {
		for _, s := range d.Claims {
			u.Claims++
			if s.Mode == "exclusive" {
				u.PromisedMiB += d.MemoryMiB
			} else {
				u.PromisedMiB += s.MemoryMiB
			}
			u.ComputePromised += s.ComputeShare * d.ComputePercent / 100
			if s.UsedMiB >= 0 {
				u.UsedMiB = max(u.UsedMiB, 0) + s.UsedMiB
			}
		}
	}
	u.ComputePromised = min(u.ComputePromised, 1)
	return u
}

// GPUMode is the mode a GPU is counted under: mig, or its whole device's
// mode (idle, exclusive, timeslice, mps).
func GPUMode(gpu FleetGPU) string {
	if gpu.MIG {
		return "mig"
	}
	if len(gpu.Devices) > 0 {
		return gpu.Devices[0].Mode
	}
	return "idle"
}

// Summary is the fleet at a glance: counts and totals only, the same
// size however large the fleet.
type Summary struct {
	Time   time.Time `json:"time"`
	Viewer string    `json:"viewer,omitempty"`
	Nodes  int       `json:"nodes"`
	// NodesByState counts nodes by state (ready, lost).
	NodesByState map[string]int `json:"nodesByState"`
	GPUs         int            `json:"gpus"`
	// ByModel and ByMode count GPUs (in use: with at least one live claim).
	ByModel []SummaryCount `json:"byModel"`
	ByMode  []SummaryCount `json:"byMode"`
	// ByPool counts GPUs by the pool of their node.
	ByPool    []SummaryCount `json:"byPool"`
	Unhealthy int            `json:"unhealthy"`
	// MemoryMiB and ComputeGPUs are the healthy GPUs of ready nodes;
	// promised is what live claims hold, used what their processes use.
	MemoryMiB         int64   `json:"memoryMiB"`
	MemoryPromisedMiB int64   `json:"memoryPromisedMiB"`
	MemoryUsedMiB     int64   `json:"memoryUsedMiB"`
	ComputeGPUs       float64 `json:"computeGPUs"`
	ComputePromised   float64 `json:"computePromised"`
	// Pending is every pending claim for an admin, the tenant's own for
	// a tenant; LiveClaims likewise.
	Pending    int `json:"pending"`
	LiveClaims int `json:"liveClaims"`
	// Tenants is how many tenants hold a live claim (admins only).
	Tenants int `json:"tenants,omitempty"`
	// CostPerHour is what the live claims cost at catalog prices (an
	// admin's: every tenant's; a tenant's: its own); FleetPerHour what
	// every GPU of the fleet costs.
	CostPerHour  float64 `json:"costPerHour"`
	FleetPerHour float64 `json:"fleetPerHour"`
	// EventSeq is the newest event the viewer may read (a lower bound),
	// for a page that wants only the latest events of GET /v1/events.
	EventSeq int64 `json:"eventSeq"`
}

// SummaryCount is one row of a summary's breakdown.
type SummaryCount struct {
	Name      string `json:"name"`
	GPUs      int    `json:"gpus"`
	InUse     int    `json:"inUse"`
	Unhealthy int    `json:"unhealthy,omitempty"`
}

// SummaryInput is what Summarize reads.
type SummaryInput struct {
	Time time.Time
	// Fleet is the whole fleet as an admin sees it: fleet-wide totals
	// name no tenant, so a tenant gets them too.
	Fleet Fleet
	// Claims are the live and pending claims the viewer may see (its
	// own for a tenant).
	Claims  []api.Claim
	Viewer  string
	Catalog *catalog.Catalog
	Prices  map[string]float64
}

// Summarize makes the fleet's summary.
func Summarize(in SummaryInput) Summary {
	cat := in.Catalog
	if cat == nil {
		cat = catalog.Default()
	}
	s := Summary{Time: in.Time, Viewer: in.Viewer, NodesByState: map[string]int{}, ByModel: []SummaryCount{}, ByMode: []SummaryCount{}, ByPool: []SummaryCount{}}
	bump := func(list *[]SummaryCount, name string, inUse, sick bool) {
		i := slices.IndexFunc(*list, func(c SummaryCount) bool { return c.Name == name })
		if i < 0 {
			*list = append(*list, SummaryCount{Name: name})
			i = len(*list) - 1
		}
		c := &(*list)[i]
		c.GPUs++
		if inUse {
			c.InUse++
		}
		if sick {
			c.Unhealthy++
		}
	}
	models := map[string]string{}
	for _, n := range in.Fleet.Nodes {
		s.Nodes++
		s.NodesByState[n.State]++
		for _, g := range n.GPUs {
			models[g.UUID] = g.Model
			s.GPUs++
			u := Use(g)
			inUse := u.Claims > 0
			bump(&s.ByModel, g.Model, inUse, !g.Healthy)
			bump(&s.ByMode, GPUMode(g), inUse, !g.Healthy)
			pool := n.Pool
			if pool == "" {
				pool = "(no pool)"
			}
			bump(&s.ByPool, pool, inUse, !g.Healthy)
			s.FleetPerHour += in.Prices[g.Model]
			if !g.Healthy {
				s.Unhealthy++
				continue
			}
			if n.State != string(api.NodeReady) {
				continue
			}
			s.MemoryMiB += g.MemoryMiB
			s.ComputeGPUs++
			s.MemoryPromisedMiB += u.PromisedMiB
			s.MemoryUsedMiB += max(u.UsedMiB, 0)
			s.ComputePromised += u.ComputePromised
		}
	}
	byCount := func(a, b SummaryCount) int { return cmp.Or(cmp.Compare(b.GPUs, a.GPUs), cmp.Compare(a.Name, b.Name)) }
	slices.SortFunc(s.ByModel, byCount)
	slices.SortFunc(s.ByMode, byCount)
	slices.SortFunc(s.ByPool, byCount)
	tenants := map[string]bool{}
	for _, c := range in.Claims {
		switch c.State {
		case api.Pending:
			s.Pending++
		case api.Allocated, api.Running:
			s.LiveClaims++
			tenants[c.Tenant] = true
		}
	}
	if in.Viewer == "" {
		s.Tenants = len(tenants)
	}
	s.CostPerHour = TenantCost(in.Claims, func(g string) string { return models[g] }, in.Prices, cat).PerHour
	return s
}
