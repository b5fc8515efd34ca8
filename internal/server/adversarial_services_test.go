package server_test

// Adversarial tests of what surrounds claims on the standalone server:
// services a tenant puts, leases that end abandoned claims, tenants
// deleted and re-created. (Processes, crashes and kill -9: internal/cli
// and internal/services.)

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/model"
)

func serviceReq(cmd ...string) api.PutServiceRequest {
	return api.PutServiceRequest{ServiceSpec: api.ServiceSpec{
		Claim:       api.ClaimSpec{Requests: []alloc.Request{{Name: "gpu", MemoryMiB: 1024, Mode: alloc.TimeSlice}}},
		Command:     cmd,
		Autoscaling: model.Autoscaling{MinReplicas: 1, MaxReplicas: 1},
	}}
}

// A tenant token once made the server run any command on its host, as
// its user (root), with its environment: the admin token was one `cat`
// away. Now a tenant runs only what an admin allowed it, sets only the
// variables allowed on that command, listens on no privileged port and
// makes the server fetch no URL; its services stop when the admin takes
// the command back.
func TestTenantTokenRunsOnlyWhatTheAdminAllows(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 0)
	h.Tenant("beta", 0)
	evil := serviceReq("sh", "-c", "id; cat /root/.local/share/gpuslice/admin.token")
	if code, body := h.Call(acme, "PUT", "/v1/services/pwn", evil); code != http.StatusForbidden || !strings.Contains(string(body), "may run no command") {
		t.Fatalf("a tenant with no allowed command put %v: %d %s, want 403", evil.Command, code, body)
	}
	allowed := []string{"python3", "/srv/serve.py"}
	h.Must(h.Admin, "PUT", "/v1/tenants/acme", api.Tenant{Commands: []api.AllowedCommand{{Command: allowed, Env: []string{"MODEL"}}}}, 200, nil)
	for _, tc := range []struct {
		name string
		mut  func(*api.PutServiceRequest)
		want string
	}{
		{"another command", func(r *api.PutServiceRequest) { r.Command = []string{"sh", "-c", "id"} }, "is not one tenant acme may run"},
		{"an extra argument", func(r *api.PutServiceRequest) { r.Command = append(r.Command, "--evil") }, "is not one tenant acme may run"},
		{"a prefix", func(r *api.PutServiceRequest) { r.Command = r.Command[:1] }, "is not one tenant acme may run"},
		{"LD_PRELOAD", func(r *api.PutServiceRequest) { r.Env = map[string]string{"LD_PRELOAD": "/tmp/x.so"} }, "may set only [MODEL]"},
		{"PATH", func(r *api.PutServiceRequest) { r.Env = map[string]string{"MODEL": "m", "PATH": "/tmp"} }, "may set only [MODEL]"},
		{"a privileged port", func(r *api.PutServiceRequest) { r.Autoscaling.TargetPort = 80 }, "1024..65535"},
		{"a URL the server fetches", func(r *api.PutServiceRequest) {
			r.Metric, r.PrometheusURL, r.PrometheusQuery = "prometheus", "http://169.254.169.254/latest/meta-data", "up"
		}, "only an admin's service"},
	} {
		req := serviceReq(allowed...)
		tc.mut(&req)
		code, body := h.Call(acme, "PUT", "/v1/services/web", req)
		if code != http.StatusForbidden || !strings.Contains(string(body), tc.want) {
			t.Errorf("%s: %d %s, want 403 saying %q", tc.name, code, body, tc.want)
		}
	}
	// The claim's devices and the replica's identity are gpuslice's to
	// set, for admins too.
	for _, k := range []string{"CUDA_VISIBLE_DEVICES", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "PORT", "GPUSLICE_CLAIM", "1BAD", "A=B"} {
		req := serviceReq("sleep", "60")
		req.Tenant, req.Env = "acme", map[string]string{k: "x"}
		if code, body := h.Call(h.Admin, "PUT", "/v1/services/admin-svc", req); code != http.StatusUnprocessableEntity {
			t.Errorf("admin service setting %s: %d %s, want 422", k, code, body)
		}
	}
	// Another tenant's allow-list is not acme's.
	if code, body := h.Call(h.Tenant("gamma", 0), "PUT", "/v1/services/web2", serviceReq(allowed...)); code != http.StatusForbidden {
		t.Fatalf("gamma ran acme's allowed command: %d %s", code, body)
	}
	ok := serviceReq(allowed...)
	ok.Env = map[string]string{"MODEL": "llama"}
	var svc api.Service
	h.Must(acme, "PUT", "/v1/services/web", ok, 200, &svc)
	if svc.PutBy != api.RoleTenant || svc.Disabled != "" {
		t.Fatalf("allowed service: putBy %q disabled %q", svc.PutBy, svc.Disabled)
	}
	// The admin takes the command back: the service stops at once (the
	// controller runs no disabled service) and says why; allowed again,
	// it runs again.
	h.Must(h.Admin, "PUT", "/v1/tenants/acme", api.Tenant{}, 200, nil)
	h.Must(acme, "GET", "/v1/services/web", nil, 200, &svc)
	if !strings.Contains(svc.Disabled, "not allowed to its tenant any more") {
		t.Fatalf("service of a withdrawn command: disabled %q", svc.Disabled)
	}
	h.Must(h.Admin, "PUT", "/v1/tenants/acme", api.Tenant{Commands: []api.AllowedCommand{{Command: allowed, Env: []string{"MODEL"}}}}, 200, nil)
	h.Must(acme, "GET", "/v1/services/web", nil, 200, &svc)
	if svc.Disabled != "" {
		t.Fatalf("service allowed again: disabled %q", svc.Disabled)
	}
	// An admin's service of any command is the admin's to run.
	adminSvc := serviceReq("sleep", "60")
	adminSvc.Tenant = "acme"
	h.Must(h.Admin, "PUT", "/v1/services/batch", adminSvc, 200, &svc)
	h.Must(h.Admin, "PUT", "/v1/tenants/acme", api.Tenant{}, 200, nil)
	h.Must(h.Admin, "GET", "/v1/services/batch", nil, 200, &svc)
	if svc.Disabled != "" || svc.PutBy != api.RoleAdmin {
		t.Fatalf("admin's service: putBy %q disabled %q", svc.PutBy, svc.Disabled)
	}
	// Lowering the tenant's maximum priority below what an admin's
	// service asks for stops it too (its replicas' claims would all be
	// refused); raising it back starts it.
	h.Must(h.Admin, "PUT", "/v1/tenants/acme", api.Tenant{MaxPriority: 5}, 200, nil)
	adminSvc.Claim.Priority = 5
	h.Must(h.Admin, "PUT", "/v1/services/batch", adminSvc, 200, nil)
	h.Must(h.Admin, "PUT", "/v1/tenants/acme", api.Tenant{}, 200, nil)
	h.Must(h.Admin, "GET", "/v1/services/batch", nil, 200, &svc)
	if !strings.Contains(svc.Disabled, "maximum of 0") {
		t.Fatalf("service above its tenant's lowered maximum priority: disabled %q", svc.Disabled)
	}
	h.Must(h.Admin, "PUT", "/v1/tenants/acme", api.Tenant{MaxPriority: 5}, 200, nil)
	h.Must(h.Admin, "GET", "/v1/services/batch", nil, 200, &svc)
	if svc.Disabled != "" {
		t.Fatalf("service within its tenant's raised maximum: disabled %q", svc.Disabled)
	}
	// A tenant cannot mark its claims as a service's replicas (the
	// restarted controller releases those) nor set a replica's lease.
	probe := gpuReq(1024, alloc.TimeSlice)
	probe.Service = "batch"
	if code, body := h.Call(acme, "POST", "/v1/claims", probe); code != http.StatusUnprocessableEntity {
		t.Fatalf("tenant claim naming a service: %d %s, want 422", code, body)
	}
	// Bad allow-lists are refused, naming the field.
	for _, bad := range []api.AllowedCommand{{}, {Command: []string{""}}, {Command: []string{"x"}, Env: []string{"CUDA_VISIBLE_DEVICES"}}} {
		if code, body := h.Call(h.Admin, "PUT", "/v1/tenants/acme", api.Tenant{Commands: []api.AllowedCommand{bad}}); code != http.StatusUnprocessableEntity || !strings.Contains(string(body), "commands[0]") {
			t.Errorf("allow-list %+v: %d %s, want 422 naming commands[0]", bad, code, body)
		}
	}
}

// Deleting a tenant once left its services; a namesake tenant then ran
// the old command on its own quota. Now the delete is refused until its
// services are gone, and a namesake finds none.
func TestDeletingATenantLeavesNoServiceBehind(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.Tenant("acme", 0)
	req := serviceReq("sleep", "60")
	req.Tenant = "acme"
	req.Autoscaling = model.Autoscaling{MinReplicas: 0, MaxReplicas: 1, TargetPort: 18080, EnableAutoStop: true}
	h.Must(h.Admin, "PUT", "/v1/services/old", req, 200, nil)
	if code, body := h.Call(h.Admin, "DELETE", "/v1/tenants/acme", nil); code != http.StatusConflict || !strings.Contains(string(body), "old") {
		t.Fatalf("deleting a tenant with a service scaled to zero: %d %s, want 409 naming it", code, body)
	}
	h.Must(h.Admin, "DELETE", "/v1/services/old", nil, 200, nil)
	h.Must(h.Admin, "DELETE", "/v1/tenants/acme", nil, 204, nil)
	again := h.Tenant("acme", 0)
	var svcs []api.Service
	h.Must(again, "GET", "/v1/services", nil, 200, &svcs)
	if len(svcs) != 0 {
		t.Fatalf("a namesake tenant inherited %d services", len(svcs))
	}
	// Deleting while a service is being put: one of the two wins, never
	// both (a tenant gone with a service of its still stored).
	for i := range 20 {
		name := fmt.Sprintf("race-%d", i)
		h.Tenant(name, 0)
		r := serviceReq("sleep", "60")
		r.Tenant = name
		var wg sync.WaitGroup
		var putCode, delCode int
		wg.Add(2)
		go func() { defer wg.Done(); putCode, _ = h.Call(h.Admin, "PUT", "/v1/services/"+name, r) }()
		go func() { defer wg.Done(); delCode, _ = h.Call(h.Admin, "DELETE", "/v1/tenants/"+name, nil) }()
		wg.Wait()
		code, _ := h.Call(h.Admin, "GET", "/v1/services/"+name, nil)
		tcode, _ := h.Call(h.Admin, "GET", "/v1/tenants/"+name, nil)
		if code == 200 && tcode == 404 {
			t.Fatalf("race %d: service stored for a deleted tenant (put %d, delete %d)", i, putCode, delCode)
		}
	}
}

// A claim whose holder died (gpuslice run killed with kill -9) was held
// forever. A leased claim is released once its lease and the grace have
// passed without a renewal; a renewal keeps it; renewing an ended claim
// says so (409 with the state), so its holder stops; another tenant
// cannot renew it; a restart gives every leased claim a whole lease.
func TestAbandonedLeasedClaimIsReleased(t *testing.T) {
	t.Parallel()
	h := newHarnessRun(t, nil, false)
	acme := h.Tenant("acme", 0)
	beta := h.Tenant("beta", 0)
	vm, _ := h.Node("vm", "l4x4")
	leased := gpuReq(0, alloc.Exclusive)
	leased.LeaseSeconds = 30
	var c, kept, other api.Claim
	h.Must(acme, "POST", "/v1/claims", leased, 201, &c)
	if c.LeaseExpires == nil || !c.LeaseExpires.Equal(h.Now().Add(30*time.Second)) {
		t.Fatalf("lease expiry %v, want now+30s", c.LeaseExpires)
	}
	h.Must(acme, "POST", "/v1/claims", leased, 201, &kept)
	h.Must(acme, "POST", "/v1/claims", gpuReq(0, alloc.Exclusive), 201, &other) // no lease
	tick := func() {                                                            // the agent heartbeats, so the node stays ready
		t.Helper()
		if err := vm.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := h.Server().Tick(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 { // 4 × 20s: kept is renewed, c is not
		h.Advance(20 * time.Second)
		h.Must(acme, "POST", "/v1/claims/"+kept.ID+"/renew", nil, 200, nil)
		tick()
	}
	h.Must(acme, "GET", "/v1/claims/"+c.ID, nil, 200, &c)
	if c.State != api.Released || !strings.Contains(c.Reason, "lease expired") {
		t.Fatalf("abandoned leased claim: %s (%s), want released: lease expired", c.State, c.Reason)
	}
	h.Must(acme, "GET", "/v1/claims/"+kept.ID, nil, 200, &kept)
	h.Must(acme, "GET", "/v1/claims/"+other.ID, nil, 200, &other)
	if kept.State != api.Allocated || other.State != api.Allocated {
		t.Fatalf("renewed claim %s, unleased claim %s: both should still be allocated", kept.State, other.State)
	}
	code, body := h.Call(acme, "POST", "/v1/claims/"+c.ID+"/renew", nil)
	if code != http.StatusConflict || !strings.Contains(string(body), `"state":"released"`) {
		t.Fatalf("renewing a released claim: %d %s, want 409 with its state", code, body)
	}
	if code, _ := h.Call(beta, "POST", "/v1/claims/"+kept.ID+"/renew", nil); code != http.StatusNotFound {
		t.Fatalf("another tenant renewed acme's claim: %d, want 404", code)
	}
	if code, _ := h.Call(acme, "POST", "/v1/claims/"+other.ID+"/renew", nil); code != http.StatusUnprocessableEntity {
		t.Fatalf("renewing an unleased claim: %d, want 422", code)
	}
	for _, n := range []int{-1, api.MaxLeaseSeconds + 1} {
		bad := gpuReq(0, alloc.TimeSlice)
		bad.LeaseSeconds = n
		if code, _ := h.Call(acme, "POST", "/v1/claims", bad); code != http.StatusUnprocessableEntity {
			t.Errorf("leaseSeconds %d: %d, want 422", n, code)
		}
	}
	// A restart: the lease table is in memory, so every leased claim gets
	// a whole lease from the restart, and is released one lease and one
	// grace later if nobody renews.
	h.Advance(25 * time.Second)
	h.Restart()
	h.Advance(20 * time.Second)
	tick()
	h.Advance(15 * time.Second)
	tick()
	h.Must(acme, "GET", "/v1/claims/"+kept.ID, nil, 200, &kept)
	if kept.State != api.Allocated {
		t.Fatalf("after a restart a claim renewed 25s before it was released after 35s: %s", kept.State)
	}
	h.Advance(10 * time.Second)
	tick()
	h.Must(acme, "GET", "/v1/claims/"+kept.ID, nil, 200, &kept)
	if kept.State != api.Released {
		t.Fatalf("after a restart, a claim nobody renewed for lease+grace: %s", kept.State)
	}
}

// Renewals and expiry sweeps at once, with claims released by hand in
// between: a claim whose renewal was answered 200 is never released by
// an expiry before its new lease (and grace) ran out, every claim whose
// holder stopped renewing is released, and no claim is released twice.
func TestRenewalsRacingExpiryKeepTheirPromise(t *testing.T) {
	t.Parallel()
	h := newHarnessRun(t, nil, false)
	acme := h.Tenant("acme", 0)
	vm, _ := h.Node("vm", "dgx-a100")
	const n = 24
	ids := make([]string, n)
	for i := range ids {
		req := gpuReq(1024, alloc.TimeSlice)
		req.LeaseSeconds = 5
		var c api.Claim
		h.Must(acme, "POST", "/v1/claims", req, 201, &c)
		ids[i] = c.ID
	}
	// Odd claims are renewed every step, even ones are abandoned; every
	// fourth is released by hand meanwhile.
	for step := range 8 {
		h.Advance(3 * time.Second)
		var wg sync.WaitGroup
		for i, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				switch {
				case i%4 == 3 && step == 2:
					h.Call(acme, "DELETE", "/v1/claims/"+id, nil)
				case i%2 == 1:
					code, body := h.Call(acme, "POST", "/v1/claims/"+id+"/renew", nil)
					if code != 200 && !(i%4 == 3 && code == 409) {
						t.Errorf("step %d: renewing a live claim %s: %d %s", step, id, code, body)
					}
				}
			}()
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = h.Server().Tick(context.Background()) }()
		wg.Wait()
		if err := vm.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	_ = h.Server().Tick(context.Background())
	for i, id := range ids {
		var c api.Claim
		h.Must(acme, "GET", "/v1/claims/"+id, nil, 200, &c)
		switch {
		case i%4 == 3:
			if c.State != api.Released || c.Reason != "released" {
				t.Errorf("claim %d released by hand: %s (%s)", i, c.State, c.Reason)
			}
		case i%2 == 1:
			if c.State.Final() {
				t.Errorf("claim %d renewed every 3s of a 5s lease: %s (%s)", i, c.State, c.Reason)
			}
		default:
			if c.State != api.Released || !strings.Contains(c.Reason, "lease expired") {
				t.Errorf("abandoned claim %d: %s (%s)", i, c.State, c.Reason)
			}
		}
	}
	released := map[string]int{}
	for _, f := range sseFrames(t, h, h.Admin) {
		var e api.Event
		if f.event == "released" && json.Unmarshal([]byte(f.data), &e) == nil {
			released[e.Claim]++
		}
	}
	if len(released) != n/2+n/4 {
		t.Errorf("%d claims released, want %d", len(released), n/2+n/4)
	}
	for id, k := range released {
		if k > 1 {
			t.Errorf("claim %s released %d times", id, k)
		}
	}
}

// Renewals at a hundred times the rate a holder needs, from many
// goroutines at once, while another tenant claims and releases: every
// renewal is answered, the claim stays, and the other tenant's writes go
// through (renewals within a tenth of the lease are answered from a read,
// not queued at the writer).
func TestRenewalFloodDoesNotStallWriters(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 0)
	beta := h.Tenant("beta", 0)
	h.Node("vm", "dgx-a100")
	req := gpuReq(1024, alloc.TimeSlice)
	req.LeaseSeconds = 30
	var c api.Claim
	h.Must(acme, "POST", "/v1/claims", req, 201, &c)
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				if code, body := h.Call(acme, "POST", "/v1/claims/"+c.ID+"/renew", nil); code != 200 {
					errs <- fmt.Sprintf("renewal: %d %s", code, body)
					return
				}
			}
		}()
	}
	for range 20 {
		var b api.Claim
		h.Must(beta, "POST", "/v1/claims", gpuReq(1024, alloc.TimeSlice), 201, &b)
		h.Must(beta, "DELETE", "/v1/claims/"+b.ID, nil, 200, nil)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	h.Must(acme, "GET", "/v1/claims/"+c.ID, nil, 200, &c)
	if c.State.Final() || c.LeaseExpires == nil {
		t.Fatalf("flooded claim: %s, lease %v", c.State, c.LeaseExpires)
	}
}

// A compose file names its tenant (the plan's slug): an admin's put with
// createTenant makes it, with no quota, in the same transaction, and
// leaves an existing tenant as it is. A tenant token can neither create a
// tenant nor, by naming another, reach one; a tenant deleted and made
// again this way does not revive its old tokens.
func TestCreateTenantIsTheAdminsAndContainsTenants(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 0)
	req := serviceReq("python3", "/srv/serve.py")
	req.Tenant = "gpu-slicing-example-hosted-tier"
	// Without createTenant the answer says how to get one.
	if code, body := h.Call(h.Admin, "PUT", "/v1/services/gpuinfo", req); code != http.StatusUnprocessableEntity ||
		!strings.Contains(string(body), "gpuslice tenants put gpu-slicing-example-hosted-tier") || !strings.Contains(string(body), "createTenant") {
		t.Fatalf("service of a missing tenant: %d %s, want 422 naming the command and createTenant", code, body)
	}
	req.CreateTenant = true
	var svc api.Service
	h.Must(h.Admin, "PUT", "/v1/services/gpuinfo", req, 200, &svc)
	var ten api.Tenant
	h.Must(h.Admin, "GET", "/v1/tenants/gpu-slicing-example-hosted-tier", nil, 200, &ten)
	if svc.Tenant != ten.Name || ten.MemoryMiB != 0 || ten.ComputePercent != 0 || ten.MaxPriority != 0 || len(ten.Commands) != 0 {
		t.Fatalf("created tenant %+v for service of tenant %s: want no quota, priority 0, no commands", ten, svc.Tenant)
	}
	// An existing tenant is kept as it is (its quota and commands).
	h.Must(h.Admin, "PUT", "/v1/tenants/beta", api.Tenant{MemoryMiB: 2048, Commands: []api.AllowedCommand{{Command: []string{"x"}}}}, 200, nil)
	req.Tenant = "beta"
	h.Must(h.Admin, "PUT", "/v1/services/b1", req, 200, nil)
	h.Must(h.Admin, "GET", "/v1/tenants/beta", nil, 200, &ten)
	if ten.MemoryMiB != 2048 || len(ten.Commands) != 1 {
		t.Fatalf("createTenant changed an existing tenant: %+v", ten)
	}
	// A tenant token creates nothing: not with its own name, not with
	// another's, and naming another tenant is refused as before.
	for _, name := range []string{"", "acme", "evil-new", "beta"} {
		r := serviceReq("python3", "/srv/serve.py")
		r.Tenant, r.CreateTenant = name, true
		code, body := h.Call(acme, "PUT", "/v1/services/t-"+strings.TrimPrefix(name+"x", "-"), r)
		if code != http.StatusForbidden && code != http.StatusUnprocessableEntity {
			t.Errorf("tenant token, createTenant for %q: %d %s, want a refusal", name, code, body)
		}
	}
	if code, _ := h.Call(h.Admin, "GET", "/v1/tenants/evil-new", nil); code != http.StatusNotFound {
		t.Fatalf("a tenant token's createTenant made tenant evil-new: %d", code)
	}
	// A bad name is refused with the field, not stored.
	bad := serviceReq("python3", "/srv/serve.py")
	bad.Tenant, bad.CreateTenant = "Bad Name", true
	if code, body := h.Call(h.Admin, "PUT", "/v1/services/bad", bad); code != http.StatusUnprocessableEntity || !strings.Contains(string(body), `"field":"tenant"`) {
		t.Fatalf("createTenant with a bad name: %d %s", code, body)
	}
	// A tenant deleted and made again by createTenant: the old tenant's
	// token stays dead.
	gamma := h.Tenant("gamma", 0)
	h.Must(h.Admin, "DELETE", "/v1/tenants/gamma", nil, 204, nil)
	req.Tenant = "gamma"
	h.Must(h.Admin, "PUT", "/v1/services/g1", req, 200, nil)
	if code, body := h.Call(gamma, "GET", "/v1/services/g1", nil); code != http.StatusUnauthorized && code != http.StatusForbidden {
		t.Fatalf("the deleted tenant's token reached the re-created tenant's service: %d %s", code, body)
	}
}
