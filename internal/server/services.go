package server

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/autoscale"
	"github.com/gpuslice/gpuslice/internal/state"
)

// ValidateServiceSpec checks a service's spec: the claim by the
// allocator's own rules, the command, the autoscaling policy and metric.
// The error names the field.
func ValidateServiceSpec(spec api.ServiceSpec) error {
	if len(spec.Command) == 0 || spec.Command[0] == "" {
		return errField("command", "a service needs a command to run per replica, e.g. [python, serve.py]")
	}
	if len(spec.Command) > maxArgs {
		return errField("command", "%d arguments: at most %d", len(spec.Command), maxArgs)
	}
	for i, a := range spec.Command {
		if strings.ContainsRune(a, 0) {
			return errField(fmt.Sprintf("command[%d]", i), "an argument cannot hold a NUL byte")
		}
	}
	for _, k := range slices.Sorted(maps.Keys(spec.Env)) {
		if err := checkEnvName("env."+k, k); err != nil {
			return err
		}
		if strings.ContainsRune(spec.Env[k], 0) {
			return errField("env."+k, "a value cannot hold a NUL byte")
		}
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

// Bounds of a tenant's allow-list.
const (
	maxAllowedCommands = 64
	maxArgs            = 256
)

// envName is what a service's variable may be called.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// checkEnvName refuses a name that is no variable, or one the controller
// sets for the replica: its devices (CUDA_VISIBLE_DEVICES, CUDA_MPS_*,
// NVIDIA_VISIBLE_DEVICES), its port and GPUSLICE_CLAIM/REPLICA/SERVICE.
func checkEnvName(field, k string) error {
	switch {
	case !envName.MatchString(k):
		return errField(field, "%q: a variable name is letters, digits and '_', not starting with a digit", k)
	case k == "PORT" || k == "CUDA_VISIBLE_DEVICES" || k == "NVIDIA_VISIBLE_DEVICES" || strings.HasPrefix(k, "CUDA_MPS_") ||
		k == "GPUSLICE_CLAIM" || k == "GPUSLICE_REPLICA" || k == "GPUSLICE_SERVICE":
		return errField(field, "%s is set by gpuslice for each replica (its devices, port and claim); it cannot be overridden", k)
	}
	return nil
}

// checkCommands validates a tenant's allow-list (PUT /v1/tenants).
func checkCommands(cmds []api.AllowedCommand) error {
	if len(cmds) > maxAllowedCommands {
		return errField("commands", "%d commands: at most %d per tenant", len(cmds), maxAllowedCommands)
	}
	for i, c := range cmds {
		f := fmt.Sprintf("commands[%d]", i)
		if len(c.Command) == 0 || c.Command[0] == "" {
			return errField(f+".command", "an allowed command is a whole argv, e.g. [python3, serve.py]")
		}
		if len(c.Command) > maxArgs {
			return errField(f+".command", "%d arguments: at most %d", len(c.Command), maxArgs)
		}
		for j, a := range c.Command {
			if strings.ContainsRune(a, 0) {
				return errField(fmt.Sprintf("%s.command[%d]", f, j), "an argument cannot hold a NUL byte")
			}
		}
		for j, k := range c.Env {
			if err := checkEnvName(fmt.Sprintf("%s.env[%d]", f, j), k); err != nil {
				return err
			}
		}
	}
	return nil
}

// tenantMayRun says whether a tenant's token may run spec: its command is
// one the admin allows the tenant (the whole argv), every variable it sets
// is one that command lets the tenant set, its proxy port is unprivileged,
// and it makes the server fetch no URL of the tenant's choosing. Admins
// put anything. The error names the field and what an admin can allow.
func tenantMayRun(t api.Tenant, spec api.ServiceSpec) error {
	var allowed *api.AllowedCommand
	for i := range t.Commands {
		if slices.Equal(t.Commands[i].Command, spec.Command) {
			allowed = &t.Commands[i]
			break
		}
	}
	if allowed == nil {
		if len(t.Commands) == 0 {
			return errStatus(http.StatusForbidden, "command %q: tenant %s may run no command; an admin allows commands per tenant (gpuslice tenants put %s --allow-command '...')", spec.Command, t.Name, t.Name)
		}
		var cmds []string
		for _, c := range t.Commands {
			cmds = append(cmds, fmt.Sprintf("%q", c.Command))
		}
		return &httpError{status: http.StatusForbidden, field: "command", msg: fmt.Sprintf("command %q is not one tenant %s may run (allowed: %s); an admin allows more", spec.Command, t.Name, strings.Join(cmds, ", "))}
	}
	for _, k := range slices.Sorted(maps.Keys(spec.Env)) {
		if !slices.Contains(allowed.Env, k) {
			return &httpError{status: http.StatusForbidden, field: "env." + k, msg: fmt.Sprintf("variable %s: tenant %s may set only %v on %q; an admin allows more", k, t.Name, allowed.Env, spec.Command)}
		}
	}
	if p := spec.Autoscaling.TargetPort; p > 0 && p < 1024 {
		return &httpError{status: http.StatusForbidden, field: "autoscaling.targetPort", msg: fmt.Sprintf("%d: a tenant's proxy listens on ports 1024..65535; a privileged port needs a service an admin puts", p)}
	}
	if spec.PrometheusURL != "" {
		return &httpError{status: http.StatusForbidden, field: "prometheusURL", msg: "the server fetches prometheusURL from its own host: only an admin's service may set it"}
	}
	return nil
}

// disabledWhy is why a stored service runs no replica under its tenant
// as it is now ("" when it may run): its replicas' priority is above the
// tenant's maximum (every replica's claim would be refused), or a
// tenant's spec whose command or variables the admin no longer allows.
func disabledWhy(t api.Tenant, s api.Service) string {
	if err := priorityAllowed(t, s.Spec.Claim.Priority, "claim.priority"); err != nil {
		return "not allowed to its tenant any more: " + err.Error()
	}
	if s.PutBy != api.RoleTenant {
		return ""
	}
	if err := tenantMayRun(t, s.Spec); err != nil {
		return "not allowed to its tenant any more: " + err.Error()
	}
	return ""
}

// putService creates or replaces a service's spec; its status is kept.
func (srv *Server) putService(w http.ResponseWriter, r *http.Request, p principal) {
	name := r.PathValue("name")
	if !validName.MatchString(name) {
		writeError(w, errField("name", "service name %q: lowercase letters, digits, '.', '_' and '-', 1–63 characters", name))
		return
	}
	var req api.PutServiceRequest
	if err := decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	tenant, err := tenantFor(p, req.Tenant)
	if err != nil {
		writeError(w, err)
		return
	}
	if req.CreateTenant {
		if p.role != api.RoleAdmin {
			writeError(w, &httpError{status: http.StatusForbidden, field: "createTenant", msg: "only an admin token creates tenants; a tenant token puts services of its own tenant (leave createTenant out)"})
			return
		}
		if !validName.MatchString(tenant) {
			writeError(w, errField("tenant", "tenant name %q: lowercase letters, digits, '.', '_' and '-', 1–63 characters", tenant))
			return
		}
	}
	if err := ValidateServiceSpec(req.ServiceSpec); err != nil {
		writeError(w, err)
		return
	}
	if req.Claim.Service != "" || req.Claim.LeaseSeconds != 0 {
		writeError(w, errField("claim.service", "a replica's claim gets its service and lease from the controller; leave service and leaseSeconds empty"))
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
		switch {
		case errors.Is(err, state.ErrNotFound) && req.CreateTenant:
			// Checked above: only an admin gets here.
			t = api.Tenant{Name: tenant, Created: now}
			if err := tx.PutTenant(t); err != nil {
				return err
			}
			if err := tx.AppendEvent(&api.Event{Time: now, Kind: "tenant.create", Tenant: tenant,
				Message: fmt.Sprintf("tenant %s created for service %s (no quota, max priority 0, no allowed commands)", tenant, name)}); err != nil {
				return err
			}
			tx.OnCommit(func() { srv.cache.putTenant(t) })
		case errors.Is(err, state.ErrNotFound):
			return errField("tenant", "tenant %q does not exist; create it (gpuslice tenants put %s), or put the service with an admin token and createTenant", tenant, tenant)
		case err != nil:
			return err
		}
		if p.role == api.RoleTenant {
			// Against the tenant as this transaction sees it: an allow-list
			// shortened a moment ago binds already.
			if err := tenantMayRun(t, req.ServiceSpec); err != nil {
				return err
			}
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
		out.Spec, out.Updated, out.PutBy, out.Disabled = req.ServiceSpec, now, p.role, ""
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
