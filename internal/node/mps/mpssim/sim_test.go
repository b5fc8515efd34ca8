//go:build unix

package mpssim_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/node/mps"
	"github.com/gpuslice/gpuslice/internal/node/mps/mpssim"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// TestMain makes the test binary a multicall binary, as the gpuslice
// binary is: called as nvidia-cuda-mps-control (the link Install makes),
// it is the simulator.
func TestMain(m *testing.M) {
	if mpssim.IsControlBinary(os.Args[0]) {
		os.Exit(mpssim.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// simulator installs the control binary (this test binary) in a temporary
// directory and kills, when the test ends, any daemon left under root.
func simulator(t *testing.T, root string) string {
	t.Helper()
	bin, err := mpssim.Install(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pids, _ := filepath.Glob(filepath.Join(root, "*", mps.PIDFile))
		for _, p := range pids {
			b, _ := os.ReadFile(p)
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	return bin
}

// waitGone waits for a process to exit.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, fmt.Sprintf("process %d to exit", pid), func() (bool, string) {
		return syscall.Kill(pid, 0) != nil || zombie(pid), "it still runs"
	})
}

func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}

func pidOf(t *testing.T, pipe string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(pipe, mps.PIDFile))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// The simulator is a control binary mps.Manager runs as it runs
// nvidia-cuda-mps-control: started (-d returns, the daemon stays, its
// socket, pid file and log appear), given its defaults (kept in the
// limits file), probed (get_server_list: no servers), restarted when
// killed, and quit (socket, pid file and limits file gone, the process
// ends).
func TestManagerRunsSimulator(t *testing.T) {
	root := filepath.Join(t.TempDir(), "mps")
	bin := simulator(t, root)
	m := mps.NewManager(mps.Config{Binary: bin, Root: root, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx := context.Background()
	const dev = "GPU-12345678-1234-1234-1234-123456789abc"
	pipe := filepath.Join(root, dev)
	want := []mps.Daemon{{Device: dev, GPU: dev, GPUIndex: 0, PipeDir: pipe, DefaultThreadPercent: 50, DefaultPinnedMiB: 10240}}
	rep, err := m.Reconcile(ctx, want)
	if err != nil || !slices.Equal(rep.Started, []string{dev}) {
		t.Fatalf("start: %+v, %v", rep, err)
	}
	pid := pidOf(t, pipe)
	if syscall.Kill(pid, 0) != nil {
		t.Fatalf("daemon %d does not run", pid)
	}
	if fi, err := os.Lstat(filepath.Join(pipe, mpssim.SocketFile)); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("control socket: %v %v", fi, err)
	}
	l, err := mpssim.ReadLimits(pipe)
	if err != nil {
		t.Fatal(err)
	}
	if l.Device != dev || l.PID != pid || l.DefaultActiveThreadPercentage != 50 || !maps.Equal(l.DefaultDevicePinnedMemLimitMiB, map[string]int64{"0": 10240}) {
		t.Fatalf("limits %+v", l)
	}
	logText, err := os.ReadFile(filepath.Join(pipe, "log", mpssim.LogFile))
	if err != nil || !strings.Contains(string(logText), "Starting control daemon using socket "+filepath.Join(pipe, "control")) ||
		!strings.Contains(string(logText), "Cmd:set_default_device_pinned_mem_limit 0 10240M") {
		t.Fatalf("log: %v\n%s", err, logText)
	}
	// Probed, kept.
	if rep, err := m.Reconcile(ctx, want); err != nil || len(rep.Started)+len(rep.Restarted)+len(rep.Stopped) != 0 {
		t.Fatalf("probe: %+v, %v", rep, err)
	}
	if len(m.ServerPIDs()) != 0 {
		t.Fatalf("servers %v", m.ServerPIDs())
	}
	// Killed: restarted, with its defaults again.
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
	rep, err = m.Reconcile(ctx, want)
	if err != nil || len(rep.Restarted) != 1 || rep.Restarted[0].Err != nil {
		t.Fatalf("restart: %+v, %v", rep, err)
	}
	pid2 := pidOf(t, pipe)
	if l, err := mpssim.ReadLimits(pipe); err != nil || pid2 == pid || l.PID != pid2 || l.DefaultActiveThreadPercentage != 50 {
		t.Fatalf("after restart: pid %d (was %d), limits %+v, %v", pid2, pid, l, err)
	}
	// Quit.
	rep, err = m.Reconcile(ctx, nil)
	if err != nil || !slices.Equal(rep.Stopped, []string{dev}) {
		t.Fatalf("stop: %+v, %v", rep, err)
	}
	waitGone(t, pid2)
	for _, f := range []string{mpssim.SocketFile, mps.PIDFile, mpssim.LimitsFile} {
		if _, err := os.Lstat(filepath.Join(pipe, f)); !os.IsNotExist(err) {
			t.Errorf("%s after quit: %v", f, err)
		}
	}
}

// The control client and -d behave as the real binary's where gpuslice
// relies on it: no daemon → "Cannot find MPS control daemon process"; a
// second -d → "An instance of this daemon is already running"; a refused
// command fails the client with the reason; SIGTERM stops the daemon.
func TestSimulatorProcess(t *testing.T) {
	root := t.TempDir()
	bin := simulator(t, root)
	pipe := filepath.Join(root, "GPU-1")
	env := append(os.Environ(), "CUDA_MPS_PIPE_DIRECTORY="+pipe, "CUDA_MPS_LOG_DIRECTORY="+filepath.Join(pipe, "log"), "CUDA_VISIBLE_DEVICES=GPU-1")
	run := func(stdin string, args ...string) (string, string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		cmd.Stdin = strings.NewReader(stdin)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		return out.String(), errOut.String(), err
	}
	if _, stderr, err := run("get_server_list\n"); err == nil || !strings.Contains(stderr, "Cannot find MPS control daemon process") {
		t.Fatalf("no daemon: %v %q", err, stderr)
	}
	if _, stderr, err := run("", "-d"); err != nil {
		t.Fatalf("-d: %v %s", err, stderr)
	}
	if _, stderr, err := run("", "-d"); err == nil || !strings.Contains(stderr, "An instance of this daemon is already running") {
		t.Fatalf("second -d: %v %q", err, stderr)
	}
	out, stderr, err := run("set_default_active_thread_percentage 25\nget_default_active_thread_percentage\nstart_server -uid 0\nget_server_list\n")
	if err == nil || out != "25.0\n25.0\n" || !strings.Contains(stderr, `unknown command "start_server"`) {
		t.Fatalf("commands: %v, out %q, err %q", err, out, stderr)
	}
	pid := pidOf(t, pipe)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
	if _, err := os.Lstat(filepath.Join(pipe, mpssim.SocketFile)); !os.IsNotExist(err) {
		t.Fatalf("socket after SIGTERM: %v", err)
	}
	if out, _, err := run("", "--help"); err != nil || !strings.Contains(out, "gpuslice's simulator") {
		t.Fatalf("--help: %v %q", err, out)
	}
}
