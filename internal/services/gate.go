package services

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/gpuslice/gpuslice/internal/autoscale"
)

// Scaler is the replica count of a workload another system runs (on
// Kubernetes: a Deployment's scale subresource).
type Scaler interface {
	Replicas(ctx context.Context) (int, error)
	Scale(ctx context.Context, replicas int) error
}

// GateConfig configures a Gate. Zero values take the defaults noted.
type GateConfig struct {
	// Name names the service in messages.
	Name   string
	Scaler Scaler
	// Policy: MinReplicas (what a wake brings up, at least 1), DownAfter
	// (the idle period before an auto-stop) and AutoStop.
	Policy autoscale.Policy
	// WakeTimeout bounds how long a request waits for a replica (default
	// 30s); then it gets a 503.
	WakeTimeout time.Duration
	// Interval is how often the requests are sampled and the replica
	// count read (default 5s); a waiting request is acted on at once.
	Interval time.Duration
	Clock    func() time.Time
	Log      *slog.Logger
}

// Gate is the scale-to-zero half of a service whose replicas run
// elsewhere: the same Proxy as in serve in front of them, waking the
// workload (Scaler) when a request finds no ready replica and stopping it
// once idle (autoscale.DecideZero). Its caller adds and removes the ready
// replicas (Proxy().Add/Remove) as it learns of them.
type Gate struct {
	cfg   GateConfig
	proxy *Proxy
	wake  chan struct{}

	mu        sync.Mutex
	cur       autoscale.Current
	known     bool
	window    []autoscale.Sample
	decisions []autoscale.Decision
}

// NewGate makes a gate and its proxy.
func NewGate(cfg GateConfig) (*Gate, error) {
	if cfg.Scaler == nil {
		return nil, errors.New("services: a gate needs a scaler")
	}
	if cfg.WakeTimeout <= 0 {
		cfg.WakeTimeout = 30 * time.Second
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 5 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	g := &Gate{cfg: cfg, wake: make(chan struct{}, 1)}
	g.proxy = NewProxy(cfg.Name, cfg.WakeTimeout, g.Poke)
	return g, nil
}

// Proxy is the gate's reverse proxy (an http.Handler).
func (g *Gate) Proxy() *Proxy { return g.proxy }

// Poke asks for a step now.
func (g *Gate) Poke() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// Decisions returns the changes made so far (the last api.MaxDecisions).
func (g *Gate) Decisions() []autoscale.Decision {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]autoscale.Decision(nil), g.decisions...)
}

// Run steps every Interval, or at once when a request waits, until ctx
// ends. A failed step is logged and retried at the next.
func (g *Gate) Run(ctx context.Context) error {
	tick := time.NewTicker(g.cfg.Interval)
	defer tick.Stop()
	for {
		if _, err := g.Step(ctx); err != nil && ctx.Err() == nil {
			g.cfg.Log.Warn("scale-to-zero step", "service", g.cfg.Name, "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		case <-g.wake:
		}
	}
}

// Step reads the replica count, samples the proxy, decides and scales.
// A sample is taken at most once per Interval, except when a request
// waits at zero (a wake is never delayed).
func (g *Gate) Step(ctx context.Context) (autoscale.Decision, error) {
	n, err := g.cfg.Scaler.Replicas(ctx)
	if err != nil {
		return autoscale.Decision{}, err
	}
	now := g.cfg.Clock()
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case !g.known:
		g.cur, g.known = autoscale.Current{Replicas: n}, true // no sample yet
	case n != g.cur.Replicas:
		// Changed by someone else (an HPA, KEDA, a person): samples
		// before now do not count toward the next change.
		g.cur = autoscale.Current{Replicas: n, Since: now}
	}
	_, _, waiting := g.proxy.Peek()
	last := time.Time{}
	if k := len(g.window); k > 0 {
		last = g.window[k-1].Time
	}
	if now.Sub(last) < g.cfg.Interval && !(waiting > 0 && n == 0) {
		return autoscale.Decision{Time: now, Action: autoscale.Hold, From: n, To: n, Reason: "sampled less than an interval ago"}, nil
	}
	s := autoscale.Sample{Time: now, Value: math.NaN()}
	s.Requests, s.InFlight, s.Waiting = g.proxy.Stats()
	g.window = autoscale.Trim(g.cfg.Policy, append(g.window, s), now)
	d := autoscale.DecideZero(g.cfg.Policy, g.cur, g.window, now)
	if !d.Changed() {
		return d, nil
	}
	if err := g.cfg.Scaler.Scale(ctx, d.To); err != nil {
		return d, err
	}
	g.cfg.Log.Info("service scale", "service", g.cfg.Name, "decision", d.String())
	g.cur = autoscale.Current{Replicas: d.To, Since: now}
	g.decisions = append(g.decisions, d)
	if len(g.decisions) > 100 {
		g.decisions = g.decisions[len(g.decisions)-100:]
	}
	return d, nil
}
