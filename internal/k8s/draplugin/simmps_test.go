//go:build unix

package draplugin

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpu/fake"
	"github.com/gpuslice/gpuslice/internal/node/mps"
	"github.com/gpuslice/gpuslice/internal/node/mps/mpssim"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// An MPS claim prepared on simulated GPUs with the simulated control
// binary (as `gpuslice dra-driver --simulate` runs it) starts a real
// daemon process for the GPU: its pipe directory — what the container
// mounts — holds the control socket, the pid file, the manager's record
// and the simulator's limits file naming the GPU; the GPU is in
// EXCLUSIVE_PROCESS. Unprepare quits it: the process ends, the socket
// and pid file go, the GPU is back in DEFAULT.
func TestPrepareMPSStartsSimulatedDaemon(t *testing.T) {
	m, err := fake.New(fake.MachineSpec{GPUs: []fake.GPUSpec{{Model: "A100-40GB"}}}, fake.WithSeed(3))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin, err := mpssim.Install(filepath.Join(dir, "state", "bin"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	d, err := New(ctx, Config{Node: "n1", Device: m, CDIDir: filepath.Join(dir, "cdi"), StateDir: filepath.Join(dir, "state"),
		MPSRoot: filepath.Join(dir, "mps"), MPSControl: bin, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	gs, _ := m.GPUs(ctx)
	pipe := filepath.Join(dir, "mps", gs[0].UUID)
	t.Cleanup(func() {
		if b, err := os.ReadFile(filepath.Join(pipe, mps.PIDFile)); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	claim := allocated("mps", "gpu-0-shared", "4Gi", `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS"}}`)
	if _, err := d.Prepare(ctx, claim); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{mpssim.SocketFile, mps.PIDFile, mps.StateFile, mpssim.LimitsFile, filepath.Join("log", mpssim.LogFile)} {
		if _, err := os.Lstat(filepath.Join(pipe, f)); err != nil {
			t.Errorf("pipe directory: %v", err)
		}
	}
	l, err := mpssim.ReadLimits(pipe)
	if err != nil {
		t.Fatal(err)
	}
	if l.Device != gs[0].UUID || syscall.Kill(l.PID, 0) != nil {
		t.Fatalf("limits %+v: want the GPU's daemon, running", l)
	}
	if gs, _ := m.GPUs(ctx); gs[0].ComputeMode != gpu.ComputeExclusiveProcess {
		t.Fatalf("compute mode %v", gs[0].ComputeMode)
	}
	if err := d.Unprepare(ctx, "mps"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the MPS daemon to end after unprepare", func() (bool, string) {
		return syscall.Kill(l.PID, 0) != nil || zombie(l.PID), fmt.Sprintf("daemon %d still runs", l.PID)
	})
	for _, f := range []string{mpssim.SocketFile, mps.PIDFile} {
		if _, err := os.Lstat(filepath.Join(pipe, f)); !os.IsNotExist(err) {
			t.Errorf("%s after unprepare: %v", f, err)
		}
	}
	if gs, _ := m.GPUs(ctx); gs[0].ComputeMode != gpu.ComputeDefault {
		t.Fatalf("compute mode after unprepare %v", gs[0].ComputeMode)
	}
}

// zombie reports whether pid exited and waits for its parent to reap it
// (a daemon's parent is whoever adopted it).
func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}
