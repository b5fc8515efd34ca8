package cli

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpu/fake"
)

// `gpuslice dra simulate-fault` writes a request to a running simulated
// machine's fault directory (watchFaults, as dra-driver, agent and serve
// run it), prints the outcome and leaves nothing behind; a refusal is an
// error naming the flag; with nobody watching it withdraws the request.
func TestSimulateFaultCommand(t *testing.T) {
	t.Parallel()
	m, err := fake.New(fake.MachineSpec{GPUs: []fake.GPUSpec{{Model: "A100-40GB"}, {Model: "A100-40GB"}}})
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	dir := filepath.Join(state, FaultDirName)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	as := func(name string, args ...string) (string, error) {
		var out, errOut bytes.Buffer
		cmd := New(&out, &errOut)
		cmd.SetArgs(append([]string{"dra", name}, args...))
		err := cmd.ExecuteContext(t.Context())
		return strings.TrimSpace(out.String()), err
	}
	run := func(args ...string) (string, error) { return as("simulate-fault", args...) }
	if err := watchFaults(ctx, m, dir, false, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	// Requests wait for a consumer of the machine's events (the driver's
	// health watch): one is written before there is one.
	early := make(chan error, 1)
	go func() {
		_, err := as("simulate-fault", "--state-dir", state, "--gpu", "0", "--xid", "13")
		early <- err
	}()
	time.Sleep(700 * time.Millisecond)
	events, err := m.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-early; err != nil {
		t.Fatalf("the request written before a subscriber: %v", err)
	}
	select {
	case ev := <-events:
		if ev.XID != 13 || ev.Index != 0 {
			t.Fatalf("event %+v, want XID 13 on GPU 0", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event: the request was applied before anyone subscribed")
	}
	out, err := run("--state-dir", state, "--gpu", "1", "--xid", "48")
	if err != nil || out != "XID 48 on GPU 1 (double-bit ECC error, fatal: the GPU is unhealthy)" {
		t.Fatalf("--xid 48: %v, %q", err, out)
	}
	if gs, _ := m.GPUs(t.Context()); gs[1].Healthy || !gs[0].Healthy {
		t.Fatalf("after XID 48 on GPU 1: %+v", gs)
	}
	if out, err := as("simulate-xid", "--fault-dir", dir, "--gpu", "1", "--recover"); err != nil || out != "GPU 1 recovered" {
		t.Fatalf("--recover: %v, %q", err, out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--state-dir", state, "--gpu", "5", "--xid", "79"}, `the simulated machine refused XID 79 on GPU 5: "gpu": 5: this machine has GPUs 0..1`},
		{[]string{"--state-dir", state, "--gpu", "0"}, "say what happens: --xid N, --lost or --recover"},
		{[]string{"--state-dir", state, "--gpu", "0", "--instance", "MIG-x", "--xid", "79"}, "--gpu and --instance: give one of them"},
		{[]string{"--state-dir", state, "--instance", "MIG-x", "--lost"}, "--lost: a whole GPU is lost or recovers: name it by --gpu"},
		{[]string{"--state-dir", state, "--gpu", "0", "--xid", "0"}, "--xid: 0: want a positive XID"},
		{[]string{"--state-dir", t.TempDir(), "--gpu", "0", "--xid", "79"}, "no fault directory"},
	} {
		if out, err := run(tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v (printed %q), want an error containing %q", tc.args, err, out, tc.want)
		}
	}
	// Real GPUs have no fault directory: asking for one is an error.
	real := struct{ gpu.Device }{m}
	if err := watchFaults(ctx, real, t.TempDir(), true, slog.Default()); err == nil || !strings.Contains(err.Error(), "simulated GPUs only") {
		t.Fatalf("--fault-dir on real GPUs: %v", err)
	}
	if err := watchFaults(ctx, real, t.TempDir(), false, slog.Default()); err != nil {
		t.Fatalf("the default fault directory on real GPUs: %v", err)
	}
	cancel()
	// Nobody watching: the request is withdrawn when the time is up.
	idle := t.TempDir()
	if _, err := run("--fault-dir", idle, "--gpu", "0", "--xid", "79", "--timeout", "300ms"); err == nil || !strings.Contains(err.Error(), "request withdrawn") {
		t.Fatalf("nobody watching: %v", err)
	}
	for _, d := range []string{dir, idle} {
		if left, _ := os.ReadDir(d); len(left) != 0 {
			t.Errorf("%s: left %v", d, left)
		}
	}
}
