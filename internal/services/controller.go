package services

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/autoscale"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/client"
)

// Config configures a Controller. Zero values take the defaults noted.
type Config struct {
	// Client talks to the server with an admin token.
	Client *client.Client
	// Node is the serving node: replicas' claims are pinned to it, and
	// their processes run here.
	Node string
	// Prometheus evaluates the prometheus metric (default HTTPPrometheus).
	Prometheus Querier
	Log        *slog.Logger
	// Clock defaults to time.Now.
	Clock func() time.Time
	// Interval is how often services are measured and decided (default
	// 15s); a request waiting at a stopped service's proxy is acted on
	// at once.
	Interval time.Duration
	// Minute is how long one of the policy's minutes lasts (default
	// time.Minute; shorter for tests and demos).
	Minute time.Duration
	// Host is the address proxies listen on (default 127.0.0.1).
	Host string
	// Output receives the replicas' stdout and stderr (default discard).
	Output io.Writer
	// Users hands out who each replica runs as (default SameUser: the
	// controller's own user; serve as root passes a UIDRange or a
	// NamedUser, never root). See process.go.
	Users Users
	// WorkDir holds each replica's own working directory (default
	// $TMPDIR/gpuslice-replicas).
	WorkDir string
	// RecordDir keeps a record of each running replica (pid, start time,
	// uid), so the next run after a crash ends what this one left; ""
	// keeps none.
	RecordDir string
	// LeaseSeconds is the lease of each replica's claim, renewed while
	// the replica lives (default 30): a controller that dies leaves
	// claims the server releases by itself.
	LeaseSeconds int
	// StopGrace is how long a replica has between SIGTERM and SIGKILL
	// (default 10s).
	StopGrace time.Duration
}

// Controller runs every service's replicas on this node.
type Controller struct {
	cfg  Config
	wake chan struct{}
	// snap is this step's read of the node's claims and heartbeat, made
	// when a service first needs it (the controller's goroutine only).
	snap *usageSnapshot

	mu   sync.Mutex
	svcs map[string]*svcRun
	seq  int
}

type svcRun struct {
	name, tenant string
	spec         api.ServiceSpec
	policy       autoscale.Policy
	metric       autoscale.Metric
	cur          autoscale.Current
	window       []autoscale.Sample
	decisions    []autoscale.Decision
	lastSample   time.Time
	replicas     []*replica
	proxy        *Proxy
	hs           *http.Server
	message      string
	sent         string // the last status reported, as JSON
}

type replicaState int

const (
	starting replicaState = iota
	ready
	stopping
)

type replica struct {
	id      string
	mu      sync.Mutex
	state   replicaState
	claim   string
	devices []string
	err     string
	stop    context.CancelFunc
	done    chan struct{}
	// reading is its claim's usage totals at the last sample (the
	// controller's goroutine only).
	reading usageReading
}

func (r *replica) get() (replicaState, string, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state, r.claim, r.devices
}

// New makes a controller.
func New(cfg Config) (*Controller, error) {
	if cfg.Client == nil || cfg.Node == "" {
		return nil, errors.New("services: a controller needs a client and a node")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 15 * time.Second
	}
	if cfg.Minute <= 0 {
		cfg.Minute = time.Minute
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.Prometheus == nil {
		cfg.Prometheus = HTTPPrometheus{}
	}
	if cfg.Output == nil {
		cfg.Output = io.Discard
	}
	if cfg.Users == nil {
		cfg.Users = SameUser{}
	}
	if cfg.WorkDir == "" {
		cfg.WorkDir = filepath.Join(os.TempDir(), "gpuslice-replicas")
	}
	if cfg.LeaseSeconds <= 0 {
		cfg.LeaseSeconds = 30
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = 10 * time.Second
	}
	if cfg.RecordDir != "" {
		if err := os.MkdirAll(cfg.RecordDir, 0o700); err != nil {
			return nil, fmt.Errorf("services: replica records: %w", err)
		}
	}
	return &Controller{cfg: cfg, wake: make(chan struct{}, 1), svcs: map[string]*svcRun{}}, nil
}

// Poke asks for a step now.
func (c *Controller) Poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Run ends what a previous run left (Recover), then steps every
// Interval, or at once when a request waits at a stopped service, until
// ctx ends; then it stops every replica and proxy before it returns.
func (c *Controller) Run(ctx context.Context) error {
	if err := c.Recover(ctx); err != nil && ctx.Err() == nil {
		c.cfg.Log.Warn("services: ending the previous run's replicas", "err", err)
	}
	tick := time.NewTicker(c.cfg.Interval / 3)
	defer tick.Stop()
	for {
		if err := c.Step(ctx); err != nil && ctx.Err() == nil {
			c.cfg.Log.Warn("services step", "err", err)
		}
		select {
		case <-ctx.Done():
			c.shutdown()
			return ctx.Err()
		case <-tick.C:
		case <-c.wake:
		}
	}
}

// shutdown stops every replica (draining the proxies first) and closes
// the proxies.
func (c *Controller) shutdown() {
	c.mu.Lock()
	runs := make([]*svcRun, 0, len(c.svcs))
	for _, s := range c.svcs {
		runs = append(runs, s)
	}
	c.svcs = map[string]*svcRun{}
	c.mu.Unlock()
	for _, s := range runs {
		c.closeRun(s)
	}
}

func (c *Controller) closeRun(s *svcRun) {
	for _, r := range s.replicas {
		r.stop()
	}
	for _, r := range s.replicas {
		<-r.done
	}
	if s.hs != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.hs.Shutdown(ctx)
		cancel()
	}
}

// Step reads the services, measures and decides each, and starts or stops
// replicas to match.
func (c *Controller) Step(ctx context.Context) error {
	svcs, err := c.cfg.Client.Services(ctx)
	if err != nil {
		return err
	}
	c.snap = nil
	now := c.cfg.Clock()
	c.mu.Lock()
	seen := map[string]bool{}
	var gone []*svcRun
	var work []*svcRun
	for _, s := range svcs {
		if s.Disabled != "" {
			continue // stopped like a deleted one until it is allowed again
		}
		seen[s.Name] = true
		run := c.svcs[s.Name]
		if run == nil {
			run = c.newRun(s, now)
			c.svcs[s.Name] = run
		}
		run.spec, run.tenant = s.Spec, s.Tenant
		run.policy = autoscale.FromCapabilities(s.Spec.Autoscaling).WithDefaults()
		run.policy.UpAfter = scaleMinutes(s.Spec.Autoscaling.OverUtilizedMinutesBeforeScalingUp, autoscale.DefaultUpAfter, c.cfg.Minute)
		run.policy.DownAfter = scaleMinutes(s.Spec.Autoscaling.IdleMinutesBeforeScalingDown, autoscale.DefaultDownAfter, c.cfg.Minute)
		run.metric, _ = autoscale.ParseMetric(s.Spec.Metric)
		work = append(work, run)
	}
	for name, run := range c.svcs {
		if !seen[name] {
			gone = append(gone, run)
			delete(c.svcs, name)
		}
	}
	c.mu.Unlock()
	for _, run := range gone {
		c.cfg.Log.Info("service deleted: stopping its replicas", "service", run.name)
		go c.closeRun(run)
	}
	var errs []error
	for _, run := range work {
		if err := c.stepOne(ctx, run, now); err != nil {
			errs = append(errs, fmt.Errorf("service %s: %w", run.name, err))
		}
	}
	return errors.Join(errs...)
}

// scaleMinutes turns a policy's minutes into time at the controller's
// minute (0 = the default period).
func scaleMinutes(m int, def, minute time.Duration) time.Duration {
	if m == 0 {
		return time.Duration(float64(def) / float64(time.Minute) * float64(minute))
	}
	return time.Duration(m) * minute
}

func (c *Controller) newRun(s api.Service, now time.Time) *svcRun {
	run := &svcRun{name: s.Name, tenant: s.Tenant, cur: autoscale.Current{Replicas: s.Spec.Autoscaling.MinReplicas, Since: now}}
	// After a restart a service resumes its decided count (Decide clamps
	// it into the policy); a stopped one stays stopped until a request.
	if len(s.Status.Decisions) > 0 {
		run.cur.Replicas = s.Status.Replicas
	}
	run.decisions = s.Status.Decisions
	if p := s.Spec.Autoscaling.TargetPort; p > 0 {
		timeout := time.Duration(max(s.Spec.WakeTimeoutSeconds, 0)) * time.Second
		if timeout == 0 {
			timeout = 30 * time.Second
		}
		run.proxy = NewProxy(s.Name, timeout, c.Poke)
		addr := net.JoinHostPort(c.cfg.Host, strconv.Itoa(p))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			run.message = fmt.Sprintf("proxy on %s: %v", addr, err)
			c.cfg.Log.Warn("service proxy", "service", s.Name, "err", err)
		} else {
			run.hs = &http.Server{Handler: run.proxy, ReadHeaderTimeout: 10 * time.Second}
			go func() { _ = run.hs.Serve(ln) }()
			c.cfg.Log.Info("service proxy listening", "service", s.Name, "addr", ln.Addr().String())
		}
	}
	return run
}

// sample measures a service now, and says which metric the sample's
// value is: the service's own, or requests at its proxy where the gpu
// metric cannot be measured on its devices (A100 MIG instances).
func (c *Controller) sample(ctx context.Context, run *svcRun, now time.Time) (autoscale.Sample, autoscale.Metric) {
	s := autoscale.Sample{Time: now, Value: math.NaN()}
	if run.proxy != nil {
		s.Requests, s.InFlight, s.Waiting = run.proxy.Stats()
	}
	var readyReps []*replica
	for _, r := range run.replicas {
		if st, _, _ := r.get(); st == ready {
			readyReps = append(readyReps, r)
		}
	}
	if len(readyReps) == 0 {
		s.Starting = run.cur.Replicas > 0
		return s, run.metric
	}
	requests := func() float64 {
		target := run.spec.TargetConcurrency
		if target <= 0 {
			target = 10
		}
		return float64(s.InFlight) * 100 / float64(len(readyReps)*target)
	}
	switch run.metric {
	case autoscale.MetricGPU, autoscale.MetricMemory:
		snap, err := c.usage(ctx)
		if err != nil {
			run.message = "measuring replicas: " + err.Error()
			return s, run.metric
		}
		sum, n, unsampled := 0.0, 0, ""
		for _, r := range readyReps {
			_, id, _ := r.get()
			cl, ok := snap.claims[id]
			cur := usageReading{at: now, ok: ok}
			if ok && cl.Used != nil {
				cur.used = *cl.Used
			}
			var devs []alloc.Assigned
			if ok && cl.Allocation != nil {
				devs = cl.Allocation.Devices
			}
			compute, mem, why := deviceLimits(devs, snap.modelOf)
			u := usageBetween(r.reading, cur, snap.beat, compute, mem, why)
			r.reading = cur
			v := u.SMPercent
			if run.metric == autoscale.MetricMemory {
				v = u.MemPercent
			} else if u.Unsampled != "" && unsampled == "" {
				unsampled = u.Unsampled
			}
			if !math.IsNaN(v) {
				sum += v
				n++
			}
		}
		if unsampled != "" {
			// Never read as idle: no sample is not zero.
			if run.proxy != nil {
				run.message = "metric gpu: " + unsampled + "; scaling on requests at the proxy instead (set the metric to requests, or prometheus with DCGM's per-instance metrics, to choose)"
				s.Value = requests()
				return s, autoscale.MetricRequests
			}
			run.message = "metric gpu: " + unsampled + "; the service cannot scale on it: choose requests (with a targetPort) or prometheus with DCGM's per-instance metrics"
			return s, run.metric
		}
		if n == len(readyReps) {
			s.Value = sum / float64(n)
		}
	case autoscale.MetricRequests:
		s.Value = requests()
	case autoscale.MetricPrometheus:
		v, err := c.cfg.Prometheus.Query(ctx, run.spec.PrometheusURL, run.spec.PrometheusQuery)
		if err != nil {
			run.message = "prometheus: " + err.Error()
		} else {
			s.Value = v
		}
	}
	return s, run.metric
}

// usageSnapshot is one read of the node: its running claims (with their
// usage totals) and last heartbeat, and its GPUs' models.
type usageSnapshot struct {
	claims map[string]api.Claim
	beat   time.Time
	models map[string]*catalog.GPU // GPU uuid -> model
}

func (u *usageSnapshot) modelOf(gpu string) *catalog.GPU { return u.models[gpu] }

// usage reads the node once per step.
func (c *Controller) usage(ctx context.Context) (*usageSnapshot, error) {
	if c.snap != nil {
		return c.snap, nil
	}
	cl := c.cfg.Client
	claims, err := client.ListAll[api.Claim](ctx, cl, "/v1/claims?node="+url.QueryEscape(c.cfg.Node)+"&state=running")
	if err != nil {
		return nil, err
	}
	var node api.Node
	if err := cl.Do(ctx, http.MethodGet, "/v1/nodes/"+url.PathEscape(c.cfg.Node), nil, &node); err != nil {
		return nil, err
	}
	snap := &usageSnapshot{claims: map[string]api.Claim{}, beat: node.LastHeartbeat, models: map[string]*catalog.GPU{}}
	for _, cl := range claims {
		snap.claims[cl.ID] = cl
	}
	cat := catalog.Default()
	for _, g := range node.Inventory.GPUs {
		if m, err := cat.GPU(g.Model); err == nil {
			snap.models[g.UUID] = m
		}
	}
	c.snap = snap
	return snap, nil
}

func (c *Controller) stepOne(ctx context.Context, run *svcRun, now time.Time) error {
	// Replicas whose goroutine ended (the process exited, or the claim
	// could not be had) are dropped; the count below starts new ones.
	live := run.replicas[:0]
	for _, r := range run.replicas {
		select {
		case <-r.done:
			r.mu.Lock()
			if r.err != "" {
				run.message = r.err
			}
			r.mu.Unlock()
		default:
			live = append(live, r)
		}
	}
	run.replicas = live
	waitingNow := false
	if run.proxy != nil {
		_, _, w := run.proxy.Peek()
		waitingNow = w > 0 && run.cur.Replicas == 0
	}
	if now.Sub(run.lastSample) >= c.cfg.Interval || waitingNow {
		smp, metric := c.sample(ctx, run, now)
		run.window = autoscale.Trim(run.policy, append(run.window, smp), now)
		run.lastSample = now
		d := autoscale.Decide(run.policy, metric, run.cur, run.window, now)
		if d.Changed() {
			c.cfg.Log.Info("service scale", "service", run.name, "decision", d.String())
			run.decisions = append(run.decisions, d)
			if len(run.decisions) > api.MaxDecisions {
				run.decisions = run.decisions[len(run.decisions)-api.MaxDecisions:]
			}
			run.cur = autoscale.Current{Replicas: d.To, Since: now}
		}
	}
	// Start or stop replicas to match the decision: the ones not yet
	// ready stop first, then the newest.
	var active []*replica
	for _, r := range run.replicas {
		if st, _, _ := r.get(); st != stopping {
			active = append(active, r)
		}
	}
	for n := len(active); n < run.cur.Replicas; n++ {
		run.replicas = append(run.replicas, c.startReplica(run))
	}
	if extra := len(active) - run.cur.Replicas; extra > 0 {
		slices.SortStableFunc(active, func(a, b *replica) int {
			sa, _, _ := a.get()
			sb, _, _ := b.get()
			return int(sa) - int(sb) // starting (0) before ready (1)
		})
		for _, r := range active[:extra] {
			r.mu.Lock()
			r.state = stopping
			r.mu.Unlock()
			r.stop()
		}
	}
	return c.report(ctx, run)
}

func (c *Controller) report(ctx context.Context, run *svcRun) error {
	st := api.ServiceStatus{Replicas: run.cur.Replicas, Since: run.cur.Since, Decisions: run.decisions, Message: run.message}
	for _, r := range run.replicas {
		s, claim, _ := r.get()
		if claim != "" {
			st.Claims = append(st.Claims, claim)
		}
		if s == ready {
			st.Ready++
		}
	}
	b, _ := json.Marshal(st)
	if string(b) == run.sent {
		return nil
	}
	if err := c.cfg.Client.PutServiceStatus(ctx, run.name, st); err != nil {
		var ce *client.Error
		if errors.As(err, &ce) && ce.Status == http.StatusNotFound {
			return nil // deleted meanwhile: the next step stops it
		}
		return err
	}
	run.sent = string(b)
	return nil
}

// startReplica begins a replica's life in its own goroutine: claim, wait
// for devices, start the command, wait until it listens, join the proxy;
// on stop: leave the proxy, let requests finish, stop the command,
// release the claim.
func (c *Controller) startReplica(run *svcRun) *replica {
	c.mu.Lock()
	c.seq++
	id := fmt.Sprintf("%s-%d", run.name, c.seq)
	c.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{id: id, stop: cancel, done: make(chan struct{})}
	spec, tenant, proxy, svc := run.spec, run.tenant, run.proxy, run.name
	go func() {
		defer close(r.done)
		defer cancel()
		if err := c.runReplica(ctx, r, svc, spec, tenant, proxy); err != nil && ctx.Err() == nil {
			r.mu.Lock()
			r.err = fmt.Sprintf("replica %s: %v", id, err)
			r.mu.Unlock()
			c.cfg.Log.Warn("replica ended", "service", run.name, "replica", id, "err", err)
			c.Poke()
		}
	}()
	return r
}

func (c *Controller) runReplica(outer context.Context, r *replica, svc string, spec api.ServiceSpec, tenant string, proxy *Proxy) error {
	cl := c.cfg.Client
	cs := spec.Claim
	cs.Node, cs.Service, cs.LeaseSeconds = c.cfg.Node, svc, c.cfg.LeaseSeconds
	claim, err := cl.CreateClaim(outer, tenant, cs)
	if err != nil {
		return fmt.Errorf("claiming: %w", err)
	}
	r.mu.Lock()
	r.claim = claim.ID
	r.mu.Unlock()
	defer func() {
		rc, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = cl.Release(rc, claim.ID)
	}()
	// The lease is held for the replica's whole life; when the server
	// says the claim is over (released by an admin, or its lease ran out
	// while this controller could not reach it), the replica stops.
	ctx, lostClaim := context.WithCancelCause(outer)
	defer lostClaim(nil)
	lost := cl.HoldLease(ctx, claim.ID, client.LeaseInterval(c.cfg.LeaseSeconds))
	go func() {
		if err, ok := <-lost; ok {
			lostClaim(fmt.Errorf("claim %s is over: %w", claim.ID, err))
		}
	}()
	ended := func() error {
		if outer.Err() != nil {
			return outer.Err()
		}
		return context.Cause(ctx)
	}
	for claim.State == api.Pending {
		next, err := cl.Claim(ctx, claim.ID, api.Pending, 20*time.Second)
		if err != nil {
			if ctx.Err() != nil {
				return ended()
			}
			return err
		}
		claim = next
	}
	for claim.State == api.Allocated && claim.Planned() {
		select {
		case <-ctx.Done():
			return ended()
		case <-time.After(50 * time.Millisecond):
		}
		if claim, err = cl.Claim(ctx, claim.ID, "", 0); err != nil {
			if ctx.Err() != nil {
				return ended()
			}
			return err
		}
	}
	if claim.State != api.Allocated {
		return fmt.Errorf("claim %s is %s: %s", claim.ID, claim.State, claim.Reason)
	}
	if err := alloc.CheckProcessEnv(claim.Allocation.Env); err != nil {
		return fmt.Errorf("claim %s: %w", claim.ID, err)
	}
	var devs []string
	for _, d := range claim.Allocation.Devices {
		devs = append(devs, d.Device)
	}
	port := 0
	if proxy != nil {
		if port, err = freePort(c.cfg.Host); err != nil {
			return err
		}
	}
	cred, giveBack, err := c.cfg.Users.Acquire()
	if err != nil {
		return err
	}
	defer giveBack()
	dir, err := workDir(c.cfg.WorkDir, r.id, cred)
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := startProc(procSpec{argv: spec.Command, env: replicaEnv(spec, claim, dir, svc, r.id, port), dir: dir, cred: cred, out: c.cfg.Output})
	if err != nil {
		return fmt.Errorf("starting %s: %w", spec.Command[0], err)
	}
	rec := record{Replica: r.id, Service: svc, Claim: claim.ID, PID: p.pid, Start: p.start, UID: uint32(os.Geteuid())}
	if cred != nil {
		rec.UID = cred.Uid
	}
	recs := records{dir: c.cfg.RecordDir}
	if err := recs.put(rec); err != nil {
		// Unrecorded, a crash could leave its children behind: it never
		// runs (the gate closes unread when it is stopped).
		_ = p.stop(c.cfg.StopGrace)
		return fmt.Errorf("recording replica %s: %w", r.id, err)
	}
	defer recs.remove(r.id)
	if err := p.release(); err != nil {
		_ = p.stop(c.cfg.StopGrace)
		recs.remove(r.id)
		return fmt.Errorf("starting %s: %w", spec.Command[0], err)
	}
	stopCmd := func() { _ = p.stop(c.cfg.StopGrace) }
	_ = cl.Do(ctx, http.MethodPost, "/v1/claims/"+claim.ID+"/running", nil, nil)
	if proxy != nil {
		addr := net.JoinHostPort(c.cfg.Host, strconv.Itoa(port))
		for {
			conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
			if err == nil {
				conn.Close()
				break
			}
			select {
			case err := <-p.exited:
				p.killGroup()
				return fmt.Errorf("%s exited before listening on %s: %v", spec.Command[0], addr, err)
			case <-ctx.Done():
				stopCmd()
				return ended()
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	r.mu.Lock()
	if r.state == starting {
		r.state = ready
	}
	r.devices = devs
	r.mu.Unlock()
	if proxy != nil {
		proxy.Add(r.id, &url.URL{Scheme: "http", Host: net.JoinHostPort(c.cfg.Host, strconv.Itoa(port))})
	}
	c.Poke() // report it ready now

	select {
	case err := <-p.exited:
		p.killGroup()
		if proxy != nil {
			<-proxy.Remove(r.id)
		}
		return fmt.Errorf("%s exited: %v", spec.Command[0], err)
	case <-ctx.Done():
		// Out of rotation first, and its requests finish, then the
		// command stops: scaling down loses no request. A claim that is
		// over stops it at once.
		if proxy != nil && outer.Err() != nil {
			select {
			case <-proxy.Remove(r.id):
			case <-time.After(30 * time.Second):
			}
		} else if proxy != nil {
			proxy.Remove(r.id)
		}
		stopCmd()
		if outer.Err() != nil {
			return nil
		}
		return ended()
	}
}

// replicaEnv is a replica's whole environment: nothing of the
// controller's is inherited. The claim's variables (its devices) and
// PORT/GPUSLICE_* come last, so they win (ValidateServiceSpec refuses
// those names in a spec anyway).
func replicaEnv(spec api.ServiceSpec, claim api.Claim, dir, svc, replica string, port int) []string {
	env := []string{"PATH=" + safePATH, "HOME=" + dir, "TMPDIR=" + dir}
	for _, k := range slices.Sorted(maps.Keys(spec.Env)) {
		env = append(env, k+"="+spec.Env[k])
	}
	for _, k := range slices.Sorted(maps.Keys(claim.Allocation.Env)) {
		env = append(env, k+"="+claim.Allocation.Env[k])
	}
	return append(env, "PORT="+strconv.Itoa(port), "GPUSLICE_CLAIM="+claim.ID, "GPUSLICE_REPLICA="+replica, "GPUSLICE_SERVICE="+svc)
}

// Recover ends what a previous run of this controller left: every
// process of the replicas it recorded (process.go), then the claims of
// every service replica on this node (and those listed in the services'
// stored status, from before claims named their service). No replica is
// running yet when it is called.
func (c *Controller) Recover(ctx context.Context) error {
	cl := c.cfg.Client
	recs, rerr := records{dir: c.cfg.RecordDir}.reap(c.cfg.StopGrace)
	ids := map[string]bool{}
	for _, r := range recs {
		ids[r.Claim] = true
		c.cfg.Log.Info("ended a replica of the previous run", "replica", r.Replica, "pid", r.PID, "claim", r.Claim)
	}
	live, err := client.ListAll[api.Claim](ctx, cl, "/v1/claims?node="+url.QueryEscape(c.cfg.Node)+"&state=pending&state=allocated&state=running")
	if err != nil {
		return errors.Join(rerr, err)
	}
	for _, cl := range live {
		if cl.Spec.Service != "" && cl.Spec.Node == c.cfg.Node {
			ids[cl.ID] = true
		}
	}
	if svcs, err := cl.Services(ctx); err == nil {
		for _, s := range svcs {
			for _, id := range s.Status.Claims {
				ids[id] = true
			}
		}
	}
	var errs []error
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		if _, err := cl.Release(ctx, id); err != nil && !client.ClaimGone(err) {
			errs = append(errs, fmt.Errorf("releasing %s: %w", id, err))
		}
	}
	return errors.Join(append([]error{rerr}, errs...)...)
}

// freePort asks the kernel for a free port on host.
func freePort(host string) (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
