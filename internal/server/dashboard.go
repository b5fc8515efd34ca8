package server

import (
	"context"
	"net/http"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/state"
	"github.com/gpuslice/gpuslice/internal/web"
)

// Dashboard is the answer of GET /v1/dashboard: the tenants the caller may
// see with quota, usage and cost, and the samples for the charts.
type Dashboard struct {
	Time time.Time `json:"time"`
	// Viewer is the caller's tenant ("" for an admin).
	Viewer  string       `json:"viewer,omitempty"`
	Tenants []TenantView `json:"tenants"`
	Series  []web.Sample `json:"series"`
	// GPUHourPrices is the cheapest catalog price of a GPU-hour by model.
	GPUHourPrices map[string]float64 `json:"gpuHourPrices"`
	// SampleSeconds is how often a sample is taken.
	SampleSeconds float64 `json:"sampleSeconds"`
}

// TenantView is one tenant in the dashboard.
type TenantView struct {
	Name                string    `json:"name"`
	MemoryQuotaMiB      int64     `json:"memoryQuotaMiB,omitempty"`
	ComputeQuotaPercent int       `json:"computeQuotaPercent,omitempty"`
	Usage               api.Usage `json:"usage"`
	Pending             int       `json:"pending"`
	Cost                web.Cost  `json:"cost"`
}

// snapshot is what one read-only transaction gives the dashboard.
type snapshot struct {
	nodes   []api.Node
	claims  []api.Claim // pending, allocated, running
	tenants []api.Tenant
	usage   map[string]api.Usage
}

func (srv *Server) readSnapshot(ctx context.Context, tenant string) (snapshot, error) {
	s := snapshot{usage: map[string]api.Usage{}}
	err := srv.store.View(ctx, func(tx state.Tx) error {
		var err error
		if s.nodes, err = tx.ListNodes(); err != nil {
			return err
		}
		if s.claims, err = tx.ListClaims(state.ClaimFilter{Tenant: tenant, States: []api.ClaimState{api.Pending, api.Allocated, api.Running}}); err != nil {
			return err
		}
		if s.tenants, err = tx.ListTenants(); err != nil {
			return err
		}
		for _, t := range s.tenants {
			if tenant != "" && t.Name != tenant {
				continue
			}
			if s.usage[t.Name], err = tx.Usage(t.Name); err != nil {
				return err
			}
		}
		return nil
	})
	return s, err
}

func viewerOf(p principal) string {
	if p.role == api.RoleTenant {
		return p.tenant
	}
	return ""
}

// fleet answers GET /v1/fleet: every node and GPU with its MIG geometry,
// the devices at their placements and the claims on each. A tenant sees
// other tenants' claims only as anonymous shares.
func (srv *Server) fleet(w http.ResponseWriter, r *http.Request, p principal) {
	s, err := srv.readSnapshot(r.Context(), "")
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, web.BuildFleet(web.FleetInput{Time: srv.cfg.Clock(), Nodes: s.nodes, Claims: s.claims,
		UsedMiB: srv.metrics.usedByClaim(), Viewer: viewerOf(p), Catalog: catalog.Default()}))
}

// dashboard answers GET /v1/dashboard[?since=RFC3339].
func (srv *Server) dashboard(w http.ResponseWriter, r *http.Request, p principal) {
	var since time.Time
	if v := r.URL.Query().Get("since"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			writeError(w, errField("since", "since %q: want an RFC 3339 time such as 2026-01-02T15:04:05Z", v))
			return
		}
		since = t
	}
	viewer := viewerOf(p)
	s, err := srv.readSnapshot(r.Context(), viewer)
	if err != nil {
		writeError(w, err)
		return
	}
	cat := catalog.Default()
	prices := web.GPUHourPrices(cat)
	models := modelsByGPU(s.nodes)
	out := Dashboard{Time: srv.cfg.Clock(), Viewer: viewer, Tenants: []TenantView{}, GPUHourPrices: prices,
		SampleSeconds: srv.cfg.SampleInterval.Seconds()}
	byTenant := map[string][]api.Claim{}
	for _, c := range s.claims {
		byTenant[c.Tenant] = append(byTenant[c.Tenant], c)
	}
	for _, t := range s.tenants {
		if viewer != "" && t.Name != viewer {
			continue
		}
		tv := TenantView{Name: t.Name, MemoryQuotaMiB: t.MemoryMiB, ComputeQuotaPercent: t.ComputePercent, Usage: s.usage[t.Name]}
		tv.Usage.Tenant = t.Name
		for _, c := range byTenant[t.Name] {
			if c.State == api.Pending {
				tv.Pending++
				continue
			}
			tv.Usage.Claims++
			for _, d := range c.Allocation.Devices {
				tv.Usage.MemoryMiB += d.MemoryMiB
				tv.Usage.ComputePercent += d.ComputePercent
			}
		}
		tv.Cost = web.TenantCost(byTenant[t.Name], func(g string) string { return models[g] }, prices, cat)
		out.Tenants = append(out.Tenants, tv)
	}
	var view func(web.Sample) web.Sample
	if viewer != "" {
		view = web.ForTenant(viewer)
	}
	out.Series = srv.series.Since(since, view)
	writeJSON(w, http.StatusOK, out)
}

func modelsByGPU(nodes []api.Node) map[string]string {
	m := map[string]string{}
	for _, n := range nodes {
		for _, g := range n.Inventory.GPUs {
			m[g.UUID] = g.Model
		}
	}
	return m
}

// Sample reads the fleet once and records a sample in the dashboard's
// ring (Run calls it every SampleInterval).
func (srv *Server) Sample(ctx context.Context) error {
	s, err := srv.readSnapshot(ctx, "")
	if err != nil {
		return err
	}
	x := web.Sample{Time: srv.cfg.Clock(), Tenants: map[string]web.TenantSample{}}
	for _, t := range s.tenants {
		u := s.usage[t.Name]
		x.Tenants[t.Name] = web.TenantSample{GPUSeconds: u.GPUSeconds, MemoryMiBSeconds: u.MemoryMiBSec}
	}
	cat := catalog.Default()
	usable := map[string]bool{}
	for _, n := range s.nodes {
		if n.State != api.NodeReady {
			continue
		}
		for _, g := range n.Inventory.GPUs {
			if !g.Healthy {
				continue
			}
			usable[g.UUID] = true
			x.GPUs++
			if m, err := cat.GPU(g.Model); err == nil {
				x.MemoryMiB += m.MemoryMiB
			}
		}
	}
	used := srv.metrics.usedByClaim()
	inUse := map[string]bool{}
	for _, c := range s.claims {
		ts := x.Tenants[c.Tenant]
		if c.State == api.Pending {
			x.Pending++
			ts.Pending++
			x.Tenants[c.Tenant] = ts
			continue
		}
		ts.Running++
		for _, d := range c.Allocation.Devices {
			x.MemoryPromisedMiB += d.MemoryMiB
			x.ComputePromised += float64(d.ComputePercent) / 100
			ts.MemoryMiB += d.MemoryMiB
			if usable[d.GPU] {
				inUse[d.GPU] = true
			}
		}
		x.MemoryUsedMiB += used[c.ID]
		x.Tenants[c.Tenant] = ts
	}
	x.GPUsInUse = len(inUse)
	srv.series.Add(x)
	return nil
}
