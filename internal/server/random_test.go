package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/agent"
	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/gpu/fake"
	"github.com/gpuslice/gpuslice/internal/state"
)

// Random sequences of what users, agents and time do to a server — claims
// of every mode created and released under quotas, claims started, agents
// reconciling and heartbeating, nodes going silent and coming back, fatal
// XIDs, server restarts, quota changes, deleted nodes — on the memory and the SQLite store, with Server.Check after every
// step: the allocator's rules hold, the store and the scheduler agree, and
// the quota counters equal the charges of the stored claims.
func TestRandomServerSequences(t *testing.T) {
	t.Parallel()
	seeds, steps := 12, 150
	if testing.Short() {
		seeds, steps = 3, 80
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { t.Parallel(); randomServerRun(t, uint64(seed), steps) })
	}
}

type randNode struct {
	name string
	ag   *agent.Agent
	m    *fake.Machine
	down bool // its agent is silent
}

func randomServerRun(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 99))
	var store state.Store // odd seeds: the durable SQLite store
	if seed%2 == 1 {
		db, err := state.OpenSQLite(filepath.Join(t.TempDir(), "state.db"), state.SQLiteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		store = db
	}
	h := newHarnessRun(t, store, false)
	ctx := context.Background()
	tenants := map[string]string{}
	for name, quota := range map[string]int64{"acme": 60000, "beta": 0, "carol": 25000} {
		tenants[name] = h.Tenant(name, quota)
		// Claims ask for priorities 0..2 (randomRequest): an admin lets them.
		h.Must(h.Admin, "PUT", "/v1/tenants/"+name, api.Tenant{MemoryMiB: quota, MaxPriority: 2}, 200, nil)
	}
	names := []string{"acme", "beta", "carol"}
	var nodes []*randNode
	for i, preset := range []string{"mixed", "l4x4"} {
		name := fmt.Sprintf("node-%d", i)
		ag, m := h.Node(name, preset, func(c *agent.Config, m *fake.Machine) { c.Workloads = m })
		nodes = append(nodes, &randNode{name: name, ag: ag, m: m})
	}
	var claims []string
	owner := map[string]string{}
	stats := map[string]int{}
	defer func() { t.Logf("seed %d: %v", seed, stats) }()
	step := func(what string, i int) {
		t.Helper()
		if err := h.Server().Check(ctx); err != nil {
			t.Fatalf("seed %d step %d (%s): %v", seed, i, what, err)
		}
	}
	heartbeat := func() {
		for _, n := range nodes {
			if n.down {
				continue
			}
			if err := n.ag.Step(ctx); err != nil {
				// A node marked lost registers again.
				if err := n.ag.Register(ctx); err != nil {
					t.Fatalf("seed %d: re-registering %s: %v", seed, n.name, err)
				}
			}
		}
	}
	for i := range steps {
		var what string
		switch op := rng.IntN(42); {
		case op < 14:
			tenant := names[rng.IntN(len(names))]
			req := randomRequest(rng)
			code, body := h.Call(tenants[tenant], "POST", "/v1/claims", req)
			what = fmt.Sprintf("create %+v for %s: %d", req.Requests[0], tenant, code)
			stats[fmt.Sprintf("create %d", code)]++
			switch code {
			case 201:
				var c api.Claim
				mustUnmarshal(t, body, &c)
				stats["created "+string(c.State)]++
				claims = append(claims, c.ID)
				owner[c.ID] = tenant
			case 403, 422:
			default:
				t.Fatalf("seed %d step %d: %s: %s", seed, i, what, body)
			}
		case op < 22 && len(claims) > 0:
			k := rng.IntN(len(claims))
			id := claims[k]
			code, body := h.Call(tenants[owner[id]], "DELETE", "/v1/claims/"+id, nil)
			what = "release " + id
			// A claim its GPU's fault failed is over: releasing it is a 409
			// that names its state.
			if code != 200 && !(code == 409 && strings.Contains(string(body), `"state":"failed"`)) {
				t.Fatalf("seed %d step %d: %s: %d %s", seed, i, what, code, body)
			}
			claims = append(claims[:k], claims[k+1:]...)
		case op < 25 && len(claims) > 0:
			id := claims[rng.IntN(len(claims))]
			code, _ := h.Call(tenants[owner[id]], "POST", "/v1/claims/"+id+"/running", nil)
			what = fmt.Sprintf("start %s: %d", id, code)
			stats[fmt.Sprintf("start %d", code)]++
		case op < 32:
			heartbeat()
			what = "agents step"
		case op < 34:
			h.Advance(10 * time.Second)
			heartbeat()
			what = "10s pass"
		case op < 36:
			n := nodes[rng.IntN(len(nodes))]
			n.down = !n.down
			what = fmt.Sprintf("%s down=%v", n.name, n.down)
			stats["node toggled"]++
			if n.down {
				h.Advance(40 * time.Second) // past the node timeout, the others heartbeat
				heartbeat()
			}
		case op < 37:
			n := nodes[rng.IntN(len(nodes))]
			gpu := rng.IntN(4)
			what = fmt.Sprintf("fatal XID on %s GPU %d", n.name, gpu)
			if err := n.m.InjectXID(gpu, 48); err != nil {
				t.Fatal(err)
			}
			heartbeat()
		case op < 38:
			h.Restart()
			what = "server restart"
			stats["restart"]++
		case op < 39:
			tenant := names[rng.IntN(len(names))]
			// maxPriority too: lowering it lowers the tenant's waiting claims.
			quota := api.Tenant{MemoryMiB: int64(rng.IntN(4)) * 20000, ComputePercent: rng.IntN(3) * 100, MaxPriority: rng.IntN(3)}
			h.Must(h.Admin, "PUT", "/v1/tenants/"+tenant, quota, 200, nil)
			what = fmt.Sprintf("quota of %s set to %+v", tenant, quota)
			stats["quota change"]++
		case op < 40:
			n := nodes[rng.IntN(len(nodes))]
			code, body := h.Call(h.Admin, "DELETE", "/v1/nodes/"+n.name, nil)
			if code != 204 && code != 404 {
				t.Fatalf("seed %d step %d: deleting %s: %d %s", seed, i, n.name, code, body)
			}
			what = "delete node " + n.name // its agent registers again at its next step
			stats["node deleted"]++
		default:
			what = "tick"
		}
		if err := h.Server().Tick(ctx); err != nil {
			t.Fatalf("seed %d step %d: tick: %v", seed, i, err)
		}
		step(what, i)
	}
}

func randomRequest(rng *rand.Rand) api.CreateClaimRequest {
	r := alloc.Request{Name: "gpu"}
	switch rng.IntN(6) {
	case 0:
		r.Mode = alloc.Exclusive
	case 1:
		r.Mode, r.MemoryMiB = alloc.TimeSlice, int64(1000*(1+rng.IntN(12)))
	case 2:
		r.Mode, r.MemoryMiB, r.ComputePercent = alloc.MPS, int64(1000*(1+rng.IntN(8))), 5*(1+rng.IntN(8))
	case 3:
		r.Mode, r.Profile = alloc.MIG, []string{"1g.5gb", "2g.10gb", "3g.20gb"}[rng.IntN(3)]
	default:
		r.MemoryMiB, r.ComputePercent = int64(1000*(1+rng.IntN(10))), 5*rng.IntN(12)
	}
	if rng.IntN(5) == 0 {
		r.Count = 2
	}
	c := api.CreateClaimRequest{ClaimSpec: api.ClaimSpec{Requests: []alloc.Request{r}, Priority: rng.IntN(3)}}
	switch rng.IntN(8) {
	case 0:
		c.Node = []string{"node-0", "node-1"}[rng.IntN(2)]
	case 1:
		c.Constraints = []alloc.Constraint{{Match: []string{"node", "gpu"}[rng.IntN(2)]}}
	}
	if rng.IntN(4) == 0 {
		c.Isolation = []alloc.Isolation{alloc.IsolationNone, alloc.IsolationHardware}[rng.IntN(2)]
	}
	return c
}

func mustUnmarshal(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
}
