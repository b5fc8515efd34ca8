package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/state"
	"github.com/gpuslice/gpuslice/internal/web"
)

// Config configures a Server. Zero values take the defaults noted.
type Config struct {
	Store state.Store
	Log   *slog.Logger
	// Clock defaults to time.Now.
	Clock func() time.Time
	// Policy is the fleet's allocation policy.
	Policy alloc.Policy
	// NodeTimeout marks a node lost when it has not heartbeated for this
	// long (default 30s).
	NodeTimeout time.Duration
	// SweepInterval is how often lost nodes are looked for (default
	// NodeTimeout/3).
	SweepInterval time.Duration
	// RetryInterval bounds how long a pending claim waits for a retry when
	// nothing pokes the scheduler (default 2s).
	RetryInterval time.Duration
	// ReserveAfter is how long a queued claim may wait while claims behind
	// it are placed (backfill) before capacity is held for it: the node
	// that could hold it alone with the fewest claims on it now is
	// nominated, and the GPUs of that node it could use (one of its
	// devices fits the GPU empty, as reported) are held: claims of its
	// priority or lower are placed anywhere but on them until it is
	// placed — on the node's other GPUs too, which are never in its way
	// (when no single node can hold it, the GPUs it could use anywhere are
	// held). So a stream of small claims cannot starve a big one, and the
	// rest of the fleet, the held node's other GPUs included, keeps
	// working. Default 5 minutes; negative: always backfill. A claim that
	// could not fit even the empty fleet holds nothing. Priority is each
	// tenant's up to its maxPriority, which only an admin sets.
	ReserveAfter time.Duration
	// MaxQueuedPerTenant bounds each tenant's pending claims (default
	// 1,000; negative: no bound). A claim that would queue past it is
	// refused with 429. Memory is bounded by the quota: a pending claim is
	// charged at least what it will hold.
	MaxQueuedPerTenant int
	// MaxStreamsPerToken bounds the event streams (GET /v1/events) and
	// long polls (GET /v1/claims/{id}?wait=) one token — of any role —
	// holds open at once (default DefaultMaxStreamsPerToken, 16; negative:
	// no bound); MaxStreamsPerTenant bounds those of all of a tenant's
	// tokens together (default DefaultMaxStreamsPerTenant, 64; negative:
	// no bound). Past either, the request is refused with 429 and
	// Retry-After, naming the cap and how many are open.
	MaxStreamsPerToken  int
	MaxStreamsPerTenant int
	// MaxBodyBytes bounds request bodies (default 1 MiB).
	MaxBodyBytes int64
	// Simulated says the local node runs on simulated GPUs; answers that
	// show inventory say so.
	Simulated bool
	// SampleInterval is how often the dashboard's charts get a sample
	// (default 15s); SeriesLength how many are kept (default 1,440: six
	// hours at 15s).
	SampleInterval time.Duration
	SeriesLength   int
	// DashboardInterval is how often a dashboard stream looks for changes
	// no event announced (memory in use, as heartbeats report it; default
	// 2s). GPUHistoryLength is how many samples each GPU's memory history
	// keeps (default 240).
	DashboardInterval time.Duration
	GPUHistoryLength  int
	// LeaseGrace is how long past its lease a leased claim is kept before
	// it is released (default 10s; negative: none): a holder that renews
	// a little late, or a client partitioned for a moment, keeps its claim.
	LeaseGrace time.Duration

	// Retention (retention.go): events older than EventRetention (default
	// 7 days) and past the newest MaxEvents (default 100,000) are pruned;
	// so are final claims (released, failed) that ended more than
	// ClaimRetention ago (default 7 days) or are past the MaxFinalClaims
	// that ended last (default 100,000). Negative: no bound of that kind.
	// Live claims are never pruned; tenants' usage totals are kept apart
	// from claims and never pruned. Pruning runs every PruneInterval
	// (default 1 minute) in transactions of at most PruneBatch rows
	// (default 1,000).
	EventRetention time.Duration
	MaxEvents      int
	ClaimRetention time.Duration
	MaxFinalClaims int
	PruneInterval  time.Duration
	PruneBatch     int

	// AgentEventRate and AgentEventBurst bound the events each node's
	// agent may add (ratelimit.go): a token bucket of AgentEventBurst
	// events (default 100) refilled at AgentEventRate per second (default
	// 1). Events past it are dropped and counted, and one event per
	// EventDropWindow (default 1 minute) per node says how many. A
	// negative AgentEventRate: no limit.
	AgentEventRate  float64
	AgentEventBurst int
	EventDropWindow time.Duration
}

// Server is the control plane: API, auth, scheduling and metrics.
type Server struct {
	// routes lists the API's "METHOD /path" patterns (Handler fills it;
	// a test checks openapi.json describes each).
	routes  []string
	cfg     Config
	store   state.Store
	log     *slog.Logger
	sched   *scheduler
	metrics *metrics
	// series holds the dashboard's samples (a bounded ring).
	series *web.Series
	// gpuHistory is each GPU's memory at each sample (bounded rings);
	// samples wakes dashboard streams when a sample is recorded.
	gpuHistory *web.GPUHistory
	samples    sampleBell
	// fleetCache is the newest read of the fleet, shared by dashboard
	// streams while no event commits (fleetview.go).
	fleetMu    sync.Mutex
	fleetCache *fleetSnap
	fleetDirty dirtyNodes
	// leases are the leased live claims' expiries (leases.go).
	leases leaseTable
	// cache holds tokens and tenants: the server is the store's only
	// writer, so it keeps them current on every change it makes.
	cache cache
	// events limits what each node's agent may add to the event log.
	events *eventLimiter
	// slots bounds open streams and long polls per token and tenant.
	slots *streamSlots
	// bell wakes event streams when events they may show commit.
	bell *eventBell
	// streamReads holds a token per stream reading a page (streamReaders).
	streamReads chan struct{}
}

type cache struct {
	mu      sync.RWMutex
	tokens  map[string]api.Token // hash -> token
	tenants map[string]api.Tenant
	// gen counts purges of tokens: a token read from the store is cached
	// only if no purge happened since the read began, so a token deleted
	// meanwhile cannot come back through the cache.
	gen uint64
}

// purge drops cached tokens that match, under the lock; the caller runs
// it once the deletion has committed (Tx.OnCommit).
func (c *cache) purge(match func(api.Token) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for h, t := range c.tokens {
		if match(t) {
			delete(c.tokens, h)
		}
	}
}

func (c *cache) token(hash []byte) (api.Token, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	t, ok := c.tokens[string(hash)]
	return t, ok
}

func (c *cache) tenant(name string) (api.Tenant, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	t, ok := c.tenants[name]
	return t, ok
}

func (c *cache) putTenant(t api.Tenant) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tenants[t.Name] = t
}

// load fills the cache from the store.
func (srv *Server) loadCache(ctx context.Context) error {
	return srv.store.View(ctx, func(tx state.Tx) error {
		ts, err := tx.ListTenants()
		if err != nil {
			return err
		}
		srv.cache.mu.Lock()
		defer srv.cache.mu.Unlock()
		srv.cache.tenants = map[string]api.Tenant{}
		for _, t := range ts {
			srv.cache.tenants[t.Name] = t
		}
		srv.cache.tokens = map[string]api.Token{}
		return nil
	})
}

// New builds a server over a store and loads its state.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, errors.New("server: no store")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.NodeTimeout <= 0 {
		cfg.NodeTimeout = 30 * time.Second
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = cfg.NodeTimeout / 3
	}
	if cfg.ReserveAfter == 0 {
		cfg.ReserveAfter = 5 * time.Minute
	}
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = 2 * time.Second
	}
	if cfg.MaxQueuedPerTenant == 0 {
		cfg.MaxQueuedPerTenant = 1000
	}
	if cfg.MaxStreamsPerToken == 0 {
		cfg.MaxStreamsPerToken = DefaultMaxStreamsPerToken
	}
	if cfg.MaxStreamsPerTenant == 0 {
		cfg.MaxStreamsPerTenant = DefaultMaxStreamsPerTenant
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	if cfg.DashboardInterval <= 0 {
		cfg.DashboardInterval = 2 * time.Second
	}
	if cfg.GPUHistoryLength <= 0 {
		cfg.GPUHistoryLength = 240
	}
	if cfg.SampleInterval <= 0 {
		cfg.SampleInterval = 15 * time.Second
	}
	if cfg.SeriesLength <= 0 {
		cfg.SeriesLength = 1440
	}
	if cfg.LeaseGrace == 0 {
		cfg.LeaseGrace = 10 * time.Second
	}
	cfg.LeaseGrace = max(cfg.LeaseGrace, 0)
	if cfg.EventRetention == 0 {
		cfg.EventRetention = DefaultEventRetention
	}
	if cfg.MaxEvents == 0 {
		cfg.MaxEvents = DefaultMaxEvents
	}
	if cfg.ClaimRetention == 0 {
		cfg.ClaimRetention = DefaultClaimRetention
	}
	if cfg.MaxFinalClaims == 0 {
		cfg.MaxFinalClaims = DefaultMaxFinalClaims
	}
	if cfg.PruneInterval <= 0 {
		cfg.PruneInterval = DefaultPruneInterval
	}
	if cfg.PruneBatch <= 0 {
		cfg.PruneBatch = DefaultPruneBatch
	}
	if cfg.AgentEventRate == 0 {
		cfg.AgentEventRate = DefaultAgentEventRate
	}
	if cfg.AgentEventBurst <= 0 {
		cfg.AgentEventBurst = DefaultAgentEventBurst
	}
	if cfg.EventDropWindow <= 0 {
		cfg.EventDropWindow = DefaultEventDropWindow
	}
	if math.IsNaN(cfg.AgentEventRate) || math.IsInf(cfg.AgentEventRate, 0) {
		return nil, fmt.Errorf("server: AgentEventRate %v: want a finite number of events per second (negative: no limit)", cfg.AgentEventRate)
	}
	srv := &Server{cfg: cfg, store: cfg.Store, log: cfg.Log, sched: newScheduler(), series: web.NewSeries(cfg.SeriesLength),
		gpuHistory: web.NewGPUHistory(cfg.GPUHistoryLength),
		events:     newEventLimiter(cfg.AgentEventRate, cfg.AgentEventBurst, cfg.EventDropWindow),
		slots:      newStreamSlots(cfg.MaxStreamsPerToken, cfg.MaxStreamsPerTenant), bell: newEventBell(),
		streamReads: make(chan struct{}, streamReaders)}
	srv.leases.m = map[string]lease{}
	srv.metrics = newMetrics(srv)
	if err := srv.loadCache(ctx); err != nil {
		return nil, err
	}
	if err := srv.rebuild(ctx); err != nil {
		return nil, err
	}
	if err := srv.loadLeases(ctx); err != nil {
		return nil, err
	}
	return srv, nil
}

// Run starts the background loops (pending retries, lost-node sweeps,
// dashboard samples, pruning) until ctx ends.
func (srv *Server) Run(ctx context.Context) {
	go srv.retryLoop(ctx)
	// Lost nodes: no heartbeat for NodeTimeout → lost; rebuild then
	// re-queues their claims (never placed twice: the lost node's devices
	// leave the allocator's fleet first).
	go srv.every(ctx, max(srv.cfg.SweepInterval, time.Millisecond), false, "sweeping lost nodes", srv.sweep)
	// Leases: a scan of the table in memory; a transaction only when one
	// is over (leases.go).
	go srv.every(ctx, time.Second, false, "releasing claims whose leases expired", srv.expireLeases)
	go srv.every(ctx, srv.cfg.SampleInterval, true, "dashboard sample", srv.Sample)
	go srv.every(ctx, srv.cfg.PruneInterval, true, "pruning history", func(ctx context.Context) error {
		_, err := srv.Prune(ctx)
		return err
	})
}

// every runs step every interval until ctx ends (the first time at once
// when immediate), logging what failed.
func (srv *Server) every(ctx context.Context, interval time.Duration, immediate bool, what string, step func(context.Context) error) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if immediate {
			if err := step(ctx); err != nil && ctx.Err() == nil {
				srv.log.Error(what, "err", err)
			}
		}
		immediate = true
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Routes lists the API's "METHOD /path" patterns, as Handler registers
// them (after the first call of Handler).
func (srv *Server) Routes() []string { return slices.Clone(srv.routes) }

// Handler is the HTTP API.
func (srv *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	route := func(pattern string, roles []api.Role, h handlerFunc) {
		mux.Handle(pattern, srv.authed(roles, h))
		srv.routes = append(srv.routes, pattern)
	}
	srv.routes = srv.routes[:0]
	admin := []api.Role{api.RoleAdmin}
	users := []api.Role{api.RoleAdmin, api.RoleTenant}
	agents := []api.Role{api.RoleAdmin, api.RoleAgent}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, map[string]string{"status": "ok"}) })
	mux.HandleFunc("GET /openapi.json", serveOpenAPI)
	route("GET /metrics", admin, srv.serveMetrics)
	route("POST /v1/claims", users, srv.createClaim)
	route("GET /v1/claims", users, srv.listClaims)
	route("GET /v1/claims/{id}", users, srv.getClaim)
	route("DELETE /v1/claims/{id}", users, srv.releaseClaim)
	route("POST /v1/claims/{id}/running", users, srv.markRunning)
	route("POST /v1/claims/{id}/failed", users, srv.markFailed)
	route("POST /v1/claims/{id}/renew", users, srv.renewClaim)
	route("GET /v1/events", users, srv.watchEvents)
	route("GET /v1/usage", users, srv.usage)
	route("GET /v1/nodes", users, srv.listNodes)
	route("GET /v1/nodes/{name}", users, srv.getNode)
	route("PUT /v1/nodes/{name}", agents, srv.registerNode)
	route("POST /v1/nodes/{name}/heartbeat", agents, srv.heartbeat)
	route("GET /v1/nodes/{name}/claims", agents, srv.nodeClaims)
	route("DELETE /v1/nodes/{name}", admin, srv.deleteNode)
	route("GET /v1/tenants", admin, srv.listTenants)
	route("PUT /v1/tenants/{name}", admin, srv.putTenant)
	route("GET /v1/tenants/{name}", admin, srv.getTenant)
	route("DELETE /v1/tenants/{name}", admin, srv.deleteTenant)
	route("POST /v1/tokens", admin, srv.createToken)
	route("GET /v1/tokens", admin, srv.listTokens)
	route("DELETE /v1/tokens/{id}", admin, srv.deleteToken)
	// The dashboard: its page (anyone gets the login; data needs a token)
	// and the views it reads.
	mux.Handle("GET /{$}", web.Assets())
	mux.Handle("GET /ui/", web.Assets())
	route("GET /v1/fleet", users, srv.fleet)
	route("GET /v1/fleet/summary", users, srv.fleetSummary)
	route("GET /v1/fleet/grid", users, srv.fleetGrid)
	route("GET /v1/fleet/gpus/{node}/{index}", users, srv.fleetGPU)
	route("GET /v1/dashboard", users, srv.dashboard)
	route("GET /v1/dashboard/tenants/{name}", users, srv.dashboardTenant)
	route("GET /v1/dashboard/stream", users, srv.dashboardStream)
	route("GET /v1/claims/{id}/events", users, srv.claimEvents)
	// Services (services.go): replicas of a claim + command, autoscaled.
	route("GET /v1/services", users, srv.listServices)
	route("PUT /v1/services/{name}", users, srv.putService)
	route("GET /v1/services/{name}", users, srv.getService)
	route("DELETE /v1/services/{name}", users, srv.deleteService)
	route("PUT /v1/services/{name}/status", admin, srv.putServiceStatus)
	return srv.logged(mux)
}

// NewHTTPServer wraps the handler with the timeouts a public server needs.
func (srv *Server) NewHTTPServer(addr string) *http.Server {
	return &http.Server{Addr: addr, Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: 30 * time.Second, WriteTimeout: 0 /* long polls and SSE */, IdleTimeout: 120 * time.Second,
		MaxHeaderBytes: 64 << 10}
}

// CreateToken makes a token and stores its hash; the secret is returned
// once.
func (srv *Server) CreateToken(ctx context.Context, role api.Role, tenant string) (api.Token, error) {
	return srv.CreateTokenFor(ctx, role, tenant, "")
}

// CreateTokenFor is CreateToken with an agent token bound to node from
// the start (node "" for other roles, or an agent bound at its first
// registration).
func (srv *Server) CreateTokenFor(ctx context.Context, role api.Role, tenant, node string) (api.Token, error) {
	secret, err := randomHex(24)
	if err != nil {
		return api.Token{}, err
	}
	id, err := randomHex(6)
	if err != nil {
		return api.Token{}, err
	}
	t := api.Token{ID: "tok-" + id, Role: role, Tenant: tenant, Node: node, Created: srv.cfg.Clock()}
	secret = tokenPrefix(role) + secret
	err = srv.update(ctx, func(tx state.Tx) error {
		if role == api.RoleTenant {
			if _, err := tx.GetTenant(tenant); err != nil {
				return errField("tenant", "tenant %q does not exist", tenant)
			}
		}
		return tx.CreateToken(t, hashToken(secret))
	})
	if err != nil {
		return api.Token{}, err
	}
	t.Secret = secret
	return t, nil
}

// tokenPrefix says a secret's role at a glance: gs_admin_, gs_agent_,
// gs_t_ (tenant). Admin and agent tokens were both gs_a_ before; those
// keep working, since a token is found by the hash of its whole secret
// and the prefix means nothing to the server.
func tokenPrefix(role api.Role) string {
	switch role {
	case api.RoleAdmin:
		return "gs_admin_"
	case api.RoleAgent:
		return "gs_agent_"
	}
	return "gs_" + string(role[:1]) + "_"
}

// HasAdminToken reports whether any admin token exists.
func (srv *Server) HasAdminToken(ctx context.Context) (bool, error) {
	found := false
	err := srv.store.View(ctx, func(tx state.Tx) error {
		ts, err := tx.ListTokens()
		for _, t := range ts {
			found = found || t.Role == api.RoleAdmin
		}
		return err
	})
	return found, err
}

func hashToken(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("reading random bytes: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// ctxForScrape is the context metric collection reads the store with.
func (srv *Server) ctxForScrape() context.Context { return context.Background() }

// HashToken is how token secrets are stored (SHA-256).
func HashToken(secret string) []byte { return hashToken(secret) }
