package nodescale

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/autoscale"
	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/model"
	"github.com/gpuslice/gpuslice/internal/server"
	"github.com/gpuslice/gpuslice/internal/server/servertest"
)

// simServer is a real server with a simulated fleet (no node yet) on
// the real clock; the controller under test keeps a clock of its own.
func simServer(t *testing.T) *servertest.Harness {
	t.Helper()
	return servertest.New(t, servertest.Options{RealClock: true, Configure: func(c *server.Config) { c.Simulated = true }})
}

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// A real server with no node: four time-sliced claims wait for nodes; a
// step buys one L4 node (not four, not a T4: the claims need 5 GiB each
// and a T4 holds three), the simulated node joins and takes all four;
// once they are released and the node has been empty past its pool's TTL,
// the next step removes it, and a step in between keeps it.
func TestPendingClaimsBuyANodeAndAnEmptyOneGoes(t *testing.T) {
	h := simServer(t)
	ctx, admin := h.Ctx, h.Client(h.Admin)
	if err := h.Server().EnsureTenant(ctx, "default"); err != nil {
		t.Fatal(err)
	}
	prov := &SimProvider{Admin: admin, Interval: 50 * time.Millisecond,
		Connect: func(tok string) (*client.Client, error) { return client.New(h.URL, tok, h.HTTP.Client()) }}
	defer prov.Close()
	clock := &fakeClock{now: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)}
	ctl := &Controller{Client: admin, Provider: prov, Clock: clock.Now, Pools: []autoscale.NodePool{
		{Pool: model.Pool{Name: "t4", InstanceType: "g4dn.xlarge", Sharing: alloc.Sharing{Mode: alloc.TimeSlice, Replicas: 4}}},
		{Pool: model.Pool{Name: "l4", InstanceType: "g6.xlarge", Sharing: alloc.Sharing{Mode: alloc.TimeSlice, Replicas: 4}}, EmptyTTL: 10 * time.Minute},
	}}

	var ids []string
	for range 4 {
		c, err := admin.CreateClaim(ctx, "default", api.ClaimSpec{WaitForNodes: true,
			Requests: []alloc.Request{{Name: "gpu", Mode: alloc.TimeSlice, MemoryMiB: 5120}}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, c.ID)
	}
	np, err := ctl.Step(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(np.Grow) != 1 || np.Grow[0].Pool != "l4" || np.Grow[0].Nodes != 1 || np.WholeGPU == nil || np.WholeGPU.Nodes != 4 {
		t.Fatalf("decision %+v", np)
	}
	// The new node joins and the four claims land on its one GPU.
	for _, id := range ids {
		c, err := admin.Claim(ctx, id, api.Pending, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if c.State != api.Allocated || c.Allocation.Devices[0].Node != "l4-0" {
			t.Fatalf("claim %s: %s %+v (%s)", id, c.State, c.Allocation, c.Reason)
		}
	}
	if np, err = ctl.Step(ctx); err != nil || len(np.Grow)+len(np.Remove) != 0 {
		t.Fatalf("with nothing pending and the node busy: %+v %v", np, err)
	}
	for _, id := range ids {
		if _, err := admin.Release(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if np, err = ctl.Step(ctx); err != nil || len(np.Remove) != 0 { // empty from now
		t.Fatalf("just emptied: %+v %v", np, err)
	}
	clock.Add(9 * time.Minute)
	if np, err = ctl.Step(ctx); err != nil || len(np.Remove) != 0 {
		t.Fatalf("empty for 9 of 10 minutes: %+v %v", np, err)
	}
	clock.Add(2 * time.Minute)
	np, err = ctl.Step(ctx)
	if err != nil || len(np.Remove) != 1 || np.Remove[0].Node != "l4-0" {
		t.Fatalf("empty past the TTL: %+v %v", np, err)
	}
	nodes, err := client.ListAll[api.Node](ctx, admin, "/v1/nodes")
	if err != nil || len(nodes) != 0 {
		t.Fatalf("nodes after removal: %+v %v", nodes, err)
	}
}

// A claim that waits for its tenant's quota, not for capacity, buys no
// node: with the quota lowered to 8 GiB while two 5 GiB claims wait, the
// first gets the node
// the controller bought and the second stays pending for the quota, and
// the next step buys nothing more (a node would not place it).
func TestQuotaPendingBuysNoNode(t *testing.T) {
	h := simServer(t)
	ctx, admin := h.Ctx, h.Client(h.Admin)
	if err := admin.Do(ctx, "PUT", "/v1/tenants/lab", api.Tenant{}, nil); err != nil {
		t.Fatal(err)
	}
	prov := &SimProvider{Admin: admin, Interval: 50 * time.Millisecond,
		Connect: func(tok string) (*client.Client, error) { return client.New(h.URL, tok, h.HTTP.Client()) }}
	defer prov.Close()
	ctl := &Controller{Client: admin, Provider: prov, Clock: time.Now, Pools: []autoscale.NodePool{
		{Pool: model.Pool{Name: "l4", InstanceType: "g6.xlarge", Sharing: alloc.Sharing{Mode: alloc.TimeSlice, Replicas: 4}}}}}
	var ids []string
	for range 2 {
		c, err := admin.CreateClaim(ctx, "lab", api.ClaimSpec{WaitForNodes: true,
			Requests: []alloc.Request{{Name: "gpu", Mode: alloc.TimeSlice, MemoryMiB: 5120}}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, c.ID)
	}
	// The quota is lowered while both wait.
	if err := admin.Do(ctx, "PUT", "/v1/tenants/lab", api.Tenant{MemoryMiB: 8192}, nil); err != nil {
		t.Fatal(err)
	}
	np, err := ctl.Step(ctx)
	if err != nil || len(np.Grow) != 1 || np.Grow[0].Nodes != 1 {
		t.Fatalf("first step: %+v %v", np, err)
	}
	first, err := admin.Claim(ctx, ids[0], api.Pending, 10*time.Second)
	if err != nil || first.State != api.Allocated {
		t.Fatalf("first claim: %+v %v", first, err)
	}
	second, err := admin.Claim(ctx, ids[1], "", 0)
	if err != nil || second.State != api.Pending || !strings.HasPrefix(second.Reason, "quota:") {
		t.Fatalf("second claim should wait for the quota: %s %q %v", second.State, second.Reason, err)
	}
	np, err = ctl.Step(ctx)
	if err != nil || len(np.Grow) != 0 || !strings.Contains(strings.Join(np.Reasons, "; "), "wait for their tenant's quota") {
		t.Fatalf("second step bought for a quota wait: %+v %v", np, err)
	}
}

// slowProvider records the nodes asked of it and makes them join only
// when the test says (a cloud node boots for minutes).
type slowProvider struct {
	sim     *SimProvider
	asked   []string
	pools   map[string]autoscale.NodePool
	deleted []string
}

func (p *slowProvider) Create(_ context.Context, pool autoscale.NodePool, name string) error {
	p.asked = append(p.asked, name)
	p.pools[name] = pool
	return nil
}

func (p *slowProvider) Delete(ctx context.Context, name string) error {
	p.deleted = append(p.deleted, name)
	return p.sim.Delete(ctx, name)
}

// boot makes a node asked for join now.
func (p *slowProvider) boot(ctx context.Context, name string) error {
	return p.sim.Create(ctx, p.pools[name], name)
}

// A node that is still booting is not bought again: the claims pending
// for it wait, the next steps buy nothing, the node joins and takes them.
// One that never joins is given up (deleted) after the boot timeout and
// a new one is bought.
func TestBootingNodeIsNotBoughtAgain(t *testing.T) {
	h := simServer(t)
	ctx, admin := h.Ctx, h.Client(h.Admin)
	if err := h.Server().EnsureTenant(ctx, "default"); err != nil {
		t.Fatal(err)
	}
	sim := &SimProvider{Admin: admin, Interval: 50 * time.Millisecond,
		Connect: func(tok string) (*client.Client, error) { return client.New(h.URL, tok, h.HTTP.Client()) }}
	defer sim.Close()
	prov := &slowProvider{sim: sim, pools: map[string]autoscale.NodePool{}}
	clock := &fakeClock{now: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)}
	ctl := &Controller{Client: admin, Provider: prov, Clock: clock.Now, BootTimeout: 10 * time.Minute, Pools: []autoscale.NodePool{
		{Pool: model.Pool{Name: "l4", InstanceType: "g6.xlarge", Sharing: alloc.Sharing{Mode: alloc.TimeSlice, Replicas: 4}}}}}
	var ids []string
	for range 4 {
		c, err := admin.CreateClaim(ctx, "default", api.ClaimSpec{WaitForNodes: true,
			Requests: []alloc.Request{{Name: "gpu", Mode: alloc.TimeSlice, MemoryMiB: 5120}}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, c.ID)
	}
	if _, err := ctl.Step(ctx); err != nil || len(prov.asked) != 1 || prov.asked[0] != "l4-0" {
		t.Fatalf("first step: asked %v, %v", prov.asked, err)
	}
	for range 3 { // the node boots for three steps
		clock.Add(time.Minute)
		np, err := ctl.Step(ctx)
		if err != nil || len(np.Grow) != 0 || len(prov.asked) != 1 {
			t.Fatalf("bought again while l4-0 boots: %+v asked %v %v", np, prov.asked, err)
		}
		if !strings.Contains(strings.Join(np.Reasons, "; "), "already booting") {
			t.Fatalf("reasons %q", np.Reasons)
		}
	}
	if err := prov.boot(ctx, "l4-0"); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		c, err := admin.Claim(ctx, id, api.Pending, 10*time.Second)
		if err != nil || c.State != api.Allocated || c.Allocation.Devices[0].Node != "l4-0" {
			t.Fatalf("claim %s after the node joined: %+v %v", id, c, err)
		}
	}
	if np, err := ctl.Step(ctx); err != nil || len(np.Grow) != 0 || len(ctl.booting) != 0 {
		t.Fatalf("after joining: %+v booting %v %v", np, ctl.booting, err)
	}
	// Four more wait; the node asked for them never joins.
	for range 4 {
		if _, err := admin.CreateClaim(ctx, "default", api.ClaimSpec{WaitForNodes: true,
			Requests: []alloc.Request{{Name: "gpu", Mode: alloc.TimeSlice, MemoryMiB: 5120}}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ctl.Step(ctx); err != nil || len(prov.asked) != 2 || prov.asked[1] != "l4-1" {
		t.Fatalf("second node: asked %v %v", prov.asked, err)
	}
	clock.Add(11 * time.Minute)
	np, err := ctl.Step(ctx)
	if err != nil || len(prov.deleted) != 1 || prov.deleted[0] != "l4-1" || len(prov.asked) != 3 ||
		!strings.Contains(strings.Join(np.Reasons, "; "), "gave up on node(s) that did not join within 10m0s: l4-1") {
		t.Fatalf("past the boot timeout: %+v asked %v deleted %v %v", np, prov.asked, prov.deleted, err)
	}
}
