package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/node"
	"github.com/gpuslice/gpuslice/internal/node/cdi"
	"github.com/gpuslice/gpuslice/internal/node/mps"
	"github.com/gpuslice/gpuslice/internal/node/watchdog"
)

// Config configures an Agent.
type Config struct {
	Name string
	// Host is the machine the agent runs on, reported at registration
	// (gpuslice run starts a claim's command only on its node's host).
	Host     string
	Client   *client.Client
	Device   gpu.Device
	Log      *slog.Logger
	Clock    func() time.Time
	Interval time.Duration // heartbeat interval (default 5s)

	// MPS runs one control daemon per MPS device (nil: none, e.g. on
	// simulated GPUs).
	MPS *mps.Manager
	// Owner tells which claim a process belongs to when several share a
	// device (real hosts: watchdog.EnvOwner("")).
	Owner watchdog.PIDOwner
	// Kill ends a process over its memory under policy kill (real hosts:
	// SIGKILL; simulated: the fake machine's StopProcess; nil: warn only).
	Kill func(pid int) error
	// MemoryGrace is how long a process may stay over its memory before
	// policy kill ends it (default 30s).
	MemoryGrace time.Duration
	// CDIDir receives a CDI spec per claim for container runtimes ("" =
	// none); MIGMinors is the nvidia-caps table ("" = the default path).
	CDIDir, MIGMinors string
	// Workloads, on simulated GPUs, stands in for the programs claims run:
	// each running claim gets a simulated process per device holding the
	// memory promised there (nil on real hosts). Without an Owner, the
	// simulated processes' owners are known.
	Workloads Workloads
}

// Agent keeps one node's GPUs in line with the server's allocations,
// through internal/node (the rules the DRA plugin follows too).
type Agent struct {
	cfg  Config
	last alloc.Node // inventory last reported
	node *node.Node
	// events and usage wait here until a heartbeat carries them.
	events []api.Event
	usage  []api.UsageSample
	// missing remembers devices already reported as drifted.
	missing map[string]bool
	// health holds events from the device layer's health watch until the
	// next step moves them into events.
	mu     sync.Mutex
	health []api.Event
	sim    *simulator // nil unless Config.Workloads
}

// New checks the config.
func New(cfg Config) (*Agent, error) {
	if cfg.Name == "" || cfg.Client == nil || cfg.Device == nil {
		return nil, errors.New("agent: name, client and device are required")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 5 * time.Second
	}
	if cfg.MemoryGrace <= 0 {
		cfg.MemoryGrace = 30 * time.Second
	}
	a := &Agent{cfg: cfg}
	owner := cfg.Owner
	if cfg.Workloads != nil {
		a.sim = newSimulator(cfg.Workloads)
		if owner == nil {
			owner = a.sim.Owner
		}
	}
	n, err := node.New(node.Config{Device: cfg.Device, Log: cfg.Log, Clock: cfg.Clock, MPS: cfg.MPS, CDIDir: cfg.CDIDir,
		Owner: owner, Kill: cfg.Kill, MemoryGrace: cfg.MemoryGrace})
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	a.node = n
	return a, nil
}

// Inventory turns what the device layer sees into the allocator's node
// (node.Inventory).
func Inventory(name string, gpus []gpu.GPU) (alloc.Node, error) { return node.Inventory(name, gpus) }

// Register reports the node to the server.
func (a *Agent) Register(ctx context.Context) error {
	gpus, err := a.cfg.Device.GPUs(ctx)
	if err != nil {
		return fmt.Errorf("reading GPUs: %w", err)
	}
	inv, err := Inventory(a.cfg.Name, gpus)
	if err != nil {
		return err
	}
	info := a.cfg.Device.Info()
	req := api.RegisterRequest{Inventory: inv, Simulated: info.Simulated, Driver: info.DriverVersion, Host: a.cfg.Host}
	if err := a.cfg.Client.Do(ctx, http.MethodPut, "/v1/nodes/"+a.cfg.Name, req, nil); err != nil {
		return fmt.Errorf("registering node %s: %w", a.cfg.Name, err)
	}
	a.last = inv
	return nil
}

// Run registers, then reconciles and heartbeats until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	for {
		if err := a.Register(ctx); err == nil {
			break
		} else if ctx.Err() != nil {
			return ctx.Err()
		} else {
			a.cfg.Log.Warn("registration failed; retrying", "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(a.cfg.Interval):
		}
	}
	a.watchHealth(ctx)
	tick := time.NewTicker(a.cfg.Interval)
	defer tick.Stop()
	for {
		if err := a.Step(ctx); err != nil && ctx.Err() == nil {
			a.cfg.Log.Warn("agent step failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// watchHealth subscribes to the device layer's health events (XIDs, lost
// GPUs). A fatal one marks the GPU unhealthy in the layer itself, so the
// next step's inventory carries it; every event also goes to the server.
func (a *Agent) watchHealth(ctx context.Context) {
	ch, err := a.cfg.Device.Events(ctx)
	if err != nil {
		a.cfg.Log.Warn("no health events from the device layer", "err", err)
		return
	}
	go func() {
		for ev := range ch {
			e := api.Event{Time: ev.Time, Kind: string(ev.Kind), Node: a.cfg.Name,
				Message: fmt.Sprintf("GPU %d (%s): %s", ev.Index, ev.UUID, ev.Message)}
			if ev.Fatal {
				e.Message += " — GPU marked unhealthy"
			}
			a.mu.Lock()
			a.health = append(a.health, e)
			a.mu.Unlock()
		}
	}()
}

// Step reconciles once and heartbeats (with the inventory when it changed).
func (a *Agent) Step(ctx context.Context) error {
	a.mu.Lock()
	a.events, a.health = append(a.events, a.health...), nil
	a.mu.Unlock()
	var claims []api.Claim
	if err := a.cfg.Client.Do(ctx, http.MethodGet, "/v1/nodes/"+a.cfg.Name+"/claims", nil, &claims); err != nil {
		return err
	}
	var errs []error
	if a.sim != nil {
		// Before the layout: a released claim's simulated process must not
		// keep its instance busy when the plan destroys it.
		errs = append(errs, a.sim.sync(ctx, a.cfg.Device, claims, a.cfg.Name)...)
	}
	rep, err := a.node.Realize(ctx, wantOf(claims, a.cfg.Name))
	if err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, rep.Errs()...)
	gpus, err := a.cfg.Device.GPUs(ctx)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	errs = append(errs, a.duties(ctx, claims, gpus)...)
	inv, err := Inventory(a.cfg.Name, gpus)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	hb := api.HeartbeatRequest{Events: a.events, Usage: a.usage}
	if !reflect.DeepEqual(inv, a.last) {
		hb.Inventory = &inv
	}
	if err := a.cfg.Client.Do(ctx, http.MethodPost, "/v1/nodes/"+a.cfg.Name+"/heartbeat", hb, nil); err != nil {
		var ce *client.Error
		if errors.As(err, &ce) && ce.Status == http.StatusNotFound {
			return a.Register(ctx) // the server forgot us: register again
		}
		return errors.Join(append(errs, err)...)
	}
	a.last, a.events, a.usage = inv, nil, nil
	return errors.Join(errs...)
}

// duties runs the per-step duties beyond the GPUs' layout, through the
// node side: MPS daemons, the memory watchdog (usage and enforcement) and
// CDI specs.
func (a *Agent) duties(ctx context.Context, claims []api.Claim, gpus []gpu.GPU) []error {
	var errs []error
	now := a.cfg.Clock()
	if a.node.RunsDaemons() {
		want, _ := mps.Resolve(mps.WantFromClaims(claims, a.cfg.Name), gpus)
		rep, err := a.node.Daemons(ctx, want)
		if err != nil {
			errs = append(errs, err)
		}
		a.events = append(a.events, rep.Events(claims, a.cfg.Name, now)...)
	}
	a.events = append(a.events, a.drift(claims, gpus, now)...)
	res := a.node.Watch(ctx, claims, a.cfg.Name)
	errs = append(errs, res.Errors...)
	a.events = append(a.events, res.Events...)
	a.events = append(a.events, res.Enforced...)
	a.usage = mergeUsage(a.usage, res.Usage)
	if a.cfg.CDIDir != "" {
		host := cdi.Host{GPUs: gpus}
		if m, err := cdi.ReadMIGMinors(a.cfg.MIGMinors); err == nil {
			host.MIGMinors = m
		}
		if _, err := a.node.SyncSpecs(claims, a.cfg.Name, host); err != nil {
			errs = append(errs, err)
		}
	}
	if n := len(a.events); n > maxPendingEvents { // server away: keep the newest
		a.events = slices.Clone(a.events[n-maxPendingEvents:])
	}
	return errs
}

const maxPendingEvents = 1000

// drift reports (once each) devices that live claims on this node hold but
// the hardware no longer shows — an instance destroyed or a GPU gone
// behind gpuslice's back. The agent reports; it never "repairs" by
// destroying or recreating what a claim may be using.
func (a *Agent) drift(claims []api.Claim, gpus []gpu.GPU, now time.Time) []api.Event {
	present := map[string]bool{}
	for _, g := range gpus {
		present[g.UUID] = true
		for _, in := range g.Instances {
			present[in.UUID] = true
		}
	}
	if a.missing == nil {
		a.missing = map[string]bool{}
	}
	var out []api.Event
	seen := map[string]bool{}
	for _, c := range claims {
		if c.Allocation == nil {
			continue
		}
		for _, d := range c.Allocation.Devices {
			if d.Node != a.cfg.Name || alloc.IsPlanned(d.Device) {
				continue
			}
			seen[d.Device] = true
			if present[d.Device] || a.missing[d.Device] {
				continue
			}
			a.missing[d.Device] = true
			out = append(out, api.Event{Time: now, Kind: "drift", Claim: c.ID, Tenant: c.Tenant, Node: a.cfg.Name,
				Message: fmt.Sprintf("device %s of claim %s is not on the hardware any more (destroyed outside gpuslice?)", d.Device, c.ID)})
		}
	}
	for d := range a.missing {
		if present[d] || !seen[d] {
			delete(a.missing, d)
		}
	}
	return out
}

func mergeUsage(pending []api.UsageSample, add []watchdog.Usage) []api.UsageSample {
	for _, u := range add {
		i := slices.IndexFunc(pending, func(p api.UsageSample) bool { return p.Claim == u.Claim })
		if i < 0 {
			pending = append(pending, api.UsageSample(u))
			continue
		}
		pending[i].GPUSeconds += u.GPUSeconds
		pending[i].SMSeconds += u.SMSeconds
		pending[i].MemoryMiBSeconds += u.MemoryMiBSeconds
		pending[i].MemoryMiB = u.MemoryMiB // a gauge: the latest
	}
	return pending
}
