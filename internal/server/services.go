package server

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/autoscale"
	"github.com/gpuslice/gpuslice/internal/state"
)

// PutServiceRequest is the body of PUT /v1/services/{name}.
type PutServiceRequest struct {
	// Tenant is required for admin tokens and must match a tenant token's.
	Tenant string `json:"tenant,omitempty"`
	api.ServiceSpec
}

// ValidateServiceSpec checks a service's spec: the claim by the
// allocator's own rules, the command, the autoscaling policy and metric.
// The error names the field.
func ValidateServiceSpec(spec api.ServiceSpec) error {
	if len(spec.Command) == 0 || spec.Command[0] == "" {
		return errField("command", "a service needs a command to run per replica, e.g. [python, serve.py]")
	}
	if len(spec.Claim.Requests) == 0 {
		return errField("claim.requests", "a replica's claim needs at least one request, e.g. {name: gpu, memoryMiB: 4096}")
	}
	if spec.Claim.Node != "" {
		return errField("claim.node", "a service's replicas run on the serving node; leave node empty")
	}
	a := spec.Autoscaling
	if a.MaxReplicas == 0 && a.MinReplicas == 0 {
		return errField("autoscaling.maxReplicas", "give maxReplicas (and minReplicas), e.g. {minReplicas: 1, maxReplicas: 3}")
	}
	if err := autoscale.FromCapabilities(a).WithDefaults().Validate(); err != nil {
		return errField("autoscaling", "%v", err)
	}
	if a.MaxReplicas > 64 {
		return errField("autoscaling.maxReplicas", "%d: at most 64 replicas per service on one node", a.MaxReplicas)
	}
	if a.TargetPort < 0 || a.TargetPort > 65535 {
		return errField("autoscaling.targetPort", "%d: want a port, 1..65535 (0: no proxy)", a.TargetPort)
	}
	if a.EnableAutoStop && a.TargetPort == 0 {
		return errField("autoscaling.enableAutoStop", "auto-stop wakes the service on a request at its proxy: give serverlessConfiguration.targetPort")
	}
	m, err := autoscale.ParseMetric(spec.Metric)
	if err != nil {
		return errField("metric", "%v", err)
	}
	switch {
	case m == autoscale.MetricRequests && a.TargetPort == 0:
		return errField("metric", "the requests metric counts requests at the proxy: give targetPort")
	case m == autoscale.MetricPrometheus && (spec.PrometheusURL == "" || spec.PrometheusQuery == ""):
		return errField("prometheusQuery", "the prometheus metric needs prometheusURL and prometheusQuery")
	case spec.TargetConcurrency < 0:
		return errField("targetConcurrency", "%d: want 1 or more (0: 10)", spec.TargetConcurrency)
	case spec.WakeTimeoutSeconds < 0 || spec.WakeTimeoutSeconds > 3600:
		return errField("wakeTimeoutSeconds", "%d: want 1..3600 (0: 30)", spec.WakeTimeoutSeconds)
	}
	return nil
}

// putService creates or replaces a service's spec; its status is kept.
func (srv *Server) putService(w http.ResponseWriter, r *http.Request, p principal) {
	name := r.PathValue("name")
	if !validName.MatchString(name) {
		writeError(w, errField("name", "service name %q: lowercase letters, digits, '.', '_' and '-', 1–63 characters", name))
		return
	}
	var req PutServiceRequest
	if err := decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	tenant, err := tenantFor(p, req.Tenant)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := ValidateServiceSpec(req.ServiceSpec); err != nil {
		writeError(w, err)
		return
	}
	// The replica's claim passes the same checks a claim does.
	probe := api.Claim{Tenant: tenant, Spec: req.Claim}
	if err := srv.validateClaim(&probe); err != nil {
		var he *httpError
		if errors.As(err, &he) && he.field != "" {
			he.field = "claim." + he.field
		}
		writeError(w, err)
		return
	}
	var out api.Service
	now := srv.cfg.Clock()
	err = srv.update(r.Context(), func(tx state.Tx) error {
		t, err := tx.GetTenant(tenant)
		if err != nil {
			return errField("tenant", "tenant %q does not exist", tenant)
		}
		// Its replicas' claims would be refused at this priority anyway;
		// say so now.
		if err := priorityAllowed(t, req.Claim.Priority, "claim.priority"); err != nil {
			return err
		}
		old, err := tx.GetService(name)
		switch {
		case err == nil:
			if p.role == api.RoleTenant && old.Tenant != p.tenant {
				return errStatus(http.StatusForbidden, "service %s belongs to another tenant", name)
			}
			if old.Tenant != tenant {
				return errField("tenant", "service %s belongs to tenant %s; delete it first to move it", name, old.Tenant)
			}
			out = old
		case errors.Is(err, state.ErrNotFound):
			out = api.Service{Name: name, Tenant: tenant, Created: now}
		default:
			return err
		}
		out.Spec, out.Updated = req.ServiceSpec, now
		if err := tx.PutService(out); err != nil {
			return err
		}
		return tx.AppendEvent(&api.Event{Time: now, Kind: "service.put", Tenant: tenant,
			Message: fmt.Sprintf("service %s: %d..%d replicas of %v", name, out.Spec.Autoscaling.MinReplicas, out.Spec.Autoscaling.MaxReplicas, out.Spec.Command)})
	})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// serviceFor reads a service the principal may see (404 otherwise).
func serviceFor(tx state.Tx, p principal, name string) (api.Service, error) {
	s, err := tx.GetService(name)
	if errors.Is(err, state.ErrNotFound) || (err == nil && p.role == api.RoleTenant && s.Tenant != p.tenant) {
		return api.Service{}, errStatus(http.StatusNotFound, "service %s not found", name)
	}
	return s, err
}

func (srv *Server) listServices(w http.ResponseWriter, r *http.Request, p principal) {
	readList(srv, w, r, func(tx state.Tx) ([]api.Service, error) {
		all, err := tx.ListServices()
		if err != nil || p.role != api.RoleTenant {
			return all, err
		}
		out := all[:0]
		for _, s := range all {
			if s.Tenant == p.tenant {
				out = append(out, s)
			}
		}
		return out, nil
	})
}

func (srv *Server) getService(w http.ResponseWriter, r *http.Request, p principal) {
	var s api.Service
	err := srv.store.View(r.Context(), func(tx state.Tx) error {
		var err error
		s, err = serviceFor(tx, p, r.PathValue("name"))
		return err
	})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s)
}

// deleteService removes a service; the controller then stops its
// replicas and releases their claims.
func (srv *Server) deleteService(w http.ResponseWriter, r *http.Request, p principal) {
	name := r.PathValue("name")
	var s api.Service
	err := srv.update(r.Context(), func(tx state.Tx) error {
		var err error
		if s, err = serviceFor(tx, p, name); err != nil {
			return err
		}
		if err := tx.DeleteService(name); err != nil {
			return err
		}
		return tx.AppendEvent(&api.Event{Time: srv.cfg.Clock(), Kind: "service.delete", Tenant: s.Tenant, Message: "service " + name + " deleted"})
	})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s)
}

// putServiceStatus is the controller's report (admin only): the status
// replaces the stored one, and every decision not reported before becomes
// an event, so the audit log has each scale with its reason.
func (srv *Server) putServiceStatus(w http.ResponseWriter, r *http.Request, p principal) {
	name := r.PathValue("name")
	var st api.ServiceStatus
	if err := decode(r, &st); err != nil {
		writeError(w, err)
		return
	}
	if len(st.Decisions) > api.MaxDecisions {
		st.Decisions = st.Decisions[len(st.Decisions)-api.MaxDecisions:]
	}
	var out api.Service
	err := srv.update(r.Context(), func(tx state.Tx) error {
		s, err := serviceFor(tx, p, name)
		if err != nil {
			return err
		}
		var lastSeen time.Time
		if n := len(s.Status.Decisions); n > 0 {
			lastSeen = s.Status.Decisions[n-1].Time
		}
		for _, d := range st.Decisions {
			if !d.Time.After(lastSeen) {
				continue
			}
			if err := tx.AppendEvent(&api.Event{Time: d.Time, Kind: "service.scale", Tenant: s.Tenant,
				Message: fmt.Sprintf("service %s: %v", name, d)}); err != nil {
				return err
			}
		}
		s.Status = st
		out = s
		return tx.PutService(s)
	})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}
