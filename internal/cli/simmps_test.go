//go:build unix

package cli

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuslice/gpuslice/internal/node/mps"
	"github.com/gpuslice/gpuslice/internal/node/mps/mpssim"
)

// TestMain makes the test binary a multicall binary, as main makes
// gpuslice: called as nvidia-cuda-mps-control it is the simulator.
//
// The tests here mostly wait on the processes they start (serve, agents,
// run, the README's commands), each test on its own data directory, port
// and home: unless -test.parallel is given, up to minParallel of them run
// at once even where GOMAXPROCS is smaller — in practice all of them, so
// the longest (the README walk's pages, the seed's two 10 s stops, the
// control plane) start first rather than after a queue.
func TestMain(m *testing.M) {
	if code, ok := Multicall(os.Args, os.Stdin, os.Stdout, os.Stderr); ok {
		os.Exit(code)
	}
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		_ = flag.Set("test.parallel", strconv.Itoa(max(runtime.GOMAXPROCS(0), minParallel)))
	}
	os.Exit(m.Run())
}

// minParallel is how many parallel tests run at once at least.
const minParallel = 64

// The hidden `gpuslice sim-mps-control -d` starts the simulated daemon
// through the multicall name; the link dra-driver --simulate installs in
// its state directory is a control client that reaches it; quit stops it.
func TestSimMPSControlCommand(t *testing.T) {
	dir := t.TempDir()
	pipe := filepath.Join(dir, "pipe")
	t.Setenv("CUDA_MPS_PIPE_DIRECTORY", pipe)
	t.Setenv("CUDA_MPS_LOG_DIRECTORY", filepath.Join(pipe, "log"))
	t.Setenv("CUDA_VISIBLE_DEVICES", "GPU-5")
	t.Cleanup(func() {
		if b, err := os.ReadFile(filepath.Join(pipe, mps.PIDFile)); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	var out, errOut bytes.Buffer
	cmd := New(&out, &errOut)
	cmd.SetArgs([]string{"sim-mps-control", "-d"})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("sim-mps-control -d: %v\n%s", err, errOut.String())
	}
	cmd = New(&out, &errOut)
	cmd.SetArgs([]string{"sim-mps-control", "-x"})
	if err := cmd.Execute(); err == nil || !strings.Contains(errOut.String(), "Usage: nvidia-cuda-mps-control") {
		t.Fatalf("sim-mps-control -x: %v\n%s", err, errOut.String())
	}
	bin, err := simulatedMPSControl(filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	self, _ := os.Executable()
	if target, err := os.Readlink(bin); err != nil || bin != filepath.Join(dir, "state", "bin", mps.ControlBinary) || !sameFile(target, self) {
		t.Fatalf("link %s → %s (%v), want → %s", bin, target, err, self)
	}
	client := exec.Command(bin)
	client.Stdin = strings.NewReader("set_default_device_pinned_mem_limit 0 2G\nget_default_device_pinned_mem_limit 0\nquit\n")
	got, err := client.CombinedOutput()
	if err != nil || string(got) != "2048M\n" {
		t.Fatalf("client: %v %q", err, got)
	}
	if _, err := os.Stat(filepath.Join(pipe, mpssim.SocketFile)); !os.IsNotExist(err) {
		t.Fatalf("socket after quit: %v", err)
	}
}

func sameFile(a, b string) bool {
	fa, err1 := os.Stat(a)
	fb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(fa, fb)
}
