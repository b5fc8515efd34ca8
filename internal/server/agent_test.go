package server_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/agent"
	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpu/fake"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// Time-slicing has no memory isolation: the agent's watchdog compares a
// claim's processes with its promise and, under policy kill, ends them
// after the grace period; events and usage reach the server.
func TestWatchdogKillsOverLimitProcess(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 0)
	ag, m := h.Node("host-a", "t4")
	req := gpuReq(4000, alloc.TimeSlice)
	req.MemoryPolicy = "kill"
	var c api.Claim
	h.Must(acme, "POST", "/v1/claims", req, 201, &c)
	ctx := context.Background()
	if err := ag.Step(ctx); err != nil {
		t.Fatal(err)
	}
	dev := c.Allocation.Devices[0].Device
	if err := m.StartProcess(dev, 4242, 9000); err != nil { // 9000 MiB > 4000 promised
		t.Fatal(err)
	}
	if err := ag.Step(ctx); err != nil { // over the limit: a warning, the grace period starts
		t.Fatal(err)
	}
	if ps, _ := m.Processes(ctx, dev); len(ps) != 1 {
		t.Fatalf("killed before the grace period: %v", ps)
	}
	h.Advance(11 * time.Second)
	if err := ag.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if ps, _ := m.Processes(ctx, dev); len(ps) != 0 {
		t.Fatalf("still running after the grace period: %v", ps)
	}
	if err := ag.Step(ctx); err != nil { // the heartbeat carries the events
		t.Fatal(err)
	}
	// The events reach watchers (Server-Sent Events).
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req2, _ := http.NewRequestWithContext(sctx, "GET", h.URL+"/v1/events?since=0", nil)
	req2.Header.Set("Authorization", "Bearer "+acme)
	resp, err := http.DefaultClient.Do(req2)
	if err != nil {
		t.Fatal(err)
	}
	var seen strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && !strings.Contains(seen.String(), "memory-killed") {
		seen.WriteString(sc.Text() + "\n")
	}
	resp.Body.Close()
	for _, want := range []string{"event: created", "event: memory-over-limit", "event: memory-killed"} {
		if !strings.Contains(seen.String(), want) {
			t.Errorf("event stream lacks %q:\n%s", want, seen.String())
		}
	}
	var usage []api.Usage
	h.Must(h.Admin, "GET", "/v1/usage", nil, 200, &usage)
	found := false
	for _, u := range usage {
		found = found || (u.Tenant == "acme" && u.GPUSeconds > 0 && u.SMSeconds > 0)
	}
	if !found {
		t.Fatalf("no GPU- and SM-seconds reported for acme: %+v", usage)
	}
	// The claim carries its own totals, for per-claim billing.
	var got api.Claim
	h.Must(acme, "GET", "/v1/claims/"+c.ID, nil, 200, &got)
	if got.Used == nil || got.Used.GPUSeconds <= 0 || got.Used.SMSeconds <= 0 || got.Used.MemoryMiBSeconds <= 0 {
		t.Errorf("claim %s used %+v, want GPU-, SM- and MiB-seconds", c.ID, got.Used)
	}
	// The metrics export them per tenant.
	_, body := h.Call(h.Admin, "GET", "/metrics", nil)
	metrics := string(body)
	for _, want := range []string{`gpuslice_tenant_sm_seconds_total{tenant="acme"}`, `gpuslice_tenant_memory_mib_seconds_total{tenant="acme"}`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// A fatal XID makes the GPU unhealthy in the agent's next report: the
// allocator places nothing new on it, a running claim on it fails and a
// reserved one goes back to the queue.
func TestFatalXIDStopsPlacements(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 0)
	ag, m := h.Node("host-a", "l4x4")
	var running, reserved api.Claim
	h.Must(acme, "POST", "/v1/claims", gpuReq(0, alloc.Exclusive), 201, &running)
	h.Must(acme, "POST", "/v1/claims/"+running.ID+"/running", nil, 200, nil)
	h.Must(acme, "POST", "/v1/claims", gpuReq(0, alloc.Exclusive), 201, &reserved)
	idx := func(c api.Claim) int {
		for _, g := range mustGPUs(t, m) {
			if g.UUID == c.Allocation.Devices[0].GPU {
				return g.Index
			}
		}
		return -1
	}
	if err := m.InjectXID(idx(running), 79); err != nil {
		t.Fatal(err)
	}
	if err := m.InjectXID(idx(reserved), 48); err != nil {
		t.Fatal(err)
	}
	if err := ag.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.Must(acme, "GET", "/v1/claims/"+running.ID, nil, 200, &running)
	h.Must(acme, "GET", "/v1/claims/"+reserved.ID+"?wait=2s&state=allocated", nil, 200, &reserved)
	if running.State != api.Failed || !strings.Contains(running.Reason, "unhealthy") {
		t.Fatalf("running claim on a failed GPU: %s %q", running.State, running.Reason)
	}
	if reserved.State == api.Allocated && (reserved.Allocation.Devices[0].GPU == running.Allocation.Devices[0].GPU) {
		t.Fatalf("reserved claim left on a sick GPU")
	}
	for i := 0; i < 2; i++ { // the two healthy L4s
		if err := m.InjectXID(i+2, 79); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.InjectXID(0, 79); err != nil {
		t.Fatal(err)
	}
	if err := ag.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	var n api.Node
	h.Must(h.Admin, "GET", "/v1/nodes/host-a", nil, 200, &n)
	if n.Inventory.GPUs[0].Healthy {
		t.Fatal("GPU still healthy after XID 79")
	}
	var c api.Claim
	h.Must(acme, "POST", "/v1/claims", api.CreateClaimRequest{ClaimSpec: api.ClaimSpec{Requests: []alloc.Request{{Name: "gpu", MemoryMiB: 1000}}}}, 201, &c)
	if c.State != api.Pending || !strings.Contains(c.Reason, "GPU unhealthy") {
		t.Fatalf("placed on an unhealthy GPU: %+v", c)
	}
}

func mustGPUs(t *testing.T, m interface {
	GPUs(context.Context) ([]gpu.GPU, error)
}) []gpu.GPU {
	t.Helper()
	gs, err := m.GPUs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return gs
}

// A restarted agent adopts what exists on the GPUs: it creates nothing
// twice and destroys nothing.
func TestAgentRestartAdopts(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 0)
	ag, m := h.Node("host-a", "mixed")
	var c api.Claim
	h.Must(acme, "POST", "/v1/claims", api.CreateClaimRequest{ClaimSpec: api.ClaimSpec{Isolation: alloc.IsolationHardware,
		Requests: []alloc.Request{{Name: "gpu", Profile: "2g.10gb"}}}}, 201, &c)
	if err := ag.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := mustGPUs(t, m)
	// A new agent process on the same machine (same fake hardware).
	again, err := agent.New(agent.Config{Name: "host-a", Client: agentClient(t, h, "host-a"), Device: m})
	if err != nil {
		t.Fatal(err)
	}
	if err := again.Register(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := again.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	after := mustGPUs(t, m)
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Fatalf("restart changed the hardware:\nbefore %+v\nafter  %+v", before, after)
	}
	h.Must(acme, "GET", "/v1/claims/"+c.ID, nil, 200, &c)
	if c.State != api.Allocated || alloc.IsPlanned(c.Allocation.Devices[0].Device) {
		t.Fatalf("claim after the restart: %+v", c)
	}
}

// agentClient is a client with the agent token node was registered
// with: a second agent process for the same node (a restart) uses the
// same credential.
func agentClient(t *testing.T, h *harness, node string) *client.Client {
	t.Helper()
	secret := h.AgentToken(node)
	if secret == "" {
		t.Fatalf("no agent token for node %s", node)
	}
	c, err := client.New(h.URL, secret, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// An instance of a running claim destroyed behind gpuslice's back is
// reported as drift, once, and not re-created or touched.
func TestAgentReportsDrift(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 0)
	ag, m := h.Node("host-a", "mixed")
	var c api.Claim
	h.Must(acme, "POST", "/v1/claims", api.CreateClaimRequest{ClaimSpec: api.ClaimSpec{Isolation: alloc.IsolationHardware,
		Requests: []alloc.Request{{Name: "gpu", Profile: "1g.5gb"}}}}, 201, &c)
	ctx := context.Background()
	if err := ag.Step(ctx); err != nil {
		t.Fatal(err)
	}
	h.Must(acme, "POST", "/v1/claims/"+c.ID+"/running", nil, 200, &c)
	dev := c.Allocation.Devices[0]
	var idx int
	for _, g := range mustGPUs(t, m) {
		if g.UUID == dev.GPU {
			idx = g.Index
		}
	}
	if err := m.DestroyInstance(ctx, idx, dev.Device); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		_ = ag.Step(ctx)
	}
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(sctx, "GET", h.URL+"/v1/events?since=0", nil)
	req.Header.Set("Authorization", "Bearer "+acme)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var stream strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		stream.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "is not on the hardware") {
			break
		}
	}
	if n := strings.Count(stream.String(), "event: drift"); n != 1 {
		t.Fatalf("%d drift events, want 1:\n%s", n, stream.String())
	}
	for _, g := range mustGPUs(t, m) {
		for _, in := range g.Instances {
			if in.UUID == dev.Device {
				t.Fatal("the agent re-created a running claim's instance")
			}
		}
	}
}

// faultPolicy requeue sends a running claim back to the queue instead of
// failing it when its GPU becomes unhealthy.
func TestFaultPolicyRequeue(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 0)
	ag, m := h.Node("host-a", "l4x4")
	req := gpuReq(0, alloc.Exclusive)
	req.FaultPolicy = "requeue"
	var c api.Claim
	h.Must(acme, "POST", "/v1/claims", req, 201, &c)
	h.Must(acme, "POST", "/v1/claims/"+c.ID+"/running", nil, 200, nil)
	for _, g := range mustGPUs(t, m) {
		if g.UUID == c.Allocation.Devices[0].GPU {
			if err := m.InjectXID(g.Index, 79); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := ag.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The claim goes back to the queue and the scheduler (asynchronously)
	// places it on a healthy GPU. Decode into a fresh value each time: a
	// pending claim has no allocation, and decoding into c would keep the old.
	old := c.Allocation.Devices[0].GPU
	testkit.Eventually(t, 5*time.Second, "the re-queued claim placed again", func() (bool, string) {
		var got api.Claim
		h.Must(acme, "GET", "/v1/claims/"+c.ID, nil, 200, &got)
		if got.State == api.Failed || (got.Allocation != nil && got.Allocation.Devices[0].GPU == old) {
			t.Fatalf("claim with faultPolicy requeue: %s on %v", got.State, got.Allocation)
		}
		return got.State == api.Allocated, fmt.Sprintf("%s (%s)", got.State, got.Reason)
	})
	code, body := h.Call(acme, "POST", "/v1/claims", `{"requests":[{"name":"gpu"}],"faultPolicy":"retry"}`)
	if code != 422 || !strings.Contains(string(body), "want fail or requeue") {
		t.Fatalf("bad faultPolicy: %d %s", code, body)
	}
}

// A running agent forwards the device layer's health events to the
// server, and the GPU it marks unhealthy shows in the node's inventory.
func TestAgentForwardsHealthEvents(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	_, m := h.Node("host-a", "t4") // registers the node and gives the machine
	ag, err := agent.New(agent.Config{Name: "host-a", Client: agentClient(t, h, "host-a"), Device: m, Interval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = ag.Run(ctx) }()
	testkit.Eventually(t, 5*time.Second, "the agent to subscribe to device events", testkit.Bool(func() bool { return m.Subscribers() > 0 }))
	if err := m.InjectXID(0, 48); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "the GPU to show unhealthy", func() (bool, string) {
		var n api.Node
		h.Must(h.Admin, "GET", "/v1/nodes/host-a", nil, 200, &n)
		return !n.Inventory.GPUs[0].Healthy, ""
	})
	// The health flag and the event travel separately (inventory vs event
	// post), so poll the event log until the xid shows up.
	testkit.Eventually(t, 5*time.Second, "the xid event to reach the server", testkit.Bool(func() bool { return sawEvent(t, ctx, h, "event: xid") }))
}

// sawEvent reads the event log from the start (a short window) and reports
// whether a line with the given prefix appears.
func sawEvent(t *testing.T, ctx context.Context, h *harness, prefix string) bool {
	t.Helper()
	sctx, scancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer scancel()
	req, _ := http.NewRequestWithContext(sctx, "GET", h.URL+"/v1/events?since=0", nil)
	req.Header.Set("Authorization", "Bearer "+h.Admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), prefix) {
			return true
		}
	}
	return false
}

// On simulated GPUs a running claim gets a simulated process per device
// holding its promised memory: usage is measured, a killed process comes
// back while the claim runs, and it stops when the claim is released.
func TestSimulatedWorkloads(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 0)
	ag, m := h.Node("host-a", "l4x4", func(c *agent.Config, m *fake.Machine) { c.Workloads = m })
	ctx := context.Background()
	var c api.Claim
	h.Must(acme, "POST", "/v1/claims", gpuReq(6000, alloc.TimeSlice), 201, &c)
	dev := c.Allocation.Devices[0].Device
	procs := func() []gpu.Process {
		t.Helper()
		if err := ag.Step(ctx); err != nil {
			t.Fatal(err)
		}
		ps, err := m.Processes(ctx, dev)
		if err != nil {
			t.Fatal(err)
		}
		return ps
	}
	if ps := procs(); len(ps) != 0 {
		t.Fatalf("an allocated claim that is not running has processes: %+v", ps)
	}
	h.Must(acme, "POST", "/v1/claims/"+c.ID+"/running", nil, 200, nil)
	ps := procs()
	if len(ps) != 1 || ps[0].MemoryMiB != 6000 {
		t.Fatalf("running claim's simulated processes: %+v, want one holding 6000 MiB", ps)
	}
	if err := m.StopProcess(ps[0].PID); err != nil { // as if it crashed
		t.Fatal(err)
	}
	if again := procs(); len(again) != 1 || again[0].PID != ps[0].PID {
		t.Fatalf("after a crash: %+v, want pid %d back", again, ps[0].PID)
	}
	h.Pass(30*time.Second, ag)
	var got api.Claim
	h.Must(acme, "GET", "/v1/claims/"+c.ID, nil, 200, &got)
	if got.Used == nil || got.Used.GPUSeconds < 20 || got.Used.SMSeconds <= 0 {
		t.Fatalf("usage of a simulated claim after 30s: %+v", got.Used)
	}
	h.Must(acme, "DELETE", "/v1/claims/"+c.ID, nil, 200, nil)
	if ps := procs(); len(ps) != 0 {
		t.Fatalf("a released claim's simulated process still runs: %+v", ps)
	}
}

// A released claim's simulated process goes before the layout changes of
// the same step, so a new claim can evict its instance at once.
func TestSimulatedProcessStopsBeforeEviction(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 0)
	ag, m := h.Node("host-a", "mixed", func(c *agent.Config, m *fake.Machine) { c.Workloads = m })
	ctx := context.Background()
	mig := func(profile string) api.CreateClaimRequest {
		return api.CreateClaimRequest{ClaimSpec: api.ClaimSpec{Requests: []alloc.Request{{Name: "gpu", Mode: alloc.MIG, Profile: profile}}}}
	}
	var x, y, z api.Claim
	h.Must(acme, "POST", "/v1/claims", mig("7g.40gb"), 201, &x)
	h.Must(acme, "POST", "/v1/claims", mig("3g.20gb"), 201, &y)
	if err := ag.Step(ctx); err != nil {
		t.Fatal(err)
	}
	h.Must(acme, "POST", "/v1/claims/"+y.ID+"/running", nil, 200, nil)
	if err := ag.Step(ctx); err != nil { // y's simulated process starts
		t.Fatal(err)
	}
	h.Must(acme, "DELETE", "/v1/claims/"+y.ID, nil, 200, nil)
	h.Must(acme, "POST", "/v1/claims", mig("7g.40gb"), 201, &z)
	if z.State != api.Allocated {
		t.Fatalf("z: %s %s", z.State, z.Reason)
	}
	if err := ag.Step(ctx); err != nil {
		t.Fatalf("the step that evicts y's instance: %v", err)
	}
	gpus, err := m.GPUs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sevens := 0
	for _, g := range gpus {
		for _, in := range g.Instances {
			if in.Profile == "7g.40gb" {
				sevens++
			}
		}
	}
	if sevens != 2 {
		t.Fatalf("after one step: %d 7g.40gb instances, want 2 (%+v)", sevens, gpus)
	}
}
