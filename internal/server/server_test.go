package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/server"
	"github.com/gpuslice/gpuslice/internal/server/servertest"
	"github.com/gpuslice/gpuslice/internal/state"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// harness is servertest's harness with the defaults of these tests: a
// fake clock, nodes lost after 30 s of silence, lost nodes looked for
// every 10 ms and pending claims retried every 20 ms. Helpers of a few
// tests (stored, beat, tick) are methods on it.
type harness struct{ *servertest.Harness }

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
	return &harness{servertest.New(t, servertest.Options{Store: store, Manual: !run, Configure: func(c *server.Config) {
		c.NodeTimeout, c.SweepInterval, c.RetryInterval = 30*time.Second, 10*time.Millisecond, 20*time.Millisecond
		if configure != nil {
			configure(c)
		}
	}})}
}

func gpuReq(mem int64, mode alloc.Mode) api.CreateClaimRequest {
	return api.CreateClaimRequest{ClaimSpec: api.ClaimSpec{Requests: []alloc.Request{{Name: "gpu", MemoryMiB: mem, Mode: mode}}}}
}

func TestClaimLifecycleWithAgent(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 0)
	ag, m := h.Node("host-a", "mixed")
	var c api.Claim
	h.Must(acme, "POST", "/v1/claims", api.CreateClaimRequest{ClaimSpec: api.ClaimSpec{Isolation: alloc.IsolationHardware,
		Requests: []alloc.Request{{Name: "gpu", Profile: "3g.20gb"}}}}, 201, &c)
	if c.State != api.Allocated || c.Allocation == nil || !alloc.IsPlanned(c.Allocation.Devices[0].Device) {
		t.Fatalf("claim %+v", c)
	}
	// The agent creates the instance at the planned start; the server
	// adopts its uuid and rewrites the environment.
	if err := ag.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.Must(acme, "GET", "/v1/claims/"+c.ID, nil, 200, &c)
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
	h.Must(acme, "POST", "/v1/claims/"+c.ID+"/running", nil, 200, &c)
	h.Must(acme, "DELETE", "/v1/claims/"+c.ID, nil, 200, &c)
	if c.State != api.Released {
		t.Fatalf("state %s", c.State)
	}
	h.Must(acme, "DELETE", "/v1/claims/"+c.ID, nil, 200, &c) // idempotent
}

func TestPendingThenAllocatedInPriorityOrder(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 0)
	// An admin lets acme ask for priority 10.
	h.Must(h.Admin, "PUT", "/v1/tenants/acme", api.Tenant{MaxPriority: 10}, 200, nil)
	h.Node("host-a", "t4") // one T4: 16 GiB
	var first, low, high api.Claim
	h.Must(acme, "POST", "/v1/claims", gpuReq(0, alloc.Exclusive), 201, &first)
	lowReq := gpuReq(0, alloc.Exclusive)
	h.Must(acme, "POST", "/v1/claims", lowReq, 201, &low)
	highReq := gpuReq(0, alloc.Exclusive)
	highReq.Priority = 10
	h.Must(acme, "POST", "/v1/claims", highReq, 201, &high)
	if low.State != api.Pending || high.State != api.Pending || high.QueuePosition != 1 || !strings.Contains(low.Reason, "0/1 nodes are available") {
		t.Fatalf("low %+v high %+v", low, high)
	}
	h.Must(acme, "DELETE", "/v1/claims/"+first.ID, nil, 200, nil)
	h.Must(acme, "GET", "/v1/claims/"+high.ID+"?wait=2s&state=pending", nil, 200, &high)
	h.Must(acme, "GET", "/v1/claims/"+low.ID, nil, 200, &low)
	if high.State != api.Allocated || low.State != api.Pending || low.QueuePosition != 1 {
		t.Fatalf("high %s low %s (pos %d): priority order broken", high.State, low.State, low.QueuePosition)
	}
}

func TestTenantIsolationAndQuota(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 10000)
	beta := h.Tenant("beta", 0)
	h.Node("host-a", "l4x4")
	var c api.Claim
	h.Must(acme, "POST", "/v1/claims", gpuReq(8000, alloc.TimeSlice), 201, &c)
	code, body := h.Call(acme, "POST", "/v1/claims", gpuReq(4000, alloc.TimeSlice))
	if code != 403 || !strings.Contains(string(body), "quota: tenant acme holds 8000 MiB") {
		t.Fatalf("quota: %d %s", code, body)
	}
	// Another tenant's claim is invisible: 404, not 403.
	if code, _ := h.Call(beta, "GET", "/v1/claims/"+c.ID, nil); code != 404 {
		t.Fatalf("beta sees acme's claim: %d", code)
	}
	if code, _ := h.Call(beta, "DELETE", "/v1/claims/"+c.ID, nil); code != 404 {
		t.Fatalf("beta releases acme's claim: %d", code)
	}
	var list []api.Claim
	h.Must(beta, "GET", "/v1/claims", nil, 200, &list)
	if len(list) != 0 {
		t.Fatalf("beta lists %d claims", len(list))
	}
	// Tenants never share a time-sliced device.
	var b api.Claim
	h.Must(beta, "POST", "/v1/claims", gpuReq(2000, alloc.TimeSlice), 201, &b)
	if b.Allocation.Devices[0].Device == c.Allocation.Devices[0].Device {
		t.Fatal("two tenants on one time-sliced GPU")
	}
	// Admin-only endpoints.
	if code, _ := h.Call(acme, "GET", "/v1/tenants", nil); code != 403 {
		t.Fatalf("tenant lists tenants: %d", code)
	}
}

func TestBadRequestsChangeNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 0)
	h.Node("host-a", "t4")
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
		code, body := h.Call(acme, "POST", "/v1/claims", tc.body)
		if code != tc.code || !strings.Contains(string(body), tc.want) {
			t.Errorf("body %.60q: HTTP %d %s; want %d containing %q", tc.body, code, body, tc.code, tc.want)
		}
	}
	if code, _ := h.Call("", "GET", "/v1/claims", nil); code != 401 {
		t.Fatalf("no token: %d", code)
	}
	if code, _ := h.Call("gs_t_wrong", "GET", "/v1/claims", nil); code != 401 {
		t.Fatalf("bad token: %d", code)
	}
	var list []api.Claim
	h.Must(h.Admin, "GET", "/v1/claims", nil, 200, &list)
	if len(list) != 0 {
		t.Fatalf("bad requests left %d claims", len(list))
	}
}

func TestLostNodeRequeuesItsClaims(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 0)
	agA, _ := h.Node("host-a", "t4")
	var c api.Claim
	h.Must(acme, "POST", "/v1/claims", gpuReq(0, alloc.Exclusive), 201, &c)
	if c.Allocation.Devices[0].Node != "host-a" {
		t.Fatalf("placed on %s", c.Allocation.Devices[0].Node)
	}
	agB, _ := h.Node("host-b", "t4")
	h.Advance(20 * time.Second)
	if err := agB.Step(context.Background()); err != nil { // b heartbeats, a does not
		t.Fatal(err)
	}
	h.Advance(20 * time.Second)
	if err := agB.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "the claim moved to host-b", func() (bool, string) {
		h.Must(acme, "GET", "/v1/claims/"+c.ID, nil, 200, &c)
		return c.State == api.Allocated && c.Allocation.Devices[0].Node == "host-b", fmt.Sprintf("claim %+v", c)
	})
	var n api.Node
	h.Must(h.Admin, "GET", "/v1/nodes/host-a", nil, 200, &n)
	if n.State != api.NodeLost {
		t.Fatalf("host-a is %s", n.State)
	}
	// host-a comes back: it is ready again, and the claim stays on host-b
	// (never double-placed).
	if err := agA.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	var claims []api.Claim
	h.Must(h.Admin, "GET", "/v1/claims?state=allocated", nil, 200, &claims)
	if len(claims) != 1 || claims[0].Allocation.Devices[0].Node != "host-b" {
		t.Fatalf("after host-a returns: %+v", claims)
	}
}

func TestMetricsAndOpenAPI(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 0)
	h.Node("host-a", "t4")
	h.Must(acme, "POST", "/v1/claims", gpuReq(2000, alloc.TimeSlice), 201, nil)
	code, body := h.Call(h.Admin, "GET", "/metrics", nil)
	for _, want := range []string{`gpuslice_claims{state="allocated",tenant="acme"} 1`, "gpuslice_allocation_latency_seconds_bucket",
		`gpuslice_device_memory_promised_mib{`, `gpuslice_tenant_memory_mib{tenant="acme"} 2000`, `gpuslice_nodes{state="ready"} 1`} {
		if code != 200 || !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	code, body = h.Call("", "GET", "/openapi.json", nil)
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
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 30000) // more than one L4 (23034 MiB), less than two
	h.Node("host-a", "l4x4")
	var first api.Claim
	h.Must(acme, "POST", "/v1/claims", gpuReq(0, alloc.Exclusive), 201, &first)
	if first.State != api.Allocated {
		t.Fatalf("first claim %+v", first)
	}
	held := first.Allocation.Devices[0].MemoryMiB
	if held < 20000 {
		t.Fatalf("an exclusive claim was promised %d MiB, want the whole L4", held)
	}
	var usage []api.Usage
	h.Must(acme, "GET", "/v1/usage", nil, 200, &usage)
	if len(usage) != 1 || usage[0].MemoryMiB != held {
		t.Fatalf("usage %+v, want %d MiB held", usage, held)
	}
	code, body := h.Call(acme, "POST", "/v1/claims", gpuReq(0, alloc.Exclusive))
	if code != 403 || !strings.Contains(string(body), fmt.Sprintf("holds %d MiB", held)) || !strings.Contains(string(body), "the allocation found gives") {
		t.Fatalf("second whole GPU: %d %s", code, body)
	}
	// A small shared claim still fits the quota.
	var small api.Claim
	h.Must(acme, "POST", "/v1/claims", gpuReq(4000, alloc.TimeSlice), 201, &small)
	// Releasing the whole GPU gives its charge back.
	h.Must(acme, "DELETE", "/v1/claims/"+first.ID, nil, 200, nil)
	h.Must(acme, "POST", "/v1/claims", gpuReq(0, alloc.Exclusive), 201, nil)
}

// A queued claim is charged what it would be given when its turn comes: if
// that breaks the quota it stays pending and says so; others may go first.
// (A time-sliced claim that names no memory is charged nothing while it
// waits, and its equal share of the device once placed.)
func TestQueuedClaimQuotaOnAllocation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 5000)
	beta := h.Tenant("beta", 0)
	h.Node("host-a", "l4x4")
	var betas []api.Claim
	for range 4 {
		var c api.Claim
		h.Must(beta, "POST", "/v1/claims", gpuReq(0, alloc.Exclusive), 201, &c)
		betas = append(betas, c)
	}
	var share, small api.Claim
	h.Must(acme, "POST", "/v1/claims", gpuReq(4000, alloc.TimeSlice), 201, &small)
	h.Must(acme, "POST", "/v1/claims", gpuReq(0, alloc.TimeSlice), 201, &share)
	if share.State != api.Pending || small.State != api.Pending {
		t.Fatalf("with every GPU taken: share %s, small %s", share.State, small.State)
	}
	// A GPU frees up: the share would get a sixteenth of an L4 (1536 MiB),
	// more than the 1000 MiB left of the quota once small is placed.
	h.Must(beta, "DELETE", "/v1/claims/"+betas[0].ID, nil, 200, nil)
	h.Must(acme, "GET", "/v1/claims/"+small.ID+"?wait=2s&state=pending", nil, 200, &small)
	h.Must(acme, "GET", "/v1/claims/"+share.ID, nil, 200, &share)
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
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 30000)
	beta := h.Tenant("beta", 0)
	h.Node("host-a", "l4x4")
	for range 4 {
		h.Must(beta, "POST", "/v1/claims", gpuReq(0, alloc.Exclusive), 201, nil)
	}
	var whole api.Claim
	h.Must(acme, "POST", "/v1/claims", gpuReq(0, alloc.Exclusive), 201, &whole)
	if whole.State != api.Pending {
		t.Fatalf("whole: %s", whole.State)
	}
	code, body := h.Call(acme, "POST", "/v1/claims", gpuReq(0, alloc.Exclusive))
	if code != 403 || !strings.Contains(string(body), "quota: tenant acme holds") {
		t.Fatalf("a second queued whole GPU: %d %s, want 403 on the quota", code, body)
	}
	var usage []api.Usage
	h.Must(h.Admin, "GET", "/v1/usage", nil, 200, &usage)
	if err := h.Server().Check(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A big claim at the head of the queue is not starved by a stream of small
// ones: once it has waited ReserveAfter, its node is held for it and claims
// behind it wait (here there is no other node).
func TestQueueStopsBackfillingForAStarvingClaim(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 0)
	beta := h.Tenant("beta", 0)
	carol := h.Tenant("carol", 0)
	ag, _ := h.Node("host-a", "l4x4")
	var betas []api.Claim
	for range 3 {
		var c api.Claim
		h.Must(beta, "POST", "/v1/claims", gpuReq(0, alloc.Exclusive), 201, &c)
		betas = append(betas, c)
	}
	two := gpuReq(0, alloc.Exclusive)
	two.Requests[0].Count = 2
	var big api.Claim
	h.Must(acme, "POST", "/v1/claims", two, 201, &big)
	if big.State != api.Pending {
		t.Fatalf("two GPUs with one free: %s", big.State)
	}
	// Before ReserveAfter: small claims backfill the free GPU.
	var small api.Claim
	h.Must(carol, "POST", "/v1/claims", gpuReq(4000, alloc.TimeSlice), 201, &small)
	if small.State != api.Allocated {
		t.Fatalf("backfill before the reservation: %s %s", small.State, small.Reason)
	}
	h.Pass(6*time.Minute, ag)
	h.Must(beta, "DELETE", "/v1/claims/"+betas[0].ID, nil, 200, nil) // frees one GPU; big needs two
	var later api.Claim
	h.Must(carol, "POST", "/v1/claims", gpuReq(4000, alloc.TimeSlice), 201, &later)
	// carol's reason says why, but never names acme's claim.
	if later.State != api.Pending || !strings.Contains(later.Reason, "node host-a is held for a claim of another tenant") || strings.Contains(later.Reason, big.ID) {
		t.Fatalf("a small claim after the reservation: %s %q, want pending behind another tenant's claim, not naming %s", later.State, later.Reason, big.ID)
	}
	h.Must(acme, "GET", "/v1/claims/"+big.ID, nil, 200, &big)
	if big.State != api.Pending || !strings.Contains(big.Reason, "node host-a is now held for it") {
		t.Fatalf("the starving claim: %s %q", big.State, big.Reason)
	}
	// A higher priority claim is not held back (an admin lets carol ask
	// for it).
	h.Must(h.Admin, "PUT", "/v1/tenants/carol", api.Tenant{MaxPriority: 10}, 200, nil)
	urgent := gpuReq(4000, alloc.TimeSlice)
	urgent.Priority = 10
	var u api.Claim
	h.Must(carol, "POST", "/v1/claims", urgent, 201, &u)
	if u.State != api.Allocated {
		t.Fatalf("a higher-priority claim: %s %q", u.State, u.Reason)
	}
	h.Must(carol, "DELETE", "/v1/claims/"+u.ID, nil, 200, nil)
	// The second GPU frees up: the starving claim gets both, then the
	// queue backfills again.
	h.Must(beta, "DELETE", "/v1/claims/"+betas[1].ID, nil, 200, nil)
	h.Must(acme, "GET", "/v1/claims/"+big.ID+"?wait=2s&state=pending", nil, 200, &big)
	if big.State != api.Allocated || len(big.Allocation.Devices) != 2 {
		t.Fatalf("the starving claim after two GPUs freed: %s %q", big.State, big.Reason)
	}
	h.Must(carol, "GET", "/v1/claims/"+later.ID+"?wait=2s&state=pending", nil, 200, &later)
	if later.State != api.Allocated {
		t.Fatalf("the held-back claim after the reservation ended: %s %q", later.State, later.Reason)
	}
}

// A claim that could not fit even the empty fleet never blocks the queue.
func TestImpossibleClaimDoesNotBlockTheQueue(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 0)
	ag, _ := h.Node("host-a", "l4x4")
	five := gpuReq(0, alloc.Exclusive)
	five.Requests[0].Count = 5
	five.WaitForNodes = true // else refused at once: it can never fit
	var huge api.Claim
	h.Must(acme, "POST", "/v1/claims", five, 201, &huge)
	h.Pass(time.Hour, ag)
	var tmp api.Claim // its release runs the queue
	h.Must(acme, "POST", "/v1/claims", gpuReq(4000, alloc.TimeSlice), 201, &tmp)
	h.Must(acme, "DELETE", "/v1/claims/"+tmp.ID, nil, 200, nil)
	h.Must(acme, "GET", "/v1/claims/"+huge.ID, nil, 200, &huge)
	if strings.Contains(huge.Reason, "now wait for it") {
		t.Fatalf("an impossible claim reserved the queue: %q", huge.Reason)
	}
	var small api.Claim
	h.Must(acme, "POST", "/v1/claims", gpuReq(4000, alloc.TimeSlice), 201, &small)
	if small.State != api.Allocated {
		t.Fatalf("a claim behind one that can never fit: %s %q", small.State, small.Reason)
	}
}

// With several nodes, only the node nominated for the starving claim is
// held: the fewest claims on it, so the soonest free. Claims behind it are
// placed on the other nodes.
func TestStarvingClaimHoldsOneNode(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 0)
	beta := h.Tenant("beta", 0)
	a, _ := h.Node("host-a", "l4x4")
	b, _ := h.Node("host-b", "l4x4")
	pin := func(node string) api.CreateClaimRequest {
		r := gpuReq(0, alloc.Exclusive)
		r.Node = node
		return r
	}
	var held []api.Claim
	for _, node := range []string{"host-a", "host-a", "host-a", "host-b", "host-b", "host-b"} {
		var c api.Claim
		h.Must(beta, "POST", "/v1/claims", pin(node), 201, &c)
		held = append(held, c)
	}
	four := gpuReq(0, alloc.Exclusive)
	four.Requests[0].Count = 4
	four.Constraints = []alloc.Constraint{{Requests: []string{"gpu"}, Match: "node"}}
	var big api.Claim
	h.Must(acme, "POST", "/v1/claims", four, 201, &big)
	if big.State != api.Pending {
		t.Fatalf("four GPUs on a busy fleet: %s", big.State)
	}
	h.Pass(6*time.Minute, a, b)
	// host-a now has 2 claims and 2 free GPUs, host-b 3 and 1: host-a is
	// the soonest free, so it is held.
	h.Must(beta, "DELETE", "/v1/claims/"+held[0].ID, nil, 200, nil) // runs the queue: big starves
	h.Must(acme, "GET", "/v1/claims/"+big.ID, nil, 200, &big)
	node, other := "host-a", "host-b"
	if big.State != api.Pending || !strings.Contains(big.Reason, "node host-a is now held for it") {
		t.Fatalf("the starving claim: %s %q", big.State, big.Reason)
	}
	// A small claim goes to the other node...
	var small api.Claim
	h.Must(acme, "POST", "/v1/claims", gpuReq(2000, alloc.TimeSlice), 201, &small)
	if small.State != api.Allocated || small.Allocation.Devices[0].Node != other {
		t.Fatalf("a small claim while %s is held: %s on %+v (%q)", node, small.State, small.Allocation, small.Reason)
	}
	// ...and one pinned to the held node waits.
	var pinned api.Claim
	h.Must(acme, "POST", "/v1/claims", api.CreateClaimRequest{ClaimSpec: api.ClaimSpec{Node: node,
		Requests: []alloc.Request{{Name: "gpu", MemoryMiB: 2000, Mode: alloc.TimeSlice}}}}, 201, &pinned)
	if pinned.State != api.Pending || !strings.Contains(pinned.Reason, "node "+node+" is held for claim "+big.ID) {
		t.Fatalf("a claim pinned to the held node: %s %q", pinned.State, pinned.Reason)
	}
	// The held node drains: the starving claim gets it.
	for _, c := range held {
		if c.Allocation.Devices[0].Node == node {
			h.Call(beta, "DELETE", "/v1/claims/"+c.ID, nil)
		}
	}
	h.Must(acme, "GET", "/v1/claims/"+big.ID+"?wait=2s&state=pending", nil, 200, &big)
	if big.State != api.Allocated || big.Allocation.Devices[0].Node != node {
		t.Fatalf("after %s drained: %s %q", node, big.State, big.Reason)
	}
}

// The queue is the scheduler's look-ahead: replicas that waited together
// are placed together, the first on a device sized for the ones behind it
// (AllocateAhead), not each on the smallest MIG instance that holds it.
func TestQueuedReplicasShareASizedDevice(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 0)
	var reps []api.Claim
	for range 6 { // no node yet: they queue
		var c api.Claim
		h.Must(acme, "POST", "/v1/claims", api.CreateClaimRequest{ClaimSpec: api.ClaimSpec{
			Requests: []alloc.Request{{Name: "gpu", MemoryMiB: 6 * 1024, ComputePercent: 10, Mode: alloc.MPS,
				Selector: "device.attributes['gpu.nvidia.com'].model == 'A100-40GB'"}}}}, 201, &c)
		if c.State != api.Pending {
			t.Fatalf("replica placed with no node: %+v", c)
		}
		reps = append(reps, c)
	}
	h.Node("host-a", "mixed") // 2 × A100-40GB (dynamic MIG) + 2 × L4
	devices := map[string]bool{}
	for _, c := range reps {
		var got api.Claim
		h.Must(acme, "GET", "/v1/claims/"+c.ID+"?wait=5s&state=pending", nil, 200, &got)
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
	t.Parallel()
	h := newHarness(t, nil)
	code, body := h.Call("", "GET", "/openapi.json", nil)
	var doc struct {
		Paths map[string]map[string]any `json:"paths"`
	}
	if code != 200 || json.Unmarshal(body, &doc) != nil {
		t.Fatalf("openapi: %d", code)
	}
	if len(h.Server().Routes()) < 20 {
		t.Fatalf("only %d routes recorded", len(h.Server().Routes()))
	}
	for _, r := range h.Server().Routes() {
		method, path, _ := strings.Cut(r, " ")
		if doc.Paths[path][strings.ToLower(method)] == nil {
			t.Errorf("openapi.json does not describe %s", r)
		}
	}
}
