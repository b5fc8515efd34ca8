package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/agent"
	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/gpu/fake"
	"github.com/gpuslice/gpuslice/internal/server"
	"github.com/gpuslice/gpuslice/internal/state"
)

// harness is a real server over HTTP on a memory store, with a fake
// clock, and helpers to act as admin, tenants and agents.
type harness struct {
	t       *testing.T
	cfg     server.Config
	srv     *server.Server
	handler http.Handler // srv's, swapped by restart
	http    *httptest.Server
	admin   string
	now     time.Time
	mu      sync.Mutex
	// agents holds each node's agent token secret (h.node makes one).
	agents map[string]string
}

func newHarness(t *testing.T, store state.Store) *harness {
	t.Helper()
	return newHarnessRun(t, store, true)
}

// newHarnessRun is newHarness; without run no background loop runs, and
// the test drives them with Server.Tick.
func newHarnessRun(t *testing.T, store state.Store, run bool) *harness {
	t.Helper()
	return newHarnessWith(t, store, run, nil)
}

// newHarnessWith is newHarnessRun with the server's configuration changed
// by configure (nil: as it is) before the server starts.
func newHarnessWith(t *testing.T, store state.Store, run bool, configure func(*server.Config)) *harness {
	t.Helper()
	h := &harness{t: t, now: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)}
	if store == nil {
		store = state.NewMemory()
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	h.cfg = server.Config{Store: store, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Clock: h.clock, NodeTimeout: 30 * time.Second, SweepInterval: 10 * time.Millisecond, RetryInterval: 20 * time.Millisecond}
	if configure != nil {
		configure(&h.cfg)
	}
	srv, err := server.New(ctx, h.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if run {
		srv.Run(ctx)
	}
	h.srv, h.handler = srv, srv.Handler()
	h.http = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		hd := h.handler
		h.mu.Unlock()
		hd.ServeHTTP(w, r)
	}))
	t.Cleanup(h.http.Close)
	tok, err := srv.CreateToken(ctx, api.RoleAdmin, "")
	if err != nil {
		t.Fatal(err)
	}
	h.admin = tok.Secret
	return h
}

// restart replaces the server with a new one over the same store, as
// after a crash; the URL stays, so agents and tokens carry on.
func (h *harness) restart() {
	h.t.Helper()
	srv, err := server.New(context.Background(), h.cfg)
	if err != nil {
		h.t.Fatalf("restarting: %v", err)
	}
	h.mu.Lock()
	h.srv, h.handler = srv, srv.Handler()
	h.mu.Unlock()
}

func (h *harness) clock() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.now
}

func (h *harness) advance(d time.Duration) {
	h.mu.Lock()
	h.now = h.now.Add(d)
	h.mu.Unlock()
}

// call sends a request and returns the status and body.
// pass lets d go by in steps shorter than the node timeout, the agents
// heartbeating after each, so no node is marked lost on the way.
func (h *harness) pass(d time.Duration, agents ...*agent.Agent) {
	h.t.Helper()
	for step := 20 * time.Second; d > 0; d -= step {
		h.advance(min(step, d))
		for _, a := range agents {
			if err := a.Step(context.Background()); err != nil {
				h.t.Fatal(err)
			}
		}
	}
}

func (h *harness) call(token, method, path string, body any) (int, []byte) {
	h.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		data, _ := json.Marshal(b)
		rd = bytes.NewReader(data)
	}
	req, _ := http.NewRequest(method, h.http.URL+path, rd)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func (h *harness) must(token, method, path string, body any, want int, out any) {
	h.t.Helper()
	code, data := h.call(token, method, path, body)
	if code != want {
		h.t.Fatalf("%s %s: HTTP %d, want %d: %s", method, path, code, want, data)
	}
	if out != nil {
		// Zero the target first: json.Unmarshal leaves fields the answer
		// omits (a pending claim's allocation) as they were, and a test
		// reusing a variable would read a stale value.
		if v := reflect.ValueOf(out); v.Kind() == reflect.Pointer && !v.IsNil() {
			v.Elem().SetZero()
		}
		if err := json.Unmarshal(data, out); err != nil {
			h.t.Fatal(err)
		}
	}
}

func (h *harness) tenant(name string, quotaMiB int64) string {
	h.t.Helper()
	h.must(h.admin, "PUT", "/v1/tenants/"+name, api.Tenant{MemoryMiB: quotaMiB}, 200, nil)
	var tok api.Token
	h.must(h.admin, "POST", "/v1/tokens", api.CreateTokenRequest{Role: api.RoleTenant, Tenant: name}, 201, &tok)
	return tok.Secret
}

// node registers a simulated machine through the real agent and returns
// the agent (Step reconciles and heartbeats).
func (h *harness) node(name, preset string, opts ...func(*agent.Config, *fake.Machine)) (*agent.Agent, *fake.Machine) {
	h.t.Helper()
	var tok api.Token
	h.must(h.admin, "POST", "/v1/tokens", api.CreateTokenRequest{Role: api.RoleAgent}, 201, &tok)
	h.mu.Lock()
	if h.agents == nil {
		h.agents = map[string]string{}
	}
	h.agents[name] = tok.Secret
	h.mu.Unlock()
	spec, err := fake.Preset(preset)
	if err != nil {
		h.t.Fatal(err)
	}
	seed := int64(0)
	for _, r := range name {
		seed = seed*31 + int64(r)
	}
	m, err := fake.New(spec, fake.WithSeed(seed))
	if err != nil {
		h.t.Fatal(err)
	}
	c, err := client.New(h.http.URL, tok.Secret, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	cfg := agent.Config{Name: name, Client: c, Device: m, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Clock: h.clock, Kill: m.StopProcess, MemoryGrace: 10 * time.Second}
	for _, o := range opts {
		o(&cfg, m)
	}
	a, err := agent.New(cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := a.Register(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	return a, m
}

func gpuReq(mem int64, mode alloc.Mode) api.CreateClaimRequest {
	return api.CreateClaimRequest{ClaimSpec: api.ClaimSpec{Requests: []alloc.Request{{Name: "gpu", MemoryMiB: mem, Mode: mode}}}}
}

func TestClaimLifecycleWithAgent(t *testing.T) {
	h := newHarness(t, nil)
	acme := h.tenant("acme", 0)
	ag, m := h.node("host-a", "mixed")
	var c api.Claim
	h.must(acme, "POST", "/v1/claims", api.CreateClaimRequest{ClaimSpec: api.ClaimSpec{Isolation: alloc.IsolationHardware,
		Requests: []alloc.Request{{Name: "gpu", Profile: "3g.20gb"}}}}, 201, &c)
	if c.State != api.Allocated || c.Allocation == nil || !alloc.IsPlanned(c.Allocation.Devices[0].Device) {
		t.Fatalf("claim %+v", c)
	}
	// The agent creates the instance at the planned start; the server
	// adopts its uuid and rewrites the environment.
	if err := ag.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.must(acme, "GET", "/v1/claims/"+c.ID, nil, 200, &c)
	dev := c.Allocation.Devices[0]
	if alloc.IsPlanned(dev.Device) || !strings.HasPrefix(dev.Device, "MIG-") || c.Allocation.Env["CUDA_VISIBLE_DEVICES"] != dev.Device {
		t.Fatalf("device not adopted: %+v env %v", dev, c.Allocation.Env)
	}
	gpus, _ := m.GPUs(context.Background())
	found := false
	for _, g := range gpus {
		for _, in := range g.Instances {
			found = found || (in.UUID == dev.Device && in.Profile == "3g.20gb" && in.Start == dev.Start)
		}
	}
	if !found {
		t.Fatalf("the fake machine has no %s@%d", dev.Profile, dev.Start)
	}
	h.must(acme, "POST", "/v1/claims/"+c.ID+"/running", nil, 200, &c)
	h.must(acme, "DELETE", "/v1/claims/"+c.ID, nil, 200, &c)
	if c.State != api.Released {
		t.Fatalf("state %s", c.State)
	}
	h.must(acme, "DELETE", "/v1/claims/"+c.ID, nil, 200, &c) // idempotent
}

func TestPendingThenAllocatedInPriorityOrder(t *testing.T) {
	h := newHarness(t, nil)
	acme := h.tenant("acme", 0)
	// An admin lets acme ask for priority 10.
	h.must(h.admin, "PUT", "/v1/tenants/acme", api.Tenant{MaxPriority: 10}, 200, nil)
	h.node("host-a", "t4") // one T4: 16 GiB
	var first, low, high api.Claim
	h.must(acme, "POST", "/v1/claims", gpuReq(0, alloc.Exclusive), 201, &first)
	lowReq := gpuReq(0, alloc.Exclusive)
	h.must(acme, "POST", "/v1/claims", lowReq, 201, &low)
	highReq := gpuReq(0, alloc.Exclusive)
	highReq.Priority = 10
	h.must(acme, "POST", "/v1/claims", highReq, 201, &high)
	if low.State != api.Pending || high.State != api.Pending || high.QueuePosition != 1 || !strings.Contains(low.Reason, "0/1 nodes are available") {
		t.Fatalf("low %+v high %+v", low, high)
	}
	h.must(acme, "DELETE", "/v1/claims/"+first.ID, nil, 200, nil)
	h.must(acme, "GET", "/v1/claims/"+high.ID+"?wait=2s&state=pending", nil, 200, &high)
	h.must(acme, "GET", "/v1/claims/"+low.ID, nil, 200, &low)
	if high.State != api.Allocated || low.State != api.Pending || low.QueuePosition != 1 {
		t.Fatalf("high %s low %s (pos %d): priority order broken", high.State, low.State, low.QueuePosition)
	}
}

func TestTenantIsolationAndQuota(t *testing.T) {
	h := newHarness(t, nil)
	acme := h.tenant("acme", 10000)
	beta := h.tenant("beta", 0)
	h.node("host-a", "l4x4")
	var c api.Claim
	h.must(acme, "POST", "/v1/claims", gpuReq(8000, alloc.TimeSlice), 201, &c)
	code, body := h.call(acme, "POST", "/v1/claims", gpuReq(4000, alloc.TimeSlice))
	if code != 403 || !strings.Contains(string(body), "quota: tenant acme holds 8000 MiB") {
		t.Fatalf("quota: %d %s", code, body)
	}
	// Another tenant's claim is invisible: 404, not 403.
	if code, _ := h.call(beta, "GET", "/v1/claims/"+c.ID, nil); code != 404 {
		t.Fatalf("beta sees acme's claim: %d", code)
	}
	if code, _ := h.call(beta, "DELETE", "/v1/claims/"+c.ID, nil); code != 404 {
		t.Fatalf("beta releases acme's claim: %d", code)
	}
	var list []api.Claim
	h.must(beta, "GET", "/v1/claims", nil, 200, &list)
	if len(list) != 0 {
		t.Fatalf("beta lists %d claims", len(list))
	}
	// Tenants never share a time-sliced device.
	var b api.Claim
	h.must(beta, "POST", "/v1/claims", gpuReq(2000, alloc.TimeSlice), 201, &b)
	if b.Allocation.Devices[0].Device == c.Allocation.Devices[0].Device {
		t.Fatal("two tenants on one time-sliced GPU")
	}
	// Admin-only endpoints.
	if code, _ := h.call(acme, "GET", "/v1/tenants", nil); code != 403 {
		t.Fatalf("tenant lists tenants: %d", code)
	}
}

func TestBadRequestsChangeNothing(t *testing.T) {
	h := newHarness(t, nil)
	acme := h.tenant("acme", 0)
	h.node("host-a", "t4")
	cases := []struct {
		body any
		code int
		want string
	}{
		{`{"requests": [`, 400, "malformed JSON"},
		{`{"requests": [{"name":"gpu"}], "turbo": true}`, 422, `unknown field \"turbo\"`},
		{`{"requests": [{"name":"gpu","memoryMiB":-5}]}`, 422, "requests[0].memoryMiB: -5"},
		{`{"requests": [{"name":"gpu","memoryMiB":"lots"}]}`, 422, "want int64"},
		{`{"requests": [{"name":"gpu","count":100000}]}`, 422, "requests[0].count"},
		{`{"requests": [{"name":"gpu","computePercent":500}]}`, 422, "computePercent"},
		{`{"requests": []}`, 422, "requests: is empty"},
		{`{"tenant": "beta", "requests": [{"name":"gpu"}]}`, 422, "own tenant"},
		{`{"requests": [{"name":"gpu","selector":"device.attributes["}]}`, 422, "selector"},
		{`{"requests": [{"name":"gpu"}], "node": "nowhere"}`, 422, "node \\\"nowhere\\\" is not registered"},
		{`{"requests": [{"name":"gpu"}]} {}`, 400, "trailing data"},
		{strings.Repeat(" ", 2<<20) + "{}", 413, "request body over"},
		{"", 400, "empty body"},
	}
	for _, tc := range cases {
		code, body := h.call(acme, "POST", "/v1/claims", tc.body)
		if code != tc.code || !strings.Contains(string(body), tc.want) {
			t.Errorf("body %.60q: HTTP %d %s; want %d containing %q", tc.body, code, body, tc.code, tc.want)
		}
	}
	if code, _ := h.call("", "GET", "/v1/claims", nil); code != 401 {
		t.Fatalf("no token: %d", code)
	}
	if code, _ := h.call("gs_t_wrong", "GET", "/v1/claims", nil); code != 401 {
		t.Fatalf("bad token: %d", code)
	}
	var list []api.Claim
	h.must(h.admin, "GET", "/v1/claims", nil, 200, &list)
	if len(list) != 0 {
		t.Fatalf("bad requests left %d claims", len(list))
	}
}

func TestLostNodeRequeuesItsClaims(t *testing.T) {
	h := newHarness(t, nil)
	acme := h.tenant("acme", 0)
	agA, _ := h.node("host-a", "t4")
	var c api.Claim
	h.must(acme, "POST", "/v1/claims", gpuReq(0, alloc.Exclusive), 201, &c)
	if c.Allocation.Devices[0].Node != "host-a" {
		t.Fatalf("placed on %s", c.Allocation.Devices[0].Node)
	}
	agB, _ := h.node("host-b", "t4")
	h.advance(20 * time.Second)
	if err := agB.Step(context.Background()); err != nil { // b heartbeats, a does not
		t.Fatal(err)
	}
	h.advance(20 * time.Second)
	if err := agB.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		h.must(acme, "GET", "/v1/claims/"+c.ID, nil, 200, &c)
		if c.State == api.Allocated && c.Allocation.Devices[0].Node == "host-b" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("claim not moved to host-b: %+v", c)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var n api.Node
	h.must(h.admin, "GET", "/v1/nodes/host-a", nil, 200, &n)
	if n.State != api.NodeLost {
		t.Fatalf("host-a is %s", n.State)
	}
	// host-a comes back: it is ready again, and the claim stays on host-b
	// (never double-placed).
	if err := agA.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	var claims []api.Claim
	h.must(h.admin, "GET", "/v1/claims?state=allocated", nil, 200, &claims)
	if len(claims) != 1 || claims[0].Allocation.Devices[0].Node != "host-b" {
		t.Fatalf("after host-a returns: %+v", claims)
	}
}

func TestMetricsAndOpenAPI(t *testing.T) {
	h := newHarness(t, nil)
	acme := h.tenant("acme", 0)
	h.node("host-a", "t4")
	h.must(acme, "POST", "/v1/claims", gpuReq(2000, alloc.TimeSlice), 201, nil)
	code, body := h.call(h.admin, "GET", "/metrics", nil)
	for _, want := range []string{`gpuslice_claims{state="allocated",tenant="acme"} 1`, "gpuslice_allocation_latency_seconds_bucket",
		`gpuslice_device_memory_promised_mib{`, `gpuslice_tenant_memory_mib{tenant="acme"} 2000`, `gpuslice_nodes{state="ready"} 1`} {
		if code != 200 || !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	code, body = h.call("", "GET", "/openapi.json", nil)
	var doc struct {
		Paths map[string]map[string]any `json:"paths"`
	}
	if code != 200 || json.Unmarshal(body, &doc) != nil {
		t.Fatalf("openapi: %d", code)
	}
	for _, p := range []string{"/v1/claims", "/v1/claims/{id}", "/v1/nodes/{name}/heartbeat", "/v1/tokens", "/metrics", "/healthz"} {
		if doc.Paths[p] == nil {
			t.Errorf("openapi lacks %s", p)
		}
	}
}

// Quotas count what a claim is given, not only what it asks: an exclusive
// claim that names no memory gets a whole GPU and is charged for it.
func TestQuotaChargesWhatIsGiven(t *testing.T) {
	h := newHarness(t, nil)
	acme := h.tenant("acme", 30000) // more than one L4 (23034 MiB), less than two
	h.node("host-a", "l4x4")
	var first api.Claim
	h.must(acme, "POST", "/v1/claims", gpuReq(0, alloc.Exclusive), 201, &first)
	if first.State != api.Allocated {
		t.Fatalf("first claim %+v", first)
	}
	held := first.Allocation.Devices[0].MemoryMiB
	if held < 20000 {
		t.Fatalf("an exclusive claim was promised %d MiB, want the whole L4", held)
	}
	var usage []api.Usage
	h.must(acme, "GET", "/v1/usage", nil, 200, &usage)
	if len(usage) != 1 || usage[0].MemoryMiB != held {
		t.Fatalf("usage %+v, want %d MiB held", usage, held)
	}
	code, body := h.call(acme, "POST", "/v1/claims", gpuReq(0, alloc.Exclusive))
	if code != 403 || !strings.Contains(string(body), fmt.Sprintf("holds %d MiB", held)) || !strings.Contains(string(body), "the allocation found gives") {
		t.Fatalf("second whole GPU: %d %s", code, body)
	}
	// A small shared claim still fits the quota.
	var small api.Claim
	h.must(acme, "POST", "/v1/claims", gpuReq(4000, alloc.TimeSlice), 201, &small)
	// Releasing the whole GPU gives its charge back.
	h.must(acme, "DELETE", "/v1/claims/"+first.ID, nil, 200, nil)
	h.must(acme, "POST", "/v1/claims", gpuReq(0, alloc.Exclusive), 201, nil)
}

// A queued claim is charged what it would be given when its turn comes: if
// that breaks the quota it stays pending and says so; others may go first.
// (A time-sliced claim that names no memory is charged nothing while it
// waits, and its equal share of the device once placed.)
func TestQueuedClaimQuotaOnAllocation(t *testing.T) {
	h := newHarness(t, nil)
	acme := h.tenant("acme", 5000)
	beta := h.tenant("beta", 0)
	h.node("host-a", "l4x4")
	var betas []api.Claim
	for range 4 {
		var c api.Claim
		h.must(beta, "POST", "/v1/claims", gpuReq(0, alloc.Exclusive), 201, &c)
		betas = append(betas, c)
	}
	var share, small api.Claim
	h.must(acme, "POST", "/v1/claims", gpuReq(4000, alloc.TimeSlice), 201, &small)
	h.must(acme, "POST", "/v1/claims", gpuReq(0, alloc.TimeSlice), 201, &share)
	if share.State != api.Pending || small.State != api.Pending {
		t.Fatalf("with every GPU taken: share %s, small %s", share.State, small.State)
	}
	// A GPU frees up: the share would get a sixteenth of an L4 (1536 MiB),
	// more than the 1000 MiB left of the quota once small is placed.
	h.must(beta, "DELETE", "/v1/claims/"+betas[0].ID, nil, 200, nil)
	h.must(acme, "GET", "/v1/claims/"+small.ID+"?wait=2s&state=pending", nil, 200, &small)
	h.must(acme, "GET", "/v1/claims/"+share.ID, nil, 200, &share)
	if small.State != api.Allocated {
		t.Fatalf("the small claim did not get the free GPU: %+v", small)
	}
	if share.State != api.Pending || !strings.Contains(share.Reason, "quota: tenant acme holds 4000 MiB") {
		t.Fatalf("the shared claim: %s %q %+v, want pending on its quota", share.State, share.Reason, share.Allocation)
	}
}

// A pending exclusive claim that names no memory is charged the whole GPU
// it will hold, so a tenant cannot queue unbounded whole-GPU claims past
// its quota; and the queue per tenant is bounded in count (429).
func TestPendingExclusiveChargedWhatItWillHold(t *testing.T) {
	h := newHarness(t, nil)
	acme := h.tenant("acme", 30000)
	beta := h.tenant("beta", 0)
	h.node("host-a", "l4x4")
	for range 4 {
		h.must(beta, "POST", "/v1/claims", gpuReq(0, alloc.Exclusive), 201, nil)
	}
	var whole api.Claim
	h.must(acme, "POST", "/v1/claims", gpuReq(0, alloc.Exclusive), 201, &whole)
	if whole.State != api.Pending {
		t.Fatalf("whole: %s", whole.State)
	}
	code, body := h.call(acme, "POST", "/v1/claims", gpuReq(0, alloc.Exclusive))
	if code != 403 || !strings.Contains(string(body), "quota: tenant acme holds") {
		t.Fatalf("a second queued whole GPU: %d %s, want 403 on the quota", code, body)
	}
	var usage []api.Usage
	h.must(h.admin, "GET", "/v1/usage", nil, 200, &usage)
	if err := h.srv.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A big claim at the head of the queue is not starved by a stream of small
// ones: once it has waited ReserveAfter, its node is held for it and claims
// behind it wait (here there is no other node).
func TestQueueStopsBackfillingForAStarvingClaim(t *testing.T) {
	h := newHarness(t, nil)
	acme := h.tenant("acme", 0)
	beta := h.tenant("beta", 0)
	carol := h.tenant("carol", 0)
	ag, _ := h.node("host-a", "l4x4")
	var betas []api.Claim
	for range 3 {
		var c api.Claim
		h.must(beta, "POST", "/v1/claims", gpuReq(0, alloc.Exclusive), 201, &c)
		betas = append(betas, c)
	}
	two := gpuReq(0, alloc.Exclusive)
	two.Requests[0].Count = 2
	var big api.Claim
	h.must(acme, "POST", "/v1/claims", two, 201, &big)
	if big.State != api.Pending {
		t.Fatalf("two GPUs with one free: %s", big.State)
	}
	// Before ReserveAfter: small claims backfill the free GPU.
	var small api.Claim
	h.must(carol, "POST", "/v1/claims", gpuReq(4000, alloc.TimeSlice), 201, &small)
	if small.State != api.Allocated {
		t.Fatalf("backfill before the reservation: %s %s", small.State, small.Reason)
	}
	h.pass(6*time.Minute, ag)
	h.must(beta, "DELETE", "/v1/claims/"+betas[0].ID, nil, 200, nil) // frees one GPU; big needs two
	var later api.Claim
	h.must(carol, "POST", "/v1/claims", gpuReq(4000, alloc.TimeSlice), 201, &later)
	// carol's reason says why, but never names acme's claim.
	if later.State != api.Pending || !strings.Contains(later.Reason, "node host-a is held for a claim of another tenant") || strings.Contains(later.Reason, big.ID) {
		t.Fatalf("a small claim after the reservation: %s %q, want pending behind another tenant's claim, not naming %s", later.State, later.Reason, big.ID)
	}
	h.must(acme, "GET", "/v1/claims/"+big.ID, nil, 200, &big)
	if big.State != api.Pending || !strings.Contains(big.Reason, "node host-a is now held for it") {
		t.Fatalf("the starving claim: %s %q", big.State, big.Reason)
	}
	// A higher priority claim is not held back (an admin lets carol ask
	// for it).
	h.must(h.admin, "PUT", "/v1/tenants/carol", api.Tenant{MaxPriority: 10}, 200, nil)
	urgent := gpuReq(4000, alloc.TimeSlice)
	urgent.Priority = 10
	var u api.Claim
	h.must(carol, "POST", "/v1/claims", urgent, 201, &u)
	if u.State != api.Allocated {
		t.Fatalf("a higher-priority claim: %s %q", u.State, u.Reason)
	}
	h.must(carol, "DELETE", "/v1/claims/"+u.ID, nil, 200, nil)
	// The second GPU frees up: the starving claim gets both, then the
	// queue backfills again.
	h.must(beta, "DELETE", "/v1/claims/"+betas[1].ID, nil, 200, nil)
	h.must(acme, "GET", "/v1/claims/"+big.ID+"?wait=2s&state=pending", nil, 200, &big)
	if big.State != api.Allocated || len(big.Allocation.Devices) != 2 {
		t.Fatalf("the starving claim after two GPUs freed: %s %q", big.State, big.Reason)
	}
	h.must(carol, "GET", "/v1/claims/"+later.ID+"?wait=2s&state=pending", nil, 200, &later)
	if later.State != api.Allocated {
		t.Fatalf("the held-back claim after the reservation ended: %s %q", later.State, later.Reason)
	}
}

// A claim that could not fit even the empty fleet never blocks the queue.
func TestImpossibleClaimDoesNotBlockTheQueue(t *testing.T) {
	h := newHarness(t, nil)
	acme := h.tenant("acme", 0)
	ag, _ := h.node("host-a", "l4x4")
	five := gpuReq(0, alloc.Exclusive)
	five.Requests[0].Count = 5
	five.WaitForNodes = true // else refused at once: it can never fit
	var huge api.Claim
	h.must(acme, "POST", "/v1/claims", five, 201, &huge)
	h.pass(time.Hour, ag)
	var tmp api.Claim // its release runs the queue
	h.must(acme, "POST", "/v1/claims", gpuReq(4000, alloc.TimeSlice), 201, &tmp)
	h.must(acme, "DELETE", "/v1/claims/"+tmp.ID, nil, 200, nil)
	h.must(acme, "GET", "/v1/claims/"+huge.ID, nil, 200, &huge)
	if strings.Contains(huge.Reason, "now wait for it") {
		t.Fatalf("an impossible claim reserved the queue: %q", huge.Reason)
	}
	var small api.Claim
	h.must(acme, "POST", "/v1/claims", gpuReq(4000, alloc.TimeSlice), 201, &small)
	if small.State != api.Allocated {
		t.Fatalf("a claim behind one that can never fit: %s %q", small.State, small.Reason)
	}
}

// With several nodes, only the node nominated for the starving claim is
// held: the fewest claims on it, so the soonest free. Claims behind it are
// placed on the other nodes.
func TestStarvingClaimHoldsOneNode(t *testing.T) {
	h := newHarness(t, nil)
	acme := h.tenant("acme", 0)
	beta := h.tenant("beta", 0)
	a, _ := h.node("host-a", "l4x4")
	b, _ := h.node("host-b", "l4x4")
	pin := func(node string) api.CreateClaimRequest {
		r := gpuReq(0, alloc.Exclusive)
		r.Node = node
		return r
	}
	var held []api.Claim
	for _, node := range []string{"host-a", "host-a", "host-a", "host-b", "host-b", "host-b"} {
		var c api.Claim
		h.must(beta, "POST", "/v1/claims", pin(node), 201, &c)
		held = append(held, c)
	}
	four := gpuReq(0, alloc.Exclusive)
	four.Requests[0].Count = 4
	four.Constraints = []alloc.Constraint{{Requests: []string{"gpu"}, Match: "node"}}
	var big api.Claim
	h.must(acme, "POST", "/v1/claims", four, 201, &big)
	if big.State != api.Pending {
		t.Fatalf("four GPUs on a busy fleet: %s", big.State)
	}
	h.pass(6*time.Minute, a, b)
	// host-a now has 2 claims and 2 free GPUs, host-b 3 and 1: host-a is
	// the soonest free, so it is held.
	h.must(beta, "DELETE", "/v1/claims/"+held[0].ID, nil, 200, nil) // runs the queue: big starves
	h.must(acme, "GET", "/v1/claims/"+big.ID, nil, 200, &big)
	node, other := "host-a", "host-b"
	if big.State != api.Pending || !strings.Contains(big.Reason, "node host-a is now held for it") {
		t.Fatalf("the starving claim: %s %q", big.State, big.Reason)
	}
	// A small claim goes to the other node...
	var small api.Claim
	h.must(acme, "POST", "/v1/claims", gpuReq(2000, alloc.TimeSlice), 201, &small)
	if small.State != api.Allocated || small.Allocation.Devices[0].Node != other {
		t.Fatalf("a small claim while %s is held: %s on %+v (%q)", node, small.State, small.Allocation, small.Reason)
	}
	// ...and one pinned to the held node waits.
	var pinned api.Claim
	h.must(acme, "POST", "/v1/claims", api.CreateClaimRequest{ClaimSpec: api.ClaimSpec{Node: node,
		Requests: []alloc.Request{{Name: "gpu", MemoryMiB: 2000, Mode: alloc.TimeSlice}}}}, 201, &pinned)
	if pinned.State != api.Pending || !strings.Contains(pinned.Reason, "node "+node+" is held for claim "+big.ID) {
		t.Fatalf("a claim pinned to the held node: %s %q", pinned.State, pinned.Reason)
	}
	// The held node drains: the starving claim gets it.
	for _, c := range held {
		if c.Allocation.Devices[0].Node == node {
			h.call(beta, "DELETE", "/v1/claims/"+c.ID, nil)
		}
	}
	h.must(acme, "GET", "/v1/claims/"+big.ID+"?wait=2s&state=pending", nil, 200, &big)
	if big.State != api.Allocated || big.Allocation.Devices[0].Node != node {
		t.Fatalf("after %s drained: %s %q", node, big.State, big.Reason)
	}
}

// The queue is the scheduler's look-ahead: replicas that waited together
// are placed together, the first on a device sized for the ones behind it
// (AllocateAhead), not each on the smallest MIG instance that holds it.
func TestQueuedReplicasShareASizedDevice(t *testing.T) {
	h := newHarness(t, nil)
	acme := h.tenant("acme", 0)
	var reps []api.Claim
	for range 6 { // no node yet: they queue
		var c api.Claim
		h.must(acme, "POST", "/v1/claims", api.CreateClaimRequest{ClaimSpec: api.ClaimSpec{
			Requests: []alloc.Request{{Name: "gpu", MemoryMiB: 6 * 1024, ComputePercent: 10, Mode: alloc.MPS,
				Selector: "device.attributes['gpu.nvidia.com'].model == 'A100-40GB'"}}}}, 201, &c)
		if c.State != api.Pending {
			t.Fatalf("replica placed with no node: %+v", c)
		}
		reps = append(reps, c)
	}
	h.node("host-a", "mixed") // 2 × A100-40GB (dynamic MIG) + 2 × L4
	devices := map[string]bool{}
	for _, c := range reps {
		var got api.Claim
		h.must(acme, "GET", "/v1/claims/"+c.ID+"?wait=5s&state=pending", nil, 200, &got)
		if got.State != api.Allocated {
			t.Fatalf("replica %s: %s (%s)", got.ID, got.State, got.Reason)
		}
		devices[got.Allocation.Devices[0].Device] = true
	}
	if len(devices) > 2 {
		t.Fatalf("6 queued replicas of 6 GiB took %d devices: %v; the first should be sized for the rest", len(devices), devices)
	}
}

// Every route the API serves is described in openapi.json with its method.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	h := newHarness(t, nil)
	code, body := h.call("", "GET", "/openapi.json", nil)
	var doc struct {
		Paths map[string]map[string]any `json:"paths"`
	}
	if code != 200 || json.Unmarshal(body, &doc) != nil {
		t.Fatalf("openapi: %d", code)
	}
	if len(h.srv.Routes()) < 20 {
		t.Fatalf("only %d routes recorded", len(h.srv.Routes()))
	}
	for _, r := range h.srv.Routes() {
		method, path, _ := strings.Cut(r, " ")
		if doc.Paths[path][strings.ToLower(method)] == nil {
			t.Errorf("openapi.json does not describe %s", r)
		}
	}
}
