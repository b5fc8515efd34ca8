// Package servertest is the one in-process server harness of gpuslice's
// tests: a real server.Server on a store of the test's own (memory, or
// SQLite in a temporary directory), served over real HTTP by an httptest
// server, with an admin token, and helpers that act as the admin, as
// tenants and as agents on simulated machines (internal/gpu/fake).
//
// Everything a Harness holds is its test's own, so tests built on it may
// call t.Parallel. By default the server runs on the harness's fake clock
// (Advance moves it); Options.RealClock gives it the wall clock for tests
// whose agents run on their own. It imports testing: only tests use it.
// internal/server's own tests use it from the external server_test
// package (an in-package test cannot import a package that imports
// internal/server).
package servertest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/agent"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/gpu/fake"
	"github.com/gpuslice/gpuslice/internal/server"
	"github.com/gpuslice/gpuslice/internal/state"
)

// Start is where the fake clock of every harness starts.
var Start = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// Options says how New builds the server.
type Options struct {
	// Store is the server's store; nil gives a new memory store, or with
	// SQLite a new SQLite database in a temporary directory.
	Store state.Store
	// SQLite, with no Store, opens state.OpenSQLite (default options) in
	// t.TempDir(), closed when the test ends.
	SQLite bool
	// Manual starts no background loop (Server.Run is not called): the
	// test drives them with Server().Tick.
	Manual bool
	// RealClock gives the server the wall clock instead of the harness's
	// fake one (Now, Advance and Pass then fail the test).
	RealClock bool
	// Configure changes the configuration before the server starts: the
	// harness sets only Store, Log (discarded) and Clock.
	Configure func(*server.Config)
}

// Harness is a real server over HTTP with an admin token; see the
// package comment.
type Harness struct {
	T testing.TB
	// Ctx ends when the test does; background loops and agents started
	// by the harness run under it.
	Ctx context.Context
	// Cfg is the configuration the server was given (after Configure;
	// the server fills its defaults in its own copy): Restart reuses it.
	Cfg server.Config
	// Admin is an admin token's secret.
	Admin string
	// HTTP serves the current server (Restart swaps it behind the same
	// URL); URL is its address.
	HTTP *httptest.Server
	URL  string

	realClock bool
	mu        sync.Mutex
	srv       *server.Server
	handler   http.Handler
	now       time.Time
	agents    map[string]string
}

// New starts a server as o says and returns its harness. Everything it
// starts stops when the test ends: open client connections are closed
// first (an event stream stays open), then the HTTP server, then the
// context the server and agents run under.
func New(t testing.TB, o Options) *Harness {
	t.Helper()
	h := &Harness{T: t, now: Start, realClock: o.RealClock}
	store := o.Store
	if store == nil && o.SQLite {
		db, err := state.OpenSQLite(filepath.Join(t.TempDir(), "state.db"), state.SQLiteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		store = db
	}
	if store == nil {
		store = state.NewMemory()
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	h.Ctx = ctx
	h.Cfg = server.Config{Store: store, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if !o.RealClock {
		h.Cfg.Clock = h.clock
	}
	if o.Configure != nil {
		o.Configure(&h.Cfg)
	}
	srv, err := server.New(ctx, h.Cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !o.Manual {
		srv.Run(ctx)
	}
	h.srv, h.handler = srv, srv.Handler()
	h.HTTP = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		hd := h.handler
		h.mu.Unlock()
		hd.ServeHTTP(w, r)
	}))
	h.URL = h.HTTP.URL
	t.Cleanup(func() { h.HTTP.CloseClientConnections(); h.HTTP.Close() })
	tok, err := srv.CreateToken(ctx, api.RoleAdmin, "")
	if err != nil {
		t.Fatal(err)
	}
	h.Admin = tok.Secret
	return h
}

// Server is the server now behind the URL.
func (h *Harness) Server() *server.Server {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.srv
}

// Restart replaces the server with a new one over the same store and
// configuration, as after a crash; the URL stays, so agents and tokens
// carry on. The new server runs no background loop.
func (h *Harness) Restart() {
	h.T.Helper()
	srv, err := server.New(context.Background(), h.Cfg)
	if err != nil {
		h.T.Fatalf("restarting: %v", err)
	}
	h.mu.Lock()
	h.srv, h.handler = srv, srv.Handler()
	h.mu.Unlock()
}

func (h *Harness) clock() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.now
}

// Now is the fake clock's time (the server's clock).
func (h *Harness) Now() time.Time {
	if h.realClock {
		h.T.Fatal("servertest: Now on a harness with the real clock")
	}
	return h.clock()
}

// Advance moves the fake clock by d.
func (h *Harness) Advance(d time.Duration) {
	if h.realClock {
		h.T.Fatal("servertest: Advance on a harness with the real clock")
	}
	h.mu.Lock()
	h.now = h.now.Add(d)
	h.mu.Unlock()
}

// Pass lets d go by in steps of at most 20 s (shorter than the default
// node timeout), each agent stepping (reconcile and heartbeat) after each,
// so no node is marked lost on the way.
func (h *Harness) Pass(d time.Duration, agents ...*agent.Agent) {
	h.T.Helper()
	for step := 20 * time.Second; d > 0; d -= step {
		h.Advance(min(step, d))
		for _, a := range agents {
			if err := a.Step(context.Background()); err != nil {
				h.T.Fatal(err)
			}
		}
	}
}

// Call sends a request with token as the bearer (none when empty) and
// returns the status and body. A string body is sent as it is; any other
// non-nil body as JSON.
func (h *Harness) Call(token, method, path string, body any) (int, []byte) {
	h.T.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		data, _ := json.Marshal(b)
		rd = bytes.NewReader(data)
	}
	req, _ := http.NewRequest(method, h.URL+path, rd)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.T.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// Must is Call failing the test unless the status is want; with out
// non-nil the body is decoded into it, zeroed first (json.Unmarshal
// leaves fields the answer omits as they were, and a test reusing a
// variable would read a stale value).
func (h *Harness) Must(token, method, path string, body any, want int, out any) {
	h.T.Helper()
	code, data := h.Call(token, method, path, body)
	if code != want {
		h.T.Fatalf("%s %s: HTTP %d, want %d: %s", method, path, code, want, data)
	}
	if out != nil {
		if v := reflect.ValueOf(out); v.Kind() == reflect.Pointer && !v.IsNil() {
			v.Elem().SetZero()
		}
		if err := json.Unmarshal(data, out); err != nil {
			h.T.Fatal(err)
		}
	}
}

// Tenant creates (or updates) tenant name with a memory quota (0: none)
// and returns a new tenant token's secret.
func (h *Harness) Tenant(name string, quotaMiB int64) string {
	h.T.Helper()
	h.Must(h.Admin, "PUT", "/v1/tenants/"+name, api.Tenant{MemoryMiB: quotaMiB}, 200, nil)
	return h.TenantToken(name)
}

// TenantToken makes a token for an existing tenant.
func (h *Harness) TenantToken(name string) string {
	h.T.Helper()
	var tok api.Token
	h.Must(h.Admin, "POST", "/v1/tokens", api.CreateTokenRequest{Role: api.RoleTenant, Tenant: name}, 201, &tok)
	return tok.Secret
}

// Client is an API client of the server with token.
func (h *Harness) Client(token string) *client.Client {
	h.T.Helper()
	c, err := client.New(h.URL, token, h.HTTP.Client())
	if err != nil {
		h.T.Fatal(err)
	}
	return c
}

// AgentToken is the agent token secret Node or Machine made for node
// name ("" if neither did).
func (h *Harness) AgentToken(name string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.agents[name]
}

func (h *Harness) keepAgent(name, secret string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.agents == nil {
		h.agents = map[string]string{}
	}
	h.agents[name] = secret
}

// seedOf is the simulated machine's seed for a node name, so that
// machines of one test have distinct, repeatable GPU uuids.
func seedOf(name string) int64 {
	seed := int64(0)
	for _, r := range name {
		seed = seed*31 + int64(r)
	}
	return seed
}

// Node registers a simulated machine of preset (fake.Preset) through the
// real agent, on an agent token not bound to a node name, and returns
// the agent (the test calls Step: reconcile and heartbeat) and the
// machine. The agent runs on the harness's clock with a 10 s memory grace;
// opts change its configuration before it is made.
func (h *Harness) Node(name, preset string, opts ...func(*agent.Config, *fake.Machine)) (*agent.Agent, *fake.Machine) {
	h.T.Helper()
	var tok api.Token
	h.Must(h.Admin, "POST", "/v1/tokens", api.CreateTokenRequest{Role: api.RoleAgent}, 201, &tok)
	h.keepAgent(name, tok.Secret)
	spec, err := fake.Preset(preset)
	if err != nil {
		h.T.Fatal(err)
	}
	m, err := fake.New(spec, fake.WithSeed(seedOf(name)))
	if err != nil {
		h.T.Fatal(err)
	}
	c, err := client.New(h.URL, tok.Secret, nil)
	if err != nil {
		h.T.Fatal(err)
	}
	cfg := agent.Config{Name: name, Client: c, Device: m, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Clock: h.Cfg.Clock, Kill: m.StopProcess, MemoryGrace: 10 * time.Second}
	for _, o := range opts {
		o(&cfg, m)
	}
	a, err := agent.New(cfg)
	if err != nil {
		h.T.Fatal(err)
	}
	if err := a.Register(context.Background()); err != nil {
		h.T.Fatal(err)
	}
	return a, m
}

// Machine registers a simulated machine of spec whose agent runs on its
// own (Agent.Run, every 100 ms unless opts say otherwise, running the
// machine's workloads), as under `gpuslice serve`, on an agent token
// bound to the node name. The agent stops, and Machine waits for it,
// when the test ends.
func (h *Harness) Machine(name string, spec fake.MachineSpec, opts ...func(*agent.Config, *fake.Machine)) *fake.Machine {
	h.T.Helper()
	tok, err := h.Server().CreateTokenFor(h.Ctx, api.RoleAgent, "", name)
	if err != nil {
		h.T.Fatal(err)
	}
	h.keepAgent(name, tok.Secret)
	m, err := fake.New(spec, fake.WithSeed(seedOf(name)))
	if err != nil {
		h.T.Fatal(err)
	}
	cfg := agent.Config{Name: name, Client: h.Client(tok.Secret), Device: m, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Interval: 100 * time.Millisecond, Kill: m.StopProcess, Workloads: m}
	for _, o := range opts {
		o(&cfg, m)
	}
	a, err := agent.New(cfg)
	if err != nil {
		h.T.Fatal(err)
	}
	if err := a.Register(h.Ctx); err != nil {
		h.T.Fatal(err)
	}
	ctx, cancel := context.WithCancel(h.Ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	h.T.Cleanup(func() { cancel(); <-done })
	return m
}
