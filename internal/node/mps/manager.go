package mps

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/gpu"
)

// Files and the binary.
const (
	// ControlBinary is the MPS control daemon's executable.
	ControlBinary = "nvidia-cuda-mps-control"
	// PIDFile is the pid file the daemon writes in its pipe directory.
	PIDFile = "nvidia-cuda-mps-control.pid"
	// StateFile is the agent's record of a daemon, in its pipe directory.
	StateFile = "gpuslice-mps.json"
)

// ComputeModeSetter sets a whole GPU's compute mode; gpu.Device is one.
type ComputeModeSetter interface {
	SetComputeMode(ctx context.Context, index int, mode gpu.ComputeMode) error
}

// Config configures a Manager. Every field is optional.
type Config struct {
	// Runner runs the control binary (default ExecRunner).
	Runner Runner
	// Binary is the control binary's name or path (default ControlBinary).
	Binary string
	// Compute sets whole GPUs' compute modes; nil leaves them alone.
	Compute ComputeModeSetter
	Clock   func() time.Time
	Log     *slog.Logger
	// Root is the directory the pipe directories live in (typically
	// alloc.MPSPipeRoot). When set, Reconcile also stops daemons found
	// there (by their StateFile) that nothing wants, such as those a
	// previous agent started for claims released while it was down.
	Root string
	// CommandTimeout bounds each run of the control binary (default 10s).
	CommandTimeout time.Duration
	// StartWait is how long Start waits for the pid file to appear after
	// `-d` returns (default 5s).
	StartWait time.Duration
	// Backoff is the wait after a failed start, doubled on each further
	// failure up to MaxBackoff (defaults 5s and 5m).
	Backoff, MaxBackoff time.Duration
	// Alive and Kill check and SIGKILL a process (defaults: kill(2)).
	Alive func(pid int) bool
	Kill  func(pid int) error
}

// Manager keeps one MPS control daemon per wanted device. Its methods are
// safe for concurrent use, though the agent calls them from one loop.
type Manager struct {
	cfg Config

	mu      sync.Mutex
	running map[string]Daemon // by device: what runs, with the defaults applied
	failed  map[string]retry  // by device: failed starts
	servers map[int]string    // MPS server pid → device, from get_server_list
}

type retry struct {
	n  int
	at time.Time
}

// Report says what one Reconcile did. Each list is in device order.
type Report struct {
	Started []string // daemons started
	Adopted []string // daemons found running and kept
	Stopped []string // daemons quit (nothing wants them)
	// Restarted lists daemons found dead or hung and started again: their
	// claims' clients lost their MPS server.
	Restarted []Restart
	// Failed lists devices whose daemon could not be started, stopped or
	// configured; Reconcile retries them (starts after a backoff).
	Failed []Failure
}

// Restart is a daemon that died (or stopped answering).
type Restart struct {
	Device string
	Reason string
	// Err is set when starting it again failed.
	Err error
}

// Failure is a daemon operation that failed.
type Failure struct {
	Device string
	Err    error
	// RetryAt is when a failed start is tried again (zero: next time).
	RetryAt time.Time
}

// NewManager builds a manager with cfg's defaults filled in.
func NewManager(cfg Config) *Manager {
	if cfg.Runner == nil {
		cfg.Runner = ExecRunner{}
	}
	cfg.Binary = cmp.Or(cfg.Binary, ControlBinary)
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	cfg.CommandTimeout = cmp.Or(cfg.CommandTimeout, 10*time.Second)
	cfg.StartWait = cmp.Or(cfg.StartWait, 5*time.Second)
	cfg.Backoff = cmp.Or(cfg.Backoff, 5*time.Second)
	cfg.MaxBackoff = cmp.Or(cfg.MaxBackoff, 5*time.Minute)
	if cfg.Alive == nil {
		cfg.Alive = processAlive
	}
	if cfg.Kill == nil {
		cfg.Kill = killProcess
	}
	return &Manager{cfg: cfg, running: map[string]Daemon{}, failed: map[string]retry{}, servers: map[int]string{}}
}

// Running lists the daemons the manager runs, in device order.
func (m *Manager) Running() []Daemon {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Daemon, 0, len(m.running))
	for _, d := range m.running {
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b Daemon) int { return cmp.Compare(a.Device, b.Device) })
	return out
}

// ServerPIDs maps the pids of the MPS servers the daemons reported (at
// their last probe) to their device. Those processes use GPU memory on
// behalf of every client; a memory watchdog should not count them
// against one claim.
func (m *Manager) ServerPIDs() map[int]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[int]string, len(m.servers))
	for pid, dev := range m.servers {
		out[pid] = dev
	}
	return out
}

// Reconcile makes the running daemons match want: it stops those not
// wanted (or wanted elsewhere), starts the missing ones, probes the rest
// and restarts any that died. Errors are per device: every device is
// tried, the report says what happened to each and the error joins the
// failures.
func (m *Manager) Reconcile(ctx context.Context, want []Daemon) (Report, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var rep Report
	wanted := map[string]Daemon{}
	var order []string
	for _, d := range want {
		d, err := m.normalize(d)
		if err != nil {
			rep.Failed = append(rep.Failed, Failure{Device: d.Device, Err: err})
			continue
		}
		if _, dup := wanted[d.Device]; dup {
			continue
		}
		wanted[d.Device] = d
		order = append(order, d.Device)
	}
	slices.Sort(order)

	// Stop what nobody wants, and daemons whose place changed.
	blocked := map[string]bool{}
	for _, dev := range sortedKeys(m.running) {
		cur := m.running[dev]
		if w, ok := wanted[dev]; ok && samePlace(cur, w) {
			continue
		}
		if err := m.stop(ctx, cur); err != nil {
			rep.Failed = append(rep.Failed, Failure{Device: dev, Err: err})
			blocked[dev] = true
			continue
		}
		rep.Stopped = append(rep.Stopped, dev)
	}
	if m.cfg.Root != "" {
		stopped, fails := m.stopOrphans(ctx, wanted)
		rep.Stopped = append(rep.Stopped, stopped...)
		rep.Failed = append(rep.Failed, fails...)
		for _, f := range fails {
			blocked[f.Device] = true
		}
	}

	for _, dev := range order {
		if blocked[dev] {
			continue
		}
		m.ensure(ctx, wanted[dev], &rep)
	}
	slices.Sort(rep.Stopped)
	slices.SortStableFunc(rep.Failed, func(a, b Failure) int { return cmp.Compare(a.Device, b.Device) })
	var errs []error
	for _, f := range rep.Failed {
		errs = append(errs, fmt.Errorf("MPS daemon for %s: %w", f.Device, f.Err))
	}
	for _, r := range rep.Restarted {
		if r.Err != nil {
			errs = append(errs, fmt.Errorf("restarting MPS daemon for %s: %w", r.Device, r.Err))
		}
	}
	return rep, errors.Join(errs...)
}

// ensure makes one wanted daemon run.
func (m *Manager) ensure(ctx context.Context, w Daemon, rep *Report) {
	cur, tracked := m.running[w.Device]
	if !tracked {
		pid, present, alive := m.pid(w.PipeDir)
		switch {
		case alive:
			rec, _ := readRecord(w.PipeDir)
			if err := m.probe(ctx, w); err != nil {
				m.restart(ctx, w, pid, fmt.Sprintf("the running daemon (pid %d) does not answer: %v", pid, err), rep)
				return
			}
			adopted := w
			adopted.DefaultThreadPercent, adopted.DefaultPinnedMiB = 0, 0
			if rec != nil && rec.Device == w.Device {
				adopted.DefaultThreadPercent, adopted.DefaultPinnedMiB = rec.DefaultThreadPercent, rec.DefaultPinnedMiB
			}
			if !w.MIG && m.cfg.Compute != nil {
				if err := m.cfg.Compute.SetComputeMode(ctx, w.GPUIndex, gpu.ComputeExclusiveProcess); err != nil {
					rep.Failed = append(rep.Failed, Failure{Device: w.Device, Err: fmt.Errorf("setting GPU %d to EXCLUSIVE_PROCESS: %w", w.GPUIndex, err)})
				}
			}
			m.running[w.Device] = adopted
			if err := writeRecord(adopted); err != nil {
				rep.Failed = append(rep.Failed, Failure{Device: w.Device, Err: err})
			}
			rep.Adopted = append(rep.Adopted, w.Device)
			m.cfg.Log.Info("adopted MPS control daemon", "device", w.Device, "pid", pid)
			m.configure(ctx, w, rep)
			return
		case present:
			m.restart(ctx, w, 0, fmt.Sprintf("stale pid file (pid %d is gone)", pid), rep)
			return
		}
		if r, ok := m.failed[w.Device]; ok && m.cfg.Clock().Before(r.at) {
			return // backing off
		}
		if err := m.start(ctx, w); err != nil {
			rep.Failed = append(rep.Failed, Failure{Device: w.Device, Err: err, RetryAt: m.backoff(w.Device)})
			return
		}
		rep.Started = append(rep.Started, w.Device)
		m.configure(ctx, w, rep)
		return
	}
	pid, present, alive := m.pid(w.PipeDir)
	var reason string
	switch {
	case !present:
		reason = "pid file " + filepath.Join(w.PipeDir, PIDFile) + " is missing"
	case !alive:
		reason = fmt.Sprintf("process %d is gone", pid)
	default:
		if err := m.probe(ctx, w); err != nil {
			reason = fmt.Sprintf("get_server_list failed: %v", err)
		}
	}
	if reason != "" {
		if !alive {
			pid = 0
		}
		m.restart(ctx, w, pid, reason, rep)
		return
	}
	if needsDefaults(cur, w) {
		m.configure(ctx, w, rep)
	}
}

// restart replaces a dead or hung daemon (pid > 0 is killed first).
func (m *Manager) restart(ctx context.Context, w Daemon, pid int, reason string, rep *Report) {
	m.cfg.Log.Warn("MPS control daemon died; restarting", "device", w.Device, "reason", reason)
	delete(m.running, w.Device)
	m.forgetServers(w.Device)
	if pid > 0 {
		if err := m.cfg.Kill(pid); err != nil && m.cfg.Alive(pid) {
			rep.Restarted = append(rep.Restarted, Restart{Device: w.Device, Reason: reason, Err: fmt.Errorf("killing pid %d: %w", pid, err)})
			return
		}
	}
	if err := os.Remove(filepath.Join(w.PipeDir, PIDFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		rep.Restarted = append(rep.Restarted, Restart{Device: w.Device, Reason: reason, Err: err})
		return
	}
	if err := m.start(ctx, w); err != nil {
		m.backoff(w.Device)
		rep.Restarted = append(rep.Restarted, Restart{Device: w.Device, Reason: reason, Err: err})
		return
	}
	rep.Restarted = append(rep.Restarted, Restart{Device: w.Device, Reason: reason})
	m.configure(ctx, w, rep)
}

// start launches a daemon and records it with no defaults applied yet.
func (m *Manager) start(ctx context.Context, w Daemon) error {
	for _, dir := range []string{w.PipeDir, w.LogDir} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
	}
	if !w.MIG && m.cfg.Compute != nil {
		if err := m.cfg.Compute.SetComputeMode(ctx, w.GPUIndex, gpu.ComputeExclusiveProcess); err != nil {
			return fmt.Errorf("setting GPU %d to EXCLUSIVE_PROCESS: %w", w.GPUIndex, err)
		}
	}
	env, err := w.env()
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, m.cfg.CommandTimeout)
	err = m.cfg.Runner.Start(cctx, m.cfg.Binary, []string{"-d"}, env)
	cancel()
	if err != nil {
		return err
	}
	if err := m.waitPID(ctx, w.PipeDir); err != nil {
		return err
	}
	started := w
	started.DefaultThreadPercent, started.DefaultPinnedMiB = 0, 0
	if err := writeRecord(started); err != nil {
		return err
	}
	m.running[w.Device] = started
	delete(m.failed, w.Device)
	m.cfg.Log.Info("started MPS control daemon", "device", w.Device, "pipeDir", w.PipeDir)
	return nil
}

// configure sends the defaults that differ from what the running daemon
// has. They apply to the next MPS server the daemon starts (a running
// server keeps its own), which after a start is the first one.
func (m *Manager) configure(ctx context.Context, w Daemon, rep *Report) {
	cur := m.running[w.Device]
	var err error
	if !needsDefaults(cur, w) {
		return
	}
	if w.DefaultThreadPercent != cur.DefaultThreadPercent && w.DefaultThreadPercent > 0 {
		if _, err = m.send(ctx, w, "set_default_active_thread_percentage "+strconv.Itoa(w.DefaultThreadPercent)); err == nil {
			cur.DefaultThreadPercent = w.DefaultThreadPercent
		}
	}
	if err == nil && w.DefaultPinnedMiB != cur.DefaultPinnedMiB && w.DefaultPinnedMiB > 0 {
		// The daemon sees one device (CUDA_VISIBLE_DEVICES), ordinal 0.
		if _, err = m.send(ctx, w, "set_default_device_pinned_mem_limit 0 "+strconv.FormatInt(w.DefaultPinnedMiB, 10)+"M"); err == nil {
			cur.DefaultPinnedMiB = w.DefaultPinnedMiB
		}
	}
	m.running[w.Device] = cur
	if werr := writeRecord(cur); werr != nil && err == nil {
		err = werr
	}
	if err != nil {
		rep.Failed = append(rep.Failed, Failure{Device: w.Device, Err: fmt.Errorf("setting defaults: %w", err)})
	}
}

// stop quits a daemon and gives its GPU back its default compute mode.
func (m *Manager) stop(ctx context.Context, d Daemon) error {
	if _, err := m.send(ctx, d, "quit"); err != nil {
		if _, _, alive := m.pid(d.PipeDir); alive {
			return fmt.Errorf("quitting: %w", err)
		}
		// Already gone: nothing to quit.
	}
	if cur, ok := m.running[d.Device]; ok && cur.PipeDir == d.PipeDir {
		delete(m.running, d.Device)
		m.forgetServers(d.Device)
	}
	if err := os.Remove(filepath.Join(d.PipeDir, StateFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		m.cfg.Log.Warn("removing MPS state file", "dir", d.PipeDir, "err", err)
	}
	m.cfg.Log.Info("stopped MPS control daemon", "device", d.Device)
	if !d.MIG && m.cfg.Compute != nil && d.GPUIndex >= 0 {
		if err := m.cfg.Compute.SetComputeMode(ctx, d.GPUIndex, gpu.ComputeDefault); err != nil {
			return fmt.Errorf("daemon quit, but setting GPU %d back to DEFAULT: %w", d.GPUIndex, err)
		}
	}
	return nil
}

// stopOrphans quits daemons under Root that the manager neither runs nor
// wants where they are.
func (m *Manager) stopOrphans(ctx context.Context, wanted map[string]Daemon) (stopped []string, fails []Failure) {
	entries, err := os.ReadDir(m.cfg.Root)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			m.cfg.Log.Warn("reading MPS root", "dir", m.cfg.Root, "err", err)
		}
		return nil, nil
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(m.cfg.Root, e.Name())
		rec, err := readRecord(dir)
		if err != nil || rec == nil || !alloc.ValidDeviceID(rec.Device) {
			continue // not ours
		}
		if rec.LogDir != "" && alloc.Within(m.cfg.Root, rec.LogDir) != nil {
			rec.LogDir = "" // a record's log directory stays under Root
		}
		if cur, ok := m.running[rec.Device]; ok && filepath.Clean(cur.PipeDir) == dir {
			continue
		}
		if w, ok := wanted[rec.Device]; ok && filepath.Clean(w.PipeDir) == dir {
			continue // ensure adopts it
		}
		if _, _, alive := m.pid(dir); !alive {
			_ = os.Remove(filepath.Join(dir, StateFile))
			continue
		}
		d := Daemon{Device: rec.Device, GPUIndex: rec.GPUIndex, MIG: rec.MIG, PipeDir: dir, LogDir: cmp.Or(rec.LogDir, filepath.Join(dir, "log"))}
		if err := m.stop(ctx, d); err != nil {
			fails = append(fails, Failure{Device: rec.Device, Err: err})
			continue
		}
		stopped = append(stopped, rec.Device)
	}
	return stopped, fails
}

// probe asks a daemon for its servers and remembers their pids.
func (m *Manager) probe(ctx context.Context, d Daemon) error {
	out, err := m.send(ctx, d, "get_server_list")
	if err != nil {
		return err
	}
	m.forgetServers(d.Device)
	for _, f := range strings.Fields(out) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			m.servers[pid] = d.Device
		}
	}
	return nil
}

func (m *Manager) forgetServers(device string) {
	for pid, dev := range m.servers {
		if dev == device {
			delete(m.servers, pid)
		}
	}
}

func (m *Manager) send(ctx context.Context, d Daemon, command string) (string, error) {
	env, err := d.env()
	if err != nil {
		return "", err
	}
	cctx, cancel := context.WithTimeout(ctx, m.cfg.CommandTimeout)
	defer cancel()
	return m.cfg.Runner.Send(cctx, m.cfg.Binary, env, command)
}

// pid reads a pipe directory's pid file.
func (m *Manager) pid(dir string) (pid int, present, alive bool) {
	b, err := os.ReadFile(filepath.Join(dir, PIDFile))
	if err != nil {
		return 0, false, false
	}
	pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, true, false
	}
	return pid, true, m.cfg.Alive(pid)
}

// waitPID waits for a started daemon's pid file.
func (m *Manager) waitPID(ctx context.Context, dir string) error {
	deadline := time.Now().Add(m.cfg.StartWait)
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		if _, _, alive := m.pid(dir); alive {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no live daemon in %s after %v", filepath.Join(dir, PIDFile), m.cfg.StartWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// backoff records a failed start and returns when to try again.
func (m *Manager) backoff(device string) time.Time {
	r := m.failed[device]
	wait := m.cfg.Backoff
	for i := 0; i < r.n && wait < m.cfg.MaxBackoff; i++ {
		wait *= 2
	}
	r.n++
	r.at = m.cfg.Clock().Add(min(wait, m.cfg.MaxBackoff))
	m.failed[device] = r
	return r.at
}

// env is the daemon's (and its control clients') environment. It refuses
// values no valid device id and clean path produce (alloc.CheckEnv): no
// newline, NUL, space or shell syntax reaches the control binary.
func (d Daemon) env() ([]string, error) {
	if err := alloc.CheckEnv(map[string]string{
		"CUDA_VISIBLE_DEVICES":    d.Device,
		"CUDA_MPS_PIPE_DIRECTORY": d.PipeDir,
		"CUDA_MPS_LOG_DIRECTORY":  d.LogDir,
	}); err != nil {
		return nil, fmt.Errorf("refusing to run %s: %w", ControlBinary, err)
	}
	return []string{
		"CUDA_VISIBLE_DEVICES=" + d.Device,
		"CUDA_MPS_PIPE_DIRECTORY=" + d.PipeDir,
		"CUDA_MPS_LOG_DIRECTORY=" + d.LogDir,
	}, nil
}

// normalize checks a wanted daemon and fills in its log directory. The
// device must be a GPU or MIG uuid (alloc.ValidDeviceID) and the pipe
// directory absolute; with a Root, the pipe directory must be one
// directory of Root (alloc.SafeJoin) and the log directory inside Root.
func (m *Manager) normalize(d Daemon) (Daemon, error) {
	switch {
	case d.Device == "":
		return d, errors.New("daemon without a device")
	case !alloc.ValidDeviceID(d.Device):
		return d, fmt.Errorf("device %.64q: not a GPU or MIG uuid as NVML writes them", d.Device)
	case d.PipeDir == "":
		return d, errors.New("no pipe directory")
	case !filepath.IsAbs(d.PipeDir):
		return d, fmt.Errorf("pipe directory %.128q is not an absolute path", d.PipeDir)
	case !d.MIG && d.GPUIndex < 0:
		return d, errors.New("GPU index unknown (see Resolve)")
	case d.DefaultThreadPercent < 0 || d.DefaultThreadPercent > 100:
		return d, fmt.Errorf("default thread percentage %d: want 0..100", d.DefaultThreadPercent)
	case d.DefaultPinnedMiB < 0:
		return d, fmt.Errorf("default pinned memory %d MiB: want ≥ 0", d.DefaultPinnedMiB)
	}
	d.PipeDir = filepath.Clean(d.PipeDir)
	d.LogDir = filepath.Clean(cmp.Or(d.LogDir, filepath.Join(d.PipeDir, "log")))
	if m.cfg.Root != "" {
		if p, err := alloc.SafeJoin(m.cfg.Root, filepath.Base(d.PipeDir)); err != nil || p != d.PipeDir {
			return d, fmt.Errorf("pipe directory %.128q is not a directory of %s", d.PipeDir, m.cfg.Root)
		}
		if err := alloc.Within(m.cfg.Root, d.LogDir); err != nil {
			return d, fmt.Errorf("log directory: %w", err)
		}
	}
	if _, err := d.env(); err != nil {
		return d, err
	}
	return d, nil
}

// needsDefaults reports whether a wanted daemon sets a default the running
// one lacks. A default the wanted one leaves unset (0) is left as it is:
// the daemon has no command to unset it.
func needsDefaults(cur, w Daemon) bool {
	return (w.DefaultThreadPercent > 0 && w.DefaultThreadPercent != cur.DefaultThreadPercent) ||
		(w.DefaultPinnedMiB > 0 && w.DefaultPinnedMiB != cur.DefaultPinnedMiB)
}

// samePlace reports whether a running daemon can serve a wanted one.
func samePlace(a, b Daemon) bool {
	return a.Device == b.Device && a.PipeDir == b.PipeDir && a.LogDir == b.LogDir && a.MIG == b.MIG && a.GPUIndex == b.GPUIndex
}

// record is StateFile's content.
type record struct {
	Device               string `json:"device"`
	GPUIndex             int    `json:"gpuIndex"`
	MIG                  bool   `json:"mig,omitempty"`
	LogDir               string `json:"logDir"`
	DefaultThreadPercent int    `json:"defaultThreadPercent,omitempty"`
	DefaultPinnedMiB     int64  `json:"defaultPinnedMiB,omitempty"`
}

func writeRecord(d Daemon) error {
	b, err := json.Marshal(record{Device: d.Device, GPUIndex: d.GPUIndex, MIG: d.MIG, LogDir: d.LogDir,
		DefaultThreadPercent: d.DefaultThreadPercent, DefaultPinnedMiB: d.DefaultPinnedMiB})
	if err != nil {
		return err
	}
	tmp := filepath.Join(d.PipeDir, "."+StateFile+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(d.PipeDir, StateFile))
}

// readRecord reads a directory's StateFile; nil, nil when there is none.
func readRecord(dir string) (*record, error) {
	b, err := os.ReadFile(filepath.Join(dir, StateFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, StateFile), err)
	}
	if r.Device == "" {
		return nil, fmt.Errorf("%s: no device", filepath.Join(dir, StateFile))
	}
	return &r, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Events turns a report's restarts and failures into events for the
// claims on the affected devices (one per claim and device), for the
// agent to send with its heartbeat.
func (r Report) Events(claims []api.Claim, node string, now time.Time) []api.Event {
	var out []api.Event
	emit := func(device, kind, msg string) {
		for _, c := range claims {
			if c.Allocation == nil {
				continue
			}
			for _, d := range c.Allocation.Devices {
				if d.Node == node && d.Device == device {
					out = append(out, api.Event{Time: now, Kind: kind, Claim: c.ID, Tenant: c.Tenant, Node: node, Message: msg})
					break
				}
			}
		}
	}
	for _, rs := range r.Restarted {
		if rs.Err != nil {
			emit(rs.Device, "mps-daemon-failed", fmt.Sprintf("MPS control daemon for %s died (%s) and could not be restarted: %v", rs.Device, rs.Reason, rs.Err))
			continue
		}
		emit(rs.Device, "mps-daemon-restarted", fmt.Sprintf("MPS control daemon for %s died (%s) and was restarted; its clients must reconnect", rs.Device, rs.Reason))
	}
	for _, f := range r.Failed {
		emit(f.Device, "mps-daemon-failed", fmt.Sprintf("MPS control daemon for %s: %v", f.Device, f.Err))
	}
	return out
}
