package server

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/state"
	"github.com/gpuslice/gpuslice/internal/web"
)

// The dashboard's views of a large fleet: a summary (counts only), the
// grid (one compact cell per GPU), pages of the full fleet, one GPU, one
// tenant, one claim's history, and an event stream of grid changes. Every
// view is made for its caller: a tenant token sees other tenants' shares
// without claim or tenant, and no other tenant's events or claims.

// fleetPageSize is the default page of GET /v1/fleet, in nodes.
const fleetPageSize = 100

// dashboardPageSize is the default page of GET /v1/dashboard, in tenants.
const dashboardPageSize = 50

// chartPoints is how many samples a chart gets by default (?points=).
const chartPoints = 240

// chartTenants is how many tenants the dashboard's per-tenant charts draw
// (those with the most GPU-seconds).
const chartTenants = 12

// streamSpacing is the least time between two updates of a dashboard
// stream: a burst of changes is sent as one delta.
const streamSpacing = 100 * time.Millisecond

// fleetSnap is what the fleet views are made of: the nodes and the
// pending and live claims. Never changed once made (readers share it).
type fleetSnap struct {
	at     time.Time
	full   time.Time // when the store was last read whole
	seq    int64     // every event up to seq is reflected
	nodes  []api.Node
	claims []api.Claim // pending, allocated, running: every tenant's, by seq
	used   map[string]int64

	// whole is the fleet as an admin sees it, built once per snapshot;
	// grid and gridJSON its grid, encoded once (an admin's page load
	// sends it as it is).
	wholeOnce sync.Once
	whole     web.Fleet
	gridOnce  sync.Once
	grid      web.Grid
	gridJSON  []byte
}

// admin is the snapshot's fleet as an admin sees it (built on first use,
// then shared by every view of the snapshot).
func (s *fleetSnap) admin() web.Fleet {
	s.wholeOnce.Do(func() {
		s.whole = web.BuildFleet(web.FleetInput{Nodes: s.nodes, Claims: s.claims, UsedMiB: s.used, Catalog: catalog.Default()})
	})
	return s.whole
}

// adminGrid is the snapshot's grid as an admin sees it, and its JSON.
func (s *fleetSnap) adminGrid() (web.Grid, []byte) {
	s.gridOnce.Do(func() {
		s.grid = web.BuildGrid(s.admin())
		s.gridJSON, _ = json.Marshal(s.grid)
	})
	return s.grid, s.gridJSON
}

// gpuHourPrices are the catalog's prices, computed once.
var gpuHourPrices = sync.OnceValue(func() map[string]float64 { return web.GPUHourPrices(catalog.Default()) })

// fleetRefresh is how often the cached fleet is read whole again (what no
// event or inventory change announces, heartbeat times, drifts no longer).
const fleetRefresh = time.Minute

// fleetPatchLimit is how many events since the cached read are applied
// one by one; more and the store is read whole.
const fleetPatchLimit = 5000

// dirtyNodes notes nodes whose inventory changed without an event (a
// heartbeat's), for the fleet cache to read again.
type dirtyNodes struct {
	mu    sync.Mutex
	names map[string]bool
}

func (d *dirtyNodes) mark(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.names == nil {
		d.names = map[string]bool{}
	}
	d.names[name] = true
}

func (d *dirtyNodes) take() map[string]bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.names
	d.names = nil
	return out
}

// readFleet returns the fleet as of now: the cached read brought up to
// date with the claims and nodes that events (and inventory changes)
// since name — cheap when little changed —, or a whole read of the store
// when there is no cache, too much changed, or fleetRefresh passed. One
// caller reads at a time; the others wait and share its result.
func (srv *Server) readFleet(ctx context.Context) (*fleetSnap, error) {
	srv.fleetMu.Lock()
	defer srv.fleetMu.Unlock()
	now := srv.cfg.Clock()
	_, newest := srv.bell.watch("")
	dirty := srv.fleetDirty.take()
	old := srv.fleetCache
	if old != nil && len(dirty) == 0 && newest == old.seq && now.Sub(old.at) < time.Second {
		return old, nil // nothing changed a moment ago: share it (and the fleet built from it)
	}
	if old != nil && now.Sub(old.full) < fleetRefresh && newest-old.seq <= fleetPatchLimit {
		s, err := srv.patchFleet(ctx, old, dirty, now)
		if err == nil {
			srv.fleetCache = s
			return s, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
	}
	s := &fleetSnap{at: now, full: now, used: srv.metrics.usedByClaim()}
	err := srv.store.View(ctx, func(tx state.Tx) error {
		// The newest event before the read: the read reflects it.
		evs, err := tx.EventsSince(max(0, newest-1), 0)
		if err != nil {
			return err
		}
		s.seq = newest
		for _, e := range evs {
			s.seq = max(s.seq, e.Seq)
		}
		if s.nodes, err = tx.ListNodes(); err != nil {
			return err
		}
		s.claims, err = tx.ListClaims(state.ClaimFilter{States: []api.ClaimState{api.Pending, api.Allocated, api.Running}})
		return err
	})
	if err != nil {
		for n := range dirty {
			srv.fleetDirty.mark(n)
		}
		return nil, err
	}
	srv.fleetCache = s
	return s, nil
}

func isLive(st api.ClaimState) bool {
	return st == api.Pending || st == api.Allocated || st == api.Running
}

// patchFleet is old with the claims and nodes named by later events (and
// the dirty nodes) read again.
func (srv *Server) patchFleet(ctx context.Context, old *fleetSnap, dirty map[string]bool, now time.Time) (*fleetSnap, error) {
	s := &fleetSnap{at: now, full: old.full, seq: old.seq, used: srv.metrics.usedByClaim()}
	claims := map[string]*api.Claim{}
	nodes := map[string]*api.Node{}
	changedClaims := map[string]bool{}
	changedNodes := map[string]bool{}
	for n := range dirty {
		changedNodes[n] = true
	}
	err := srv.store.View(ctx, func(tx state.Tx) error {
		evs, err := tx.EventsSince(old.seq, 0)
		if err != nil {
			return err
		}
		for _, e := range evs {
			s.seq = max(s.seq, e.Seq)
			if e.Claim != "" {
				changedClaims[e.Claim] = true
			}
			if e.Node != "" {
				changedNodes[e.Node] = true
			}
		}
		if len(changedClaims) == 0 && len(changedNodes) == 0 {
			return nil
		}
		for id := range changedClaims {
			c, err := tx.GetClaim(id)
			switch {
			case errors.Is(err, state.ErrNotFound):
				claims[id] = nil
			case err != nil:
				return err
			case isLive(c.State):
				claims[id] = &c
			default:
				claims[id] = nil
			}
		}
		for name := range changedNodes {
			n, err := tx.GetNode(name)
			switch {
			case errors.Is(err, state.ErrNotFound):
				nodes[name] = nil
			case err != nil:
				return err
			default:
				nodes[name] = &n
			}
			// Its claims' devices may have been renamed with it.
			cs, err := tx.ListClaims(state.ClaimFilter{Node: name, States: []api.ClaimState{api.Allocated, api.Running}})
			if err != nil {
				return err
			}
			for i := range cs {
				claims[cs[i].ID] = &cs[i]
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(claims) == 0 && len(nodes) == 0 {
		s.nodes, s.claims = old.nodes, old.claims
		return s, nil
	}
	s.nodes = make([]api.Node, 0, len(old.nodes)+len(nodes))
	for _, n := range old.nodes {
		if _, ok := nodes[n.Name]; !ok {
			s.nodes = append(s.nodes, n)
		}
	}
	for _, n := range nodes {
		if n != nil {
			s.nodes = append(s.nodes, *n)
		}
	}
	slices.SortFunc(s.nodes, func(a, b api.Node) int { return strings.Compare(a.Name, b.Name) })
	s.claims = make([]api.Claim, 0, len(old.claims)+len(claims))
	for _, c := range old.claims {
		if _, ok := claims[c.ID]; !ok {
			s.claims = append(s.claims, c)
		}
	}
	for _, c := range claims {
		if c != nil {
			s.claims = append(s.claims, *c)
		}
	}
	slices.SortFunc(s.claims, func(a, b api.Claim) int { return cmp.Compare(a.Seq, b.Seq) })
	return s, nil
}

// claimsFor is the snapshot's claims as p may see them in the fleet: a
// tenant's claims made before its tenant was created (a deleted
// namesake's) count as another tenant's.
func claimsFor(p principal, cs []api.Claim) []api.Claim {
	if p.role != api.RoleTenant {
		return cs
	}
	out := slices.Clone(cs)
	for i := range out {
		if out[i].Tenant == p.tenant && !p.sees(&out[i]) {
			out[i].Tenant = "\x00namesake"
		}
	}
	return out
}

// ownClaims is the claims p may see as its own.
func ownClaims(p principal, cs []api.Claim) []api.Claim {
	if p.role != api.RoleTenant {
		return cs
	}
	var out []api.Claim
	for i := range cs {
		if p.sees(&cs[i]) {
			out = append(out, cs[i])
		}
	}
	return out
}

func (s *fleetSnap) fleetFor(p principal, now time.Time) web.Fleet {
	if p.role != api.RoleTenant {
		f := s.admin()
		f.Time = now
		return f
	}
	return web.BuildFleet(web.FleetInput{Time: now, Nodes: s.nodes, Claims: claimsFor(p, s.claims), UsedMiB: s.used,
		Viewer: viewerOf(p), Catalog: catalog.Default()})
}

func (srv *Server) summaryFor(s *fleetSnap, p principal, now time.Time) web.Summary {
	scope := ""
	if p.role == api.RoleTenant {
		scope = p.tenant
	}
	_, seq := srv.bell.watch(scope)
	sum := web.Summarize(web.SummaryInput{Time: now, Viewer: viewerOf(p), Catalog: catalog.Default(), Prices: gpuHourPrices(),
		Fleet: s.admin(), Claims: ownClaims(p, s.claims)})
	sum.EventSeq = seq
	return sum
}

// fleetGrid answers GET /v1/fleet/grid: every GPU as one compact cell.
func (srv *Server) fleetGrid(w http.ResponseWriter, r *http.Request, p principal) {
	s, err := srv.readFleet(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	if p.role != api.RoleTenant {
		_, data := s.adminGrid()
		writeJSONGzip(w, r, json.RawMessage(data))
		return
	}
	writeJSONGzip(w, r, web.BuildGrid(s.fleetFor(p, srv.cfg.Clock())))
}

// fleetSummary answers GET /v1/fleet/summary.
func (srv *Server) fleetSummary(w http.ResponseWriter, r *http.Request, p principal) {
	s, err := srv.readFleet(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSONGzip(w, r, srv.summaryFor(s, p, srv.cfg.Clock()))
}

func (srv *Server) fleetGPU(w http.ResponseWriter, r *http.Request, p principal) {
	name := r.PathValue("node")
	index, err := strconv.Atoi(r.PathValue("index"))
	if err != nil || index < 0 {
		writeError(w, errField("index", "GPU index %q: want a whole number ≥ 0", r.PathValue("index")))
		return
	}
	s, err := srv.readFleet(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	now := srv.cfg.Clock()
	var out *web.GPUView
	for _, n := range s.nodes {
		if n.Name != name {
			continue
		}
		one := &fleetSnap{nodes: []api.Node{n}, claims: s.claims, used: s.used}
		f := one.fleetFor(p, now)
		for _, g := range f.Nodes[0].GPUs {
			if g.Index == index {
				node := f.Nodes[0]
				node.GPUs = nil
				out = &web.GPUView{Time: now, Node: node, GPU: g, History: srv.gpuHistory.Of(g.UUID), Claims: []api.Claim{}}
			}
		}
	}
	if out == nil {
		writeError(w, errStatus(http.StatusNotFound, "no GPU %d on node %q", index, name))
		return
	}
	uuid := out.GPU.UUID
	err = srv.store.View(r.Context(), func(tx state.Tx) error {
		cs, err := tx.ListClaims(state.ClaimFilter{Node: name})
		if err != nil {
			return err
		}
		for i := len(cs) - 1; i >= 0 && len(out.Claims) < 50; i-- {
			c := cs[i]
			if c.Allocation == nil || !p.sees(&c) || !slices.ContainsFunc(c.Allocation.Devices, func(d alloc.Assigned) bool { return d.GPU == uuid }) {
				continue
			}
			out.Claims = append(out.Claims, c)
		}
		return nil
	})
	if err != nil {
		writeError(w, err)
		return
	}
	out.Events, err = srv.recentEvents(r.Context(), p, func(e api.Event) bool { return e.Node == name }, 50, time.Time{})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSONGzip(w, r, out)
}

// recentEvents reads back from the newest event the ones p may see that
// match, newest first: at most want, reading at most 20,000 events (or
// back to stop).
func (srv *Server) recentEvents(ctx context.Context, p principal, match func(api.Event) bool, want int, stop time.Time) ([]api.Event, error) {
	scope := ""
	if p.role == api.RoleTenant {
		scope = p.tenant
	}
	return srv.recentEventsOf(ctx, p, scope, match, want, stop)
}

// recentEventsOf is recentEvents reading one tenant's events through the
// store's index (scope "": every event; a tenant token always reads its
// own tenant's).
func (srv *Server) recentEventsOf(ctx context.Context, p principal, scope string, match func(api.Event) bool, want int, stop time.Time) ([]api.Event, error) {
	var from time.Time
	if p.role == api.RoleTenant {
		scope, from = p.tenant, p.tenantCreated
	}
	_, newest := srv.bell.watch("")
	out := []api.Event{}
	const window = 1000
	for hi, read := newest, 0; hi > 0 && read < 20000 && len(out) < want; hi -= window {
		var evs []api.Event
		err := srv.store.View(ctx, func(tx state.Tx) error {
			var err error
			evs, err = tx.ListEvents(state.EventFilter{Tenant: scope, AfterSeq: max(0, hi-window), Limit: window})
			return err
		})
		if err != nil {
			return nil, err
		}
		read += window
		done := false
		for i := len(evs) - 1; i >= 0 && len(out) < want; i-- {
			e := evs[i]
			if e.Seq > hi {
				continue
			}
			if !stop.IsZero() && e.Time.Before(stop) {
				done = true
				break
			}
			if scope != "" && (e.Tenant != scope || e.Time.Before(from)) {
				continue
			}
			if match(e) {
				out = append(out, e)
			}
		}
		if done {
			break
		}
	}
	return out, nil
}

// claimEvents answers GET /v1/claims/{id}/events: the claim's history,
// oldest first, to whoever may see the claim.
func (srv *Server) claimEvents(w http.ResponseWriter, r *http.Request, p principal) {
	id := r.PathValue("id")
	var c api.Claim
	err := srv.store.View(r.Context(), func(tx state.Tx) error {
		var err error
		c, err = tx.GetClaim(id)
		return err
	})
	if err != nil {
		writeError(w, err)
		return
	}
	if !p.sees(&c) {
		writeError(w, errStatus(http.StatusNotFound, "claim %q not found", id))
		return
	}
	// A claim's events carry its tenant: read that tenant's only.
	evs, err := srv.recentEventsOf(r.Context(), p, c.Tenant, func(e api.Event) bool { return e.Claim == id }, 200, c.Created.Add(-time.Second))
	if err != nil {
		writeError(w, err)
		return
	}
	slices.Reverse(evs)
	writeJSON(w, http.StatusOK, evs)
}

// writeJSONGzip is writeJSON, gzipped when the client accepts it (the
// dashboard's views are large and repetitive: a grid of 8,000 GPUs
// shrinks about tenfold).
func writeJSONGzip(w http.ResponseWriter, r *http.Request, v any) {
	if !acceptsGzip(r) {
		writeJSON(w, http.StatusOK, v)
		return
	}
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if err := json.NewEncoder(zw).Encode(v); err != nil || zw.Close() != nil {
		http.Error(w, `{"error":"encoding the answer failed"}`, http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Encoding", "gzip")
	h.Add("Vary", "Accept-Encoding")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf.Bytes())
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.TrimSpace(enc) == "gzip" && strings.ReplaceAll(q, " ", "") != "q=0" {
			return true
		}
	}
	return false
}

// sampleBell wakes dashboard streams when a sample is recorded.
type sampleBell struct {
	mu sync.Mutex
	ch chan struct{}
}

func (b *sampleBell) watch() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

func (b *sampleBell) ring() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
	}
	b.ch = make(chan struct{})
}

// dashboardStream answers GET /v1/dashboard/stream: Server-Sent Events
// for the fleet view, gzipped when the client accepts it. First "grid"
// (the whole grid) and "summary"; then, as claims and nodes change (woken
// by every committed event, and every DashboardInterval for memory in
// use), "cells" with the cells that changed (a whole "grid" again when the
// nodes changed) and "summary" when it changed; "sample" with each new
// chart sample (fleet totals; a tenant's own figures only). Holds a
// stream slot like GET /v1/events.
func (srv *Server) dashboardStream(w http.ResponseWriter, r *http.Request, p principal) {
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, errStatus(http.StatusInternalServerError, "streaming unsupported"))
		return
	}
	release, err := srv.slots.take(p)
	if err != nil {
		writeError(w, err)
		return
	}
	defer release()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	var out io.Writer = w
	flush := fl.Flush
	if acceptsGzip(r) {
		h.Set("Content-Encoding", "gzip")
		h.Add("Vary", "Accept-Encoding")
		zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
		defer zw.Close()
		out = zw
		flush = func() { _ = zw.Flush(); fl.Flush() }
	}
	w.WriteHeader(http.StatusOK)
	send := func(event string, v any) error {
		data, ok := v.([]byte)
		if !ok {
			var err error
			if data, err = json.Marshal(v); err != nil {
				return err
			}
		}
		if _, err := fmt.Fprintf(out, "event: %s\ndata: %s\n\n", event, data); err != nil {
			return err
		}
		flush()
		return nil
	}
	var enc web.GridEncoder
	var last web.Grid
	var lastSum []byte
	sent := false
	samples := srv.samples.watch()
	lastSample := srv.cfg.Clock()
	tick := time.NewTicker(srv.cfg.DashboardInterval)
	defer tick.Stop()
	keepalive := time.NewTicker(eventKeepalive)
	defer keepalive.Stop()
	for {
		ch, _ := srv.bell.watch("")
		s, err := srv.readFleet(r.Context())
		if err != nil {
			return
		}
		now := srv.cfg.Clock()
		if !sent && p.role != api.RoleTenant {
			// An admin's first grid is the snapshot's, encoded once for
			// every page load.
			g, data := s.adminGrid()
			enc.Adopt(g)
			if send("grid", data) != nil {
				return
			}
			last, sent = g, true
		}
		g := enc.Encode(s.fleetFor(p, now))
		if d, ok := web.Diff(last, g); sent && ok {
			if len(d.Cells) > 0 || len(d.Tenants) > 0 {
				if send("cells", d) != nil {
					return
				}
			}
		} else if send("grid", g) != nil {
			return
		}
		last, sent = g, true
		sum := srv.summaryFor(s, p, now)
		sumKey, _ := json.Marshal(struct {
			web.Summary
			Time any `json:"time,omitempty"`
		}{Summary: sum})
		if !bytes.Equal(sumKey, lastSum) {
			if send("summary", sum) != nil {
				return
			}
			lastSum = sumKey
		}
		select {
		case <-ch:
		case <-tick.C:
		case <-samples:
			samples = srv.samples.watch()
			var view func(web.Sample) web.Sample
			if v := viewerOf(p); v != "" {
				view = web.ForTenant(v)
			} else {
				view = web.OnlyTenants(nil)
			}
			for _, x := range srv.series.Since(lastSample, view) {
				lastSample = x.Time
				if send("sample", x) != nil {
					return
				}
			}
			continue
		case <-keepalive.C:
			if _, err := fmt.Fprint(out, ": keepalive\n\n"); err != nil {
				return
			}
			flush()
			continue
		case <-r.Context().Done():
			return
		}
		select {
		case <-time.After(streamSpacing):
		case <-r.Context().Done():
			return
		}
	}
}

// topTenants is the n tenants with the most GPU-seconds in the newest
// sample, by name when equal.
func topTenants(x web.Sample, n int) []string {
	names := make([]string, 0, len(x.Tenants))
	for t := range x.Tenants {
		names = append(names, t)
	}
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(x.Tenants[b].GPUSeconds, x.Tenants[a].GPUSeconds), strings.Compare(a, b))
	})
	return names[:min(n, len(names))]
}
