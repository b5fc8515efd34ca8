package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
)

// fakeAPI answers GET /v1/claims with claims and PUT /v1/tenants/NAME by
// echoing the tenant back, as the server does.
func fakeAPI(t *testing.T, claims []api.Claim) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/claims", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(claims)
	})
	var mu sync.Mutex
	tenants := map[string]api.Tenant{}
	mux.HandleFunc("GET /v1/tenants/{name}", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		tn, ok := tenants[r.PathValue("name")]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(api.Error{Error: "tenant not found"})
			return
		}
		_ = json.NewEncoder(w).Encode(tn)
	})
	mux.HandleFunc("PUT /v1/tenants/{name}", func(w http.ResponseWriter, r *http.Request) {
		var tn api.Tenant
		if err := json.NewDecoder(r.Body).Decode(&tn); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		tn.Name = r.PathValue("name")
		mu.Lock()
		tenants[tn.Name] = tn
		mu.Unlock()
		_ = json.NewEncoder(w).Encode(tn)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// The REASON column says why a claim waits or failed; for other states it
// would only repeat the state, so it shows "-".
func TestClaimsLsReasonOnlyWhenItAddsSomething(t *testing.T) {
	url := fakeAPI(t, []api.Claim{
		{ID: "c1", Tenant: "a", State: api.Allocated, Reason: "allocated: GPU-1 on host (exclusive, 100 MiB)",
			Allocation: &alloc.Allocation{Devices: []alloc.Assigned{{Node: "host", Device: "GPU-1", Mode: "exclusive", MemoryMiB: 100}}}},
		{ID: "c2", Tenant: "a", State: api.Released, Reason: "released"},
		{ID: "c3", Tenant: "a", State: api.Pending, Reason: "no GPU has 80 GiB free"},
		{ID: "c4", Tenant: "a", State: api.Failed, Reason: "GPU GPU-2 became unhealthy while it ran"},
		{ID: "c5", Tenant: "a", State: api.Failed, Reason: "failed"},
	})
	out := run("claims", "ls", "--server", url, "--token", "x")
	rows := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			rows[f[0]] = l
		}
	}
	for id, want := range map[string]string{"c1": "-", "c2": "-", "c3": "no GPU has 80 GiB free", "c4": "became unhealthy while it ran", "c5": "-"} {
		row, ok := rows[id]
		if !ok {
			t.Fatalf("no row for %s:\n%s", id, out)
		}
		if !strings.HasSuffix(strings.TrimRight(row, " "), want) {
			t.Errorf("%s: REASON should end %q:\n%s", id, want, row)
		}
	}
	if strings.Contains(out, "allocated: GPU-1") || strings.Contains(out, "released released") {
		t.Errorf("a reason repeats the state:\n%s", out)
	}
}

// A quota of 0 is no limit, not a limit of 0.
func TestTenantsPutNoLimit(t *testing.T) {
	url := fakeAPI(t, nil)
	out := run("tenants", "put", "team", "--server", url, "--token", "x")
	if !strings.Contains(out, "memory quota no limit, compute quota no limit") || strings.Contains(out, "0%") {
		t.Errorf("tenants put without limits:\n%s", out)
	}
	out = run("tenants", "put", "team", "--memory-mib", "2048", "--compute", "50", "--server", url, "--token", "x")
	if !strings.Contains(out, "memory quota 2048 MiB, compute quota 50%") {
		t.Errorf("tenants put with limits:\n%s", out)
	}
}

// An admin sets a tenant's maximum claim priority with --max-priority;
// left out, it is 0 (the tenant outranks no one at the default).
func TestTenantsPutMaxPriority(t *testing.T) {
	url := fakeAPI(t, nil)
	out := run("tenants", "put", "team", "--max-priority", "50", "--server", url, "--token", "x")
	if !strings.Contains(out, "max priority 50") {
		t.Errorf("tenants put --max-priority 50:\n%s", out)
	}
	// Settings not given are kept: a quota change keeps the maximum.
	out = run("tenants", "put", "team", "--memory-mib", "1024", "--server", url, "--token", "x")
	if !strings.Contains(out, "max priority 50") || !strings.Contains(out, "memory quota 1024") {
		t.Errorf("tenants put --memory-mib after --max-priority:\n%s", out)
	}
	out = run("tenants", "put", "team", "--max-priority", "0", "--allow-command", "python3 serve.py", "--allow-env", "MODEL", "--server", url, "--token", "x")
	if !strings.Contains(out, "max priority 0") || !strings.Contains(out, `may run ["python3" "serve.py"] setting MODEL`) {
		t.Errorf("tenants put --max-priority 0 --allow-command:\n%s", out)
	}
	out = run("tenants", "put", "team", "--no-commands", "--server", url, "--token", "x")
	if strings.Contains(out, "may run") {
		t.Errorf("tenants put --no-commands:\n%s", out)
	}
}
