package server

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"

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
	readList(srv, w, r, func(tx state.Tx) ([]api.Tenant, error) { return tx.ListTenants() })
}

// putTenant creates or updates a tenant (its quotas).
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
	t.Name = name
	err := srv.store.Update(r.Context(), func(tx state.Tx) error {
		old, err := tx.GetTenant(name)
		if err == nil {
			t.Created = old.Created
		} else {
			t.Created = srv.cfg.Clock()
		}
		return tx.PutTenant(t)
	})
	if err != nil {
		writeError(w, err)
		return
	}
	srv.cache.mu.Lock()
	srv.cache.tenants[name] = t
	srv.cache.mu.Unlock()
	writeJSON(w, http.StatusOK, t)
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

// deleteTenant refuses while the tenant has live claims.
func (srv *Server) deleteTenant(w http.ResponseWriter, r *http.Request, p principal) {
	name := r.PathValue("name")
	err := srv.store.Update(r.Context(), func(tx state.Tx) error {
		live, err := tx.ListClaims(state.ClaimFilter{Tenant: name, States: []api.ClaimState{api.Pending, api.Allocated, api.Running}})
		if err != nil {
			return err
		}
		if len(live) > 0 {
			return errStatus(http.StatusConflict, "tenant %s has %d live claims; release them first", name, len(live))
		}
		return tx.DeleteTenant(name)
	})
	if err != nil {
		writeError(w, err)
		return
	}
	srv.cache.mu.Lock()
	delete(srv.cache.tenants, name)
	srv.cache.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// CreateTokenRequest is the body of POST /v1/tokens.
type CreateTokenRequest struct {
	Role   api.Role `json:"role"`
	Tenant string   `json:"tenant,omitempty"`
}

func (srv *Server) createToken(w http.ResponseWriter, r *http.Request, p principal) {
	var req CreateTokenRequest
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
	default:
		writeError(w, errField("role", "%q: want admin, tenant or agent", req.Role))
		return
	}
	t, err := srv.CreateToken(r.Context(), req.Role, req.Tenant)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, t)
}

func (srv *Server) listTokens(w http.ResponseWriter, r *http.Request, p principal) {
	readList(srv, w, r, func(tx state.Tx) ([]api.Token, error) { return tx.ListTokens() })
}

func (srv *Server) deleteToken(w http.ResponseWriter, r *http.Request, p principal) {
	if r.PathValue("id") == p.token {
		writeError(w, errStatus(http.StatusConflict, "a token cannot delete itself"))
		return
	}
	err := srv.store.Update(r.Context(), func(tx state.Tx) error { return tx.DeleteToken(r.PathValue("id")) })
	if err != nil {
		writeError(w, err)
		return
	}
	srv.cache.mu.Lock()
	for h, t := range srv.cache.tokens {
		if t.ID == r.PathValue("id") {
			delete(srv.cache.tokens, h)
		}
	}
	srv.cache.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// EnsureTenant creates a tenant without quotas unless it exists.
func (srv *Server) EnsureTenant(ctx context.Context, name string) error {
	t := api.Tenant{Name: name, Created: srv.cfg.Clock()}
	err := srv.store.Update(ctx, func(tx state.Tx) error {
		if old, err := tx.GetTenant(name); err == nil {
			t = old
			return nil
		}
		return tx.PutTenant(t)
	})
	if err != nil {
		return err
	}
	srv.cache.mu.Lock()
	srv.cache.tenants[name] = t
	srv.cache.mu.Unlock()
	return nil
}
