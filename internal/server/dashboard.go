package server

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/state"
	"github.com/gpuslice/gpuslice/internal/web"
)

// snapshot is what one read-only transaction gives the dashboard.
type snapshot struct {
	nodes   []api.Node
	claims  []api.Claim // pending, allocated, running
	tenants []api.Tenant
	usage   map[string]api.Usage
}

// readSnapshot is the fleet (nodes and pending and live claims, of one
// tenant when tenant is set) from the fleet cache, and the tenants with
// their usage (one when tenant is set) from the store.
func (srv *Server) readSnapshot(ctx context.Context, tenant string) (snapshot, error) {
	fs, err := srv.readFleet(ctx)
	if err != nil {
		return snapshot{}, err
	}
	s := snapshot{nodes: fs.nodes, claims: fs.claims, usage: map[string]api.Usage{}}
	if tenant != "" {
		s.claims = nil
		for _, c := range fs.claims {
			if c.Tenant == tenant {
				s.claims = append(s.claims, c)
			}
		}
	}
	err = srv.store.View(ctx, func(tx state.Tx) error {
		var err error
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

// fleet answers GET /v1/fleet[?limit=N][&after=NODE][&node=NAME]: a page
// of nodes (100 by default) with every GPU's MIG geometry, the devices at
// their placements and the claims on each. A tenant sees other tenants'
// claims only as anonymous shares.
func (srv *Server) fleet(w http.ResponseWriter, r *http.Request, p principal) {
	pg, err := pageOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if r.URL.Query().Get("limit") == "" {
		pg.limit = fleetPageSize
	}
	snap, err := srv.readFleet(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	// The read is shared: cut a copy.
	s := &fleetSnap{at: snap.at, seq: snap.seq, nodes: snap.nodes, claims: snap.claims, used: snap.used}
	if name := r.URL.Query().Get("node"); name != "" {
		s.nodes = slices.DeleteFunc(slices.Clone(s.nodes), func(n api.Node) bool { return n.Name != name })
	}
	s.nodes = pageByName(w, pg, s.nodes, func(n api.Node) string { return n.Name })
	writeJSONGzip(w, r, s.fleetFor(p, srv.cfg.Clock()))
}

// dashboardQuery is what GET /v1/dashboard reads from its URL.
type dashboardQuery struct {
	since  time.Time
	points int
	limit  int
	after  string
	q      string
	sort   string
}

func parseDashboardQuery(r *http.Request) (dashboardQuery, error) {
	v := r.URL.Query()
	dq := dashboardQuery{points: chartPoints, limit: dashboardPageSize, after: v.Get("after"), q: v.Get("q"), sort: v.Get("sort")}
	if s := v.Get("since"); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return dq, errField("since", "since %q: want an RFC 3339 time such as 2026-01-02T15:04:05Z", s)
		}
		dq.since = t
	}
	if s := v.Get("points"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 2 || n > 5000 {
			return dq, errField("points", "points %q: want a whole number from 2 to 5000", s)
		}
		dq.points = n
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxPageSize {
			return dq, errField("limit", "limit %q: want a whole number from 1 to %d", s, MaxPageSize)
		}
		dq.limit = n
	}
	switch dq.sort {
	case "":
		dq.sort = "name"
	case "name", "cost", "memory", "pending", "gpuSeconds":
	default:
		return dq, errField("sort", "sort %q: want name, cost, memory, pending or gpuSeconds", dq.sort)
	}
	if len(dq.after) > 256 || len(dq.q) > 256 {
		return dq, errField("after", "cursor or query longer than 256 bytes")
	}
	if dq.sort != "name" && dq.after != "" {
		if n, err := strconv.Atoi(dq.after); err != nil || n < 0 {
			return dq, errField("after", "cursor %q: pass the %s header of the previous page", dq.after, NextCursorHeader)
		}
	}
	return dq, nil
}

// dashboard answers GET /v1/dashboard[?since=RFC3339][&points=N][&limit=N]
// [&after=CURSOR][&q=TEXT][&sort=name|cost|memory|pending|gpuSeconds]:
// one page of tenants (50 by default; q keeps names containing it) and
// the charts' samples, thinned to points.
func (srv *Server) dashboard(w http.ResponseWriter, r *http.Request, p principal) {
	dq, err := parseDashboardQuery(r)
	if err != nil {
		writeError(w, err)
		return
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
	out := web.Dashboard{Time: srv.cfg.Clock(), Viewer: viewer, Tenants: []web.TenantView{}, GPUHourPrices: prices,
		SampleSeconds: srv.cfg.SampleInterval.Seconds()}
	byTenant := map[string][]api.Claim{}
	for _, c := range s.claims {
		if p.sees(&c) {
			byTenant[c.Tenant] = append(byTenant[c.Tenant], c)
		}
	}
	var all []web.TenantView
	for _, t := range s.tenants {
		if viewer != "" && t.Name != viewer || dq.q != "" && !strings.Contains(strings.ToLower(t.Name), strings.ToLower(dq.q)) {
			continue
		}
		all = append(all, tenantView(t, s.usage[t.Name], byTenant[t.Name], models, prices, cat))
	}
	out.TotalTenants = len(all)
	if dq.sort == "name" {
		i := 0
		for dq.after != "" && i < len(all) && all[i].Name <= dq.after {
			i++
		}
		all = all[i:]
		if len(all) > dq.limit {
			all = all[:dq.limit]
			out.Next = all[len(all)-1].Name
		}
	} else {
		key := map[string]func(web.TenantView) float64{
			"cost":       func(t web.TenantView) float64 { return t.Cost.PerHour },
			"memory":     func(t web.TenantView) float64 { return float64(t.Usage.MemoryMiB) },
			"pending":    func(t web.TenantView) float64 { return float64(t.Pending) },
			"gpuSeconds": func(t web.TenantView) float64 { return t.Usage.GPUSeconds },
		}[dq.sort]
		slices.SortStableFunc(all, func(a, b web.TenantView) int { return cmp.Compare(key(b), key(a)) })
		off, _ := strconv.Atoi(dq.after)
		all = all[min(off, len(all)):]
		if len(all) > dq.limit {
			all = all[:dq.limit]
			out.Next = strconv.Itoa(off + dq.limit)
		}
	}
	out.Tenants = append(out.Tenants, all...)
	if out.Next != "" {
		w.Header().Set(NextCursorHeader, out.Next)
	}
	series := srv.series.Since(dq.since, nil)
	if viewer != "" {
		out.ChartTenants = []string{viewer}
	} else if len(series) > 0 {
		out.ChartTenants = topTenants(series[len(series)-1], chartTenants)
	}
	if out.ChartTenants == nil {
		out.ChartTenants = []string{}
	}
	out.Series = web.Thin(series, dq.points)
	view := web.OnlyTenants(out.ChartTenants)
	if viewer != "" {
		view = web.ForTenant(viewer)
	}
	for i := range out.Series {
		out.Series[i] = view(out.Series[i])
	}
	writeJSONGzip(w, r, out)
}

func tenantView(t api.Tenant, usage api.Usage, claims []api.Claim, models map[string]string, prices map[string]float64, cat *catalog.Catalog) web.TenantView {
	tv := web.TenantView{Name: t.Name, MemoryQuotaMiB: t.MemoryMiB, ComputeQuotaPercent: t.ComputePercent, Usage: usage}
	tv.Usage.Tenant = t.Name
	for _, c := range claims {
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
	tv.Cost = web.TenantCost(claims, func(g string) string { return models[g] }, prices, cat)
	return tv
}

// dashboardTenant answers GET /v1/dashboard/tenants/{name}[?points=N]: a
// tenant token gets its own tenant only (another is 404).
func (srv *Server) dashboardTenant(w http.ResponseWriter, r *http.Request, p principal) {
	name := r.PathValue("name")
	dq, err := parseDashboardQuery(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if p.role == api.RoleTenant && name != p.tenant {
		writeError(w, errStatus(http.StatusNotFound, "tenant %q not found", name))
		return
	}
	var out web.TenantPage
	var t api.Tenant
	var usage api.Usage
	var nodes []api.Node
	err = srv.store.View(r.Context(), func(tx state.Tx) error {
		var err error
		if t, err = tx.GetTenant(name); err != nil {
			return err
		}
		if usage, err = tx.Usage(name); err != nil {
			return err
		}
		if nodes, err = tx.ListNodes(); err != nil {
			return err
		}
		out.Claims, err = tx.ListClaims(state.ClaimFilter{Tenant: name, States: []api.ClaimState{api.Pending, api.Allocated, api.Running}, Limit: 500})
		return err
	})
	if err != nil {
		writeError(w, err)
		return
	}
	out.Claims = slices.DeleteFunc(out.Claims, func(c api.Claim) bool { return !p.sees(&c) })
	if out.Claims == nil {
		out.Claims = []api.Claim{}
	}
	cat := catalog.Default()
	out.Time = srv.cfg.Clock()
	out.Tenant = tenantView(t, usage, out.Claims, modelsByGPU(nodes), web.GPUHourPrices(cat), cat)
	out.Series = web.Thin(srv.series.Since(dq.since, web.ForTenant(name)), dq.points)
	if out.Events, err = srv.recentEvents(r.Context(), p, func(e api.Event) bool { return e.Tenant == name }, 50, time.Time{}); err != nil {
		writeError(w, err)
		return
	}
	writeJSONGzip(w, r, out)
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
	srv.gpuHistory.Record(x.Time, web.BuildFleet(web.FleetInput{Time: x.Time, Nodes: s.nodes, Claims: s.claims, UsedMiB: used, Catalog: cat}))
	srv.samples.ring()
	return nil
}
