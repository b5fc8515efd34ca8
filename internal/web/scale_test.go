package web_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/server"
	"github.com/gpuslice/gpuslice/internal/server/servertest"
	"github.com/gpuslice/gpuslice/internal/state"
	"github.com/gpuslice/gpuslice/internal/web"
)

// A fleet at the scale the dashboard is drawn for: nodes × 8 GPUs in four
// pools (A100-80GB in MIG, H100 time-sliced and MPS, L4 exclusive and
// time-sliced, A30 in MIG), every tenant's claims placed by the real
// allocator node by node, written to the store before the server starts
// (which restores them as it would after a restart), then one heartbeat
// per node reporting memory in use, and one GPU made unhealthy under a
// running claim.

// bigFleet is what populate made.
type bigFleet struct {
	nodes, gpus, tenants, claims int
	// sickNode/sickIndex is the one unhealthy GPU; sickClaim the running
	// claim of sickTenant that held it (failed by the fault).
	sickNode   string
	sickIndex  int
	sickTenant string
	sickClaim  string
	// tenantTok is a token of sickTenant; otherTenant another tenant with
	// claims.
	tenantTok   string
	otherTenant string
}

type pool struct {
	name, model string
	mig         bool
	sharing     []alloc.Sharing // by GPU index (cycled) when not MIG
}

var pools = []pool{
	{name: "train-a100", model: "A100-80GB", mig: true},
	{name: "infer-h100", model: "H100-80GB-SXM", sharing: []alloc.Sharing{{Mode: alloc.TimeSlice, Replicas: 4}, {Mode: alloc.MPS, MaxClients: 8}}},
	{name: "edge-l4", model: "L4", sharing: []alloc.Sharing{{Mode: alloc.Exclusive}, {Mode: alloc.TimeSlice, Replicas: 2}}},
	{name: "dev-a30", model: "A30", mig: true},
}

// migLayouts are the instances each MIG pool's GPUs are cut into.
var migLayouts = map[string][]alloc.MIGInstance{
	"A100-80GB": {{Profile: "3g.40gb", Start: 0}, {Profile: "2g.20gb", Start: 4}, {Profile: "1g.10gb", Start: 6}},
	"A30":       {{Profile: "2g.12gb", Start: 0}, {Profile: "1g.6gb", Start: 2}, {Profile: "1g.6gb", Start: 3}},
}

var modelMiB = map[string]int64{"A100-80GB": 81920, "H100-80GB-SXM": 81920, "L4": 24576, "A30": 24576}

func nodeName(i int) string { return fmt.Sprintf("node-%04d", i) }

// populate fills store with nodes, tenants and their claims.
func populate(tb testing.TB, store state.Store, nodes, tenants int, now time.Time) bigFleet {
	tb.Helper()
	ctx := context.Background()
	bf := bigFleet{nodes: nodes, tenants: tenants}
	var claims []api.Claim
	next := 0
	tenantOf := func() string { next++; return fmt.Sprintf("team-%05d", next%tenants) }
	var ns []api.Node
	for i := 0; i < nodes; i++ {
		p := pools[i%10*len(pools)/10]
		inv := alloc.Node{Name: nodeName(i), Labels: map[string]string{web.PoolLabel: p.name}}
		for g := 0; g < 8; g++ {
			gpu := alloc.GPU{UUID: fmt.Sprintf("GPU-%08x-0000-4000-8000-%012x", i, g), Index: g, Model: p.model, Healthy: true}
			if p.mig {
				gpu.MIGEnabled = true
				for k, inst := range migLayouts[p.model] {
					inst.UUID = fmt.Sprintf("MIG-%08x-%04x-4000-8000-%012x", i, g, k)
					inst.Sharing = alloc.Sharing{Mode: alloc.Exclusive}
					gpu.Instances = append(gpu.Instances, inst)
				}
			} else {
				gpu.Sharing = p.sharing[g%len(p.sharing)]
			}
			inv.GPUs = append(inv.GPUs, gpu)
		}
		// Leave some GPUs and slices free: every seventh node idle, one
		// GPU in five untouched. Each GPU is allocated on its own (a node
		// of that one GPU): no selector needed, and the allocations are
		// the same on the whole node.
		for g, gpu := range inv.GPUs {
			if i%7 == 3 || (i+g)%5 == 0 {
				continue
			}
			one := inv
			one.GPUs = []alloc.GPU{gpu}
			st, err := alloc.NewState(alloc.Fleet{Nodes: []alloc.Node{one}}, nil, alloc.Options{})
			if err != nil {
				tb.Fatal(err)
			}
			var reqs []alloc.Request
			switch {
			case p.mig:
				for k, inst := range gpu.Instances {
					if (i+g+k)%4 != 0 {
						reqs = append(reqs, alloc.Request{Name: "gpu", Mode: alloc.MIG, Profile: inst.Profile})
					}
				}
			case gpu.Sharing.Mode == alloc.Exclusive:
				reqs = append(reqs, alloc.Request{Name: "gpu", Mode: alloc.Exclusive})
			default:
				slots := max(gpu.Sharing.Replicas, gpu.Sharing.MaxClients)
				for k := 0; k < 1+(i+g)%min(3, slots); k++ {
					reqs = append(reqs, alloc.Request{Name: "gpu", Mode: gpu.Sharing.Mode, MemoryMiB: modelMiB[p.model] / int64(2*slots) * int64(1+(i+k)%2),
						ComputePercent: 10 * (1 + k)})
				}
			}
			for _, r := range reqs {
				tenant := tenantOf()
				c := alloc.Claim{Name: fmt.Sprintf("c%07d", len(claims)+1), Tenant: tenant, Isolation: alloc.IsolationNone, Requests: []alloc.Request{r}}
				a, err := st.Allocate(&c)
				if err != nil {
					tb.Fatalf("populating %s GPU %d: %s %+v: %v", inv.Name, g, c.Name, r, err)
				}
				if err := st.Apply(a); err != nil {
					tb.Fatal(err)
				}
				created := now.Add(-time.Duration(len(claims)%3600) * time.Second)
				claims = append(claims, api.Claim{ID: c.Name, Tenant: tenant, State: api.Running, Created: created, Updated: created, Allocated: &created,
					Spec: api.ClaimSpec{Isolation: alloc.IsolationNone, Requests: c.Requests}, Allocation: a})
			}
		}
		ns = append(ns, api.Node{Name: inv.Name, State: api.NodeReady, LastHeartbeat: now, Simulated: true, Inventory: inv, Driver: "simulated", Created: now})
		bf.gpus += len(inv.GPUs)
	}
	// Some claims wait: more than any node has.
	for k := 0; k < 40; k++ {
		tenant := tenantOf()
		claims = append(claims, api.Claim{ID: fmt.Sprintf("p%06d", k), Tenant: tenant, State: api.Pending, Created: now, Updated: now,
			Reason: "no node has 8 free H100-80GB-SXM GPUs", Spec: api.ClaimSpec{WaitForNodes: true,
				Requests: []alloc.Request{{Name: "gpu", Count: 16, Mode: alloc.Exclusive}}}})
	}
	bf.claims = len(claims)
	err := store.Update(ctx, func(tx state.Tx) error {
		for t := 0; t < tenants; t++ {
			if err := tx.PutTenant(api.Tenant{Name: fmt.Sprintf("team-%05d", t), MemoryMiB: int64(64+t%4*64) * 1024, Created: now.Add(-time.Hour)}); err != nil {
				return err
			}
		}
		for _, n := range ns {
			if err := tx.PutNode(n); err != nil {
				return err
			}
		}
		for i := range claims {
			if err := tx.CreateClaim(&claims[i]); err != nil {
				return err
			}
			if err := tx.AppendEvent(&api.Event{Time: claims[i].Created, Kind: "created", Claim: claims[i].ID, Tenant: claims[i].Tenant, Message: "created"}); err != nil {
				return err
			}
			if claims[i].State == api.Running {
				if err := tx.AppendEvent(&api.Event{Time: claims[i].Created, Kind: "allocated", Claim: claims[i].ID, Tenant: claims[i].Tenant,
					Node: claims[i].Allocation.Devices[0].Node, Message: "allocated on " + claims[i].Allocation.Devices[0].Device}); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	// The GPU to break: on a time-sliced H100 node, GPU 2 (shared).
	for _, c := range claims {
		if c.State == api.Running && c.Allocation.Devices[0].Mode == alloc.TimeSlice && c.Allocation.Devices[0].Node == nodeName(nodes/2+4-(nodes/2)%10) {
			bf.sickNode, bf.sickClaim, bf.sickTenant = c.Allocation.Devices[0].Node, c.ID, c.Tenant
			for _, n := range ns {
				for _, g := range n.Inventory.GPUs {
					if g.UUID == c.Allocation.Devices[0].GPU {
						bf.sickIndex = g.Index
					}
				}
			}
			break
		}
	}
	if bf.sickClaim == "" {
		tb.Fatal("populate: no time-sliced claim to break")
	}
	for _, c := range claims {
		if c.Tenant != bf.sickTenant && c.State == api.Running {
			bf.otherTenant = c.Tenant
			break
		}
	}
	return bf
}

// bigLive is a real server over the populated store: heartbeats report
// memory in use on every node, then the sick GPU's node reports it
// unhealthy.
type bigLive struct {
	*live
	fleet bigFleet
}

func newBigLive(tb testing.TB, nodes, tenants int) *bigLive {
	tb.Helper()
	store := state.NewMemory()
	now := time.Now()
	bf := populate(tb, store, nodes, tenants, now)
	l := &live{servertest.New(tb, servertest.Options{Store: store, RealClock: true, Configure: func(c *server.Config) {
		c.NodeTimeout, c.SampleInterval, c.SeriesLength, c.DashboardInterval = time.Hour, 5*time.Second, 600, 2*time.Second
		c.MaxStreamsPerToken, c.MaxStreamsPerTenant = -1, -1
	}})}
	var nodesNow []api.Node
	l.Must(l.Admin, "GET", "/v1/nodes?limit=5000", nil, 200, &nodesNow)
	var live []api.Claim
	l.Must(l.Admin, "GET", "/v1/claims?state=running&limit=5000", nil, 200, &live)
	for len(live)%5000 == 0 && len(live) > 0 {
		var more []api.Claim
		l.Must(l.Admin, "GET", fmt.Sprintf("/v1/claims?state=running&limit=5000&after=%d", live[len(live)-1].Seq), nil, 200, &more)
		if len(more) == 0 {
			break
		}
		live = append(live, more...)
	}
	byNode := map[string][]api.UsageSample{}
	for i, c := range live {
		d := c.Allocation.Devices[0]
		byNode[d.Node] = append(byNode[d.Node], api.UsageSample{Claim: c.ID, GPUSeconds: 1, MemoryMiBSeconds: float64(d.MemoryMiB),
			MemoryMiB: d.MemoryMiB * int64(30+i%60) / 100})
	}
	for _, n := range nodesNow {
		hb := api.HeartbeatRequest{Usage: byNode[n.Name]}
		if n.Name == bf.sickNode {
			inv := n.Inventory
			inv.GPUs[bf.sickIndex].Healthy = false
			hb.Inventory = &inv
			hb.Events = []api.Event{{Kind: "xid", Message: fmt.Sprintf("XID 79 on GPU %d (%s): fallen off the bus", bf.sickIndex, inv.GPUs[bf.sickIndex].UUID)}}
		}
		l.Must(l.Admin, "POST", "/v1/nodes/"+n.Name+"/heartbeat", hb, 200, nil)
	}
	bf.tenantTok = l.TenantToken(bf.sickTenant)
	return &bigLive{live: l, fleet: bf}
}
