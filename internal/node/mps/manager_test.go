//go:build unix

package mps_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpu/fake"
	"github.com/gpuslice/gpuslice/internal/node/mps"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// fakeScript stands in for nvidia-cuda-mps-control. `-d` logs the
// daemon's environment, starts a long sleep as "the daemon" and writes its
// pid file; without arguments it reads commands from stdin, logs each
// with the device it was sent for and fails like the real client when no
// daemon runs. quit kills the daemon and removes its pid file. A file
// named "hang" in the pipe directory makes get_server_list fail although
// the daemon runs; one named "fail-start" makes -d fail.
const fakeScript = `#!/bin/sh
log=@LOG@
pids=@PIDS@
pidf="$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid"
alive() {
	[ -f "$pidf" ] || return 1
	p=$(cat "$pidf")
	kill -0 "$p" 2>/dev/null || return 1
	# a killed daemon nobody reaped is a zombie: gone
	[ -r /proc/$p/stat ] && grep -q ') Z' /proc/$p/stat && return 1
	return 0
}
if [ "$#" -gt 0 ]; then
	echo "$CUDA_VISIBLE_DEVICES: $* pipe=$CUDA_MPS_PIPE_DIRECTORY log=$CUDA_MPS_LOG_DIRECTORY" >>"$log"
	[ "$1" = "-d" ] || exit 2
	[ -d "$CUDA_MPS_PIPE_DIRECTORY" ] && [ -d "$CUDA_MPS_LOG_DIRECTORY" ] || { echo "no pipe or log directory" >&2; exit 1; }
	[ -f "$CUDA_MPS_PIPE_DIRECTORY/fail-start" ] && { echo "cannot start" >&2; exit 1; }
	alive && { echo "An instance of this daemon is already running" >&2; exit 1; }
	sleep 300 </dev/null >/dev/null 2>&1 &
	echo $! >>"$pids"
	echo $! >"$pidf"
	exit 0
fi
while IFS= read -r cmd || [ -n "$cmd" ]; do
	echo "$CUDA_VISIBLE_DEVICES: $cmd" >>"$log"
	alive || { echo "Cannot find MPS control daemon process" >&2; exit 1; }
	case "$cmd" in
	quit) kill "$(cat "$pidf")"; rm -f "$pidf" ;;
	get_server_list) [ -f "$CUDA_MPS_PIPE_DIRECTORY/hang" ] && exit 1; echo 4242 ;;
	set_*) ;;
	*) echo "unknown command $cmd" >&2; exit 1 ;;
	esac
done
`

type control struct {
	bin, log string
}

func newControl(t *testing.T) *control {
	t.Helper()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	dir := t.TempDir()
	c := &control{bin: filepath.Join(dir, mps.ControlBinary), log: filepath.Join(dir, "calls.log")}
	pids := filepath.Join(dir, "pids")
	script := strings.NewReplacer("@LOG@", strconv.Quote(c.log), "@PIDS@", strconv.Quote(pids)).Replace(fakeScript)
	if err := os.WriteFile(c.bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b, _ := os.ReadFile(pids)
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	return c
}

// calls returns the lines logged since the last call.
func (c *control) calls(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(c.log)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	_ = os.Remove(c.log)
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func (c *control) expect(t *testing.T, want ...string) {
	t.Helper()
	got := c.calls(t)
	if len(want) == 0 {
		want = []string{""}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("control calls:\n got  %q\n want %q", got, want)
	}
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

// machine is an A100 with MIG off and one with a 3g.20gb instance.
func machine(t *testing.T) (*fake.Machine, gpu.GPU, gpu.Instance) {
	t.Helper()
	m, err := fake.New(fake.MachineSpec{GPUs: []fake.GPUSpec{
		{Model: "A100-40GB"},
		{Model: "A100-40GB", MIGEnabled: true, Instances: []string{"3g.20gb@4"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := m.GPUs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return m, gpus[0], gpus[1].Instances[0]
}

func computeMode(t *testing.T, m *fake.Machine, index int) gpu.ComputeMode {
	t.Helper()
	gpus, err := m.GPUs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return gpus[index].ComputeMode
}

func daemons(root string, g gpu.GPU, in gpu.Instance) (whole, mig mps.Daemon) {
	wp := filepath.Join(root, "whole")
	mp := filepath.Join(root, "mig")
	whole = mps.Daemon{Device: g.UUID, GPU: g.UUID, GPUIndex: g.Index, PipeDir: wp, LogDir: filepath.Join(wp, "log"),
		DefaultThreadPercent: 50, DefaultPinnedMiB: 10240}
	mig = mps.Daemon{Device: in.UUID, GPUIndex: 1, MIG: true, PipeDir: mp, LogDir: filepath.Join(mp, "log")}
	return whole, mig
}

func startLine(d mps.Daemon) string {
	return d.Device + ": -d pipe=" + d.PipeDir + " log=" + d.LogDir
}

func pidOf(t *testing.T, d mps.Daemon) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.PipeDir, mps.PIDFile))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func reconcile(t *testing.T, mgr *mps.Manager, want ...mps.Daemon) mps.Report {
	t.Helper()
	rep, err := mgr.Reconcile(context.Background(), want)
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	return rep
}

// The exact life of two daemons: start with the environment and the
// defaults (whole GPU in EXCLUSIVE_PROCESS), probes while wanted, quit
// (and DEFAULT again) when no longer wanted.
func TestStartProbeStop(t *testing.T) {
	ctl := newControl(t)
	m, g, in := machine(t)
	whole, mig := daemons(t.TempDir(), g, in)
	mgr := mps.NewManager(mps.Config{Binary: ctl.bin, Compute: m})

	rep := reconcile(t, mgr, mig, whole)
	if !slices.Equal(rep.Started, []string{g.UUID, in.UUID}) || len(rep.Stopped)+len(rep.Restarted)+len(rep.Failed)+len(rep.Adopted) > 0 {
		t.Fatalf("report %+v", rep)
	}
	ctl.expect(t,
		startLine(whole),
		g.UUID+": set_default_active_thread_percentage 50",
		g.UUID+": set_default_device_pinned_mem_limit 0 10240M",
		startLine(mig), // no defaults: none set
	)
	for _, dir := range []string{whole.PipeDir, whole.LogDir, mig.PipeDir, mig.LogDir} {
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v, want 0700", dir, fi.Mode().Perm())
		}
	}
	if got := computeMode(t, m, 0); got != gpu.ComputeExclusiveProcess {
		t.Errorf("GPU 0 compute mode %v, want EXCLUSIVE_PROCESS", got)
	}
	if got := computeMode(t, m, 1); got != gpu.ComputeDefault {
		t.Errorf("MIG GPU compute mode %v, want untouched", got)
	}
	if got := mgr.ServerPIDs(); len(got) != 0 {
		t.Errorf("server pids before any probe: %v", got)
	}

	rep = reconcile(t, mgr, whole, mig)
	if len(rep.Started)+len(rep.Stopped)+len(rep.Restarted)+len(rep.Failed) > 0 {
		t.Fatalf("steady state report %+v", rep)
	}
	ctl.expect(t, g.UUID+": get_server_list", in.UUID+": get_server_list")
	if got := mgr.ServerPIDs(); got[4242] == "" {
		t.Errorf("server pids %v, want 4242 from get_server_list", got)
	}

	rep = reconcile(t, mgr, mig)
	if !slices.Equal(rep.Stopped, []string{g.UUID}) {
		t.Fatalf("report %+v", rep)
	}
	ctl.expect(t, g.UUID+": quit", in.UUID+": get_server_list")
	if got := computeMode(t, m, 0); got != gpu.ComputeDefault {
		t.Errorf("GPU 0 compute mode after stop %v, want DEFAULT", got)
	}
	if _, err := os.Stat(filepath.Join(whole.PipeDir, mps.PIDFile)); !os.IsNotExist(err) {
		t.Errorf("pid file after quit: %v", err)
	}

	rep = reconcile(t, mgr)
	if !slices.Equal(rep.Stopped, []string{in.UUID}) {
		t.Fatalf("report %+v", rep)
	}
	ctl.expect(t, in.UUID+": quit")
	if got := mgr.Running(); len(got) != 0 {
		t.Errorf("still running %v", got)
	}
}

// A daemon whose pid file vanished, whose process died, or that stops
// answering is started again, with its defaults, and reported.
func TestRestart(t *testing.T) {
	ctl := newControl(t)
	m, g, in := machine(t)
	whole, _ := daemons(t.TempDir(), g, in)
	mgr := mps.NewManager(mps.Config{Binary: ctl.bin, Compute: m})
	reconcile(t, mgr, whole)
	ctl.calls(t)
	restarted := []string{
		startLine(whole),
		g.UUID + ": set_default_active_thread_percentage 50",
		g.UUID + ": set_default_device_pinned_mem_limit 0 10240M",
	}

	check := func(rep mps.Report, reason string) {
		t.Helper()
		if len(rep.Restarted) != 1 || rep.Restarted[0].Device != g.UUID || rep.Restarted[0].Err != nil ||
			!strings.Contains(rep.Restarted[0].Reason, reason) {
			t.Fatalf("report %+v, want a restart of %s for %q", rep, g.UUID, reason)
		}
	}

	// The pid file is removed: the daemon is taken for dead.
	pid := pidOf(t, whole)
	if err := os.Remove(filepath.Join(whole.PipeDir, mps.PIDFile)); err != nil {
		t.Fatal(err)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	check(reconcile(t, mgr, whole), "missing")
	ctl.expect(t, restarted...)

	// The process dies, its pid file stays.
	_ = syscall.Kill(pidOf(t, whole), syscall.SIGKILL)
	waitDead(t, pidOf(t, whole))
	check(reconcile(t, mgr, whole), "gone")
	ctl.expect(t, restarted...)

	// It runs but does not answer: killed and started again.
	hang := filepath.Join(whole.PipeDir, "hang")
	if err := os.WriteFile(hang, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	old := pidOf(t, whole)
	check(reconcile(t, mgr, whole), "get_server_list failed")
	ctl.expect(t, append([]string{g.UUID + ": get_server_list"}, restarted...)...)
	if pidOf(t, whole) == old {
		t.Error("the hung daemon was not replaced")
	}
	_ = os.Remove(hang)

	// Events name the claims on the device.
	claims := []api.Claim{
		mpsClaim("c-1", "acme", 1, "n1", dev(g.UUID, g.UUID, whole.PipeDir)),
		mpsClaim("c-2", "acme", 2, "n1", dev(g.UUID, in.UUID, "")),
	}
	evs := mps.Report{Restarted: []mps.Restart{{Device: g.UUID, Reason: "pid file missing"}}}.Events(claims, "n1", time.Unix(5, 0))
	if len(evs) != 1 || evs[0].Claim != "c-1" || evs[0].Kind != "mps-daemon-restarted" || evs[0].Tenant != "acme" || evs[0].Node != "n1" {
		t.Errorf("events %+v", evs)
	}
}

func waitDead(t *testing.T, pid int) {
	t.Helper()
	testkit.Eventually(t, time.Second, "pid "+strconv.Itoa(pid)+" to die", func() (bool, string) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		return err != nil || strings.Contains(string(b), ") Z") || syscall.Kill(pid, 0) != nil, "still alive"
	})
}

// A new manager adopts the daemons it wants (probing, not restarting),
// sends only the defaults that changed, and stops the ones under its root
// that nothing wants.
func TestAdoptAndOrphans(t *testing.T) {
	ctl := newControl(t)
	m, g, in := machine(t)
	root := t.TempDir()
	whole, mig := daemons(root, g, in)
	reconcile(t, mps.NewManager(mps.Config{Binary: ctl.bin, Compute: m}), whole, mig)
	ctl.calls(t)
	if err := m.SetComputeMode(context.Background(), 0, gpu.ComputeDefault); err != nil {
		t.Fatal(err)
	}

	// The agent restarts: same daemons wanted, one with a new default.
	changed := whole
	changed.DefaultThreadPercent = 25
	mgr := mps.NewManager(mps.Config{Binary: ctl.bin, Compute: m, Root: root})
	rep := reconcile(t, mgr, changed, mig)
	if !slices.Equal(rep.Adopted, []string{g.UUID, in.UUID}) || len(rep.Started)+len(rep.Restarted) > 0 {
		t.Fatalf("report %+v", rep)
	}
	ctl.expect(t,
		g.UUID+": get_server_list",
		g.UUID+": set_default_active_thread_percentage 25",
		in.UUID+": get_server_list",
	)
	if got := computeMode(t, m, 0); got != gpu.ComputeExclusiveProcess {
		t.Errorf("adopted whole GPU compute mode %v, want EXCLUSIVE_PROCESS", got)
	}

	// Restarted again, with no claim left: both are orphans under root.
	mgr = mps.NewManager(mps.Config{Binary: ctl.bin, Compute: m, Root: root})
	rep = reconcile(t, mgr)
	if !slices.Equal(rep.Stopped, []string{g.UUID, in.UUID}) {
		t.Fatalf("report %+v", rep)
	}
	calls := ctl.calls(t)
	slices.Sort(calls) // root is read in directory order
	if want := []string{g.UUID + ": quit", in.UUID + ": quit"}; !slices.Equal(calls, want) {
		t.Fatalf("calls %q, want %q", calls, want)
	}
	if got := computeMode(t, m, 0); got != gpu.ComputeDefault {
		t.Errorf("orphan's GPU compute mode %v, want DEFAULT", got)
	}
	// Nothing is left to stop.
	rep = reconcile(t, mgr)
	if len(rep.Stopped) > 0 {
		t.Fatalf("report %+v", rep)
	}
	ctl.expect(t)
}

// A daemon that cannot start is retried after a doubling backoff.
func TestStartBackoff(t *testing.T) {
	ctl := newControl(t)
	m, g, in := machine(t)
	whole, _ := daemons(t.TempDir(), g, in)
	clk := &clock{t: time.Unix(1000, 0)}
	mgr := mps.NewManager(mps.Config{Binary: ctl.bin, Compute: m, Clock: clk.now})
	if err := os.MkdirAll(whole.PipeDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(whole.PipeDir, "fail-start"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := mgr.Reconcile(context.Background(), []mps.Daemon{whole})
	if err == nil || len(rep.Failed) != 1 || !rep.Failed[0].RetryAt.Equal(clk.t.Add(5*time.Second)) {
		t.Fatalf("report %+v, err %v", rep, err)
	}
	if !strings.Contains(err.Error(), "cannot start") {
		t.Errorf("error %v does not carry the daemon's output", err)
	}
	ctl.expect(t, startLine(whole))

	clk.advance(4 * time.Second)
	if rep, err := mgr.Reconcile(context.Background(), []mps.Daemon{whole}); err != nil || len(rep.Failed) > 0 {
		t.Fatalf("during backoff: %+v, %v", rep, err)
	}
	ctl.expect(t) // not tried

	clk.advance(time.Second)
	rep, _ = mgr.Reconcile(context.Background(), []mps.Daemon{whole})
	if len(rep.Failed) != 1 || !rep.Failed[0].RetryAt.Equal(clk.t.Add(10*time.Second)) {
		t.Fatalf("second failure %+v, want a 10s backoff", rep)
	}
	ctl.expect(t, startLine(whole))

	_ = os.Remove(filepath.Join(whole.PipeDir, "fail-start"))
	clk.advance(10 * time.Second)
	rep = reconcile(t, mgr, whole)
	if !slices.Equal(rep.Started, []string{g.UUID}) {
		t.Fatalf("report %+v", rep)
	}
}

// Daemons the manager cannot place are refused, not started.
func TestReconcileRefusesIncompleteDaemons(t *testing.T) {
	ctl := newControl(t)
	mgr := mps.NewManager(mps.Config{Binary: ctl.bin})
	rep, err := mgr.Reconcile(context.Background(), []mps.Daemon{
		{Device: "GPU-x", GPUIndex: -1, PipeDir: t.TempDir()},
		{Device: "GPU-y", GPUIndex: 0},
	})
	if err == nil || len(rep.Failed) != 2 {
		t.Fatalf("report %+v, err %v", rep, err)
	}
	ctl.expect(t)
}

func dev(gpuID, device, pipe string) alloc.Assigned {
	if pipe == "" {
		pipe = pipeDir(device)
	}
	return alloc.Assigned{Node: "n1", GPU: gpuID, Device: device, Mode: alloc.MPS, MemoryMiB: 4096,
		MPS: &alloc.MPSLimits{ActiveThreadPercent: 25, PinnedMemoryMiB: 4096, PipeDirectory: pipe}}
}

func mpsClaim(id, tenant string, seq int64, node string, devs ...alloc.Assigned) api.Claim {
	for i := range devs {
		devs[i].Node = node
	}
	return api.Claim{ID: id, Tenant: tenant, Seq: seq, State: api.Allocated,
		Allocation: &alloc.Allocation{Claim: id, Tenant: tenant, Devices: devs}}
}
