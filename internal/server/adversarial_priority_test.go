package server_test

// Adversarial tests of priorities and holds between tenants: a tenant
// cannot outrank the others on its own say, a hold for a starving claim
// never keeps another tenant off capacity it could use without delaying
// the held claim, and no reason or event names another tenant's claim.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/agent"
	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
)

func withPriority(r api.CreateClaimRequest, p int) api.CreateClaimRequest {
	r.Priority = p
	return r
}

// mustRefuse checks a 422 whose error names field and says each of want.
func mustRefuse(t *testing.T, what string, code int, body []byte, field string, want ...string) {
	t.Helper()
	var e api.Error
	if code != 422 || json.Unmarshal(body, &e) != nil || e.Field != field {
		t.Fatalf("%s: %d %s, want 422 naming %s", what, code, body, field)
	}
	for _, w := range want {
		if !strings.Contains(e.Error, w) {
			t.Errorf("%s: %q does not say %q", what, e.Error, w)
		}
	}
}

// Priority is the admin's to give: a tenant asking for more than its
// maxPriority (0 unless an admin raised it) is refused with 422 naming
// priority, its maximum and how to get more; an admin token claiming for
// the tenant is bound the same; a service's replica claim too; lowering
// the maximum binds claims admitted concurrently and lowers waiting ones.
func TestTenantCannotOutrankOthers(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 0)
	h.Node("host-a", "t4") // one GPU: everything after the first waits
	var first api.Claim
	h.Must(acme, "POST", "/v1/claims", gpuReq(0, alloc.Exclusive), 201, &first)

	code, body := h.Call(acme, "POST", "/v1/claims", withPriority(gpuReq(0, alloc.Exclusive), 2147483647))
	mustRefuse(t, "priority 2147483647", code, body, "priority", "-1000..1000")
	code, body = h.Call(acme, "POST", "/v1/claims", withPriority(gpuReq(0, alloc.Exclusive), -2147483648))
	mustRefuse(t, "priority -2147483648", code, body, "priority", "-1000..1000")
	code, body = h.Call(acme, "POST", "/v1/claims", withPriority(gpuReq(0, alloc.Exclusive), 1))
	mustRefuse(t, "priority 1 at the default maximum", code, body, "priority", "maximum of 0", "ask an admin", "--max-priority")
	asAdmin := withPriority(gpuReq(0, alloc.Exclusive), 1)
	asAdmin.Tenant = "acme"
	code, body = h.Call(h.Admin, "POST", "/v1/claims", asAdmin)
	mustRefuse(t, "an admin's claim for acme above its maximum", code, body, "priority", "maximum of 0")
	svc := fmt.Sprintf(`{"tenant":"acme","command":["srv"],"claim":{"requests":[{"name":"gpu","memoryMiB":4096,"mode":"timeslice"}],"priority":%d},"autoscaling":{"minReplicas":1,"maxReplicas":1}}`, 9)
	code, body = h.Call(h.Admin, "PUT", "/v1/services/web", svc)
	mustRefuse(t, "a service whose replicas ask above the maximum", code, body, "claim.priority", "maximum of 0")
	if code, _ := h.Call(h.Admin, "GET", "/v1/services/web", nil); code != 404 {
		t.Fatalf("the refused service was stored: %d", code)
	}
	// Lower priorities are anyone's (down to the floor).
	var low api.Claim
	h.Must(acme, "POST", "/v1/claims", withPriority(gpuReq(0, alloc.Exclusive), -1000), 201, &low)

	// The admin's range is bounded too, and names the field.
	for _, bad := range []int{1001, -1001, 1 << 40} {
		code, body = h.Call(h.Admin, "PUT", "/v1/tenants/acme", api.Tenant{MaxPriority: bad})
		mustRefuse(t, fmt.Sprintf("maxPriority %d", bad), code, body, "maxPriority", "-1000..1000")
	}
	code, body = h.Call(acme, "PUT", "/v1/tenants/acme", api.Tenant{MaxPriority: 1000})
	if code != 403 {
		t.Fatalf("a tenant raised its own maximum: %d %s", code, body)
	}

	// An admin raises it: up to it is allowed, above is not.
	h.Must(h.Admin, "PUT", "/v1/tenants/acme", api.Tenant{MaxPriority: 5}, 200, nil)
	var t5 api.Tenant
	h.Must(h.Admin, "GET", "/v1/tenants/acme", nil, 200, &t5)
	if t5.MaxPriority != 5 {
		t.Fatalf("maxPriority %d after the admin set 5", t5.MaxPriority)
	}
	var high api.Claim
	h.Must(acme, "POST", "/v1/claims", withPriority(gpuReq(0, alloc.Exclusive), 5), 201, &high)
	if high.State != api.Pending || high.QueuePosition != 1 {
		t.Fatalf("priority 5: %s at %d", high.State, high.QueuePosition)
	}
	code, body = h.Call(acme, "POST", "/v1/claims", withPriority(gpuReq(0, alloc.Exclusive), 6))
	mustRefuse(t, "priority 6 over a maximum of 5", code, body, "priority", "maximum of 5")
	h.Must(h.Admin, "PUT", "/v1/services/web", strings.Replace(svc, `"priority":9`, `"priority":5`, 1), 200, nil)

	// Lowered while claims are being made: whatever the order, no claim
	// waits above the new maximum once the admin's change is answered
	// (each admission reads the tenant in its own transaction; the
	// lowering lowers what already waits).
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, body := h.Call(acme, "POST", "/v1/claims", withPriority(gpuReq(0, alloc.Exclusive), 5)); code != 201 && code != 422 {
				t.Errorf("a claim at 5 while the maximum drops: %d %s", code, body)
			}
		}()
	}
	h.Must(h.Admin, "PUT", "/v1/tenants/acme", api.Tenant{MaxPriority: 0}, 200, nil)
	wg.Wait()
	var pend []api.Claim
	h.Must(acme, "GET", "/v1/claims?state=pending", nil, 200, &pend)
	for _, c := range pend {
		if c.Spec.Priority > 0 {
			t.Errorf("claim %s waits at priority %d above the tenant's maximum of 0", c.ID, c.Spec.Priority)
		}
	}
	h.Must(acme, "GET", "/v1/claims/"+high.ID, nil, 200, &high)
	if high.Spec.Priority != 0 {
		t.Fatalf("a waiting claim at 5 after the maximum dropped to 0: %d", high.Spec.Priority)
	}
	code, body = h.Call(acme, "POST", "/v1/claims", withPriority(gpuReq(0, alloc.Exclusive), 5))
	mustRefuse(t, "priority 5 after the maximum dropped", code, body, "priority", "maximum of 0")
	if err := h.Server().Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The queue is in order after the lowering: the first claim's release
	// places the oldest claim at the top priority left (0), not one of
	// the lowered ones ahead of it or the one at -1000.
	h.Must(acme, "DELETE", "/v1/claims/"+first.ID, nil, 200, nil)
	h.Must(acme, "GET", "/v1/claims/"+high.ID+"?wait=2s&state=pending", nil, 200, &high)
	h.Must(acme, "GET", "/v1/claims/"+low.ID, nil, 200, &low)
	if high.State != api.Allocated || low.State != api.Pending {
		t.Fatalf("after the release: the lowered claim %s, the -1000 one %s", high.State, low.State)
	}
}

// starve makes claim id wait past ReserveAfter and runs the queue (a
// claim made and released), so the hold for it is in force.
func starve(t *testing.T, h *harness, token string, agents ...*agent.Agent) {
	t.Helper()
	h.Pass(6*time.Minute, agents...)
	// The background retry may last have run a step earlier: one retry
	// now, so the reasons are those of this moment.
	if err := h.Server().Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	var tmp api.Claim
	code, body := h.Call(token, "POST", "/v1/claims", gpuReq(1000, alloc.TimeSlice))
	if code == 201 {
		_ = json.Unmarshal(body, &tmp)
		h.Must(token, "DELETE", "/v1/claims/"+tmp.ID, nil, 200, nil)
	}
}

func migReq(profile string, count int) api.CreateClaimRequest {
	return api.CreateClaimRequest{ClaimSpec: api.ClaimSpec{Requests: []alloc.Request{{Name: "gpu", Mode: alloc.MIG, Profile: profile, Count: count}}}}
}

func onModel(model string, mode alloc.Mode, mem int64) api.CreateClaimRequest {
	r := gpuReq(mem, mode)
	r.Requests[0].Selector = "device.attributes['gpu.nvidia.com'].model == '" + model + "'"
	return r
}

// A hold for a starving claim keeps later claims off the GPUs it could
// use, and only those: a claim that fits the held node's other GPUs is
// placed there at once, whatever its tenant, while one that would take a
// GPU the held claim needs still waits; the held claim then gets its GPUs
// as soon as they free up (no stream of claims starves it).
func TestHoldDoesNotIdleCapacityOthersCouldUse(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 0)
	beta := h.Tenant("beta", 0)
	carol := h.Tenant("carol", 0)
	ag, _ := h.Node("host-a", "mixed") // 2 × A100-40GB (MIG) + 2 × L4
	var busy api.Claim
	h.Must(beta, "POST", "/v1/claims", migReq("1g.5gb", 1), 201, &busy)
	two := migReq("7g.40gb", 2) // both A100s whole
	var big api.Claim
	h.Must(acme, "POST", "/v1/claims", two, 201, &big)
	if big.State != api.Pending {
		t.Fatalf("two whole A100s with one in use: %s", big.State)
	}
	starve(t, h, beta, ag)
	h.Must(acme, "GET", "/v1/claims/"+big.ID, nil, 200, &big)
	if big.State != api.Pending || !strings.Contains(big.Reason, "node host-a is now held for it") {
		t.Fatalf("the starving claim: %s %q", big.State, big.Reason)
	}
	// The L4s are no use to the held claim: another tenant's claims take
	// them, with a model named or not.
	var onL4, anyGPU api.Claim
	h.Must(carol, "POST", "/v1/claims", onModel("L4", alloc.Exclusive, 0), 201, &onL4)
	h.Must(carol, "POST", "/v1/claims", gpuReq(4000, alloc.TimeSlice), 201, &anyGPU)
	for _, c := range []api.Claim{onL4, anyGPU} {
		if c.State != api.Allocated || c.Allocation.Devices[0].Node != "host-a" || !strings.Contains(gpuModel(t, h, c), "L4") {
			t.Fatalf("a claim that leaves the held claim its room: %s %q on %s", c.State, c.Reason, gpuModel(t, h, c))
		}
	}
	// The free A100 is the held claim's: a claim that would take it waits.
	var onA100 api.Claim
	h.Must(carol, "POST", "/v1/claims", migReq("1g.5gb", 1), 201, &onA100)
	if onA100.State != api.Pending || !strings.Contains(onA100.Reason, "node host-a is held for") {
		t.Fatalf("a claim in the held claim's way: %s %q", onA100.State, onA100.Reason)
	}
	// ...and so does one of the held claim's own tenant.
	var own api.Claim
	h.Must(acme, "POST", "/v1/claims", migReq("2g.10gb", 1), 201, &own)
	if own.State != api.Pending || !strings.Contains(own.Reason, "node host-a is held for claim "+big.ID) {
		t.Fatalf("acme's own claim in the held claim's way: %s %q", own.State, own.Reason)
	}
	// The A100 frees up: the held claim gets both, the others wait on.
	h.Must(beta, "DELETE", "/v1/claims/"+busy.ID, nil, 200, nil)
	h.Must(acme, "GET", "/v1/claims/"+big.ID+"?wait=2s&state=pending", nil, 200, &big)
	if big.State != api.Allocated || len(big.Allocation.Devices) != 2 {
		t.Fatalf("the held claim after its GPUs freed: %s %q", big.State, big.Reason)
	}
	h.Must(carol, "GET", "/v1/claims/"+onA100.ID, nil, 200, &onA100)
	if onA100.State != api.Pending {
		t.Fatalf("the A100 claim behind the held one: %s", onA100.State)
	}
	if err := h.Server().Check(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// gpuModel is the model of the GPU a claim's first device is on ("" when
// it has none).
func gpuModel(t *testing.T, h *harness, c api.Claim) string {
	t.Helper()
	if c.Allocation == nil || len(c.Allocation.Devices) == 0 {
		return ""
	}
	var n api.Node
	h.Must(h.Admin, "GET", "/v1/nodes/"+c.Allocation.Devices[0].Node, nil, 200, &n)
	for _, g := range n.Inventory.GPUs {
		if g.UUID == c.Allocation.Devices[0].GPU {
			return g.Model
		}
	}
	return ""
}

// What a tenant reads about its own waiting claims — the reason on the
// claim, in the list and in its events — never names another tenant's
// claim or the tenant: a hold for another tenant's claim is told by its
// priority alone. The same tenant's held claim is named (it is theirs).
func TestReasonsNeverNameAnotherTenantsClaim(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		nodes []string
		count int // whole GPUs the held claim asks for
	}{
		{"one node held", []string{"l4x4"}, 2},
		{"no single node holds it", []string{"l4x4", "l4x4"}, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, nil)
			acme := h.Tenant("acme", 0)
			beta := h.Tenant("beta", 0)
			carol := h.Tenant("carol", 0)
			var agents []*agent.Agent
			for i, preset := range tc.nodes {
				ag, _ := h.Node(fmt.Sprintf("host-%d", i), preset)
				agents = append(agents, ag)
			}
			// beta fills all but one GPU; acme's big claim waits.
			var betas []api.Claim
			for range 4*len(tc.nodes) - 1 {
				var c api.Claim
				h.Must(beta, "POST", "/v1/claims", gpuReq(0, alloc.Exclusive), 201, &c)
				betas = append(betas, c)
			}
			big := gpuReq(0, alloc.Exclusive)
			big.Requests[0].Count = tc.count
			var held api.Claim
			h.Must(acme, "POST", "/v1/claims", big, 201, &held)
			starve(t, h, beta, agents...)
			h.Must(acme, "GET", "/v1/claims/"+held.ID, nil, 200, &held)
			if held.State != api.Pending || !strings.Contains(held.Reason, "(waiting 6m0s; ") {
				t.Fatalf("the starving claim: %s %q", held.State, held.Reason)
			}
			// carol's claims wait behind it (the reason they were made
			// with, and the one each retry of the queue writes).
			var mine []api.Claim
			for range 2 {
				var c api.Claim
				h.Must(carol, "POST", "/v1/claims", gpuReq(2000, alloc.TimeSlice), 201, &c)
				mine = append(mine, c)
			}
			if err := h.Server().Tick(context.Background()); err != nil {
				t.Fatal(err)
			}
			// acme's own later claim names its held claim.
			var ownLater api.Claim
			h.Must(acme, "POST", "/v1/claims", gpuReq(2000, alloc.TimeSlice), 201, &ownLater)
			if ownLater.State != api.Pending || !strings.Contains(ownLater.Reason, "claim "+held.ID) {
				t.Fatalf("acme's own claim behind its held one: %s %q", ownLater.State, ownLater.Reason)
			}

			leaks := func(what, s string) {
				t.Helper()
				for _, secret := range []string{held.ID, "acme"} {
					if strings.Contains(s, secret) {
						t.Errorf("%s shown to carol names %q: %q", what, secret, s)
					}
				}
			}
			var list []api.Claim
			h.Must(carol, "GET", "/v1/claims", nil, 200, &list)
			for _, c := range list {
				leaks("the listed reason of "+c.ID, c.Reason)
			}
			for _, c := range mine {
				var got api.Claim
				h.Must(carol, "GET", "/v1/claims/"+c.ID, nil, 200, &got)
				if got.State != api.Pending || !strings.Contains(got.Reason, "a claim of another tenant waiting ahead of this one (priority 0)") {
					t.Fatalf("carol's claim behind acme's: %s %q", got.State, got.Reason)
				}
				leaks("the reason of "+c.ID, got.Reason)
				leaks("the creation answer of "+c.ID, c.Reason)
			}
			frames := sseFrames(t, h, carol)
			if len(frames) == 0 {
				t.Fatal("carol sees no events")
			}
			for _, f := range frames {
				leaks("event "+f.id, f.data)
			}
		})
	}
}
