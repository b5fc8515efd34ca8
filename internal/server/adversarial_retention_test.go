package server_test

// Adversarial tests of what the control plane keeps and bills (issue 25,
// items 4 and 5): history that grew without bound, an agent that flooded
// the event log, and an agent that billed a tenant many times over.

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/server"
	"github.com/gpuslice/gpuslice/internal/state"
	"github.com/gpuslice/gpuslice/internal/web"
)

// stored reads every event and every claim straight from the store.
func (h *harness) stored() (evs []api.Event, claims []api.Claim) {
	h.T.Helper()
	err := h.Cfg.Store.View(context.Background(), func(tx state.Tx) error {
		var err error
		if evs, err = tx.EventsSince(0, 0); err != nil {
			return err
		}
		claims, err = tx.ListClaims(state.ClaimFilter{})
		return err
	})
	if err != nil {
		h.T.Fatal(err)
	}
	return evs, claims
}

// storedClaims reads every claim straight from the store (stored without
// the events, which a test reading claims after every step would read
// again and again).
func (h *harness) storedClaims() (claims []api.Claim) {
	h.T.Helper()
	err := h.Cfg.Store.View(context.Background(), func(tx state.Tx) error {
		var err error
		claims, err = tx.ListClaims(state.ClaimFilter{})
		return err
	})
	if err != nil {
		h.T.Fatal(err)
	}
	return claims
}

// beat heartbeats node with nothing to report, so that a sweep after the
// clock moved does not find it lost.
func (h *harness) beat(nodes ...string) {
	h.T.Helper()
	for _, n := range nodes {
		h.Must(h.AgentToken(n), "POST", "/v1/nodes/"+n+"/heartbeat", api.HeartbeatRequest{}, 200, nil)
	}
}

func (h *harness) tick() {
	h.T.Helper()
	if err := h.Server().Tick(context.Background()); err != nil {
		h.T.Fatal(err)
	}
}

func finalCount(cs []api.Claim) (final int, live map[string]bool) {
	live = map[string]bool{}
	for _, c := range cs {
		if c.State.Final() {
			final++
		} else {
			live[c.ID] = true
		}
	}
	return final, live
}

func sqliteStore(t *testing.T) state.Store {
	t.Helper()
	db, err := state.OpenSQLite(filepath.Join(t.TempDir(), "state.db"), state.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// Nothing was ever pruned: events and released claims were kept forever.
// Now events and final claims go past an age and past a count, in small
// batches, while clients keep creating and releasing claims; a live claim
// is never pruned, however old.
func TestEventsAndReleasedClaimsArePruned(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"memory", "sqlite"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			var store state.Store
			if backend == "sqlite" {
				store = sqliteStore(t)
			}
			h := newHarnessWith(t, store, false, func(c *server.Config) {
				c.EventRetention, c.MaxEvents = time.Hour, 60
				c.ClaimRetention, c.MaxFinalClaims = time.Hour, 20
				c.PruneBatch = 7 // many batches: each its own transaction
			})
			acme := h.Tenant("acme", 0)
			h.Node("vm", "l4x4")

			// Age: two claims stay live (one running), three are released;
			// two hours later only the live ones and the recent events are left.
			var old []api.Claim
			for range 5 {
				var c api.Claim
				h.Must(acme, "POST", "/v1/claims", gpuReq(2000, alloc.TimeSlice), 201, &c)
				old = append(old, c)
			}
			h.Must(acme, "POST", "/v1/claims/"+old[0].ID+"/running", nil, 200, nil)
			for _, c := range old[2:] {
				h.Must(acme, "DELETE", "/v1/claims/"+c.ID, nil, 200, nil)
			}
			h.Advance(2 * time.Hour)
			h.beat("vm")
			var recent api.Claim
			h.Must(acme, "POST", "/v1/claims", gpuReq(2000, alloc.TimeSlice), 201, &recent)
			h.Must(acme, "DELETE", "/v1/claims/"+recent.ID, nil, 200, nil)
			h.tick()
			for _, c := range old[:2] {
				h.Must(acme, "GET", "/v1/claims/"+c.ID, nil, 200, nil)
			}
			for _, c := range old[2:] {
				if code, body := h.Call(acme, "GET", "/v1/claims/"+c.ID, nil); code != 404 {
					t.Errorf("claim %s, released two hours ago with a retention of one: %d %s", c.ID, code, body)
				}
			}
			h.Must(acme, "GET", "/v1/claims/"+recent.ID, nil, 200, nil)
			evs, _ := h.stored()
			cutoff := h.Now().Add(-time.Hour)
			for _, e := range evs {
				if e.Time.Before(cutoff) {
					t.Errorf("event #%d %s at %s kept past the retention of an hour", e.Seq, e.Kind, e.Time.Format(time.TimeOnly))
				}
			}
			if len(evs) == 0 {
				t.Fatal("every event went; the recent ones should stay")
			}

			// Count: 40 claims released at once leave the 20 that ended last.
			var burst []string
			for range 40 {
				var c api.Claim
				h.Must(acme, "POST", "/v1/claims", gpuReq(1000, alloc.TimeSlice), 201, &c)
				h.Must(acme, "DELETE", "/v1/claims/"+c.ID, nil, 200, nil)
				burst = append(burst, c.ID)
			}
			h.tick()
			evs, claims := h.stored()
			final, live := finalCount(claims)
			if final != 20 || len(evs) > 60 {
				t.Fatalf("after the burst: %d final claims (want 20) and %d events (want at most 60)", final, len(evs))
			}
			for _, id := range burst[:20] {
				if code, _ := h.Call(acme, "GET", "/v1/claims/"+id, nil); code != 404 {
					t.Errorf("claim %s, among the first 20 of 40 to end, is still there (%d)", id, code)
				}
			}
			if !live[old[0].ID] || !live[old[1].ID] {
				t.Fatalf("a live claim was pruned: live %v", live)
			}

			// Concurrently: clients create and release claims (each holding
			// one live claim it reads back after every prune could have run)
			// while pruning runs in a loop.
			ctx, stop := context.WithCancel(context.Background())
			var pruning sync.WaitGroup
			pruning.Add(1)
			go func() {
				defer pruning.Done()
				for ctx.Err() == nil {
					if _, err := h.Server().Prune(ctx); err != nil && ctx.Err() == nil {
						t.Errorf("prune: %v", err)
						return
					}
				}
			}()
			var clients sync.WaitGroup
			for w := range 4 {
				clients.Add(1)
				go func() {
					defer clients.Done()
					var mine api.Claim
					h.Must(acme, "POST", "/v1/claims", gpuReq(500, alloc.TimeSlice), 201, &mine)
					for i := range 25 {
						var c api.Claim
						h.Must(acme, "POST", "/v1/claims", gpuReq(500, alloc.TimeSlice), 201, &c)
						if code, body := h.Call(acme, "GET", "/v1/claims/"+mine.ID, nil); code != 200 {
							t.Errorf("client %d, step %d: its live claim %s: %d %s", w, i, mine.ID, code, body)
							return
						}
						h.Must(acme, "DELETE", "/v1/claims/"+c.ID, nil, 200, nil)
					}
					h.Must(acme, "DELETE", "/v1/claims/"+mine.ID, nil, 200, nil)
				}()
			}
			clients.Wait()
			stop()
			pruning.Wait()
			h.tick()
			evs, claims = h.stored()
			final, live = finalCount(claims)
			if final != 20 || len(evs) > 60 {
				t.Errorf("after the concurrent clients: %d final claims (want 20), %d events (want at most 60)", final, len(evs))
			}
			if len(live) != 2 || !live[old[0].ID] || !live[old[1].ID] {
				t.Errorf("live claims after everything: %v, want %s and %s", live, old[0].ID, old[1].ID)
			}
			if err := h.Server().Check(context.Background()); err != nil {
				t.Fatal(err)
			}
			_, metrics := h.Call(h.Admin, "GET", "/metrics", nil)
			if !strings.Contains(string(metrics), `gpuslice_pruned_total{kind="claims"}`) {
				t.Error("/metrics does not count pruned claims")
			}
		})
	}
}

// One agent token appended 1,000 events per heartbeat with no limit. Now
// each node has its own bucket (100 at once, then 1 a second): the rest
// is dropped, counted, and told in one event per minute; another node's
// events are untouched.
func TestAgentEventsAreRateLimitedPerNode(t *testing.T) {
	t.Parallel()
	h := newHarnessRun(t, nil, false)
	h.Node("evil", "l4x4")
	h.Node("good", "t4")
	flood := func(n int) api.HeartbeatRequest {
		req := api.HeartbeatRequest{}
		for i := range n {
			req.Events = append(req.Events, api.Event{Kind: "flood", Message: strings.Repeat("x", 200) + strconv.Itoa(i)})
		}
		return req
	}
	count := func() (flooded, fromGood int, summaries []string) {
		evs, _ := h.stored()
		for _, e := range evs {
			switch {
			case e.Kind == "flood" && e.Node == "evil":
				flooded++
			case e.Kind == "ok" && e.Node == "good":
				fromGood++
			case e.Kind == "events-dropped":
				summaries = append(summaries, e.Node+": "+e.Message)
			}
		}
		return
	}
	if code, body := h.Call(h.AgentToken("evil"), "POST", "/v1/nodes/evil/heartbeat", flood(1001)); code != 422 || !strings.Contains(string(body), `"field":"events"`) {
		t.Fatalf("1,001 events in one heartbeat: %d %s, want 422 naming the field events", code, body)
	}
	h.Must(h.AgentToken("evil"), "POST", "/v1/nodes/evil/heartbeat", flood(1000), 200, nil)
	h.Must(h.AgentToken("evil"), "POST", "/v1/nodes/evil/heartbeat", flood(1000), 200, nil)
	good := api.HeartbeatRequest{}
	for range 50 {
		good.Events = append(good.Events, api.Event{Kind: "ok", Message: "fine"})
	}
	h.Must(h.AgentToken("good"), "POST", "/v1/nodes/good/heartbeat", good, 200, nil)
	flooded, fromGood, summaries := count()
	if flooded != 100 || fromGood != 50 {
		t.Fatalf("stored %d of evil's 2,000 events (want its burst, 100) and %d of good's 50", flooded, fromGood)
	}
	if len(summaries) != 1 || !strings.Contains(summaries[0], "evil: 900 events from node evil dropped: rate limit") {
		t.Fatalf("summaries %q, want one saying 900 events from evil were dropped", summaries)
	}
	// A minute later the bucket holds 60: the next summary tells the
	// second flood's 1,000, and of 100 more, 60 pass.
	h.Advance(time.Minute)
	h.beat("evil", "good")
	h.Must(h.AgentToken("evil"), "POST", "/v1/nodes/evil/heartbeat", flood(100), 200, nil)
	flooded, _, summaries = count()
	if flooded != 160 {
		t.Errorf("after a minute: %d of evil's events stored, want 160", flooded)
	}
	if len(summaries) != 2 || !strings.Contains(summaries[1], "evil: 1000 events from node evil dropped") {
		t.Errorf("summaries after a minute: %q, want a second one for 1000 events", summaries)
	}
	_, metrics := h.Call(h.Admin, "GET", "/metrics", nil)
	if !strings.Contains(string(metrics), `gpuslice_agent_events_dropped_total{node="evil"} 1940`) {
		t.Errorf("/metrics does not count evil's 1,940 dropped events")
	}
}

// Bills come from the tenants' totals, which pruning leaves alone: usage,
// the dashboard's cost and the metrics are the same before and after the
// claims that were billed are pruned.
func TestUsageSurvivesPruning(t *testing.T) {
	t.Parallel()
	h := newHarnessWith(t, nil, false, func(c *server.Config) { c.ClaimRetention = time.Hour })
	acme, beta := h.Tenant("acme", 0), h.Tenant("beta", 0)
	h.Node("vm", "l4x4")
	var ids []string
	for i, tok := range []string{acme, beta, acme} {
		var c api.Claim
		h.Must(tok, "POST", "/v1/claims", gpuReq(4000, alloc.TimeSlice), 201, &c)
		ids = append(ids, c.ID)
		h.Advance(time.Duration(10+i) * time.Second)
		h.Must(h.AgentToken("vm"), "POST", "/v1/nodes/vm/heartbeat", api.HeartbeatRequest{Usage: []api.UsageSample{
			{Claim: c.ID, GPUSeconds: float64(3 + i), SMSeconds: 1.5, MemoryMiBSeconds: 4000 * float64(3+i), MemoryMiB: 4000}}}, 200, nil)
		h.Must(tok, "DELETE", "/v1/claims/"+c.ID, nil, 200, nil)
	}
	type bill struct {
		Usage     []api.Usage
		Dashboard []web.TenantView
		Metrics   []string
	}
	read := func() bill {
		var b bill
		h.Must(h.Admin, "GET", "/v1/usage", nil, 200, &b.Usage)
		var d web.Dashboard
		h.Must(h.Admin, "GET", "/v1/dashboard", nil, 200, &d)
		b.Dashboard = d.Tenants
		_, m := h.Call(h.Admin, "GET", "/metrics", nil)
		for _, line := range strings.Split(string(m), "\n") {
			if strings.HasPrefix(line, "gpuslice_tenant_") && strings.Contains(line, "seconds_total") {
				b.Metrics = append(b.Metrics, line)
			}
		}
		return b
	}
	before := read()
	if len(before.Metrics) == 0 || before.Usage[0].GPUSeconds != 3+5 {
		t.Fatalf("usage before pruning: %+v", before)
	}
	h.Advance(2 * time.Hour)
	h.beat("vm")
	h.tick()
	for _, id := range ids {
		if code, _ := h.Call(h.Admin, "GET", "/v1/claims/"+id, nil); code != 404 {
			t.Fatalf("claim %s was not pruned (%d)", id, code)
		}
	}
	if after := read(); !reflect.DeepEqual(after, before) {
		t.Fatalf("bills changed when the claims were pruned:\nbefore %+v\nafter  %+v", before, after)
	}
}

// Usage was clamped per sample: one heartbeat repeating one claim's sample
// 2,000 times billed it thousands of device-seconds a second after it was
// made, and each of many rapid heartbeats got 5 s of slack. Now a claim's
// samples are summed before one clamp, and its total never passes its
// devices × its life.
func TestRepeatedSamplesBillOnce(t *testing.T) {
	t.Parallel()
	h := newHarnessRun(t, nil, false)
	acme := h.Tenant("acme", 0)
	h.Node("vm", "l4x4")
	var c api.Claim
	h.Must(acme, "POST", "/v1/claims", gpuReq(0, alloc.Exclusive), 201, &c)
	created := h.Now()
	h.Advance(time.Second)
	sample := api.UsageSample{Claim: c.ID, GPUSeconds: 10, SMSeconds: 10, MemoryMiBSeconds: 10 * 23034, MemoryMiB: 23034}
	repeated := api.HeartbeatRequest{}
	for range 2000 {
		repeated.Usage = append(repeated.Usage, sample)
	}
	h.Must(h.AgentToken("vm"), "POST", "/v1/nodes/vm/heartbeat", repeated, 200, nil)
	used := func() api.Consumption {
		var got api.Claim
		h.Must(acme, "GET", "/v1/claims/"+c.ID, nil, 200, &got)
		if got.Used == nil {
			return api.Consumption{}
		}
		return *got.Used
	}
	if u := used(); u.GPUSeconds > 1 || u.SMSeconds > 1 {
		t.Fatalf("one claim on one GPU, one second old, billed %+v for 2,000 copies of a 10 s sample", u)
	}
	// Fifty heartbeats 100 ms apart, each with 6 s (what elapsed + slack
	// allowed each): the claim is 6 s old, so 6 s at most.
	for range 50 {
		h.Advance(100 * time.Millisecond)
		h.Must(h.AgentToken("vm"), "POST", "/v1/nodes/vm/heartbeat", api.HeartbeatRequest{Usage: []api.UsageSample{
			{Claim: c.ID, GPUSeconds: 6, SMSeconds: 6}}}, 200, nil)
	}
	life := h.Now().Sub(created).Seconds()
	if u := used(); u.GPUSeconds > life || u.SMSeconds > life {
		t.Fatalf("after 50 rapid heartbeats: billed %+v, more than one GPU for %.1f s", u, life)
	}
	// An honest sample within the bounds is billed whole.
	h.Advance(10 * time.Second)
	prior := used()
	h.Must(h.AgentToken("vm"), "POST", "/v1/nodes/vm/heartbeat", api.HeartbeatRequest{Usage: []api.UsageSample{
		{Claim: c.ID, GPUSeconds: 4, SMSeconds: 2}, {Claim: c.ID, GPUSeconds: 5, SMSeconds: 3}}}, 200, nil)
	if u := used(); u.GPUSeconds != prior.GPUSeconds+9 || u.SMSeconds != prior.SMSeconds+5 {
		t.Fatalf("an honest split sample of 9 GPU-seconds in 10 s: billed %+v after %+v", u, prior)
	}
	var usage []api.Usage
	h.Must(acme, "GET", "/v1/usage", nil, 200, &usage)
	if u := used(); len(usage) != 1 || usage[0].GPUSeconds != u.GPUSeconds || usage[0].SMSeconds != u.SMSeconds {
		t.Fatalf("tenant usage %+v, its only claim %+v", usage, u)
	}
}

// A claim that waited in the queue used nothing meanwhile: an agent that
// bills it the hour it waited the moment it is placed gets the seconds
// since it was placed, not the hour.
func TestQueuedTimeBillsNothing(t *testing.T) {
	t.Parallel()
	h := newHarnessRun(t, nil, false)
	acme := h.Tenant("acme", 0)
	vm, _ := h.Node("vm", "l4x4")
	var hogs []api.Claim
	for range 4 {
		var c api.Claim
		h.Must(acme, "POST", "/v1/claims", gpuReq(0, alloc.Exclusive), 201, &c)
		hogs = append(hogs, c)
	}
	var c api.Claim
	h.Must(acme, "POST", "/v1/claims", gpuReq(0, alloc.Exclusive), 201, &c)
	if c.State != api.Pending {
		t.Fatalf("fifth whole-GPU claim on four GPUs: %s", c.State)
	}
	h.Pass(time.Hour, vm)
	h.Must(acme, "DELETE", "/v1/claims/"+hogs[0].ID, nil, 200, nil)
	h.Must(acme, "GET", "/v1/claims/"+c.ID, nil, 200, &c)
	if c.State != api.Allocated || c.Allocated == nil || !c.Allocated.Equal(h.Now()) {
		t.Fatalf("after a GPU came free: %s, allocated at %v (now %v)", c.State, c.Allocated, h.Now())
	}
	h.Advance(2 * time.Second)
	h.Must(h.AgentToken("vm"), "POST", "/v1/nodes/vm/heartbeat", api.HeartbeatRequest{Usage: []api.UsageSample{
		{Claim: c.ID, GPUSeconds: 3600, SMSeconds: 3600}}}, 200, nil)
	h.Must(acme, "GET", "/v1/claims/"+c.ID, nil, 200, &c)
	if c.Used == nil || c.Used.GPUSeconds > 2 || c.Used.SMSeconds > 2 {
		t.Fatalf("a claim placed 2 s ago after an hour in the queue billed %+v", c.Used)
	}
}

// A hostile agent, whatever it sends and whenever (random claims, random
// heartbeat timings, samples duplicated, huge or split across heartbeats,
// claims released midway, samples for claims of other nodes), never bills
// a claim more than its devices could have run in its life, and each
// tenant's total is the sum of its claims'. GPUSLICE_HOSTILE_SEED
// reproduces a run.
func TestHostileAgentNeverOverbills(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("GPUSLICE_HOSTILE_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("GPUSLICE_HOSTILE_SEED=%q: %v", s, err)
		}
	}
	t.Logf("seed %d (GPUSLICE_HOSTILE_SEED=%d reproduces it)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 25))
	h := newHarnessRun(t, nil, false)
	tenants := map[string]string{"acme": h.Tenant("acme", 0), "beta": h.Tenant("beta", 0)}
	names := []string{"acme", "beta"}
	nodes := []string{"n1", "n2"}
	h.Node("n1", "l4x4")
	h.Node("n2", "mixed")
	gpuMem := map[string]int64{} // GPU uuid → its model's memory
	for _, n := range nodes {
		var node api.Node
		h.Must(h.Admin, "GET", "/v1/nodes/"+n, nil, 200, &node)
		for _, g := range node.Inventory.GPUs {
			m, err := catalog.Default().GPU(g.Model)
			if err != nil {
				t.Fatal(err)
			}
			gpuMem[g.UUID] = m.MemoryMiB
		}
	}
	var ids []string
	value := func() float64 {
		switch rng.IntN(5) {
		case 0:
			return 0
		case 1:
			return rng.Float64() * 3
		case 2:
			return rng.Float64() * 30
		case 3:
			return 1e12
		default:
			return math.MaxFloat64 / 4
		}
	}
	billed, clampedSome := 0.0, false
	for step := range 400 {
		switch r := rng.IntN(10); {
		case r < 2 || len(ids) == 0: // a claim, any size, maybe two devices
			tenant := names[rng.IntN(len(names))]
			req := gpuReq(int64(1000*(1+rng.IntN(8))), alloc.TimeSlice)
			if rng.IntN(3) == 0 {
				req = gpuReq(0, alloc.Exclusive)
				req.Requests[0].Count = 1 + rng.IntN(2)
			}
			var c api.Claim
			h.Must(tenants[tenant], "POST", "/v1/claims", req, 201, &c)
			ids = append(ids, c.ID)
		case r < 3: // released midway; its agent may go on reporting it
			id := ids[rng.IntN(len(ids))]
			h.Call(h.Admin, "DELETE", "/v1/claims/"+id, nil)
		case r < 5: // time passes, in steps the node timeout never sees
			h.Advance(time.Duration(rng.IntN(8000)) * time.Millisecond)
		default: // a hostile heartbeat
			node := nodes[rng.IntN(len(nodes))]
			req := api.HeartbeatRequest{}
			for range rng.IntN(6) {
				s := api.UsageSample{Claim: ids[rng.IntN(len(ids))], GPUSeconds: value(), SMSeconds: value(), MemoryMiBSeconds: min(value()*80000, math.MaxFloat64)}
				if rng.IntN(8) == 0 {
					s.Claim = "c-nope"
				}
				for range 1 + rng.IntN(3)*rng.IntN(200) { // duplicated
					req.Usage = append(req.Usage, s)
				}
			}
			rng.Shuffle(len(req.Usage), func(i, j int) { req.Usage[i], req.Usage[j] = req.Usage[j], req.Usage[i] })
			h.Must(h.AgentToken(node), "POST", "/v1/nodes/"+node+"/heartbeat", req, 200, nil)
		}
		// The property, after every step.
		now := h.Now()
		claims := h.storedClaims()
		sum := map[string]api.Consumption{}
		for _, c := range claims {
			if c.Used == nil {
				continue
			}
			sum[c.Tenant] = sum[c.Tenant].Add(*c.Used)
			if c.Allocation == nil {
				t.Fatalf("step %d: claim %s (%s) billed %+v holds no devices", step, c.ID, c.State, *c.Used)
			}
			end := now
			if c.State.Final() {
				end = c.Updated
			}
			// Its life is the time it held devices: from its first
			// allocation, which is never before its creation.
			if c.Allocated == nil || c.Allocated.Before(c.Created) || c.Allocated.After(now) {
				t.Fatalf("step %d: claim %s created %v was allocated at %v", step, c.ID, c.Created, c.Allocated)
			}
			life := end.Sub(*c.Allocated).Seconds()
			devices, mem := 0.0, 0.0
			for _, d := range c.Allocation.Devices {
				devices++
				mem += float64(max(gpuMem[d.GPU], d.MemoryMiB))
			}
			// The server adds the bound device by device: allow for rounding.
			over := func(v, bound float64) bool { return v > bound*(1+1e-12) }
			u := *c.Used
			if over(u.GPUSeconds, devices*life) || over(u.SMSeconds, devices*life) || over(u.MemoryMiBSeconds, mem*life) {
				t.Fatalf("step %d: claim %s (%s, %v devices, %.3f s old) billed %+v: more than its devices could run in its life",
					step, c.ID, c.State, devices, life, u)
			}
			clampedSome = clampedSome || u.GPUSeconds >= devices*life*(1-1e-12)
		}
		var usage []api.Usage
		h.Must(h.Admin, "GET", "/v1/usage", nil, 200, &usage)
		for _, tu := range usage {
			want := sum[tu.Tenant]
			for _, pair := range [][2]float64{{tu.GPUSeconds, want.GPUSeconds}, {tu.SMSeconds, want.SMSeconds}, {tu.MemoryMiBSec, want.MemoryMiBSeconds}} {
				if math.Abs(pair[0]-pair[1]) > 1e-9*max(1, pair[1]) {
					t.Fatalf("step %d: tenant %s's usage %+v is not the sum of its claims' %+v", step, tu.Tenant, tu, want)
				}
			}
			billed = max(billed, tu.GPUSeconds)
		}
	}
	if billed == 0 || !clampedSome {
		t.Fatalf("the run billed nothing (%v) or never reached a bound (%v): it tested nothing", billed, clampedSome)
	}
	if err := h.Server().Check(context.Background()); err != nil {
		t.Fatal(err)
	}
}
