package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/state"
)

var validName = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`)

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return `{}`
	}
	return string(b)
}

func (srv *Server) listTenants(w http.ResponseWriter, r *http.Request, p principal) {
	readPageByName(srv, w, r, state.Tx.ListTenants, func(t api.Tenant) string { return t.Name })
}

// putTenant creates or updates a tenant (its quotas and maxPriority, the
// highest claim priority its claims may ask for). Lowering maxPriority
// lowers the tenant's waiting claims above it to it, in the same
// transaction.
func (srv *Server) putTenant(w http.ResponseWriter, r *http.Request, p principal) {
	name := r.PathValue("name")
	if !validName.MatchString(name) {
		writeError(w, errField("name", "tenant name %q: lowercase letters, digits, '.', '_' and '-', 1–63 characters", name))
		return
	}
	var t api.Tenant
	if err := decode(r, &t); err != nil {
		writeError(w, err)
		return
	}
	if t.Name != "" && t.Name != name {
		writeError(w, errField("name", "body names %q but the path names %q", t.Name, name))
		return
	}
	if t.MemoryMiB < 0 || t.ComputePercent < 0 {
		writeError(w, errField("memoryMiB", "quotas cannot be negative (0 = unlimited)"))
		return
	}
	if err := checkCommands(t.Commands); err != nil {
		writeError(w, err)
		return
	}
	if t.MaxPriority < api.LowestPriority || t.MaxPriority > api.HighestPriority {
		writeError(w, errField("maxPriority", "%d: want %d..%d (the highest claim priority the tenant may ask for; 0: none above another tenant's default)", t.MaxPriority, api.LowestPriority, api.HighestPriority))
		return
	}
	t.Name = name
	err := srv.update(r.Context(), func(tx state.Tx) error {
		old, err := tx.GetTenant(name)
		if err == nil {
			t.Created = old.Created
		} else {
			t.Created = srv.cfg.Clock()
		}
		if err := tx.PutTenant(t); err != nil {
			return err
		}
		// The tenant's services follow its allow-list at once: one whose
		// command it may no longer run stops (and starts again if allowed
		// again).
		svcs, err := tx.ListServices()
		if err != nil {
			return err
		}
		for _, s := range svcs {
			if s.Tenant != name {
				continue
			}
			if why := disabledWhy(t, s); why != s.Disabled {
				s.Disabled = why
				if err := tx.PutService(s); err != nil {
					return err
				}
				msg := "service " + s.Name + " may run again"
				if why != "" {
					msg = "service " + s.Name + " stopped: " + why
				}
				if err := tx.AppendEvent(&api.Event{Time: srv.cfg.Clock(), Kind: "service.disabled", Tenant: name, Message: msg}); err != nil {
					return err
				}
			}
		}
		if err := srv.lowerPendingPriorities(tx, t); err != nil {
			return err
		}
		tx.OnCommit(func() { srv.cache.putTenant(t) })
		return nil
	})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

// lowerPendingPriorities lowers tenant t's waiting claims that ask for
// more than its maxPriority to it, each with an event: a maximum an admin
// lowers binds the queue at once, not only claims made afterwards.
// Allocated claims keep theirs (priority only orders the queue). The
// caller holds the scheduler's lock inside a transaction.
func (srv *Server) lowerPendingPriorities(tx state.Tx, t api.Tenant) error {
	s := srv.sched
	now := srv.cfg.Clock()
	lowered := false
	for _, p := range s.pending {
		if p.Tenant != t.Name || p.Spec.Priority <= t.MaxPriority {
			continue
		}
		c, err := tx.GetClaim(p.ID)
		if err != nil {
			return err
		}
		was := c.Spec.Priority
		c.Spec.Priority, c.Updated = t.MaxPriority, now
		if err := tx.UpdateClaim(c); err != nil {
			return err
		}
		if err := tx.AppendEvent(&api.Event{Time: now, Kind: "priority", Claim: c.ID, Tenant: c.Tenant,
			Message: fmt.Sprintf("priority lowered from %d to %d, the tenant's maxPriority (set by an admin)", was, t.MaxPriority)}); err != nil {
			return err
		}
		p.Spec.Priority = t.MaxPriority
		lowered = true
	}
	if lowered {
		s.sortPending()
		s.poke()
	}
	return nil
}

func (srv *Server) getTenant(w http.ResponseWriter, r *http.Request, p principal) {
	var t api.Tenant
	err := srv.store.View(r.Context(), func(tx state.Tx) error {
		var err error
		t, err = tx.GetTenant(r.PathValue("name"))
		return err
	})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

// deleteTenant refuses while the tenant has live claims; its tokens are
// deleted with it, in the same transaction.
func (srv *Server) deleteTenant(w http.ResponseWriter, r *http.Request, p principal) {
	name := r.PathValue("name")
	err := srv.update(r.Context(), func(tx state.Tx) error {
		if _, err := tx.GetTenant(name); err != nil {
			if errors.Is(err, state.ErrNotFound) {
				return errStatus(http.StatusNotFound, "tenant %s not found", name)
			}
			return err
		}
		live, err := tx.ListClaims(state.ClaimFilter{Tenant: name, States: []api.ClaimState{api.Pending, api.Allocated, api.Running}, Limit: 1})
		if err != nil {
			return err
		}
		if len(live) > 0 {
			return errStatus(http.StatusConflict, "tenant %s has live claims; release them first", name)
		}
		// Its services go first, by hand: a namesake created later must
		// inherit nothing, and deleting a service stops its replicas.
		svcs, err := tx.ListServices()
		if err != nil {
			return err
		}
		var own []string
		for _, s := range svcs {
			if s.Tenant == name {
				own = append(own, s.Name)
			}
		}
		if len(own) > 0 {
			return errStatus(http.StatusConflict, "tenant %s has services (%s); delete them first (gpuslice services rm NAME)", name, strings.Join(own, ", "))
		}
		tokens, err := tx.ListTokens()
		if err != nil {
			return err
		}
		for _, t := range tokens {
			if t.Role == api.RoleTenant && t.Tenant == name {
				if err := tx.DeleteToken(t.ID); err != nil {
					return err
				}
			}
		}
		if err := tx.DeleteTenant(name); err != nil {
			return err
		}
		tx.OnCommit(func() {
			srv.cache.mu.Lock()
			delete(srv.cache.tenants, name)
			srv.cache.mu.Unlock()
			srv.cache.purge(func(t api.Token) bool { return t.Role == api.RoleTenant && t.Tenant == name })
		})
		return nil
	})
	if err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (srv *Server) createToken(w http.ResponseWriter, r *http.Request, p principal) {
	var req api.CreateTokenRequest
	if err := decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	switch req.Role {
	case api.RoleTenant:
		if req.Tenant == "" {
			writeError(w, errField("tenant", "a tenant token needs a tenant"))
			return
		}
	case api.RoleAdmin, api.RoleAgent:
		if req.Tenant != "" {
			writeError(w, errField("tenant", "%s tokens belong to no tenant", req.Role))
			return
		}
		if req.Node != "" && (req.Role != api.RoleAgent || !validName.MatchString(req.Node)) {
			writeError(w, errField("node", "only agent tokens are bound to a node, named with lowercase letters, digits, '.', '_' and '-'"))
			return
		}
	default:
		writeError(w, errField("role", "%q: want admin, tenant or agent", req.Role))
		return
	}
	if req.Role == api.RoleTenant && req.Node != "" {
		writeError(w, errField("node", "only agent tokens are bound to a node"))
		return
	}
	t, err := srv.CreateTokenFor(r.Context(), req.Role, req.Tenant, req.Node)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, t)
}

func (srv *Server) listTokens(w http.ResponseWriter, r *http.Request, p principal) {
	readPageByName(srv, w, r, state.Tx.ListTokens, func(t api.Token) string { return t.ID })
}

func (srv *Server) deleteToken(w http.ResponseWriter, r *http.Request, p principal) {
	if r.PathValue("id") == p.token {
		writeError(w, errStatus(http.StatusConflict, "a token cannot delete itself"))
		return
	}
	id := r.PathValue("id")
	err := srv.update(r.Context(), func(tx state.Tx) error {
		if err := tx.DeleteToken(id); err != nil {
			if errors.Is(err, state.ErrNotFound) {
				return errStatus(http.StatusNotFound, "token %s not found", id)
			}
			return err
		}
		tx.OnCommit(func() { srv.cache.purge(func(t api.Token) bool { return t.ID == id }) })
		return nil
	})
	if err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// EnsureTenant creates a tenant without quotas unless it exists.
func (srv *Server) EnsureTenant(ctx context.Context, name string) error {
	t := api.Tenant{Name: name, Created: srv.cfg.Clock()}
	return srv.update(ctx, func(tx state.Tx) error {
		if old, err := tx.GetTenant(name); err == nil {
			t = old
		} else if err := tx.PutTenant(t); err != nil {
			return err
		}
		tx.OnCommit(func() { srv.cache.putTenant(t) })
		return nil
	})
}
