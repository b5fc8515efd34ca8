package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/mig"
	"github.com/gpuslice/gpuslice/internal/node/cdi"
	"github.com/gpuslice/gpuslice/internal/node/mps"
	"github.com/gpuslice/gpuslice/internal/node/watchdog"
)

// Config configures a Node. Device is required.
type Config struct {
	Device  gpu.Device
	Catalog *catalog.Catalog // default catalog.Default()
	Log     *slog.Logger
	Clock   func() time.Time
	// MPS runs one control daemon per MPS device (nil: none; Daemons
	// then makes the pipe and log directories only, as on simulated
	// GPUs).
	MPS *mps.Manager
	// CDIDir receives the CDI specs ("" writes none).
	CDIDir string
	// Memory watchdog: Owner tells which claim a process on a shared
	// device belongs to (nil: none known; real hosts:
	// watchdog.EnvOwner("")); Kill ends one under memoryPolicy kill
	// (nil: warn only) after MemoryGrace (default 30s).
	Owner       watchdog.PIDOwner
	Kill        func(pid int) error
	MemoryGrace time.Duration
}

// Node makes one node's GPUs match what was decided: MIG mode and
// instances at the decided placements, whole GPUs' compute modes and
// time slices (Realize: Decide, then Run), MPS daemons (Daemons), CDI
// specs (WriteSpec, RemoveSpec, SyncSpecs) and the memory watchdog
// (Watch). The standalone agent and the DRA kubelet plugin both drive
// their GPUs through it. Its methods are safe for concurrent use;
// Realize calls are serialized.
type Node struct {
	cfg Config

	mu     sync.Mutex
	levels map[string]gpu.TimeSlice // time slices as set, by GPU uuid
	geos   map[string]*mig.Geometry // by model; nil: none

	wmu   sync.Mutex
	watch *watchdog.Watcher
	enf   *watchdog.Enforcer
}

// New checks the config and fills in its defaults.
func New(cfg Config) (*Node, error) {
	if cfg.Device == nil {
		return nil, errors.New("node: Config.Device is required")
	}
	if cfg.Catalog == nil {
		cfg.Catalog = catalog.Default()
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.MemoryGrace <= 0 {
		cfg.MemoryGrace = 30 * time.Second
	}
	n := &Node{cfg: cfg, levels: map[string]gpu.TimeSlice{}, geos: map[string]*mig.Geometry{}, enf: watchdog.NewEnforcer(0)}
	ignore := func(int) bool { return false }
	if cfg.MPS != nil {
		ignore = func(pid int) bool { _, ok := cfg.MPS.ServerPIDs()[pid]; return ok }
	}
	n.watch = watchdog.New(watchdog.Config{Clock: cfg.Clock, Owner: cfg.Owner, Ignore: ignore})
	return n, nil
}

// Device is the device layer the node drives.
func (n *Node) Device() gpu.Device { return n.cfg.Device }

// geometry is a model's MIG geometry (nil when it has none). n.mu is
// held.
func (n *Node) geometry(model string) *mig.Geometry {
	if g, ok := n.geos[model]; ok {
		return g
	}
	var geo *mig.Geometry
	if m, err := n.cfg.Catalog.GPU(model); err == nil && m.MIG != nil {
		geo, _ = mig.New(m)
	}
	n.geos[model] = geo
	return geo
}

// Realize reads the GPUs, decides what to change for want (Decide) and
// changes it (Run). The report tells each hold's fate (Report.Err,
// Report.Instance; Report.Errs lists every refusal and failed step); the
// error is set only when the GPUs could not be read (nothing was done).
func (n *Node) Realize(ctx context.Context, want Want) (Report, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	gpus, err := n.cfg.Device.GPUs(ctx)
	if err != nil {
		return Report{}, fmt.Errorf("reading GPUs: %w", err)
	}
	plan := Decide(want, Observed{GPUs: gpus, TimeSlice: n.levels}, n.geometry)
	rep := Report{Plan: plan, Results: Run(ctx, n.cfg.Device, plan.Steps)}
	for _, r := range rep.Results {
		n.log(want, r)
		switch {
		case r.Kind != SetTimeSlice:
		case r.Outcome == Done:
			n.levels[r.GPU] = r.Level
		default:
			delete(n.levels, r.GPU) // unknown now
		}
	}
	return rep, nil
}

func (n *Node) log(want Want, r Result) {
	attrs := []any{"gpu", r.Index, "step", r.Step.String(), "why", r.Why}
	for _, h := range r.Holds {
		attrs = append(attrs, "claim", want.Holds[h].name())
		break
	}
	switch r.Outcome {
	case Done:
		if r.Kind == CreateInstance {
			attrs = append(attrs, "uuid", r.Created.UUID)
		}
		n.cfg.Log.Info("GPU changed", attrs...)
	case Gone:
	case Skipped:
		n.cfg.Log.Debug("GPU change skipped", append(attrs, "err", r.Err)...)
	default:
		n.cfg.Log.Warn("GPU change failed", append(attrs, "outcome", string(r.Outcome), "err", r.Err)...)
	}
}

// Daemons makes the MPS daemons match want: started or adopted for every
// wanted device, stopped where no claim uses one any more (mps.Manager).
// Without a manager it only makes each daemon's pipe and log
// directories (simulated GPUs: containers mount the pipe directory).
func (n *Node) Daemons(ctx context.Context, want []mps.Daemon) (mps.Report, error) {
	if n.cfg.MPS == nil {
		var errs []error
		for _, w := range want {
			if w.LogDir == "" {
				continue
			}
			if err := os.MkdirAll(w.LogDir, 0o755); err != nil {
				errs = append(errs, fmt.Errorf("MPS pipe directory for %s: %w", w.Device, err))
			}
		}
		return mps.Report{}, errors.Join(errs...)
	}
	rep, err := n.cfg.MPS.Reconcile(ctx, want)
	for _, s := range rep.Started {
		n.cfg.Log.Info("MPS daemon started", "device", s)
	}
	for _, s := range rep.Adopted {
		n.cfg.Log.Info("MPS daemon adopted", "device", s)
	}
	for _, s := range rep.Stopped {
		n.cfg.Log.Info("MPS daemon stopped (no claim uses it)", "device", s)
	}
	return rep, err
}

// MPSServerPIDs are the MPS servers' pids, by device (none without
// daemons); the watchdog counts them against no claim.
func (n *Node) MPSServerPIDs() map[int]string {
	if n.cfg.MPS == nil {
		return nil
	}
	return n.cfg.MPS.ServerPIDs()
}

// RunsDaemons reports whether the node runs MPS daemons (Config.MPS).
func (n *Node) RunsDaemons() bool { return n.cfg.MPS != nil }

// WriteSpec writes one CDI spec named name (cdi.WriteFile) into the CDI
// directory and returns its path.
func (n *Node) WriteSpec(name string, spec *specs.Spec) (string, error) {
	if n.cfg.CDIDir == "" {
		return "", errors.New("node: no CDI directory configured")
	}
	return cdi.WriteFile(n.cfg.CDIDir, name, spec)
}

// RemoveSpec removes the CDI spec named name (none there: no error).
func (n *Node) RemoveSpec(name string) error {
	if n.cfg.CDIDir == "" {
		return nil
	}
	return cdi.Remove(n.cfg.CDIDir, name)
}

// SyncSpecs makes the CDI directory hold one spec per live claim on node
// (cdi.Sync); nothing without a CDI directory.
func (n *Node) SyncSpecs(claims []api.Claim, node string, host cdi.Host) (cdi.SyncReport, error) {
	if n.cfg.CDIDir == "" {
		return cdi.SyncReport{}, nil
	}
	return cdi.Sync(n.cfg.CDIDir, claims, node, host)
}

// Watched is one pass of the memory watchdog.
type Watched struct {
	watchdog.Result
	// Enforced are the events of acting on the violations (warnings,
	// kills) after the grace period.
	Enforced []api.Event
}

// Watch runs the memory watchdog once over the claims on node: every
// process on their devices attributed to a claim, usage measured, and a
// claim over its memory warned about or, under memoryPolicy kill, its
// largest processes killed once over for MemoryGrace.
func (n *Node) Watch(ctx context.Context, claims []api.Claim, node string) Watched {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	res := n.watch.Watch(ctx, n.cfg.Device, claims, node)
	return Watched{Result: res, Enforced: n.enf.Enforce(ctx, res.Violations, n.cfg.Kill, n.cfg.MemoryGrace, n.cfg.Clock())}
}

// Inventory turns what the device layer sees into the allocator's node.
// Every GPU allows dynamic MIG; sharing is left to the server (dynamic).
func Inventory(name string, gpus []gpu.GPU) (alloc.Node, error) {
	n := alloc.Node{Name: name}
	for _, g := range gpus {
		model := g.Model
		if model == "" {
			m, err := catalog.Default().GPU(g.Name)
			if err != nil {
				return n, fmt.Errorf("GPU %d (%s): %w", g.Index, g.Name, err)
			}
			model = m.ID
		}
		ag := alloc.GPU{UUID: g.UUID, Index: g.Index, Model: model, Healthy: g.Healthy,
			MIGEnabled: g.MIGEnabled, DynamicMIG: g.MIGCapable, Sharing: alloc.Sharing{Mode: alloc.Dynamic}}
		for _, in := range g.Instances {
			ag.Instances = append(ag.Instances, alloc.MIGInstance{UUID: in.UUID, Profile: in.Profile, Start: in.Start,
				Sharing: alloc.Sharing{Mode: alloc.Dynamic}, GIID: &in.GIID})
		}
		n.GPUs = append(n.GPUs, ag)
	}
	return n, nil
}
