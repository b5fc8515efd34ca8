package server_test

// Adversarial tests of event streams and long polls (issue 25, item 3):
// one tenant opening hundreds of streams stalled every read of the API,
// a stream behind by thousands of events got 500 per wake-up, and a
// tenant re-created under a deleted tenant's name saw its events.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/state"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// The defaults of serve --max-streams-per-token and --max-streams-per-tenant
// (server.DefaultMaxStreamsPerToken, DefaultMaxStreamsPerTenant), restated
// so that these tests build on the code before the caps.
const (
	capPerToken  = 16
	capPerTenant = 64
)

// stream is one open GET /v1/events: its status, and its events as they
// arrive.
type stream struct {
	code   int
	header http.Header
	body   string // the answer of a refused stream
	events chan api.Event
	cancel context.CancelFunc
	done   chan struct{}
}

// openStream opens an event stream from since; a refused one (not 200)
// comes back with its body read. The stream ends with the test or close.
func openStream(t *testing.T, h *harness, token string, since int64) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/v1/events?since=%d", h.URL, since), nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s := &stream{code: resp.StatusCode, header: resp.Header, events: make(chan api.Event, 100000), cancel: cancel, done: make(chan struct{})}
	t.Cleanup(s.close)
	if resp.StatusCode != http.StatusOK {
		var b strings.Builder
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			b.WriteString(sc.Text())
		}
		s.body = b.String()
		resp.Body.Close()
		close(s.done)
		return s
	}
	go func() {
		defer close(s.done)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var e api.Event
			if err := json.Unmarshal([]byte(data), &e); err != nil {
				t.Errorf("a frame that is not an event: %s", data)
				return
			}
			s.events <- e
		}
	}()
	return s
}

func (s *stream) close() {
	s.cancel()
	<-s.done
}

// collect reads events until n have come or the stream has been quiet
// for quiet (a bound against hanging, far above what any machine needs).
func (s *stream) collect(n int, quiet time.Duration) []api.Event {
	var out []api.Event
	timer := time.NewTimer(quiet)
	defer timer.Stop()
	for len(out) < n {
		select {
		case e := <-s.events:
			out = append(out, e)
			if !timer.Stop() {
				<-timer.C
			}
			timer.Reset(quiet)
		case <-timer.C:
			return out
		}
	}
	return out
}

// openMany opens n streams at once with token and returns them.
func openMany(t *testing.T, h *harness, token string, n int) []*stream {
	t.Helper()
	out := make([]*stream, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = openStream(t, h, token, 0)
		}()
	}
	wg.Wait()
	return out
}

func byCode(ss []*stream) (ok, refused []*stream) {
	for _, s := range ss {
		if s.code == http.StatusOK {
			ok = append(ok, s)
		} else {
			refused = append(refused, s)
		}
	}
	return ok, refused
}

// Streams and long polls are capped per token and per tenant: past a cap
// a request is refused with 429, Retry-After and a message naming the cap
// and how many are open; other tenants and tokens are unaffected; a
// closed stream gives its slot back.
func TestStreamsPerTokenAndTenantAreCapped(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	acme := h.Tenant("acme", 0)
	beta := h.Tenant("beta", 0)
	h.Node("vm", "l4x4")
	var pending api.Claim
	h.Must(acme, "POST", "/v1/claims", api.CreateClaimRequest{ClaimSpec: api.ClaimSpec{WaitForNodes: true,
		Requests: []alloc.Request{{Name: "gpu", Count: 64}}}}, 201, &pending)

	// One token, past its cap, all at once.
	first := openMany(t, h, acme, capPerToken+6)
	ok, refused := byCode(first)
	if len(ok) != capPerToken || len(refused) != 6 {
		t.Fatalf("%d streams of one token at once: %d opened, %d refused; want %d and 6", capPerToken+6, len(ok), len(refused), capPerToken)
	}
	for _, s := range refused {
		if s.code != http.StatusTooManyRequests || s.header.Get("Retry-After") == "" ||
			!strings.Contains(s.body, fmt.Sprintf("%d open, at most %d per token", capPerToken, capPerToken)) || !strings.Contains(s.body, "--max-streams-per-token") {
			t.Fatalf("a stream past the token's cap: %d, Retry-After %q, %s", s.code, s.header.Get("Retry-After"), s.body)
		}
	}
	// A long poll of the same token is refused too; without wait it is
	// an ordinary read.
	code, body := h.Call(acme, "GET", "/v1/claims/"+pending.ID+"?wait=20s&state=pending", nil)
	if code != http.StatusTooManyRequests || !strings.Contains(string(body), "per token") {
		t.Fatalf("a long poll past the token's cap: %d %s", code, body)
	}
	h.Must(acme, "GET", "/v1/claims/"+pending.ID, nil, 200, nil)

	// More tokens of the tenant fill the tenant's cap, and no more.
	var more []string
	for range capPerTenant/capPerToken + 1 {
		var tok api.Token
		h.Must(h.Admin, "POST", "/v1/tokens", api.CreateTokenRequest{Role: api.RoleTenant, Tenant: "acme"}, 201, &tok)
		more = append(more, tok.Secret)
	}
	var all []*stream
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, tok := range more {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ss := openMany(t, h, tok, capPerToken)
			mu.Lock()
			all = append(all, ss...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	ok2, refused2 := byCode(all)
	if len(ok)+len(ok2) != capPerTenant {
		t.Fatalf("the tenant holds %d streams, want its cap %d", len(ok)+len(ok2), capPerTenant)
	}
	for _, s := range refused2 {
		if s.code != http.StatusTooManyRequests || !strings.Contains(s.body, fmt.Sprintf("tenant acme has %d open, at most %d per tenant", capPerTenant, capPerTenant)) {
			t.Fatalf("a stream past the tenant's cap: %d %s", s.code, s.body)
		}
	}

	// Another tenant, and an admin, are not affected.
	b := openStream(t, h, beta, 0)
	if b.code != http.StatusOK {
		t.Fatalf("another tenant's stream: %d %s", b.code, b.body)
	}
	adm := openStream(t, h, h.Admin, 0)
	if adm.code != http.StatusOK {
		t.Fatalf("an admin's stream: %d %s", adm.code, adm.body)
	}
	h.Must(beta, "GET", "/v1/claims", nil, 200, nil)
	h.Must(h.AgentToken("vm"), "GET", "/v1/nodes/vm/claims", nil, 200, nil)

	// A closed stream gives its slot back: the token opens one again.
	ok[0].close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	testkit.EventuallyCtx(t, ctx, "a closed stream's slot to come back", func() (bool, string) {
		s := openStream(t, h, acme, 0)
		if s.code == http.StatusOK {
			s.close()
			return true, ""
		}
		return false, fmt.Sprintf("%d %s", s.code, s.body)
	})
	// Every stream closed: every slot is free again.
	for _, s := range append(ok, ok2...) {
		s.close()
	}
	testkit.EventuallyCtx(t, ctx, "every slot free after every stream closed", func() (bool, string) {
		s := openMany(t, h, acme, capPerToken)
		o, _ := byCode(s)
		for _, x := range s {
			x.close()
		}
		return len(o) == capPerToken, fmt.Sprintf("the token opens only %d", len(o))
	})
}

// appendEvents stores events straight into the store: no server commit
// rings for them, so no stream is woken.
func appendEvents(t *testing.T, store state.Store, n int, tenantOf func(i int) string, at time.Time) {
	t.Helper()
	for start := 0; start < n; start += 500 {
		err := store.Update(context.Background(), func(tx state.Tx) error {
			for i := start; i < min(start+500, n); i++ {
				if err := tx.AppendEvent(&api.Event{Time: at, Kind: "test", Tenant: tenantOf(i), Message: fmt.Sprint(i)}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// A stream 3,000 events behind gets all of them at once, with no commit
// to wake it: a full page is followed by the next at once. (Before, each
// page of 500 waited for a wake-up — a commit or the 15s keepalive.)
func TestStreamBehindCatchesUpAtOnce(t *testing.T) {
	t.Parallel()
	store := state.NewMemory()
	// No background loop runs: their commits would wake the stream.
	h := newHarnessRun(t, store, false)
	acme := h.Tenant("acme", 0)
	h.Tenant("beta", 0)
	// 3,000 of acme's events among 3,000 of beta's and 600 of nobody's.
	appendEvents(t, store, 6600, func(i int) string {
		return []string{"acme", "beta", "acme", "beta", "", "acme", "beta", "acme", "beta", "acme", "beta"}[i%11]
	}, h.Now())
	var before int
	if err := store.View(context.Background(), func(tx state.Tx) error {
		evs, err := tx.EventsSince(0, 0)
		before = len(evs)
		return err
	}); err != nil {
		t.Fatal(err)
	}

	// No quiet spell of 10s: well above any page's read, below the old
	// wake-up by keepalive.
	const quiet = 10 * time.Second
	s := openStream(t, h, acme, 0)
	got := s.collect(3000, quiet)
	if len(got) != 3000 {
		t.Fatalf("acme's stream delivered %d of its 3,000 events, then nothing for %s", len(got), quiet)
	}
	for i, e := range got {
		if e.Tenant != "acme" || i > 0 && e.Seq <= got[i-1].Seq {
			t.Fatalf("event %d of acme's stream: %+v (previous seq %d)", i, e, got[max(i-1, 0)].Seq)
		}
	}
	// An admin's stream gets every event, as fast.
	a := openStream(t, h, h.Admin, 0)
	all := a.collect(before, quiet)
	if len(all) != before {
		t.Fatalf("the admin's stream delivered %d of %d events", len(all), before)
	}
	// From a cursor in the middle: the rest only.
	mid := got[1499].Seq
	s2 := openStream(t, h, acme, mid)
	rest := s2.collect(1500, quiet)
	if len(rest) != 1500 || rest[0].Seq != got[1500].Seq {
		t.Fatalf("from seq %d: %d events (first %+v), want 1,500 from seq %d", mid, len(rest), rest[:min(1, len(rest))], got[1500].Seq)
	}
	// And a live event still arrives on the open stream.
	h.Node("vm", "l4x4")
	var c api.Claim
	h.Must(acme, "POST", "/v1/claims", gpuReq(1000, alloc.TimeSlice), 201, &c)
	live := s.collect(1, quiet)
	if len(live) != 1 || live[0].Claim != c.ID {
		t.Fatalf("after catching up, the stream got %+v, want the new claim's event", live)
	}
}

// A tenant deleted and re-created under the same name is a new tenant: its
// tokens see none of the old tenant's events, claims or claim by id.
func TestNamesakeTenantSeesNothingOld(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	old := h.Tenant("gamma", 0)
	h.Node("vm", "l4x4")
	var c1, c2 api.Claim
	h.Must(old, "POST", "/v1/claims", gpuReq(1000, alloc.TimeSlice), 201, &c1)
	h.Must(old, "POST", "/v1/claims", gpuReq(1000, alloc.TimeSlice), 201, &c2)
	h.Must(old, "DELETE", "/v1/claims/"+c1.ID, nil, 200, nil)
	h.Must(old, "DELETE", "/v1/claims/"+c2.ID, nil, 200, nil)
	h.Must(h.Admin, "DELETE", "/v1/tenants/gamma", nil, 204, nil)
	h.Advance(time.Second)
	fresh := h.Tenant("gamma", 0)

	s := openStream(t, h, fresh, 0)
	if s.code != http.StatusOK {
		t.Fatalf("stream: %d %s", s.code, s.body)
	}
	if evs := s.collect(1, 500*time.Millisecond); len(evs) != 0 {
		t.Fatalf("the new gamma's stream shows the old gamma's event %+v", evs[0])
	}
	var cs []api.Claim
	h.Must(fresh, "GET", "/v1/claims", nil, 200, &cs)
	if len(cs) != 0 {
		t.Fatalf("the new gamma lists the old gamma's claims: %+v", cs)
	}
	for _, id := range []string{c1.ID, c2.ID} {
		if code, body := h.Call(fresh, "GET", "/v1/claims/"+id, nil); code != http.StatusNotFound {
			t.Fatalf("the new gamma reads the old gamma's claim %s: %d %s", id, code, body)
		}
		if code, body := h.Call(fresh, "DELETE", "/v1/claims/"+id, nil); code != http.StatusNotFound {
			t.Fatalf("the new gamma releases the old gamma's claim %s: %d %s", id, code, body)
		}
	}
	// Its own claims and events it does see, the listing paged past the
	// old ones.
	var mine api.Claim
	h.Must(fresh, "POST", "/v1/claims", gpuReq(1000, alloc.TimeSlice), 201, &mine)
	evs := s.collect(1, 10*time.Second)
	if len(evs) != 1 || evs[0].Claim != mine.ID {
		t.Fatalf("the new gamma's stream: %+v, want its claim's event", evs)
	}
	code, body := h.Call(fresh, "GET", "/v1/claims?limit=1", nil)
	if code != 200 || !strings.Contains(string(body), mine.ID) || strings.Contains(string(body), c1.ID) {
		t.Fatalf("the new gamma's first page: %d %s", code, body)
	}
	// The admin still sees everything.
	h.Must(h.Admin, "GET", "/v1/claims?tenant=gamma", nil, 200, &cs)
	if len(cs) != 3 {
		t.Fatalf("the admin lists %d of gamma's claims, want 3", len(cs))
	}
	a := openStream(t, h, h.Admin, 0)
	if n := len(a.collect(1000, 500*time.Millisecond)); n < 5 {
		t.Fatalf("the admin's stream has %d events, want the old and new ones", n)
	}
}

// callWithin GETs path; a read with no answer in a minute (a hang, not a
// slow answer) comes back as code 0.
func callWithin(h *harness, token, path string) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", h.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, err = io.Copy(&b, resp.Body)
	if err != nil {
		return 0, err.Error()
	}
	return resp.StatusCode, b.String()
}

// Hostile streams of one tenant — past every cap, on a SQLite store with
// two read connections, while claims come and go — never keep an agent
// or another tenant from an answer: every read answers 200 with what it
// should, and the streams past the caps were refused.
func TestHostileStreamsDoNotStarveReads(t *testing.T) {
	t.Parallel()
	store, err := state.OpenSQLite(filepath.Join(t.TempDir(), "state.db"), state.SQLiteOptions{ReadConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	h := newHarness(t, store)
	evil := h.Tenant("evil", 0)
	good := h.Tenant("good", 0)
	h.Node("vm", "l4x4")
	var held api.Claim
	h.Must(good, "POST", "/v1/claims", gpuReq(1000, alloc.TimeSlice), 201, &held)
	var evilTokens []string
	for range 6 {
		var tok api.Token
		h.Must(h.Admin, "POST", "/v1/tokens", api.CreateTokenRequest{Role: api.RoleTenant, Tenant: "evil"}, 201, &tok)
		evilTokens = append(evilTokens, tok.Secret)
	}

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	// Claims come and go, so streams wake and read.
	churned := make(chan struct{})
	go func() {
		defer close(churned)
		for i := 0; ctx.Err() == nil; i++ {
			var c api.Claim
			if code, body := h.Call(evil, "POST", "/v1/claims", gpuReq(100, alloc.TimeSlice)); code == 201 {
				if json.Unmarshal(body, &c) == nil {
					h.Call(evil, "DELETE", "/v1/claims/"+c.ID, nil)
				}
			}
		}
	}()
	// 16 hostile streams per token, at once.
	var streams []*stream
	var mu sync.Mutex
	for _, tok := range evilTokens {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ss := openMany(t, h, tok, capPerToken)
			mu.Lock()
			streams = append(streams, ss...)
			mu.Unlock()
		}()
	}
	// Agent and tenant reads at the same time.
	type answer struct {
		what string
		code int
		body string
	}
	answers := make(chan answer, 1000)
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				code, body := callWithin(h, h.AgentToken("vm"), "/v1/nodes/vm/claims")
				answers <- answer{"agent", code, body}
				code, body = callWithin(h, good, "/v1/claims")
				answers <- answer{"good", code, body}
				if r == 0 {
					code, body = callWithin(h, h.Admin, "/v1/nodes")
					answers <- answer{"nodes", code, body}
				}
			}
		}()
	}
	wg.Wait()
	stop()
	<-churned
	close(answers)
	n := 0
	for a := range answers {
		n++
		if a.code != 200 || a.what != "nodes" && !strings.Contains(a.body, held.ID) {
			t.Fatalf("%s read: %d %s", a.what, a.code, a.body)
		}
	}
	if n != 4*50+25 {
		t.Fatalf("%d reads answered, want %d", n, 4*50+25)
	}
	ok, _ := byCode(streams)
	if len(ok) != capPerTenant {
		t.Fatalf("%d of %d hostile streams were let open, want the tenant's cap %d", len(ok), len(streams), capPerTenant)
	}
}
