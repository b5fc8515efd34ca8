package mps_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/node/mps"
)

// TestReconcileRefusesHostileDaemons: a device id or a directory that did
// not come from a valid inventory never reaches the control binary's
// environment or a mkdir.
func TestReconcileRefusesHostileDaemons(t *testing.T) {
	ctl := newControl(t)
	m, g, in := machine(t)
	root := t.TempDir()
	whole, mig := daemons(root, g, in)
	for name, d := range map[string]mps.Daemon{
		"device ..":                 {Device: "..", GPUIndex: 0, PipeDir: filepath.Join(root, "x")},
		"device with a newline":     {Device: g.UUID + "\nLD_PRELOAD=/x.so", GPUIndex: 0, PipeDir: filepath.Join(root, "x")},
		"device with shell syntax":  {Device: "$(rm -rf /)", GPUIndex: 0, PipeDir: filepath.Join(root, "x")},
		"device with a NUL":         {Device: g.UUID + "\x00", GPUIndex: 0, PipeDir: filepath.Join(root, "x")},
		"device of 10 KB":           {Device: "GPU-" + strings.Repeat("a", 10<<10), GPUIndex: 0, PipeDir: filepath.Join(root, "x")},
		"uppercase uuid":            {Device: strings.ToUpper(g.UUID), GPUIndex: 0, PipeDir: filepath.Join(root, "x")},
		"pipe directory above root": {Device: g.UUID, GPU: g.UUID, GPUIndex: 0, PipeDir: filepath.Join(root, "..")},
		"pipe directory is root":    {Device: g.UUID, GPU: g.UUID, GPUIndex: 0, PipeDir: root},
		"pipe directory deeper":     {Device: g.UUID, GPU: g.UUID, GPUIndex: 0, PipeDir: filepath.Join(root, "a", "b")},
		"pipe directory elsewhere":  {Device: g.UUID, GPU: g.UUID, GPUIndex: 0, PipeDir: t.TempDir()},
		"relative pipe directory":   {Device: g.UUID, GPU: g.UUID, GPUIndex: 0, PipeDir: "mps/x"},
		"pipe directory with a newline": {Device: g.UUID, GPU: g.UUID, GPUIndex: 0,
			PipeDir: filepath.Join(root, "x\ny")},
		"log directory outside root": {Device: in.UUID, MIG: true, GPUIndex: 1, PipeDir: mig.PipeDir, LogDir: "/var/log"},
		"log directory with a space": {Device: in.UUID, MIG: true, GPUIndex: 1, PipeDir: mig.PipeDir,
			LogDir: filepath.Join(mig.PipeDir, "a b")},
	} {
		mgr := mps.NewManager(mps.Config{Binary: ctl.bin, Compute: m, Root: root})
		rep, err := mgr.Reconcile(context.Background(), []mps.Daemon{d})
		if err == nil || len(rep.Failed) != 1 || len(rep.Started) != 0 {
			t.Errorf("%s: report %+v, err %v", name, rep, err)
		}
		ctl.expect(t)
	}
	// The same manager still runs what is fine.
	mgr := mps.NewManager(mps.Config{Binary: ctl.bin, Compute: m, Root: root})
	rep := reconcile(t, mgr, whole, mig)
	if len(rep.Started) != 2 {
		t.Fatalf("report %+v", rep)
	}
}

// A claim whose MPS device id cannot name a pipe directory is wanted with
// none, so Reconcile refuses it instead of guessing a place.
func TestWantFromClaimsHostileDevice(t *testing.T) {
	hostile := "GPU-../../etc"
	d := alloc.Assigned{Node: "n1", GPU: hostile, Device: hostile, Mode: alloc.MPS, MemoryMiB: 1024,
		MPS: &alloc.MPSLimits{ActiveThreadPercent: 25, PinnedMemoryMiB: 1024}}
	want := mps.WantFromClaims([]api.Claim{mpsClaim("c-1", "acme", 1, "n1", d)}, "n1")
	if len(want) != 1 || want[0].PipeDir != "" || want[0].LogDir != "" {
		t.Fatalf("want %+v", want)
	}
	want[0].GPUIndex = 0
	rep, err := mps.NewManager(mps.Config{Binary: "/nonexistent"}).Reconcile(context.Background(), want)
	if err == nil || len(rep.Failed) != 1 {
		t.Errorf("report %+v, err %v", rep, err)
	}
}
