package server_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
)

func pinnedReq(node string, r alloc.Request) api.CreateClaimRequest {
	r.Name = "gpu"
	return api.CreateClaimRequest{ClaimSpec: api.ClaimSpec{Node: node, Requests: []alloc.Request{r}}}
}

// A claim pinned to a node (gpuslice run pins its claim to this host's
// node) waits with that node's reason alone: the other nodes, ruled out
// only by the pin, are not reported as a "selector mismatch" the user
// never wrote.
func TestPinnedClaimReasonNamesOnlyItsNode(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 0)
	h.Node("host-a", "l4x4")
	h.Node("host-b", "l4x4")
	for i := range 4 { // host-a full
		h.Must(acme, "POST", "/v1/claims", pinnedReq("host-a", alloc.Request{Mode: alloc.Exclusive}), 201, nil)
		_ = i
	}
	var c api.Claim
	h.Must(acme, "POST", "/v1/claims", pinnedReq("host-a", alloc.Request{MemoryMiB: 4096}), 201, &c)
	if c.State != api.Pending {
		t.Fatalf("claim %s %q, want pending", c.State, c.Reason)
	}
	for _, bad := range []string{"selector mismatch", "sharing mode mismatch", "0/2"} {
		if strings.Contains(c.Reason, bad) {
			t.Errorf("reason %q mentions %q", c.Reason, bad)
		}
	}
	if !strings.Contains(c.Reason, "0/1 nodes are available (node host-a): 1 ") {
		t.Errorf("reason %q does not give node host-a's reason alone", c.Reason)
	}
}

// A profile the node's GPUs do not have is refused with the profiles they
// do have.
func TestUnknownProfileListsTheModelsProfiles(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 0)
	h.Node("dgx", "dgx-a100")
	code, body := h.Call(acme, "POST", "/v1/claims", pinnedReq("dgx", alloc.Request{Mode: alloc.MIG, Profile: "3g.40gb"}))
	if code != 422 {
		t.Fatalf("HTTP %d %s, want 422", code, body)
	}
	for _, want := range []string{"3g.40gb", "A100-40GB has", "1g.5gb", "3g.20gb", "7g.40gb", "ask for one of those profiles"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("refusal %s lacks %q", body, want)
		}
	}
	if strings.Contains(string(body), "ask for less") {
		t.Errorf("refusal %s asks for less memory: the profile is what is wrong", body)
	}
}

// A claim pinned to a node an admin removes fails with that reason — it
// cannot run anywhere else — whether it held devices or waited; its
// holder's next renewal hears it is over. Unpinned claims go back to the
// queue.
func TestPinnedClaimFailsWhenItsNodeIsRemoved(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 0)
	h.Node("host-a", "l4x4")
	h.Node("host-b", "l4x4")
	var held, waiting, free api.Claim
	req := pinnedReq("host-a", alloc.Request{Mode: alloc.Exclusive})
	req.LeaseSeconds = 30
	h.Must(acme, "POST", "/v1/claims", req, 201, &held)
	for range 3 {
		h.Must(acme, "POST", "/v1/claims", pinnedReq("host-a", alloc.Request{Mode: alloc.Exclusive}), 201, nil)
	}
	h.Must(acme, "POST", "/v1/claims", pinnedReq("host-a", alloc.Request{Mode: alloc.Exclusive}), 201, &waiting)
	h.Must(acme, "POST", "/v1/claims", gpuReq(2000, alloc.TimeSlice), 201, &free)
	if held.State != api.Allocated || waiting.State != api.Pending {
		t.Fatalf("set-up: held %s, waiting %s", held.State, waiting.State)
	}
	h.Must(h.Admin, "DELETE", "/v1/nodes/host-a", nil, 204, nil)
	for _, c := range []*api.Claim{&held, &waiting} {
		h.Must(acme, "GET", "/v1/claims/"+c.ID, nil, 200, c)
		if c.State != api.Failed || !strings.Contains(c.Reason, "node host-a was removed") {
			t.Errorf("claim %s pinned to the removed node: %s %q, want failed saying so", c.ID, c.State, c.Reason)
		}
	}
	code, body := h.Call(acme, "POST", "/v1/claims/"+held.ID+"/renew", nil)
	if code != 409 || !strings.Contains(string(body), "node host-a was removed") {
		t.Errorf("renewing the failed claim: HTTP %d %s, want 409 with the reason", code, body)
	}
	h.Must(acme, "GET", "/v1/claims/"+free.ID, nil, 200, &free)
	if free.State == api.Failed {
		t.Errorf("an unpinned claim failed: %q", free.Reason)
	}
}

// One meaning per label name across /metrics: `gpu` is always a GPU's
// index on its node and `UUID` always its uuid, in every family that has
// them (gpuslice_gpu_healthy once had `gpu` for the uuid).
func TestMetricLabelsMeanOneThing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 0)
	h.Node("host-a", "dgx-a100")
	h.Must(acme, "POST", "/v1/claims", gpuReq(2000, alloc.TimeSlice), 201, nil)
	fams := scrape(t, h)
	seen := 0
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			l := labelsOf(m)
			if g, ok := l["gpu"]; ok {
				seen++
				if _, err := strconv.Atoi(g); err != nil {
					t.Errorf("%s: label gpu=%q is not an index", name, g)
				}
			}
			if u, ok := l["UUID"]; ok && !strings.HasPrefix(u, "GPU-") {
				t.Errorf("%s: label UUID=%q is not a GPU uuid", name, u)
			}
		}
	}
	if _, ok := fams["gpuslice_gpu_healthy"]; !ok || seen == 0 {
		t.Fatalf("no series with a gpu label (families: %d)", len(fams))
	}
}

// Admin, agent and tenant secrets say their role at a glance.
func TestTokenPrefixesAreDistinct(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	h.Tenant("acme", 0)
	var agentTok, tenantTok api.Token
	h.Must(h.Admin, "POST", "/v1/tokens", api.CreateTokenRequest{Role: api.RoleAgent}, 201, &agentTok)
	h.Must(h.Admin, "POST", "/v1/tokens", api.CreateTokenRequest{Role: api.RoleTenant, Tenant: "acme"}, 201, &tenantTok)
	for secret, want := range map[string]string{h.Admin: "gs_admin_", agentTok.Secret: "gs_agent_", tenantTok.Secret: "gs_t_"} {
		if !strings.HasPrefix(secret, want) {
			t.Errorf("secret %q, want prefix %s", secret, want)
		}
	}
}
