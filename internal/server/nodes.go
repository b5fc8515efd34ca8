package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/state"
)

// onNode says whether one of the claim's devices is on node.
func onNode(c api.Claim, node string) bool {
	if c.Allocation == nil {
		return false
	}
	for _, d := range c.Allocation.Devices {
		if d.Node == node {
			return true
		}
	}
	return false
}

// checkInventory refuses an inventory the allocator cannot use (unknown
// models, invalid MIG layouts, repeated uuids).
func checkInventory(name string, inv alloc.Node) error {
	inv.Name = name
	// Uuids and free text first: they reach paths, environments and logs.
	if err := alloc.ValidateInventory(inv); err != nil {
		var fe *alloc.FieldError
		if errors.As(err, &fe) {
			return errField("inventory."+fe.Field, "inventory of node %s: %s: %s", name, fe.Field, fe.Msg)
		}
		return errField("inventory", "inventory of node %s: %v", name, err)
	}
	if _, err := alloc.NewState(alloc.Fleet{Nodes: []alloc.Node{inv}}, nil, alloc.Options{}); err != nil {
		return errField("inventory", "inventory of node %s: %v", name, err)
	}
	return nil
}

func (srv *Server) registerNode(w http.ResponseWriter, r *http.Request, p principal) {
	name := r.PathValue("name")
	if !validName.MatchString(name) {
		writeError(w, errField("name", "node name %q: lowercase letters, digits, '.', '_' and '-', 1–63 characters", name))
		return
	}
	var req api.RegisterRequest
	if err := decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if err := checkInventory(name, req.Inventory); err != nil {
		writeError(w, err)
		return
	}
	if len(req.Driver) > 64 || strings.ContainsFunc(req.Driver, unicode.IsControl) {
		writeError(w, errField("driver", "at most 64 printable characters"))
		return
	}
	if len(req.Host) > 253 || strings.ContainsFunc(req.Host, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) }) {
		writeError(w, errField("host", "at most 253 printable characters, no spaces"))
		return
	}
	now := srv.cfg.Clock()
	n := api.Node{Name: name, State: api.NodeReady, LastHeartbeat: now, Simulated: req.Simulated, Driver: req.Driver,
		Host: req.Host, Inventory: req.Inventory, Created: now}
	n.Inventory.Name = name
	err := srv.update(r.Context(), func(tx state.Tx) error {
		old, err := tx.GetNode(name)
		exists := err == nil
		if err != nil && !errors.Is(err, state.ErrNotFound) {
			return err
		}
		if exists {
			n.Created, n.Agent = old.Created, old.Agent
		}
		if p.role == api.RoleAgent {
			if err := srv.bindAgent(tx, p, name, old, exists); err != nil {
				return err
			}
			n.Agent = p.token
		}
		if err := uniqueGPUs(tx, n); err != nil {
			return err
		}
		if err := tx.PutNode(n); err != nil {
			return err
		}
		if err := srv.adoptInstances(tx, n); err != nil {
			return err
		}
		ev := api.Event{Time: now, Kind: "node-registered", Node: name, Message: fmt.Sprintf("%d GPUs, driver %s", len(n.Inventory.GPUs), n.Driver)}
		if err := tx.AppendEvent(&ev); err != nil {
			return err
		}
		return srv.rebuildLocked(tx)
	})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, n)
}

// bindAgent decides whether an agent credential may register node name:
// a token issued for another node may not; a token an admin issued for
// this very node may (it replaces the node's credential: rotation); a
// node bound to another live agent token may not be taken over by an
// unbound token; a token already bound to a node takes no second one.
// Registering binds the node to the token. The caller holds the
// scheduler's lock inside a transaction.
func (srv *Server) bindAgent(tx state.Tx, p principal, name string, old api.Node, exists bool) error {
	if p.node != "" && p.node != name {
		return errStatus(http.StatusForbidden, "this agent token was issued for node %s, not %s", p.node, name)
	}
	if p.node == name {
		return nil
	}
	tokens, err := tx.ListTokens()
	if err != nil {
		return err
	}
	alive := map[string]bool{}
	for _, t := range tokens {
		alive[t.ID] = true
	}
	if exists && old.Agent != "" && old.Agent != p.token && alive[old.Agent] {
		return errStatus(http.StatusForbidden, "node %s belongs to another agent credential; an admin can delete the node or that token", name)
	}
	nodes, err := tx.ListNodes()
	if err != nil {
		return err
	}
	for _, o := range nodes {
		if o.Name != name && o.Agent == p.token {
			return errStatus(http.StatusForbidden, "this agent token is bound to node %s; create one token per node", o.Name)
		}
	}
	return nil
}

// mayAct says whether principal p may act for node n: an admin, or the
// agent token the node is bound to.
func mayAct(p principal, n api.Node) error {
	if p.role == api.RoleAdmin {
		return nil
	}
	if p.role == api.RoleAgent && n.Agent != "" && n.Agent == p.token {
		return nil
	}
	return errStatus(http.StatusForbidden, "this token may not act for node %s (an agent token acts for the node it registered only)", n.Name)
}

// uniqueGPUs refuses a node whose GPU uuids another node already reports.
func uniqueGPUs(tx state.Tx, n api.Node) error {
	others, err := tx.ListNodes()
	if err != nil {
		return err
	}
	mine := map[string]bool{}
	for _, g := range n.Inventory.GPUs {
		mine[g.UUID] = true
	}
	for _, o := range others {
		if o.Name == n.Name {
			continue
		}
		for _, g := range o.Inventory.GPUs {
			if mine[g.UUID] {
				return errStatus(http.StatusConflict, "GPU %s is already reported by node %s", g.UUID, o.Name)
			}
		}
	}
	return nil
}

// adoptInstances renames planned MIG instance ids in the node's claims to
// the uuids the agent reports for the same GPU, profile and start.
func (srv *Server) adoptInstances(tx state.Tx, n api.Node) error {
	claims, err := tx.ListClaims(state.ClaimFilter{Node: n.Name, States: []api.ClaimState{api.Allocated, api.Running}})
	if err != nil {
		return err
	}
	real := map[string]string{} // planned id -> uuid
	for _, g := range n.Inventory.GPUs {
		for _, in := range g.Instances {
			real[fmt.Sprintf("%s/%s@%d", g.UUID, in.Profile, in.Start)] = in.UUID
		}
	}
	for _, c := range claims {
		if c.Allocation == nil {
			continue
		}
		changed := false
		for _, d := range c.Allocation.Devices {
			if id, ok := real[d.Device]; ok && alloc.IsPlanned(d.Device) && id != d.Device {
				changed = c.Allocation.RenameDevice(d.Device, id) || changed
			}
		}
		if changed {
			c.Updated = srv.cfg.Clock()
			if err := tx.UpdateClaim(c); err != nil {
				return err
			}
		}
	}
	return nil
}

// eventKind is what an agent may name its events.
var eventKind = regexp.MustCompile(`^[a-z][a-z0-9-]{0,47}$`)

// checkHeartbeat refuses samples and events no real agent sends:
// non-finite or negative usage, event kinds outside [a-z0-9-]; it cuts
// messages to 4 KiB.
func checkHeartbeat(req *api.HeartbeatRequest) error {
	if len(req.Usage) > 10000 {
		return errField("usage", "at most 10,000 usage samples per heartbeat, got %d", len(req.Usage))
	}
	if len(req.Events) > 1000 {
		return errField("events", "at most 1,000 events per heartbeat, got %d", len(req.Events))
	}
	for i, u := range req.Usage {
		for _, v := range []float64{u.GPUSeconds, u.SMSeconds, u.MemoryMiBSeconds, float64(u.MemoryMiB)} {
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				return errField(fmt.Sprintf("usage[%d]", i), "usage must be finite and non-negative, got %v", v)
			}
		}
	}
	for i, e := range req.Events {
		if !eventKind.MatchString(e.Kind) {
			return errField(fmt.Sprintf("events[%d].kind", i), "event kind %q: lowercase letters, digits and '-', starting with a letter, at most 48", e.Kind)
		}
		if len(e.Message) > 4096 {
			req.Events[i].Message = strings.ToValidUTF8(e.Message[:4096], "") + "…"
		}
	}
	return nil
}

// usageLimit is the most a claim may be billed in one heartbeat, per
// measure: in the heartbeat (Beat) and in all (Life, of which the claim
// may already have been billed some).
type usageLimit struct {
	Beat, Life api.Consumption
}

// usageBound is the one rule that bounds what an agent can bill, whatever
// it sends: a claim is billed at most
//   - in one heartbeat, each of its devices on node busy for elapsed (the
//     time since the node's last heartbeat) plus 5 s of clock slack, and
//   - over its life, each of its devices (on every node) busy from its
//     first allocation to now, or to its end once final — so neither samples
//     repeated in one heartbeat nor many rapid heartbeats (each with its
//     slack) can bill more than the devices could have run.
//
// GPU- and SM-seconds count devices × seconds; MiB-seconds the memory of
// each device's GPU (memOf, from its node's inventory; what the device
// promises, if more) × seconds.
func usageBound(c api.Claim, node string, memOf func(node, gpu string) int64, elapsed time.Duration, now time.Time) usageLimit {
	beat := max(0, elapsed.Seconds()) + 5 // clock slack between agent and server
	life := claimLife(c, now).Seconds()
	var b usageLimit
	if c.Allocation == nil {
		return b
	}
	for _, d := range c.Allocation.Devices {
		mem := float64(max(memOf(d.Node, d.GPU), d.MemoryMiB))
		b.Life = b.Life.Add(api.Consumption{GPUSeconds: life, SMSeconds: life, MemoryMiBSeconds: mem * life})
		if d.Node == node {
			b.Beat = b.Beat.Add(api.Consumption{GPUSeconds: beat, SMSeconds: beat, MemoryMiBSeconds: mem * beat})
		}
	}
	return b
}

// claimLife is how long a claim has held, or held, devices: from its
// first allocation (its creation for claims stored before Allocated was
// kept) to now, or to its end (Updated) once final. Time waiting in the
// queue first bills nothing.
func claimLife(c api.Claim, now time.Time) time.Duration {
	end := now
	if c.State.Final() && c.Updated.Before(end) {
		end = c.Updated
	}
	start := c.Created
	if c.Allocated != nil {
		start = *c.Allocated
	}
	return max(0, end.Sub(start))
}

// clampUsage bills sample u to a claim already billed prior, within lim:
// what is added (to the claim and its tenant), the claim's new total, and
// whether anything was cut. The total never exceeds lim.Life (nor goes
// down, for a claim billed more before its devices changed).
func clampUsage(prior, u api.Consumption, lim usageLimit) (add, total api.Consumption, clamped bool) {
	field := func(prior, x, beat, life float64) (float64, float64) {
		t := min(prior+min(x, beat), max(life, prior))
		return t - prior, t
	}
	add.GPUSeconds, total.GPUSeconds = field(prior.GPUSeconds, u.GPUSeconds, lim.Beat.GPUSeconds, lim.Life.GPUSeconds)
	add.SMSeconds, total.SMSeconds = field(prior.SMSeconds, u.SMSeconds, lim.Beat.SMSeconds, lim.Life.SMSeconds)
	add.MemoryMiBSeconds, total.MemoryMiBSeconds = field(prior.MemoryMiBSeconds, u.MemoryMiBSeconds, lim.Beat.MemoryMiBSeconds, lim.Life.MemoryMiBSeconds)
	return add, total, add != u
}

// mergeSamples sums each claim's samples (kept in the order claims first
// appear), so that a claim's usage is clamped once per heartbeat however
// many samples name it; MemoryMiB, a level, is the largest reported.
func mergeSamples(us []api.UsageSample) []api.UsageSample {
	var out []api.UsageSample
	at := map[string]int{}
	for _, u := range us {
		i, ok := at[u.Claim]
		if !ok {
			at[u.Claim] = len(out)
			out = append(out, u)
			continue
		}
		m := &out[i]
		m.GPUSeconds += u.GPUSeconds
		m.SMSeconds += u.SMSeconds
		m.MemoryMiBSeconds += u.MemoryMiBSeconds
		m.MemoryMiB = max(m.MemoryMiB, u.MemoryMiB)
	}
	return out
}

// gpuMemory returns, for node's GPUs, the memory (MiB) of their catalog
// models; it reads nodes other than the one in hand from tx once each.
func gpuMemory(tx state.Tx, have api.Node) func(node, gpu string) int64 {
	mems := map[string]map[string]int64{}
	load := func(inv alloc.Node) map[string]int64 {
		m := map[string]int64{}
		for _, g := range inv.GPUs {
			if mib, err := catalogModel(g.Model); err == nil {
				m[g.UUID] = mib
			}
		}
		return m
	}
	mems[have.Name] = load(have.Inventory)
	return func(node, gpu string) int64 {
		m, ok := mems[node]
		if !ok {
			if n, err := tx.GetNode(node); err == nil {
				m = load(n.Inventory)
			}
			mems[node] = m
		}
		return m[gpu]
	}
}

func (srv *Server) heartbeat(w http.ResponseWriter, r *http.Request, p principal) {
	name := r.PathValue("name")
	var req api.HeartbeatRequest
	if err := decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if req.Inventory != nil {
		if err := checkInventory(name, *req.Inventory); err != nil {
			writeError(w, err)
			return
		}
	}
	if err := checkHeartbeat(&req); err != nil {
		writeError(w, err)
		return
	}
	now := srv.cfg.Clock()
	var n api.Node
	err := srv.update(r.Context(), func(tx state.Tx) error {
		var err error
		if n, err = tx.GetNode(name); err != nil {
			if errors.Is(err, state.ErrNotFound) {
				return errStatus(http.StatusNotFound, "node %s is not registered: PUT /v1/nodes/%s first", name, name)
			}
			return err
		}
		if err := mayAct(p, n); err != nil {
			return err
		}
		rebuild := false
		elapsed := now.Sub(n.LastHeartbeat)
		if n.State != api.NodeReady {
			n.State, rebuild = api.NodeReady, true
		}
		n.LastHeartbeat = now
		if req.Inventory != nil {
			inv := *req.Inventory
			inv.Name = name
			if mustJSON(inv) != mustJSON(n.Inventory) { // JSON: nil and empty lists are the same
				if err := uniqueGPUs(tx, api.Node{Name: name, Inventory: inv}); err != nil {
					return err
				}
				n.Inventory, rebuild = inv, true
			}
		}
		if err := tx.PutNode(n); err != nil {
			return err
		}
		if rebuild {
			// No event says so: the dashboard's fleet cache reads it again.
			tx.OnCommit(func() { srv.fleetDirty.mark(name) })
			if err := srv.adoptInstances(tx, n); err != nil {
				return err
			}
		}
		memOf := gpuMemory(tx, n)
		for _, u := range mergeSamples(req.Usage) {
			c, err := tx.GetClaim(u.Claim)
			if err != nil || !onNode(c, name) {
				continue // released and gone, or not this node's to report
			}
			var prior api.Consumption
			if c.Used != nil {
				prior = *c.Used
			}
			used, total, clamped := clampUsage(prior, api.Consumption{GPUSeconds: u.GPUSeconds, SMSeconds: u.SMSeconds, MemoryMiBSeconds: u.MemoryMiBSeconds},
				usageBound(c, name, memOf, elapsed, now))
			if clamped {
				srv.log.Warn("usage above what the claim's devices allow since the last heartbeat or in the claim's life; clamped", "node", name, "claim", c.ID)
			}
			if err := tx.AddUsage(c.Tenant, used); err != nil {
				return err
			}
			if used != (api.Consumption{}) {
				c.Used = &total
				if err := tx.UpdateClaim(c); err != nil {
					return err
				}
			}
			mib := u.MemoryMiB
			tx.OnCommit(func() { srv.metrics.observeUsed(name, c, mib, used, elapsed) })
		}
		events := req.Events
		pass, dropped, undo := srv.events.admit(name, now, len(events))
		tx.OnRollback(undo)
		if pass < len(events) {
			lost := len(events) - pass
			tx.OnCommit(func() { srv.metrics.observeDropped(name, lost) })
		}
		events = events[:pass]
		if dropped > 0 {
			srv.log.Warn("agent events dropped: rate limit", "node", name, "dropped", dropped)
			events = append(events, api.Event{Kind: "events-dropped",
				Message: fmt.Sprintf("%d events from node %s dropped: rate limit (%g/s, burst %d)", dropped, name, srv.cfg.AgentEventRate, srv.cfg.AgentEventBurst)})
		}
		for _, e := range events {
			// The agent names what happened; who it concerns is the
			// server's to say: a claim only if it is on this node, and its
			// tenant from the claim.
			ev := api.Event{Time: now, Node: name, Kind: e.Kind, Message: e.Message}
			if e.Claim != "" {
				if c, err := tx.GetClaim(e.Claim); err == nil && onNode(c, name) {
					ev.Claim, ev.Tenant = c.ID, c.Tenant
				}
			}
			if err := tx.AppendEvent(&ev); err != nil {
				return err
			}
		}
		if rebuild {
			return srv.rebuildLocked(tx)
		}
		return nil
	})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, n)
}

// nodeClaims lists the live claims on a node: what its agent must make
// true (layout changes, MPS daemons) and watch. Only that node's agent
// (or an admin) may read them.
func (srv *Server) nodeClaims(w http.ResponseWriter, r *http.Request, p principal) {
	name := r.PathValue("name")
	readList(srv, w, r, func(tx state.Tx) ([]api.Claim, error) {
		n, err := tx.GetNode(name)
		if err != nil {
			if errors.Is(err, state.ErrNotFound) {
				return nil, errStatus(http.StatusNotFound, "node %s is not registered", name)
			}
			return nil, err
		}
		if err := mayAct(p, n); err != nil {
			return nil, err
		}
		return tx.ListClaims(state.ClaimFilter{Node: name, States: []api.ClaimState{api.Allocated, api.Running}})
	})
}

func (srv *Server) listNodes(w http.ResponseWriter, r *http.Request, p principal) {
	readPageByName(srv, w, r, state.Tx.ListNodes, func(n api.Node) string { return n.Name })
}

func (srv *Server) getNode(w http.ResponseWriter, r *http.Request, p principal) {
	var n api.Node
	err := srv.store.View(r.Context(), func(tx state.Tx) error {
		var err error
		n, err = tx.GetNode(r.PathValue("name"))
		return err
	})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, n)
}

func (srv *Server) deleteNode(w http.ResponseWriter, r *http.Request, p principal) {
	name := r.PathValue("name")
	err := srv.update(r.Context(), func(tx state.Tx) error {
		if err := tx.DeleteNode(name); err != nil {
			if errors.Is(err, state.ErrNotFound) {
				return errStatus(http.StatusNotFound, "node %s is not registered", name)
			}
			return err
		}
		tx.OnCommit(func() {
			srv.events.forget(name)
			srv.metrics.dropped.DeleteLabelValues(name)
		})
		ev := api.Event{Time: srv.cfg.Clock(), Kind: "node-deleted", Node: name, Message: "deleted by an admin; its claims are re-queued, and those pinned to it (gpuslice run on it) fail"}
		if err := tx.AppendEvent(&ev); err != nil {
			return err
		}
		return srv.rebuildLocked(tx)
	})
	if err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (srv *Server) sweep(ctx context.Context) error {
	now := srv.cfg.Clock()
	lost := 0
	err := srv.update(ctx, func(tx state.Tx) error {
		ns, err := tx.ListNodes()
		if err != nil {
			return err
		}
		for _, n := range ns {
			if n.State == api.NodeReady && now.Sub(n.LastHeartbeat) > srv.cfg.NodeTimeout {
				n.State = api.NodeLost
				lost++
				if err := tx.PutNode(n); err != nil {
					return err
				}
				ev := api.Event{Time: now, Kind: "node-lost", Node: n.Name,
					Message: fmt.Sprintf("no heartbeat for %s; its claims are re-queued", now.Sub(n.LastHeartbeat).Round(time.Second))}
				if err := tx.AppendEvent(&ev); err != nil {
					return err
				}
			}
		}
		if lost == 0 {
			return nil
		}
		return srv.rebuildLocked(tx)
	})
	if err == nil && lost > 0 {
		srv.log.Warn("nodes lost", "count", lost)
	}
	return err
}

// usage reports what tenants hold now and have used.
func (srv *Server) usage(w http.ResponseWriter, r *http.Request, p principal) {
	pg, err := pageOf(r)
	if err != nil {
		writeError(w, err)
		return
	}
	var out []api.Usage
	err = srv.store.View(r.Context(), func(tx state.Tx) error {
		ts, err := tx.ListTenants()
		if err != nil {
			return err
		}
		if p.role == api.RoleTenant {
			ts = slices.DeleteFunc(ts, func(t api.Tenant) bool { return t.Name != p.tenant })
		}
		ts = pageByName(w, pg, ts, func(t api.Tenant) string { return t.Name })
		live := map[string][]api.Claim{}
		if len(ts) == 1 {
			cs, err := tx.ListClaims(state.ClaimFilter{Tenant: ts[0].Name, States: []api.ClaimState{api.Allocated, api.Running}})
			if err != nil {
				return err
			}
			live[ts[0].Name] = cs
		} else if len(ts) > 1 {
			cs, err := tx.ListClaims(state.ClaimFilter{States: []api.ClaimState{api.Allocated, api.Running}})
			if err != nil {
				return err
			}
			for _, c := range cs {
				live[c.Tenant] = append(live[c.Tenant], c)
			}
		}
		for _, t := range ts {
			u, err := tx.Usage(t.Name)
			if err != nil {
				return err
			}
			u.Tenant = t.Name
			for _, c := range live[t.Name] {
				if p.role == api.RoleTenant && !p.sees(&c) {
					continue
				}
				u.Claims++
				for _, d := range c.Allocation.Devices {
					u.MemoryMiB += d.MemoryMiB
					u.ComputePercent += d.ComputePercent
				}
			}
			out = append(out, u)
		}
		return nil
	})
	if err != nil {
		writeError(w, err)
		return
	}
	if out == nil {
		out = []api.Usage{}
	}
	writeJSONGzip(w, r, out)
}
