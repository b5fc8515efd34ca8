package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

// The randomized server test with concurrency: per seed, workers run
// random operations at the same time against the real HTTP server — claims
// of every mode created for tenants with quotas, released, started and
// failed (several workers on one claim at once), agents reconciling,
// heartbeating and registering again, quota changes, deleted nodes, fatal
// XIDs, the server's Tick — in bounded phases, on the memory store (even
// seeds) and SQLite (odd seeds). Every answer must be one the API allows;
// between phases, at rest, Server.Check must hold (after a restart too),
// and so must a model kept from the answers: a claim whose DELETE answered
// 200 is released for ever, one whose /failed answered 200 is failed, and
// no tenant holds more memory or compute than its quota unless the quota
// was lowered. A last phase releases everything concurrently and the
// fleet must be empty.
//
// A seed fixes each worker's choices, not how they interleave: a failure
// prints the phase's operations in the order they were answered.
// GPUSLICE_RANDOM_SEEDS=N runs seeds 0..N-1 (default 4);
// GPUSLICE_RANDOM_SEED=S runs seed S alone.
func TestRandomServerConcurrent(t *testing.T) {
	t.Parallel()
	seeds := []uint64{0, 1, 2, 3}
	if v := os.Getenv("GPUSLICE_RANDOM_SEEDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("GPUSLICE_RANDOM_SEEDS=%q: want a whole number ≥ 1", v)
		}
		seeds = seeds[:0]
		for i := range n {
			seeds = append(seeds, uint64(i))
		}
	}
	if v := os.Getenv("GPUSLICE_RANDOM_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("GPUSLICE_RANDOM_SEED=%q: want a whole number", v)
		}
		seeds = []uint64{s}
	}
	phases, workers, ops := 8, 8, 25
	if testing.Short() {
		phases = 4
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			newConcRun(t, seed).run(ctx, phases, workers, ops)
		})
	}
}

// concNode is a node and its agent; mu gives the agent (and the fake
// machine's faults) to one worker at a time.
type concNode struct {
	name string
	mu   sync.Mutex
	ag   *agent.Agent
	m    *fake.Machine
	down bool // its agent is silent this phase (set only at rest)
}

// quota is a tenant's quota in both dimensions (0 = unlimited).
type quota struct {
	mem  int64
	comp int
}

type concRun struct {
	t      *testing.T
	seed   uint64
	h      *harness
	hc     *http.Client
	names  []string
	tokens map[string]string
	nodes  []*concNode
	xids   atomic.Int32
	stop   atomic.Bool

	mu       sync.Mutex
	ids      []string          // every claim created (201)
	owner    map[string]string // claim → tenant
	released map[string]bool   // DELETE answered 200
	failed   map[string]bool   // POST /failed answered 200
	puts     map[string][]quota
	stats    map[string]int
	log      []string // this phase's operations, for a failure's report

	// Per tenant, between phases: the quota at rest and whether what the
	// tenant's claims held was within it (memory, compute).
	quotas map[string]quota
	within map[string][2]bool
}

func newConcRun(t *testing.T, seed uint64) *concRun {
	var store state.Store
	if seed%2 == 1 {
		db, err := state.OpenSQLite(filepath.Join(t.TempDir(), "state.db"), state.SQLiteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		store = db
	}
	h := newHarnessRun(t, store, false)
	r := &concRun{t: t, seed: seed, h: h, tokens: map[string]string{}, owner: map[string]string{},
		released: map[string]bool{}, failed: map[string]bool{}, puts: map[string][]quota{}, stats: map[string]int{},
		quotas: map[string]quota{}, within: map[string][2]bool{},
		hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	t.Cleanup(r.hc.CloseIdleConnections)
	for _, tq := range []struct {
		name string
		mem  int64
	}{{"acme", 60000}, {"beta", 0}, {"carol", 25000}, {"dora", 40000}} {
		r.names = append(r.names, tq.name)
		r.tokens[tq.name] = h.Tenant(tq.name, tq.mem)
	}
	for i, preset := range []string{"mixed", "l4x4", "mixed"} {
		name := fmt.Sprintf("node-%d", i)
		ag, m := h.Node(name, preset, func(c *agent.Config, m *fake.Machine) { c.Workloads = m })
		r.nodes = append(r.nodes, &concNode{name: name, ag: ag, m: m})
	}
	return r
}

func (r *concRun) run(ctx context.Context, phases, workers, ops int) {
	t := r.t
	defer func() { t.Logf("seed %d: %v", r.seed, r.stats) }()
	rng := rand.New(rand.NewPCG(r.seed, 7))
	r.atRest(ctx, "before the first phase")
	for p := range phases {
		r.phase(ctx, p, workers, ops)
		if t.Failed() {
			return
		}
		r.atRest(ctx, fmt.Sprintf("after phase %d", p))
		if t.Failed() {
			return
		}
		// At rest: a restart, time passing, nodes going silent or coming
		// back — the next phase's sweeps (Tick) see them.
		if rng.IntN(2) == 0 {
			r.h.Restart()
			r.count("restart")
			r.check(ctx, fmt.Sprintf("after the restart following phase %d", p))
			if t.Failed() {
				return
			}
		}
		for _, n := range r.nodes {
			if n.down && rng.IntN(2) == 0 {
				n.down = false
			} else if !n.down && rng.IntN(8) == 0 {
				n.down = true
				r.count("node silenced")
			}
		}
		switch rng.IntN(4) {
		case 0:
			r.h.Advance(40 * time.Second) // past the node timeout: the next sweeps mark silent (and slow) nodes lost
		case 1, 2:
			r.h.Advance(10 * time.Second)
		}
	}
	for _, n := range r.nodes {
		n.down = false
	}
	r.drain(ctx, workers)
}

func (r *concRun) count(what string) {
	r.mu.Lock()
	r.stats[what]++
	r.mu.Unlock()
}

func (r *concRun) note(format string, args ...any) {
	r.mu.Lock()
	r.log = append(r.log, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

// fail reports a broken rule with the phase's log so far, and stops the
// phase.
func (r *concRun) fail(format string, args ...any) {
	r.t.Helper()
	r.mu.Lock()
	log := r.log[max(0, len(r.log)-80):]
	r.mu.Unlock()
	r.t.Errorf("seed %d: %s\nlast operations of the phase:\n  %s", r.seed, fmt.Sprintf(format, args...), strings.Join(log, "\n  "))
	r.stop.Store(true)
}

// do sends one request; it never calls t.Fatal, so workers may use it.
func (r *concRun) do(ctx context.Context, token, method, path string, body any) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.h.URL+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := r.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

// answer is the part of a claim or of an error the checks read.
type answer struct {
	ID    string `json:"id"`
	State string `json:"state"`
	Error string `json:"error"`
}

func (r *concRun) phase(ctx context.Context, p, workers, ops int) {
	r.mu.Lock()
	r.log = nil
	r.puts = map[string][]quota{}
	// Hot claims: the newest few, which every worker's transitions prefer
	// and a stampede of workers hits at one instant.
	var hot []string
	for i := len(r.ids) - 1; i >= 0 && len(hot) < 3; i-- {
		if id := r.ids[i]; !r.released[id] && !r.failed[id] {
			hot = append(hot, id)
		}
	}
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	start := make(chan struct{})
	var wg sync.WaitGroup
	for k, id := range hot {
		for j := range 4 {
			wg.Add(1)
			rng := rand.New(rand.NewPCG(r.seed, uint64(p*1000+100+k*10+j)))
			go func() {
				defer wg.Done()
				<-start
				for range 1 + rng.IntN(2) {
					r.transition(ctx, fmt.Sprintf("s%d.%d", k, j), id, []string{"DELETE", "running", "failed"}[rng.IntN(3)])
				}
			}()
		}
	}
	// A stampede of creates for one tenant: the quota is checked by
	// concurrent admissions.
	tenant := r.names[int(r.seed+uint64(p))%len(r.names)]
	for j := range 4 {
		wg.Add(1)
		rng := rand.New(rand.NewPCG(r.seed, uint64(p*1000+500+j)))
		go func() {
			defer wg.Done()
			<-start
			req := gpuReq(0, alloc.Exclusive)
			if j%2 == 1 {
				req = gpuReq(int64(4000+1000*rng.IntN(8)), alloc.TimeSlice)
			}
			r.create(ctx, fmt.Sprintf("c%d", j), tenant, req)
		}()
	}
	for w := range workers {
		wg.Add(1)
		rng := rand.New(rand.NewPCG(r.seed, uint64(p*1000+w)))
		go func() {
			defer wg.Done()
			<-start
			for range ops {
				if r.stop.Load() || ctx.Err() != nil {
					return
				}
				r.op(ctx, fmt.Sprintf("w%d", w), rng, hot)
			}
		}()
	}
	close(start)
	wg.Wait()
	if ctx.Err() != nil && !r.stop.Load() {
		r.fail("phase %d did not end within its time limit", p)
	}
}

// op is one random operation of a worker.
func (r *concRun) op(ctx context.Context, who string, rng *rand.Rand, hot []string) {
	switch op := rng.IntN(100); {
	case op < 30:
		r.create(ctx, who, r.names[rng.IntN(len(r.names))], randomRequest(rng))
	case op < 52:
		id := ""
		if len(hot) > 0 && rng.IntN(3) == 0 {
			id = hot[rng.IntN(len(hot))]
		} else {
			r.mu.Lock()
			if len(r.ids) > 0 {
				// The newer claims, more often: most older ones are over.
				id = r.ids[len(r.ids)-1-min(len(r.ids)-1, rng.IntN(12), rng.IntN(len(r.ids)))]
			}
			r.mu.Unlock()
		}
		if id == "" {
			return
		}
		what := "DELETE"
		switch rng.IntN(5) {
		case 0, 1:
			what = "running"
		case 2:
			what = "failed"
		}
		r.transition(ctx, who, id, what)
	case op < 56:
		r.mu.Lock()
		id := ""
		if len(r.ids) > 0 {
			id = r.ids[rng.IntN(len(r.ids))]
		}
		r.mu.Unlock()
		if id != "" {
			r.read(ctx, who, id)
		}
	case op < 78:
		r.agentStep(ctx, who, r.nodes[rng.IntN(len(r.nodes))], rng.IntN(8) == 0)
	case op < 81:
		n := r.nodes[rng.IntN(len(r.nodes))]
		xid := 13 // an application fault: the GPU stays healthy
		if rng.IntN(3) == 0 && r.xids.Add(1) <= 2 {
			xid = 48 // at most two GPUs per seed go bad for good
		}
		gpu := rng.IntN(4)
		n.mu.Lock()
		err := n.m.InjectXID(gpu, xid)
		n.mu.Unlock()
		if err != nil {
			r.fail("%s: XID %d on %s GPU %d: %v", who, xid, n.name, gpu, err)
		}
		r.note("%s: XID %d on %s GPU %d", who, xid, n.name, gpu)
		r.count(fmt.Sprintf("xid %d", xid))
	case op < 82:
		tenant := r.names[rng.IntN(len(r.names))]
		q := quota{mem: int64(rng.IntN(4)) * 20000, comp: rng.IntN(3) * 100}
		r.mu.Lock()
		r.puts[tenant] = append(r.puts[tenant], q)
		r.mu.Unlock()
		code, body, err := r.do(ctx, r.h.Admin, "PUT", "/v1/tenants/"+tenant, api.Tenant{MemoryMiB: q.mem, ComputePercent: q.comp})
		r.note("%s: PUT quota of %s %+v → %d", who, tenant, q, code)
		if err != nil || code != 200 {
			r.fail("%s: PUT quota of %s: %d %s %v", who, tenant, code, body, err)
		}
		r.count("quota change")
	case op < 84:
		n := r.nodes[rng.IntN(len(r.nodes))]
		code, body, err := r.do(ctx, r.h.Admin, "DELETE", "/v1/nodes/"+n.name, nil)
		r.note("%s: DELETE node %s → %d", who, n.name, code)
		if err != nil || (code != 204 && code != 404) {
			r.fail("%s: DELETE node %s: %d %s %v", who, n.name, code, body, err)
		}
		r.count(fmt.Sprintf("node delete %d", code))
	default:
		err := r.h.Server().Tick(ctx)
		r.note("%s: tick", who)
		if err != nil {
			r.fail("%s: tick: %v", who, err)
		}
		r.count("tick")
	}
}

func (r *concRun) create(ctx context.Context, who, tenant string, req api.CreateClaimRequest) {
	code, body, err := r.do(ctx, r.tokens[tenant], "POST", "/v1/claims", req)
	if err != nil {
		r.fail("%s: create for %s: %v", who, tenant, err)
		return
	}
	r.count(fmt.Sprintf("create %d", code))
	switch code {
	case 201:
		var a answer
		if err := json.Unmarshal(body, &a); err != nil || a.ID == "" || (a.State != "pending" && a.State != "allocated") {
			r.fail("%s: create for %s: 201 %s", who, tenant, body)
			return
		}
		r.mu.Lock()
		r.ids = append(r.ids, a.ID)
		r.owner[a.ID] = tenant
		r.mu.Unlock()
		r.note("%s: create %+v for %s → 201 %s %s", who, req.Requests[0], tenant, a.ID, a.State)
		r.count("created " + a.State)
	case 403, 422, 429:
		r.note("%s: create %+v for %s → %d", who, req.Requests[0], tenant, code)
	default:
		r.fail("%s: create %+v for %s: HTTP %d %s", who, req.Requests[0], tenant, code, body)
	}
}

// transition sends DELETE, POST /running or POST /failed for a claim and
// checks the answer against what earlier answers said.
func (r *concRun) transition(ctx context.Context, who, id, what string) {
	r.mu.Lock()
	tok := r.tokens[r.owner[id]]
	wasReleased, wasFailed := r.released[id], r.failed[id]
	r.mu.Unlock()
	method, path := "POST", "/v1/claims/"+id+"/"+what
	if what == "DELETE" {
		method, path = "DELETE", "/v1/claims/"+id
	}
	if what == "failed" {
		path += "?reason=chaos"
	}
	code, body, err := r.do(ctx, tok, method, path, nil)
	if err != nil {
		r.fail("%s: %s %s: %v", who, what, id, err)
		return
	}
	var a answer
	if err := json.Unmarshal(body, &a); err != nil {
		r.fail("%s: %s %s: HTTP %d, body not JSON: %s", who, what, id, code, body)
		return
	}
	r.note("%s: %s %s → %d %s", who, what, id, code, a.State)
	r.count(fmt.Sprintf("%s %d %s", what, code, a.State))
	// What each transition may answer: 200 in its target state, or 409
	// naming a state it does not start from.
	want := map[string]string{"DELETE": "released", "running": "running", "failed": "failed"}[what]
	switch code {
	case 200:
		if a.State != want {
			r.fail("%s: %s %s answered 200 in state %q, want %s", who, what, id, a.State, want)
			return
		}
	case 409:
		ok := false
		switch what {
		case "DELETE":
			ok = a.State == "failed"
		case "failed":
			ok = a.State == "released"
		case "running":
			ok = a.State == "pending" || a.State == "released" || a.State == "failed"
		}
		if !ok {
			r.fail("%s: %s %s: 409 with state %q: %s", who, what, id, a.State, body)
			return
		}
	case 404:
		r.fail("%s: %s %s: 404 for a claim its owner created: %s", who, what, id, body)
		return
	default:
		r.fail("%s: %s %s: HTTP %d %s", who, what, id, code, body)
		return
	}
	// Final states are for ever: a claim released (failed) before this
	// request was sent answers as released (failed).
	if (wasReleased && a.State != "released") || (wasFailed && a.State != "failed") {
		r.fail("%s: %s %s: %d %s, but an earlier answer had made it %s", who, what, id, code, a.State,
			map[bool]string{true: "released", false: "failed"}[wasReleased])
		return
	}
	if code == 200 && (what == "DELETE" || what == "failed") {
		r.mu.Lock()
		if what == "DELETE" {
			r.released[id] = true
		} else {
			r.failed[id] = true
		}
		both := r.released[id] && r.failed[id]
		r.mu.Unlock()
		if both {
			r.fail("%s: claim %s: both its DELETE and its /failed answered 200", who, id)
		}
	}
}

// read GETs a claim; one already released or failed by an answer stays so.
func (r *concRun) read(ctx context.Context, who, id string) {
	r.mu.Lock()
	tok := r.tokens[r.owner[id]]
	wasReleased, wasFailed := r.released[id], r.failed[id]
	r.mu.Unlock()
	code, body, err := r.do(ctx, tok, "GET", "/v1/claims/"+id, nil)
	if err != nil || code != 200 {
		r.fail("%s: GET %s: %d %s %v", who, id, code, body, err)
		return
	}
	var a answer
	if err := json.Unmarshal(body, &a); err != nil {
		r.fail("%s: GET %s: %v: %s", who, id, err, body)
		return
	}
	if (wasReleased && a.State != "released") || (wasFailed && a.State != "failed") {
		r.fail("%s: GET %s: %s, but an earlier answer made it released=%v failed=%v", who, id, a.State, wasReleased, wasFailed)
	}
}

// agentStep runs a node's agent once (a step, or a registration), as
// its process would: a step that fails registers again.
func (r *concRun) agentStep(ctx context.Context, who string, n *concNode, register bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.down {
		return
	}
	what := "step"
	var err error
	if register {
		what = "register"
		err = n.ag.Register(ctx)
	} else if err = n.ag.Step(ctx); err != nil {
		r.agentError(who, n.name, "step", err)
		what = "step, register"
		err = n.ag.Register(ctx)
	}
	r.note("%s: agent %s %s (err %v)", who, n.name, what, err)
	r.count("agent " + what)
	if err != nil {
		r.fail("%s: registering %s: %v", who, n.name, err)
	}
}

// agentError fails on an answer the server must never give its agent: a
// 5xx, or a refusal of its own credential. A 404 (the node was deleted)
// is normal, and so are the device's own errors (a step's plan made on
// claims that changed while it ran).
func (r *concRun) agentError(who, node, what string, err error) {
	for _, ce := range clientErrors(err) {
		if ce.Status != http.StatusNotFound {
			r.fail("%s: agent %s %s: %v", who, node, what, err)
			return
		}
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		r.fail("%s: agent %s %s: %v", who, node, what, err)
		return
	}
	r.count("agent " + what + " error")
}

// clientErrors is every API error in err's tree.
func clientErrors(err error) []*client.Error {
	var out []*client.Error
	var walk func(error)
	walk = func(err error) {
		if err == nil {
			return
		}
		if ce, ok := err.(*client.Error); ok {
			out = append(out, ce)
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return out
}

// check runs Server.Check at rest.
func (r *concRun) check(ctx context.Context, when string) {
	r.t.Helper()
	if err := r.h.Server().Check(ctx); err != nil {
		r.fail("Check %s: %v", when, err)
	}
}

// listAll pages through every claim (admin).
func (r *concRun) listAll(ctx context.Context) []api.Claim {
	var all []api.Claim
	path := "/v1/claims?limit=1000"
	for {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		req, _ := http.NewRequestWithContext(ctx, "GET", r.h.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+r.h.Admin)
		resp, err := r.hc.Do(req)
		if err != nil {
			cancel()
			r.fail("listing claims: %v", err)
			return nil
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		var page []api.Claim
		if resp.StatusCode != 200 || json.Unmarshal(body, &page) != nil {
			r.fail("listing claims: %d %s", resp.StatusCode, body)
			return nil
		}
		all = append(all, page...)
		next := resp.Header.Get(server.NextCursorHeader)
		if next == "" {
			return all
		}
		path = "/v1/claims?limit=1000&after=" + next
	}
}

// atRest checks, with nothing in flight, Server.Check and the model kept
// from the answers so far.
func (r *concRun) atRest(ctx context.Context, when string) {
	t := r.t
	r.check(ctx, when)
	if t.Failed() {
		return
	}
	claims := r.listAll(ctx)
	if t.Failed() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	// What each tenant's allocated and running claims hold, as the quota
	// counts it: per claim the larger of what it asks and what it is given.
	held := map[string]quota{}
	for _, c := range claims {
		seen[c.ID] = true
		if r.owner[c.ID] != c.Tenant {
			t.Errorf("seed %d %s: claim %s of %s is not one the test created for it (%q)", r.seed, when, c.ID, c.Tenant, r.owner[c.ID])
		}
		if r.released[c.ID] && c.State != api.Released {
			t.Errorf("seed %d %s: claim %s answered DELETE with 200, and is %s now", r.seed, when, c.ID, c.State)
		}
		if r.failed[c.ID] && c.State != api.Failed {
			t.Errorf("seed %d %s: claim %s answered /failed with 200, and is %s now", r.seed, when, c.ID, c.State)
		}
		if c.State.Final() {
			continue
		}
		if c.State == api.Pending {
			continue
		}
		if c.Allocation == nil {
			t.Errorf("seed %d %s: claim %s is %s without an allocation", r.seed, when, c.ID, c.State)
			continue
		}
		var ask, got quota
		for _, rq := range c.Spec.Requests {
			ask.mem += rq.MemoryMiB * int64(max(rq.Count, 1))
			ask.comp += rq.ComputePercent * max(rq.Count, 1)
		}
		for _, d := range c.Allocation.Devices {
			got.mem += d.MemoryMiB
			got.comp += d.ComputePercent
		}
		cur := held[c.Tenant]
		cur.mem += max(ask.mem, got.mem)
		cur.comp += max(ask.comp, got.comp)
		held[c.Tenant] = cur
	}
	for _, id := range r.ids {
		if !seen[id] {
			t.Errorf("seed %d %s: claim %s, created with 201, is gone", r.seed, when, id)
		}
	}
	// Quotas: a tenant whose claims held no more than its quota before the
	// phase, and whose quota the phase did not lower, holds no more after:
	// every placement, of a new claim or a queued one, fits the quota on
	// top of what the tenant holds; a rebuild only takes away (a claim
	// re-queued or failed). Queued claims are not held: their charges may
	// exceed a quota once the fleet changed.
	var usage []api.Usage
	var tenants []api.Tenant
	for _, q := range []struct {
		path string
		out  any
	}{{"/v1/usage", &usage}, {"/v1/tenants", &tenants}} {
		code, body, err := r.do(ctx, r.h.Admin, "GET", q.path, nil)
		if err != nil || code != 200 || json.Unmarshal(body, q.out) != nil {
			t.Errorf("seed %d %s: GET %s: %d %s %v", r.seed, when, q.path, code, body, err)
			return
		}
	}
	over := func(tenant, format string, args ...any) {
		var mine []string
		for _, c := range claims {
			if c.Tenant == tenant && !c.State.Final() {
				b, _ := json.Marshal(c)
				mine = append(mine, string(b))
			}
		}
		t.Errorf("seed %d %s: %s\nquota at the start %+v (held within: %v), PUTs in the phase %+v\nits live claims:\n  %s\nthe phase:\n  %s",
			r.seed, when, fmt.Sprintf(format, args...), r.quotas[tenant], r.within[tenant], r.puts[tenant],
			strings.Join(mine, "\n  "), strings.Join(r.log, "\n  "))
	}
	used := map[string]api.Usage{}
	for _, u := range usage {
		used[u.Tenant] = u
	}
	for _, tn := range tenants {
		q := quota{mem: tn.MemoryMiB, comp: tn.ComputePercent}
		q0, known := r.quotas[tn.Name]
		if known {
			memKept, compKept := kept(q0.mem, memsOf(r.puts[tn.Name])), kept(int64(q0.comp), compsOf(r.puts[tn.Name]))
			u, hd := used[tn.Name], held[tn.Name]
			if memKept && r.within[tn.Name][0] && q.mem > 0 && max(u.MemoryMiB, hd.mem) > q.mem {
				over(tn.Name, "tenant %s holds %d MiB (charged %d), over its quota of %d MiB (kept through the phase)", tn.Name, u.MemoryMiB, hd.mem, q.mem)
			}
			if compKept && r.within[tn.Name][1] && q.comp > 0 && max(u.ComputePercent, hd.comp) > q.comp {
				over(tn.Name, "tenant %s holds %d%% compute (charged %d%%), over its quota of %d%% (kept through the phase)", tn.Name, u.ComputePercent, hd.comp, q.comp)
			}
			if memKept && r.within[tn.Name][0] && q.mem > 0 || compKept && r.within[tn.Name][1] && q.comp > 0 {
				r.stats["quota verified"]++
			}
		}
		ch := held[tn.Name]
		r.quotas[tn.Name] = q
		r.within[tn.Name] = [2]bool{q.mem == 0 || ch.mem <= q.mem, q.comp == 0 || ch.comp <= int(q.comp)}
	}
	if t.Failed() {
		r.stop.Store(true)
	}
}

func memsOf(qs []quota) []int64 {
	var out []int64
	for _, q := range qs {
		out = append(out, q.mem)
	}
	return out
}

func compsOf(qs []quota) []int64 {
	var out []int64
	for _, q := range qs {
		out = append(out, int64(q.comp))
	}
	return out
}

// kept says whether a quota that was q0 at the start of a phase was never
// lowered during it, whatever order the concurrent PUTs took effect in:
// no PUT, or PUTs all of one value no lower than q0 (0 = unlimited).
func kept(q0 int64, puts []int64) bool {
	limit := func(v int64) int64 {
		if v == 0 {
			return 1 << 62
		}
		return v
	}
	for _, v := range puts {
		if v != puts[0] || limit(v) < limit(q0) {
			return false
		}
	}
	return true
}

// drain releases every claim at once, from several workers; then nothing
// is held or queued.
func (r *concRun) drain(ctx context.Context, workers int) {
	t := r.t
	r.mu.Lock()
	r.log = nil
	var open []string
	for _, id := range r.ids {
		if !r.released[id] && !r.failed[id] {
			open = append(open, id)
		}
	}
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(open) && !r.stop.Load(); i += workers {
				r.transition(ctx, fmt.Sprintf("d%d", w), open[i], "DELETE")
				if i%3 == 0 {
					r.agentStep(ctx, fmt.Sprintf("d%d", w), r.nodes[i%len(r.nodes)], false)
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if err := r.h.Server().Tick(ctx); err != nil {
		r.fail("drain: tick: %v", err)
	}
	r.atRest(ctx, "after the drain")
	if t.Failed() {
		return
	}
	for _, c := range r.listAll(ctx) {
		if !c.State.Final() {
			t.Errorf("seed %d: after the drain, claim %s is %s", r.seed, c.ID, c.State)
		}
	}
	code, body, err := r.do(ctx, r.h.Admin, "GET", "/v1/usage", nil)
	var usage []api.Usage
	if err != nil || code != 200 || json.Unmarshal(body, &usage) != nil {
		t.Fatalf("seed %d: usage after the drain: %d %s %v", r.seed, code, body, err)
	}
	for _, u := range usage {
		if u.Claims != 0 || u.MemoryMiB != 0 || u.ComputePercent != 0 {
			t.Errorf("seed %d: after the drain, tenant %s still holds %+v", r.seed, u.Tenant, u)
		}
	}
	r.h.Restart()
	r.check(ctx, "after the drain and a restart")
}
