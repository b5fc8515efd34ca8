package server

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/state"
)

// RegisterRequest is the body of PUT /v1/nodes/{name}: what the agent found.
type RegisterRequest struct {
	Inventory alloc.Node `json:"inventory"`
	Simulated bool       `json:"simulated"`
	Driver    string     `json:"driver,omitempty"`
}

// HeartbeatRequest is the body of POST /v1/nodes/{name}/heartbeat.
type HeartbeatRequest struct {
	// Inventory is set when the GPUs changed since the last report.
	Inventory *alloc.Node `json:"inventory,omitempty"`
	// Usage since the last heartbeat, per claim.
	Usage []UsageSample `json:"usage,omitempty"`
	// Events the agent saw (health, memory watchdog).
	Events []api.Event `json:"events,omitempty"`
}

// UsageSample is what one claim used since the last report.
type UsageSample struct {
	Claim            string  `json:"claim"`
	GPUSeconds       float64 `json:"gpuSeconds"`
	SMSeconds        float64 `json:"smSeconds"`
	MemoryMiBSeconds float64 `json:"memoryMiBSeconds"`
	MemoryMiB        int64   `json:"memoryMiB"`
}

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
	var req RegisterRequest
	if err := decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if err := checkInventory(name, req.Inventory); err != nil {
		writeError(w, err)
		return
	}
	now := srv.cfg.Clock()
	n := api.Node{Name: name, State: api.NodeReady, LastHeartbeat: now, Simulated: req.Simulated, Driver: req.Driver,
		Inventory: req.Inventory, Created: now}
	n.Inventory.Name = name
	err := srv.store.Update(r.Context(), func(tx state.Tx) error {
		if old, err := tx.GetNode(name); err == nil {
			n.Created = old.Created
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
		return tx.AppendEvent(&ev)
	})
	if err != nil {
		writeError(w, err)
		return
	}
	if err := srv.rebuild(r.Context()); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, n)
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

func (srv *Server) heartbeat(w http.ResponseWriter, r *http.Request, p principal) {
	name := r.PathValue("name")
	var req HeartbeatRequest
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
	now := srv.cfg.Clock()
	rebuild := false
	var n api.Node
	err := srv.store.Update(r.Context(), func(tx state.Tx) error {
		var err error
		if n, err = tx.GetNode(name); err != nil {
			return errStatus(http.StatusNotFound, "node %s is not registered: PUT /v1/nodes/%s first", name, name)
		}
		if n.State != api.NodeReady {
			n.State, rebuild = api.NodeReady, true
		}
		n.LastHeartbeat = now
		if req.Inventory != nil {
			inv := *req.Inventory
			inv.Name = name
			if mustJSON(inv) != mustJSON(n.Inventory) { // JSON: nil and empty lists are the same
				n.Inventory, rebuild = inv, true
			}
		}
		if err := tx.PutNode(n); err != nil {
			return err
		}
		if rebuild {
			if err := srv.adoptInstances(tx, n); err != nil {
				return err
			}
		}
		for _, u := range req.Usage {
			c, err := tx.GetClaim(u.Claim)
			if err != nil || !onNode(c, name) {
				continue // released and gone, or not this node's to report
			}
			used := api.Consumption{GPUSeconds: u.GPUSeconds, SMSeconds: u.SMSeconds, MemoryMiBSeconds: u.MemoryMiBSeconds}
			if err := tx.AddUsage(c.Tenant, used); err != nil {
				return err
			}
			if used != (api.Consumption{}) {
				total := used
				if c.Used != nil {
					total = c.Used.Add(used)
				}
				c.Used = &total
				if err := tx.UpdateClaim(c); err != nil {
					return err
				}
			}
			srv.metrics.observeUsed(name, c, u.MemoryMiB)
		}
		for _, e := range req.Events {
			e.Time, e.Node = now, name
			if err := tx.AppendEvent(&e); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		writeError(w, err)
		return
	}
	if rebuild {
		if err := srv.rebuild(r.Context()); err != nil {
			writeError(w, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, n)
}

// nodeClaims lists the live claims on a node: what its agent must make
// true (layout changes, MPS daemons) and watch.
func (srv *Server) nodeClaims(w http.ResponseWriter, r *http.Request, p principal) {
	readList(srv, w, r, func(tx state.Tx) ([]api.Claim, error) {
		return tx.ListClaims(state.ClaimFilter{Node: r.PathValue("name"), States: []api.ClaimState{api.Allocated, api.Running}})
	})
}

func (srv *Server) listNodes(w http.ResponseWriter, r *http.Request, p principal) {
	readList(srv, w, r, func(tx state.Tx) ([]api.Node, error) { return tx.ListNodes() })
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
	err := srv.store.Update(r.Context(), func(tx state.Tx) error { return tx.DeleteNode(r.PathValue("name")) })
	if err != nil {
		writeError(w, err)
		return
	}
	if err := srv.rebuild(r.Context()); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// sweepLoop marks nodes lost when they stop heartbeating; rebuild then
// re-queues their claims (they are never placed twice: the lost node's
// devices leave the allocator's fleet first).
func (srv *Server) sweepLoop(ctx context.Context) {
	tick := time.NewTicker(max(srv.cfg.SweepInterval, time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if err := srv.sweep(ctx); err != nil && ctx.Err() == nil {
				srv.log.Error("sweeping lost nodes", "err", err)
			}
		}
	}
}

func (srv *Server) sweep(ctx context.Context) error {
	now := srv.cfg.Clock()
	lost := 0
	err := srv.store.Update(ctx, func(tx state.Tx) error {
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
		return nil
	})
	if err != nil || lost == 0 {
		return err
	}
	srv.log.Warn("nodes lost", "count", lost)
	return srv.rebuild(ctx)
}

// usage reports what tenants hold now and have used.
func (srv *Server) usage(w http.ResponseWriter, r *http.Request, p principal) {
	var out []api.Usage
	err := srv.store.View(r.Context(), func(tx state.Tx) error {
		ts, err := tx.ListTenants()
		if err != nil {
			return err
		}
		for _, t := range ts {
			if p.role == api.RoleTenant && t.Name != p.tenant {
				continue
			}
			u, err := tx.Usage(t.Name)
			if err != nil {
				return err
			}
			u.Tenant = t.Name
			live, err := tx.ListClaims(state.ClaimFilter{Tenant: t.Name, States: []api.ClaimState{api.Allocated, api.Running}})
			if err != nil {
				return err
			}
			for _, c := range live {
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
	writeJSON(w, http.StatusOK, out)
}
