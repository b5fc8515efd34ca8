package server_test

// Adversarial tests of the API: each names one way a hostile caller or a
// busy cluster broke the control plane before, and checks it no longer
// does. (Hostile device ids: ids_test.go; two servers on one data
// directory and damaged databases: internal/cli and internal/state.)

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/server"
)

// An agent token acts for its own node only: it cannot re-register
// another node (replacing its inventory), heartbeat in its name, or read
// its claims; and once bound it takes no second node.
func TestAgentTokenCannotTouchAnotherNode(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 0)
	h.Node("vm", "l4x4")
	var c api.Claim
	h.Must(acme, "POST", "/v1/claims", gpuReq(0, alloc.Exclusive), 201, &c)
	var vm api.Node
	h.Must(h.Admin, "GET", "/v1/nodes/vm", nil, 200, &vm)

	var intruder api.Token
	h.Must(h.Admin, "POST", "/v1/tokens", api.CreateTokenRequest{Role: api.RoleAgent}, 201, &intruder)
	empty := api.RegisterRequest{Inventory: alloc.Node{GPUs: []alloc.GPU{}}, Simulated: true}
	for _, tc := range []struct {
		method, path string
		body         any
	}{
		{"PUT", "/v1/nodes/vm", empty},
		{"POST", "/v1/nodes/vm/heartbeat", api.HeartbeatRequest{Events: []api.Event{{Kind: "xid", Claim: c.ID, Message: "forged"}}}},
		{"POST", "/v1/nodes/vm/heartbeat", api.HeartbeatRequest{Usage: []api.UsageSample{{Claim: c.ID, GPUSeconds: 1e300}}}},
		{"GET", "/v1/nodes/vm/claims", nil},
	} {
		if code, body := h.Call(intruder.Secret, tc.method, tc.path, tc.body); code != http.StatusForbidden {
			t.Errorf("%s %s with another agent's token: %d %s, want 403", tc.method, tc.path, code, body)
		}
	}
	var after api.Node
	h.Must(h.Admin, "GET", "/v1/nodes/vm", nil, 200, &after)
	if len(after.Inventory.GPUs) != len(vm.Inventory.GPUs) || after.Agent != vm.Agent {
		t.Fatalf("vm changed under a foreign token: %d GPUs, agent %s (was %s)", len(after.Inventory.GPUs), after.Agent, vm.Agent)
	}
	h.Must(acme, "GET", "/v1/claims/"+c.ID, nil, 200, &c)
	if c.State != api.Allocated {
		t.Fatalf("the claim on vm is %s", c.State)
	}
	// The intruder may register a node of its own, and then no other.
	h.Must(intruder.Secret, "PUT", "/v1/nodes/other", empty, 200, nil)
	if code, body := h.Call(intruder.Secret, "PUT", "/v1/nodes/third", empty); code != http.StatusForbidden {
		t.Fatalf("a bound agent token registered a second node: %d %s", code, body)
	}
	// A token issued for a node registers that node only, and replaces the
	// node's credential (rotation by an admin).
	var forVM api.Token
	h.Must(h.Admin, "POST", "/v1/tokens", api.CreateTokenRequest{Role: api.RoleAgent, Node: "vm"}, 201, &forVM)
	if code, _ := h.Call(forVM.Secret, "PUT", "/v1/nodes/elsewhere", empty); code != http.StatusForbidden {
		t.Fatalf("a token issued for vm registered another node: %d", code)
	}
	// Tenants and agents cannot reach admin routes.
	for _, tok := range []string{acme, intruder.Secret} {
		if code, _ := h.Call(tok, "DELETE", "/v1/nodes/vm", nil); code != http.StatusForbidden {
			t.Fatalf("a non-admin token deleted a node: %d", code)
		}
		if code, _ := h.Call(tok, "POST", "/v1/tokens", api.CreateTokenRequest{Role: api.RoleAdmin}); code != http.StatusForbidden {
			t.Fatalf("a non-admin token made an admin token: %d", code)
		}
	}
	if err := h.Server().Check(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A node's own agent cannot inject impossible usage: negative values are
// refused, and a sample above what the claim's devices allow in the time
// since the last heartbeat is clamped.
func TestHeartbeatUsageIsBounded(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 0)
	h.Node("vm", "l4x4")
	var c api.Claim
	h.Must(acme, "POST", "/v1/claims", gpuReq(0, alloc.Exclusive), 201, &c)
	own := h.AgentToken("vm")
	if code, body := h.Call(own, "POST", "/v1/nodes/vm/heartbeat", api.HeartbeatRequest{Usage: []api.UsageSample{{Claim: c.ID, GPUSeconds: -5}}}); code != 422 {
		t.Fatalf("negative usage: %d %s", code, body)
	}
	h.Advance(10 * time.Second)
	h.Must(own, "POST", "/v1/nodes/vm/heartbeat", api.HeartbeatRequest{Usage: []api.UsageSample{{Claim: c.ID, GPUSeconds: math.MaxFloat64, SMSeconds: 1e300, MemoryMiBSeconds: 1e300}}}, 200, nil)
	var usage []api.Usage
	h.Must(acme, "GET", "/v1/usage", nil, 200, &usage)
	if len(usage) != 1 || usage[0].GPUSeconds > 20 || usage[0].SMSeconds > 20 || usage[0].MemoryMiBSec > 20*30000 {
		t.Fatalf("usage after an injected sample: %+v, want at most ~15 s of one GPU", usage)
	}
}

// Events are the server's to attribute: an agent cannot put an event in
// another tenant's stream (claim on another node, forged tenant), and an
// event kind cannot carry a newline into the SSE framing.
func TestAgentEventsCannotForgeTenantStreams(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	victim := h.Tenant("victim", 0)
	h.Node("vm", "l4x4")
	h.Node("evil", "l4x4")
	var c api.Claim
	h.Must(victim, "POST", "/v1/claims", api.CreateClaimRequest{ClaimSpec: api.ClaimSpec{Node: "vm",
		Requests: []alloc.Request{{Name: "gpu", Mode: alloc.Exclusive}}}}, 201, &c)
	evil := h.AgentToken("evil")
	code, body := h.Call(evil, "POST", "/v1/nodes/evil/heartbeat", api.HeartbeatRequest{Events: []api.Event{{Kind: "xid\nevent: forged\ndata: {}", Message: "x"}}})
	if code != 422 || !strings.Contains(string(body), "events[0].kind") {
		t.Fatalf("a kind with newlines: %d %s", code, body)
	}
	h.Must(evil, "POST", "/v1/nodes/evil/heartbeat", api.HeartbeatRequest{Events: []api.Event{
		{Kind: "xid", Claim: c.ID, Tenant: "victim", Message: "your GPU burned\n\nevent: forged\ndata: {}\n\n"},
		{Kind: "xid", Tenant: "victim", Message: "forged tenant"},
	}}, 200, nil)
	frames := sseFrames(t, h, victim)
	for _, f := range frames {
		if strings.Contains(f.data, "burned") || strings.Contains(f.data, "forged tenant") {
			t.Fatalf("an event from node evil reached tenant victim's stream: %+v", f)
		}
	}
	// The admin sees them, attributed to no tenant, framed intact.
	for _, f := range sseFrames(t, h, h.Admin) {
		if f.event == "forged" || f.bad != "" {
			t.Fatalf("a forged or broken frame: %+v", f)
		}
	}
}

type sseFrame struct {
	id, event, data string
	bad             string
}

// sseFrames reads the event stream from the start until it has been quiet
// briefly, and splits it into frames, noting any line that is not id,
// event, data or a comment.
func sseFrames(t *testing.T, h *harness, token string) []sseFrame {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", h.URL+"/v1/events?since=0", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []sseFrame
	var cur sseFrame
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur != (sseFrame{}) {
				out = append(out, cur)
			}
			cur = sseFrame{}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id: "):
			cur.id = line[4:]
			if _, err := strconv.ParseInt(cur.id, 10, 64); err != nil {
				cur.bad = line
			}
		case strings.HasPrefix(line, "event: "):
			cur.event = line[7:]
		case strings.HasPrefix(line, "data: "):
			if cur.data != "" {
				cur.bad = "two data lines"
			}
			cur.data = line[6:]
		default:
			cur.bad = line
		}
	}
	return out
}

// A tenant's tokens die with it: deleted and re-created, the tenant is a
// new one, and the old token sees and touches none of its claims.
func TestTenantTokensDieWithTheTenant(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	old := h.Tenant("gamma", 0)
	h.Node("vm", "l4x4")
	h.Must(h.Admin, "DELETE", "/v1/tenants/gamma", nil, 204, nil)
	h.Advance(time.Second)
	fresh := h.Tenant("gamma", 0)
	var c api.Claim
	h.Must(fresh, "POST", "/v1/claims", gpuReq(1000, alloc.TimeSlice), 201, &c)
	for _, tc := range []struct{ method, path string }{
		{"GET", "/v1/claims"}, {"GET", "/v1/claims/" + c.ID}, {"DELETE", "/v1/claims/" + c.ID}, {"POST", "/v1/claims"},
	} {
		if code, body := h.Call(old, tc.method, tc.path, gpuReq(1000, alloc.TimeSlice)); code != http.StatusUnauthorized {
			t.Fatalf("the deleted tenant's token: %s %s: %d %s", tc.method, tc.path, code, body)
		}
	}
	var tokens []api.Token
	h.Must(h.Admin, "GET", "/v1/tokens", nil, 200, &tokens)
	n := 0
	for _, tok := range tokens {
		if tok.Tenant == "gamma" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d tokens of gamma are stored, want only the new one", n)
	}
}

// Eight DELETEs and eight POST …/running at the same moment: the claim
// ends released if any DELETE said so, never running; the GPU goes back
// once; the next exclusive claim gets it alone. (The race that
// double-booked an exclusive GPU.)
func TestReleaseRacingRunningNeverResurrects(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 0)
	h.Node("vm", "t4")
	for round := range 20 {
		var c api.Claim
		h.Must(acme, "POST", "/v1/claims", gpuReq(0, alloc.Exclusive), 201, &c)
		if c.State != api.Allocated {
			t.Fatalf("round %d: %s (%s)", round, c.State, c.Reason)
		}
		var wg sync.WaitGroup
		codes := make([]int, 16)
		start := make(chan struct{})
		for i := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				method, path := "DELETE", "/v1/claims/"+c.ID
				if i%2 == 1 {
					method, path = "POST", path+"/running"
				}
				codes[i], _ = h.Call(acme, method, path, nil)
			}()
		}
		close(start)
		wg.Wait()
		for i, code := range codes {
			if i%2 == 0 && code != 200 {
				t.Fatalf("round %d: DELETE answered %d", round, code)
			}
			if i%2 == 1 && code != 200 && code != 409 {
				t.Fatalf("round %d: running answered %d", round, code)
			}
		}
		h.Must(acme, "GET", "/v1/claims/"+c.ID, nil, 200, &c)
		if c.State != api.Released {
			t.Fatalf("round %d: the released claim is %s", round, c.State)
		}
		if err := h.Server().Check(context.Background()); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
	var next api.Claim
	h.Must(acme, "POST", "/v1/claims", gpuReq(0, alloc.Exclusive), 201, &next)
	if next.State != api.Allocated {
		t.Fatalf("the GPU did not come back: %s", next.Reason)
	}
}

// Concurrent DELETEs of one claim give its quota back once.
func TestConcurrentReleasesReturnQuotaOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 10240)
	h.Node("vm", "l4x4")
	var c api.Claim
	h.Must(acme, "POST", "/v1/claims", gpuReq(10240, alloc.TimeSlice), 201, &c)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() { defer wg.Done(); h.Call(acme, "DELETE", "/v1/claims/"+c.ID, nil) }()
	}
	wg.Wait()
	h.Must(acme, "POST", "/v1/claims", gpuReq(10240, alloc.TimeSlice), 201, nil)
	if code, body := h.Call(acme, "POST", "/v1/claims", gpuReq(10240, alloc.TimeSlice)); code != 403 {
		t.Fatalf("a second 10 GiB claim under a 10 GiB quota: %d %s", code, body)
	}
	if err := h.Server().Check(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A MIG claim that switched MIG on and created an instance, released
// before the agent made either, leaves nothing planned behind: the next
// MIG claim's own changes switch MIG on, and the agent makes it.
func TestReleasedMIGSetupLeavesNothingHalfMade(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.Cfg.Policy.AllowModeSwitch = true
	h.Restart()
	acme := h.Tenant("acme", 0)
	ag, _ := h.Node("vm", "dgx-a100")
	var first api.Claim
	h.Must(acme, "POST", "/v1/claims", api.CreateClaimRequest{ClaimSpec: api.ClaimSpec{
		Requests: []alloc.Request{{Name: "gpu", Mode: alloc.MIG, Profile: "3g.20gb"}}}}, 201, &first)
	if first.State != api.Allocated || !hasChange(first.Allocation, alloc.EnableMIG) {
		t.Fatalf("first: %s %+v", first.State, first.Allocation)
	}
	h.Must(acme, "DELETE", "/v1/claims/"+first.ID, nil, 200, nil)
	var second api.Claim
	h.Must(acme, "POST", "/v1/claims", api.CreateClaimRequest{ClaimSpec: api.ClaimSpec{
		Requests: []alloc.Request{{Name: "gpu", Mode: alloc.MIG, MemoryMiB: 2048}}}}, 201, &second)
	if second.State != api.Allocated {
		t.Fatalf("second: %s %s", second.State, second.Reason)
	}
	if !hasChange(second.Allocation, alloc.EnableMIG) {
		t.Fatalf("the second claim relies on a MIG switch nobody will make: %+v", second.Allocation.Changes)
	}
	if err := ag.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.Must(acme, "GET", "/v1/claims/"+second.ID, nil, 200, &second)
	if d := second.Allocation.Devices[0].Device; alloc.IsPlanned(d) || !strings.HasPrefix(d, "MIG-") {
		t.Fatalf("the agent did not make the second claim's instance: %s", d)
	}
	if err := h.Server().Check(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func hasChange(a *alloc.Allocation, kind alloc.ChangeKind) bool {
	if a == nil {
		return false
	}
	for _, ch := range a.Changes {
		if ch.Kind == kind {
			return true
		}
	}
	return false
}

// An agent re-registering every few milliseconds while many clients
// create and release claims: rebuilds never interleave with a decision,
// so no GPU is over-promised and no claim is re-queued with a false
// "node lost".
func TestRebuildsDuringCommitsLoseNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 0)
	ag, _ := h.Node("vm", "l4x4")
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			_ = ag.Register(ctx)
			time.Sleep(3 * time.Millisecond)
		}
	}()
	for w := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				req := gpuReq(int64(1000+500*(w%7)), alloc.TimeSlice)
				if w%4 == 0 {
					req = gpuReq(0, alloc.Exclusive)
				}
				code, body := h.Call(acme, "POST", "/v1/claims", req)
				if code != 201 {
					continue
				}
				if i%3 != 0 {
					var c api.Claim
					mustUnmarshal(t, body, &c)
					h.Call(acme, "DELETE", "/v1/claims/"+c.ID, nil)
				}
			}
		}()
	}
	wg.Wait()
	if err := h.Server().Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	var events []api.Event
	for _, f := range sseFrames(t, h, h.Admin) {
		if f.event == "requeued" {
			events = append(events, api.Event{Message: f.data})
		}
	}
	if len(events) > 0 {
		t.Fatalf("%d claims were re-queued although no node was lost, first: %s", len(events), events[0].Message)
	}
}

// Lists are cursor-paginated and linear: every claim once, in order,
// across pages; bad limits are 422.
func TestListClaimsPaginates(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.Cfg.MaxQueuedPerTenant = -1
	h.Restart()
	acme := h.Tenant("acme", 0)
	const n = 1203
	for range n {
		h.Must(acme, "POST", "/v1/claims", gpuReq(1000, alloc.TimeSlice), 201, nil) // no node: all pending
	}
	seen := map[string]bool{}
	after, pages, last := "", 0, int64(0)
	for {
		path := "/v1/claims?limit=500"
		if after != "" {
			path += "&after=" + after
		}
		req, _ := http.NewRequest("GET", h.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+acme)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var page []api.Claim
		decodeBody(t, resp, &page)
		pages++
		for _, c := range page {
			if seen[c.ID] || c.Seq <= last {
				t.Fatalf("claim %s out of order or twice (seq %d after %d)", c.ID, c.Seq, last)
			}
			seen[c.ID], last = true, c.Seq
			if c.QueuePosition == 0 {
				t.Fatalf("pending claim %s has no queue position", c.ID)
			}
		}
		after = resp.Header.Get(server.NextCursorHeader)
		if after == "" {
			break
		}
	}
	if len(seen) != n || pages != 3 {
		t.Fatalf("%d claims in %d pages, want %d in 3", len(seen), pages, n)
	}
	for _, bad := range []string{"0", "-1", "100000", "x"} {
		if code, _ := h.Call(acme, "GET", "/v1/claims?limit="+bad, nil); code != 422 {
			t.Fatalf("limit=%s: %d", bad, code)
		}
	}
	if code, _ := h.Call(acme, "GET", "/v1/claims?after=abc", nil); code != 422 {
		t.Fatalf("a bad cursor: %d", code)
	}
}

// A tenant's queue is bounded: past MaxQueuedPerTenant a claim that would
// wait is refused with 429, and other tenants are unaffected.
func TestQueuePerTenantIsBounded(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.Cfg.MaxQueuedPerTenant = 5
	h.Restart()
	acme := h.Tenant("acme", 0)
	beta := h.Tenant("beta", 0)
	for i := range 5 {
		h.Must(acme, "POST", "/v1/claims", gpuReq(1000, alloc.TimeSlice), 201, nil)
		_ = i
	}
	code, body := h.Call(acme, "POST", "/v1/claims", gpuReq(1000, alloc.TimeSlice))
	if code != http.StatusTooManyRequests || !strings.Contains(string(body), "queue full") {
		t.Fatalf("the 6th queued claim: %d %s", code, body)
	}
	h.Must(beta, "POST", "/v1/claims", gpuReq(1000, alloc.TimeSlice), 201, nil)
	if err := h.Server().Check(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Transitions name the state they start from: running a released claim,
// releasing a failed one or failing a released one is a 409 that carries
// the current state; repeating a transition answers it again.
func TestTransitionsConflictWithTheCurrentState(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 0)
	h.Node("vm", "l4x4")
	var a, b api.Claim
	h.Must(acme, "POST", "/v1/claims", gpuReq(1000, alloc.TimeSlice), 201, &a)
	h.Must(acme, "POST", "/v1/claims", gpuReq(1000, alloc.TimeSlice), 201, &b)
	h.Must(acme, "POST", "/v1/claims/"+a.ID+"/running", nil, 200, nil)
	h.Must(acme, "POST", "/v1/claims/"+a.ID+"/running", nil, 200, nil)
	h.Must(acme, "DELETE", "/v1/claims/"+a.ID, nil, 200, nil)
	h.Must(acme, "DELETE", "/v1/claims/"+a.ID, nil, 200, nil)
	h.Must(acme, "POST", "/v1/claims/"+b.ID+"/failed?reason=oom", nil, 200, nil)
	for _, tc := range []struct {
		method, path, state string
	}{
		{"POST", "/v1/claims/" + a.ID + "/running", "released"},
		{"POST", "/v1/claims/" + a.ID + "/failed", "released"},
		{"DELETE", "/v1/claims/" + b.ID, "failed"},
		{"POST", "/v1/claims/" + b.ID + "/running", "failed"},
	} {
		code, body := h.Call(acme, tc.method, tc.path, nil)
		if code != 409 || !strings.Contains(string(body), fmt.Sprintf(`"state":%q`, tc.state)) {
			t.Fatalf("%s %s: %d %s, want 409 with state %s", tc.method, tc.path, code, body, tc.state)
		}
	}
	if code, _ := h.Call(acme, "DELETE", "/v1/claims/c-nope", nil); code != 404 {
		t.Fatalf("an unknown claim: %d", code)
	}
}

func decodeBody(t *testing.T, resp *http.Response, v any) {
	t.Helper()
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("HTTP %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// Every credential is tried where it does not belong: a tenant token on
// another tenant's claims and on agent and admin routes, an agent token on
// tenant and admin routes and on another node, a deleted token anywhere.
func TestEveryCredentialStaysInItsPlace(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 0)
	beta := h.Tenant("beta", 0)
	h.Node("vm", "l4x4")
	h.Node("other", "l4x4")
	var c api.Claim
	h.Must(acme, "POST", "/v1/claims", gpuReq(1000, alloc.TimeSlice), 201, &c)
	agentVM := h.AgentToken("vm")
	var gone api.Token
	h.Must(h.Admin, "POST", "/v1/tokens", api.CreateTokenRequest{Role: api.RoleTenant, Tenant: "acme"}, 201, &gone)
	h.Must(h.Admin, "DELETE", "/v1/tokens/"+gone.ID, nil, 204, nil)
	reg := api.RegisterRequest{Inventory: alloc.Node{GPUs: []alloc.GPU{}}}
	for _, tc := range []struct {
		who, token   string
		method, path string
		body         any
		want         []int
	}{
		{"beta", beta, "GET", "/v1/claims/" + c.ID, nil, []int{404}},
		{"beta", beta, "DELETE", "/v1/claims/" + c.ID, nil, []int{404}},
		{"beta", beta, "POST", "/v1/claims/" + c.ID + "/running", nil, []int{404}},
		{"beta", beta, "POST", "/v1/claims/" + c.ID + "/failed", nil, []int{404}},
		{"beta", beta, "POST", "/v1/claims/" + c.ID + "/renew", nil, []int{404}},
		{"agent", agentVM, "POST", "/v1/claims/" + c.ID + "/renew", nil, []int{403}},
		{"deleted", gone.Secret, "POST", "/v1/claims/" + c.ID + "/renew", nil, []int{401}},
		{"tenant", acme, "PUT", "/v1/services/s", serviceReq("sh", "-c", "id"), []int{403}},
		{"beta", beta, "POST", "/v1/claims", api.CreateClaimRequest{Tenant: "acme", ClaimSpec: gpuReq(1, alloc.TimeSlice).ClaimSpec}, []int{422}},
		{"tenant", acme, "PUT", "/v1/nodes/vm", reg, []int{403}},
		{"tenant", acme, "POST", "/v1/nodes/vm/heartbeat", api.HeartbeatRequest{}, []int{403}},
		{"tenant", acme, "GET", "/v1/nodes/vm/claims", nil, []int{403}},
		{"tenant", acme, "GET", "/v1/tokens", nil, []int{403}},
		{"tenant", acme, "PUT", "/v1/tenants/acme", api.Tenant{}, []int{403}},
		{"tenant", acme, "GET", "/metrics", nil, []int{403}},
		{"agent", agentVM, "GET", "/v1/claims", nil, []int{403}},
		{"agent", agentVM, "POST", "/v1/claims", gpuReq(1, alloc.TimeSlice), []int{403}},
		{"agent", agentVM, "DELETE", "/v1/claims/" + c.ID, nil, []int{403}},
		{"agent", agentVM, "GET", "/v1/events", nil, []int{403}},
		{"agent", agentVM, "GET", "/v1/nodes/other/claims", nil, []int{403}},
		{"agent", agentVM, "POST", "/v1/nodes/other/heartbeat", api.HeartbeatRequest{}, []int{403}},
		{"agent", agentVM, "PUT", "/v1/nodes/other", reg, []int{403}},
		{"agent", agentVM, "DELETE", "/v1/tokens/" + gone.ID, nil, []int{403}},
		{"deleted", gone.Secret, "GET", "/v1/claims", nil, []int{401}},
		{"deleted", gone.Secret, "DELETE", "/v1/claims/" + c.ID, nil, []int{401}},
		{"none", "", "GET", "/v1/claims", nil, []int{401}},
		{"garbage", "gs_t_not-a-token", "GET", "/v1/claims", nil, []int{401}},
	} {
		code, body := h.Call(tc.token, tc.method, tc.path, tc.body)
		if !slices.Contains(tc.want, code) {
			t.Errorf("%s token: %s %s: %d %s, want %v", tc.who, tc.method, tc.path, code, body, tc.want)
		}
	}
	h.Must(acme, "GET", "/v1/claims/"+c.ID, nil, 200, &c)
	if c.State != api.Allocated {
		t.Fatalf("acme's claim is %s after the attempts", c.State)
	}
}

// Whole-GPU claims queued before any node registered were charged
// nothing then (no GPU to price them at); once GPUs arrive, the queue is
// placed only as far as the quota allows what the tenant holds.
func TestClaimsQueuedBeforeTheFleetHonourTheQuota(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 30000) // more than one L4, less than two
	for range 3 {
		h.Must(acme, "POST", "/v1/claims", gpuReq(0, alloc.Exclusive), 201, nil)
	}
	h.Node("host-a", "l4x4")
	if err := h.Server().Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	var held []api.Claim
	h.Must(acme, "GET", "/v1/claims?state=allocated", nil, 200, &held)
	if len(held) != 1 {
		t.Fatalf("%d whole L4s allocated under a 30000 MiB quota, want 1", len(held))
	}
	var usage []api.Usage
	h.Must(acme, "GET", "/v1/usage", nil, 200, &usage)
	if usage[0].MemoryMiB > 30000 {
		t.Fatalf("acme holds %d MiB over its quota", usage[0].MemoryMiB)
	}
	if err := h.Server().Check(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Lists sorted by name page the same way: tenants, tokens and nodes.
func TestListsByNamePaginate(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	for i := range 7 {
		h.Tenant(fmt.Sprintf("t%d", i), 0) // a tenant and its token each
	}
	h.Node("a", "t4")
	h.Node("b", "t4")
	h.Node("c", "t4")
	for _, tc := range []struct {
		path string
		want int
	}{{"/v1/tenants", 7}, {"/v1/tokens", 7 + 3 + 1}, {"/v1/nodes", 3}} {
		seen, after, pages := map[string]bool{}, "", 0
		for {
			req, _ := http.NewRequest("GET", h.URL+tc.path+"?limit=2&after="+after, nil)
			req.Header.Set("Authorization", "Bearer "+h.Admin)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var page []map[string]any
			decodeBody(t, resp, &page)
			pages++
			for _, item := range page {
				key := fmt.Sprint(item["name"], item["id"])
				if seen[key] {
					t.Fatalf("%s: %s twice", tc.path, key)
				}
				seen[key] = true
			}
			if after = resp.Header.Get(server.NextCursorHeader); after == "" {
				break
			}
		}
		if len(seen) != tc.want || pages != (tc.want+1)/2 {
			t.Fatalf("%s: %d items in %d pages, want %d", tc.path, len(seen), pages, tc.want)
		}
	}
}

// A claim no registered node could ever hold, even empty, is refused at
// once with why and the largest GPU, instead of waiting forever behind a
// reason that reads like a busy fleet; asked to, it waits for nodes that
// may join; with no node registered yet, it waits.
func TestClaimThatCanNeverFitIsRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 0)
	var early api.Claim
	h.Must(acme, "POST", "/v1/claims", gpuReq(500*1024, alloc.TimeSlice), 201, &early)
	if early.State != api.Pending {
		t.Fatalf("with no node yet: %s", early.State)
	}
	h.Node("vm", "dgx-a100")
	for _, req := range []api.CreateClaimRequest{
		gpuReq(500*1024, alloc.TimeSlice),
		{ClaimSpec: api.ClaimSpec{Requests: []alloc.Request{{Name: "gpu", Mode: alloc.MIG, Profile: "7g.80gb"}}}},
		{ClaimSpec: api.ClaimSpec{Requests: []alloc.Request{{Name: "gpu", Mode: alloc.Exclusive, Selector: "device.attributes['gpu.nvidia.com'].model == 'H100-80GB-SXM'"}}}},
	} {
		code, body := h.Call(acme, "POST", "/v1/claims", req)
		if code != 422 || !strings.Contains(string(body), "can never fit") || !strings.Contains(string(body), "largest GPU here has 40960 MiB") {
			t.Fatalf("%+v: %d %s, want 422 saying it can never fit", req.Requests[0], code, body)
		}
		req.WaitForNodes = true
		var c api.Claim
		h.Must(acme, "POST", "/v1/claims", req, 201, &c)
		if c.State != api.Pending {
			t.Fatalf("waiting for nodes: %s", c.State)
		}
	}
	// A claim that only waits for capacity is still queued.
	for range 8 {
		h.Must(acme, "POST", "/v1/claims", gpuReq(0, alloc.Exclusive), 201, nil)
	}
	var busy api.Claim
	h.Must(acme, "POST", "/v1/claims", gpuReq(0, alloc.Exclusive), 201, &busy)
	if busy.State != api.Pending {
		t.Fatalf("a ninth whole A100 on a DGX of eight: %s", busy.State)
	}
}

// The memory a claim's processes use is shown while the claim lives and
// gone at the first scrape after its release.
func TestUsedMemoryMetricForgetsReleasedClaims(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 0)
	h.Node("vm", "l4x4")
	var c api.Claim
	h.Must(acme, "POST", "/v1/claims", gpuReq(4000, alloc.TimeSlice), 201, &c)
	h.Advance(time.Second)
	h.Must(h.AgentToken("vm"), "POST", "/v1/nodes/vm/heartbeat", api.HeartbeatRequest{Usage: []api.UsageSample{{Claim: c.ID, GPUSeconds: 1, MemoryMiB: 1234}}}, 200, nil)
	line := `gpuslice_device_memory_used_mib{device="` + c.Allocation.Devices[0].Device + `",node="vm",tenant="acme"} 1234`
	if _, body := h.Call(h.Admin, "GET", "/metrics", nil); !strings.Contains(string(body), line) {
		t.Fatalf("no used-memory line for the live claim")
	}
	h.Must(acme, "DELETE", "/v1/claims/"+c.ID, nil, 200, nil)
	if _, body := h.Call(h.Admin, "GET", "/metrics", nil); strings.Contains(string(body), "gpuslice_device_memory_used_mib{") {
		t.Fatalf("the released claim's memory is still shown")
	}
}
