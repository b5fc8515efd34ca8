package node_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpu/fake"
	"github.com/gpuslice/gpuslice/internal/gpu/nvml"
	"github.com/gpuslice/gpuslice/internal/mig"
	"github.com/gpuslice/gpuslice/internal/node"
	"github.com/gpuslice/gpuslice/internal/node/cdi"
	"github.com/gpuslice/gpuslice/internal/node/mps"
	"github.com/gpuslice/gpuslice/internal/node/mps/mpssim"
	"github.com/gpuslice/gpuslice/internal/node/watchdog"
)

// TestMain makes the test binary a multicall binary, as the gpuslice
// binary is: called as nvidia-cuda-mps-control it is the simulated MPS
// control daemon the simulated backend runs.
func TestMain(m *testing.M) {
	if mpssim.IsControlBinary(os.Args[0]) {
		os.Exit(mpssim.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// backend is a device layer the contract runs on, with what the contract
// needs that gpu.Device does not offer.
type backend struct {
	dev gpu.Device
	// real: an administrative change the device refuses in a set-up probe
	// (a container without the rights, a GPU without the feature) skips
	// the subtest with the device's answer. The simulated machine never
	// refuses.
	real bool
	// mayChange: the subtests that change the GPUs' settings (MIG mode
	// and instances, compute mode, time slice, MPS) run. On real GPUs
	// only when asked (changeEnv), never on someone's GPUs by surprise.
	mayChange bool
	// level reads a GPU's time-slice level.
	level func(index int) (gpu.TimeSlice, error)
	// mpsControl is the MPS control binary ("" skips the MPS subtest,
	// with mpsWhy).
	mpsControl, mpsWhy string
	// threadPercent reads a running daemon's default active thread
	// percentage from its pipe directory.
	threadPercent func(pipe string) (float64, error)
	// startProcess starts a process holding memory on a device (nil: the
	// backend cannot; the watchdog's enforcement is then skipped).
	startProcess func(uuid string, pid int, memoryMiB int64) error
}

// TestContractSimulated runs the node side's contract on simulated GPUs
// (internal/gpu/fake): two A100-40GB and an L4, MPS by the simulated
// control daemon.
func TestContractSimulated(t *testing.T) {
	contract(t, func(t *testing.T) backend {
		m, err := fake.New(fake.MachineSpec{GPUs: []fake.GPUSpec{{Model: "A100-40GB"}, {Model: "A100-40GB"}, {Model: "L4"}}}, fake.WithSeed(5))
		if err != nil {
			t.Fatal(err)
		}
		bin, err := mpssim.Install(filepath.Join(shortDir(t), "bin"))
		if err != nil {
			t.Fatal(err)
		}
		return backend{dev: m, mayChange: true, level: m.TimeSlice, mpsControl: bin, startProcess: m.StartProcess,
			threadPercent: func(pipe string) (float64, error) {
				l, err := mpssim.ReadLimits(pipe)
				return l.DefaultActiveThreadPercentage, err
			}}
	})
}

// changeEnv asks TestContractNVML to run the subtests that change the
// GPUs' settings.
const changeEnv = "GPUSLICE_NVML_CHANGE"

// TestContractNVML runs the same contract on the host's NVIDIA GPUs.
// Without an NVIDIA driver it skips, saying why. The subtests that change
// the GPUs (MIG mode and instances, compute mode, time slice, an MPS
// daemon; each GPU is put back as it was, and must be idle) run only with
// GPUSLICE_NVML_CHANGE=1; the others (CDI specs, the watchdog's reading)
// always run.
func TestContractNVML(t *testing.T) {
	probe, err := nvml.Open()
	if err != nil {
		t.Skipf("no NVIDIA GPUs to run the contract on: %v", err)
	}
	_ = probe.Close()
	contract(t, func(t *testing.T) backend {
		rec := &levelRecorder{set: map[string]gpu.TimeSlice{}}
		d, err := nvml.Open(nvml.WithCommandRunner(rec.run))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Close() })
		rec.dev = d
		b := backend{dev: d, real: true, mayChange: os.Getenv(changeEnv) == "1", level: rec.level, threadPercent: realThreadPercent}
		if bin, err := exec.LookPath(mps.ControlBinary); err != nil {
			b.mpsWhy = "no " + mps.ControlBinary + " on $PATH"
		} else {
			b.mpsControl = bin
		}
		return b
	})
}

// levelRecorder runs nvidia-smi and remembers the level it set per GPU:
// nvidia-smi has no query for it that this test could read.
type levelRecorder struct {
	dev *nvml.Device
	mu  sync.Mutex
	set map[string]gpu.TimeSlice
}

func (r *levelRecorder) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	out, err := nvml.ExecRunner(ctx, name, args...)
	if err == nil && len(args) == 4 && args[0] == "compute-policy" {
		if l, perr := strconv.Atoi(strings.TrimPrefix(args[3], "--set-timeslice=")); perr == nil {
			r.mu.Lock()
			r.set[args[2]] = gpu.TimeSlice(l)
			r.mu.Unlock()
		}
	}
	return out, err
}

func (r *levelRecorder) level(index int) (gpu.TimeSlice, error) {
	gs, err := r.dev.GPUs(context.Background())
	if err != nil {
		return 0, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range gs {
		if g.Index == index {
			return r.set[g.UUID], nil
		}
	}
	return 0, gpu.ErrNotFound
}

// realThreadPercent asks a running MPS control daemon its default
// active thread percentage.
func realThreadPercent(pipe string) (float64, error) {
	cmd := exec.Command(mps.ControlBinary)
	cmd.Env = append(os.Environ(), "CUDA_MPS_PIPE_DIRECTORY="+pipe, "CUDA_MPS_LOG_DIRECTORY="+filepath.Join(pipe, "log"))
	cmd.Stdin = strings.NewReader("get_default_active_thread_percentage\n")
	out, err := cmd.Output()
	if err != nil {
		return 0, err
	}
	return strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
}

// contract is the node side's contract: the same body for every backend.
func contract(t *testing.T, newBackend func(t *testing.T) backend) {
	for _, tc := range []struct {
		name    string
		changes bool // changes the GPUs' settings
		fn      func(t *testing.T, b backend)
	}{
		{"MIGInstancesAtPlacementsIdleClearedFirst", true, testMIG},
		{"ComputeModeSetAndReset", true, testComputeMode},
		{"TimeSlicePerLevel", true, testTimeSlice},
		{"MPSDaemonStartedAndStoppedWithLimits", true, testMPS},
		{"CDISpecWrittenAndRemoved", false, testCDI},
		{"Watchdog", false, testWatchdog},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBackend(t)
			if tc.changes && !b.mayChange {
				t.Skipf("changes the GPUs' MIG mode, compute mode or time slice: set %s=1 to run it on idle GPUs you may reconfigure (each is put back after)", changeEnv)
			}
			tc.fn(t, b)
		})
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newNode(t *testing.T, cfg node.Config) *node.Node {
	t.Helper()
	if cfg.Log == nil {
		cfg.Log = quiet()
	}
	n, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func gpus(t *testing.T, dev gpu.Device) []gpu.GPU {
	t.Helper()
	gs, err := dev.GPUs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return gs
}

func gpuOf(t *testing.T, dev gpu.Device, uuid string) gpu.GPU {
	t.Helper()
	for _, g := range gpus(t, dev) {
		if g.UUID == uuid {
			return g
		}
	}
	t.Fatalf("GPU %s is gone", uuid)
	return gpu.GPU{}
}

// realize runs one Realize and fails on a read error.
func realize(t *testing.T, n *node.Node, w node.Want) node.Report {
	t.Helper()
	rep, err := n.Realize(context.Background(), w)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// restore puts a GPU's MIG mode and compute mode back as they were when
// the test ends (best effort: instances made are destroyed first).
func restore(t *testing.T, dev gpu.Device, g gpu.GPU) {
	t.Cleanup(func() {
		ctx := context.Background()
		now := gpuOf(t, dev, g.UUID)
		for _, in := range now.Instances {
			if !slices.ContainsFunc(g.Instances, func(o gpu.Instance) bool { return o.UUID == in.UUID }) {
				_ = dev.DestroyInstance(ctx, g.Index, in.UUID)
			}
		}
		if g.MIGCapable {
			_ = dev.SetMIGMode(ctx, g.Index, g.MIGEnabled)
		}
		_ = dev.SetComputeMode(ctx, g.Index, g.ComputeMode)
		_ = dev.SetTimeSlice(ctx, g.Index, gpu.TimeSliceDefault)
	})
}

// refusedSkip skips a subtest when a real device refuses a set-up step.
func refusedSkip(t *testing.T, b backend, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if b.real {
		t.Skipf("the device refused %s here (rights, container or GPU): %v", what, err)
	}
	t.Fatalf("%s: %v", what, err)
}

// migGPU is the first MIG-capable GPU whose geometry the catalog knows,
// turned on in MIG mode and emptied of instances; it skips without one.
func migGPU(t *testing.T, b backend) (gpu.GPU, *mig.Geometry) {
	t.Helper()
	ctx := context.Background()
	for _, g := range gpus(t, b.dev) {
		if !g.MIGCapable || g.Model == "" {
			continue
		}
		m, err := catalog.Default().GPU(g.Model)
		if err != nil || m.MIG == nil {
			continue
		}
		geo, err := mig.New(m)
		if err != nil {
			t.Fatal(err)
		}
		restore(t, b.dev, g)
		refusedSkip(t, b, "turning MIG on", b.dev.SetMIGMode(ctx, g.Index, true))
		for _, in := range gpuOf(t, b.dev, g.UUID).Instances {
			refusedSkip(t, b, "destroying an instance", b.dev.DestroyInstance(ctx, g.Index, in.UUID))
		}
		return gpuOf(t, b.dev, g.UUID), geo
	}
	t.Skip("no MIG-capable GPU the catalog knows")
	return gpu.GPU{}, nil
}

// wholeGPU is the first GPU, out of MIG mode, in the DEFAULT compute
// mode.
func wholeGPU(t *testing.T, b backend) gpu.GPU {
	t.Helper()
	ctx := context.Background()
	g := gpus(t, b.dev)[0]
	restore(t, b.dev, g)
	if g.MIGEnabled {
		for _, in := range g.Instances {
			refusedSkip(t, b, "destroying an instance", b.dev.DestroyInstance(ctx, g.Index, in.UUID))
		}
		refusedSkip(t, b, "turning MIG off", b.dev.SetMIGMode(ctx, g.Index, false))
	}
	refusedSkip(t, b, "setting the compute mode", b.dev.SetComputeMode(ctx, g.Index, gpu.ComputeDefault))
	return gpuOf(t, b.dev, g.UUID)
}

// anyWholeGPU is a GPU out of MIG mode, as it is (nothing is changed);
// it skips without one.
func anyWholeGPU(t *testing.T, b backend) gpu.GPU {
	t.Helper()
	for _, g := range gpus(t, b.dev) {
		if !g.MIGEnabled {
			return g
		}
	}
	t.Skip("every GPU is in MIG mode")
	return gpu.GPU{}
}

// shapes picks from a geometry a profile big spanning several memory
// slices at some start, a one-slice profile small that fits at a start
// inside big's and at one outside it.
func shapes(t *testing.T, geo *mig.Geometry) (big mig.Instance, small mig.Shape, inside, outside int) {
	t.Helper()
	for _, s := range geo.Shapes {
		if s.Size == 1 && !s.ME && small.Name == "" {
			small = s
		}
	}
	for _, s := range geo.Shapes {
		if s.Size < 2 || s.Size >= geo.Slices || s.ME {
			continue
		}
		for _, st := range s.Starts {
			in := slices.IndexFunc(small.Starts, func(x int) bool { return x >= st && x < st+s.Size })
			out := slices.IndexFunc(small.Starts, func(x int) bool { return x >= st+s.Size || x < st })
			if in >= 0 && out >= 0 {
				return mig.Instance{Profile: s.Name, Start: st}, small, small.Starts[in], small.Starts[out]
			}
		}
	}
	t.Fatalf("no two shapes to test in %s", geo.Model)
	return
}

// MIG: an instance is created at the decided placement, an idle instance
// in its way is destroyed first, an idle one out of its way and one
// another claim holds stay; the next pass adopts it; a whole GPU another
// claim holds an instance of is refused naming the claim; a release
// destroys the instance; the GPU taken whole loses its idle instances and
// leaves MIG mode.
func testMIG(t *testing.T, b backend) {
	ctx := context.Background()
	g, geo := migGPU(t, b)
	big, small, inside, outside := shapes(t, geo)
	inWay, err := b.dev.CreateInstance(ctx, g.Index, small.Name, inside)
	refusedSkip(t, b, "creating a MIG instance", err)
	heldIn, err := b.dev.CreateInstance(ctx, g.Index, small.Name, outside)
	refusedSkip(t, b, "creating a MIG instance", err)
	n := newNode(t, node.Config{Device: b.dev})

	held := node.Hold{Claim: "other", GPU: g.UUID, Profile: small.Name, Start: outside, Instance: heldIn.UUID, Mode: alloc.Exclusive}
	mine := node.Hold{Claim: "mine", Name: "ns/mine", GPU: g.UUID, Profile: big.Profile, Start: big.Start, Mode: alloc.Exclusive, Make: true}
	rep := realize(t, n, node.Want{Holds: []node.Hold{held, mine}})
	if err := rep.Err(1); err != nil {
		t.Fatalf("making %s: %v (steps %v)", big, err, rep.Results)
	}
	var kinds []node.StepKind
	for _, r := range rep.Results {
		kinds = append(kinds, r.Kind)
	}
	if !slices.Equal(kinds, []node.StepKind{node.DestroyInstance, node.CreateInstance}) || rep.Results[0].Instance != inWay.UUID {
		t.Fatalf("steps %v: want the instance in the way (%s) destroyed, then the create", rep.Results, inWay.UUID)
	}
	id := rep.Instance(1)
	got := gpuOf(t, b.dev, g.UUID).Instances
	if len(got) != 2 || !slices.ContainsFunc(got, func(in gpu.Instance) bool {
		return in.UUID == id && in.Profile == big.Profile && in.Start == big.Start
	}) || !slices.ContainsFunc(got, func(in gpu.Instance) bool { return in.UUID == heldIn.UUID }) {
		t.Fatalf("instances %+v: want %s (%s) and the held %s", got, big, id, heldIn.UUID)
	}

	// Again: adopted, nothing to do.
	rep = realize(t, n, node.Want{Holds: []node.Hold{held, mine}})
	if len(rep.Plan.Steps) != 0 || rep.Instance(1) != id {
		t.Fatalf("second pass: steps %v, instance %q; want none and %s adopted", rep.Plan.Steps, rep.Instance(1), id)
	}

	// The GPU whole is refused while another claim holds an instance.
	whole := node.Hold{Claim: "whole", GPU: g.UUID, Mode: alloc.Exclusive, Make: true}
	mine.Instance, mine.Make = id, false
	rep = realize(t, n, node.Want{Holds: []node.Hold{held, mine, whole}})
	var he *node.HeldError
	if err := rep.Err(2); !errors.As(err, &he) || !strings.Contains(err.Error(), "is held by claim") {
		t.Fatalf("whole GPU beside held instances: %v", err)
	}
	if len(rep.Plan.Steps) != 0 {
		t.Fatalf("a refused hold changed the GPU: %v", rep.Plan.Steps)
	}

	// Released: destroyed (by uuid); the held instance stays.
	rep = realize(t, n, node.Want{Holds: []node.Hold{held}, Release: []node.Hold{mine}})
	if err := rep.ReleaseErr(); err != nil {
		t.Fatal(err)
	}
	if got := gpuOf(t, b.dev, g.UUID).Instances; len(got) != 1 || got[0].UUID != heldIn.UUID {
		t.Fatalf("after the release: %+v", got)
	}

	// A release another claim's hold covers is not destroyed.
	rep = realize(t, n, node.Want{Holds: []node.Hold{held}, Release: []node.Hold{{Claim: "gone", GPU: g.UUID, Profile: small.Name, Start: outside}}})
	if len(rep.Plan.Steps) != 0 {
		t.Fatalf("released a held instance: %v", rep.Plan.Steps)
	}

	// Whole, once nobody holds an instance: idle instances cleared, MIG off.
	rep = realize(t, n, node.Want{Holds: []node.Hold{whole}})
	if errs := rep.Errs(); len(errs) > 0 {
		t.Fatalf("whole GPU: %v", errs)
	}
	if got := gpuOf(t, b.dev, g.UUID); got.MIGEnabled || len(got.Instances) != 0 {
		t.Fatalf("GPU taken whole: MIG %v, instances %+v", got.MIGEnabled, got.Instances)
	}
}

// Compute mode: EXCLUSIVE_PROCESS for a GPU used by MPS, DEFAULT for one
// used whole otherwise, and DEFAULT again once nobody holds it.
func testComputeMode(t *testing.T, b backend) {
	ctx := context.Background()
	g := wholeGPU(t, b)
	n := newNode(t, node.Config{Device: b.dev})
	hold := func(mode alloc.Mode) node.Hold {
		return node.Hold{Claim: "c", GPU: g.UUID, Mode: mode, Make: true}
	}
	mode := func() gpu.ComputeMode { return gpuOf(t, b.dev, g.UUID).ComputeMode }
	if rep := realize(t, n, node.Want{Holds: []node.Hold{hold(alloc.MPS)}}); rep.Err(0) != nil || mode() != gpu.ComputeExclusiveProcess {
		t.Fatalf("MPS: %v, compute mode %v", rep.Err(0), mode())
	}
	if rep := realize(t, n, node.Want{Holds: []node.Hold{hold(alloc.Exclusive)}}); rep.Err(0) != nil || mode() != gpu.ComputeDefault {
		t.Fatalf("exclusive: %v, compute mode %v", rep.Err(0), mode())
	}
	refusedSkip(t, b, "setting the compute mode", b.dev.SetComputeMode(ctx, g.Index, gpu.ComputeProhibited))
	if rep := realize(t, n, node.Want{Holds: []node.Hold{hold(alloc.TimeSlice)}}); rep.Err(0) != nil || mode() != gpu.ComputeDefault {
		t.Fatalf("time-sliced over PROHIBITED: %v, compute mode %v", rep.Err(0), mode())
	}
	realize(t, n, node.Want{Holds: []node.Hold{hold(alloc.MPS)}})
	// Freed: reset.
	if rep := realize(t, n, node.Want{}); rep.ResetErr() != nil || mode() != gpu.ComputeDefault {
		t.Fatalf("freed: %v, compute mode %v", rep.ResetErr(), mode())
	}
	// Held but not to be made: left as it is.
	refusedSkip(t, b, "setting the compute mode", b.dev.SetComputeMode(ctx, g.Index, gpu.ComputeExclusiveProcess))
	held := hold(alloc.Exclusive)
	held.Make = false
	if rep := realize(t, n, node.Want{Holds: []node.Hold{held}}); len(rep.Plan.Steps) != 0 {
		t.Fatalf("a hold not to be made changed the GPU: %v", rep.Plan.Steps)
	}
}

// Time slice: each level a claim names is set; a claim naming none takes
// the GPU's; the level is set once, not on every pass; released, the GPU
// takes what the claims left name, Default once none does.
func testTimeSlice(t *testing.T, b backend) {
	g := wholeGPU(t, b)
	n := newNode(t, node.Config{Device: b.dev})
	ts := func(claim, interval string) node.Hold {
		return node.Hold{Claim: claim, GPU: g.UUID, Mode: alloc.TimeSlice, Interval: interval, Make: true}
	}
	level := func() gpu.TimeSlice {
		t.Helper()
		l, err := b.level(g.Index)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	for _, l := range []gpu.TimeSlice{gpu.TimeSliceShort, gpu.TimeSliceMedium, gpu.TimeSliceLong, gpu.TimeSliceDefault} {
		rep := realize(t, n, node.Want{Holds: []node.Hold{ts("a", l.String())}})
		if err := rep.Err(0); err != nil {
			refusedSkip(t, b, "setting the time slice", err)
		}
		if got := level(); got != l {
			t.Fatalf("interval %s: the GPU has %s", l, got)
		}
	}
	long, plain := ts("long", "Long"), ts("plain", "")
	realize(t, n, node.Want{Holds: []node.Hold{long, plain}})
	if level() != gpu.TimeSliceLong {
		t.Fatalf("Long beside a claim naming none: %s", level())
	}
	if rep := realize(t, n, node.Want{Holds: []node.Hold{long, plain}}); len(rep.Plan.Steps) != 0 {
		t.Fatalf("the level is set again: %v", rep.Plan.Steps)
	}
	if who, l := node.IntervalConflict(ts("short", "Short"), []node.Hold{long, plain}); who != "long" || l != "Long" {
		t.Fatalf("conflict: %q %q", who, l)
	}
	plain.Make = false
	realize(t, n, node.Want{Holds: []node.Hold{plain}, Release: []node.Hold{long}})
	if level() != gpu.TimeSliceDefault {
		t.Fatalf("after the Long claim left: %s", level())
	}
}

// MPS: a daemon starts for the device with the limits asked (the GPU in
// EXCLUSIVE_PROCESS), is adopted on the next pass, and stops when no
// claim uses the device (the GPU back in DEFAULT).
func testMPS(t *testing.T, b backend) {
	if b.mpsControl == "" {
		t.Skip(b.mpsWhy)
	}
	ctx := context.Background()
	g := wholeGPU(t, b)
	root := filepath.Join(shortDir(t), "mps")
	n := newNode(t, node.Config{Device: b.dev, MPS: mps.NewManager(mps.Config{Binary: b.mpsControl, Compute: b.dev, Root: root, Log: quiet()})})
	pipe := filepath.Join(root, g.UUID)
	want := []mps.Daemon{{Device: g.UUID, GPU: g.UUID, GPUIndex: g.Index, PipeDir: pipe, LogDir: filepath.Join(pipe, "log"),
		DefaultThreadPercent: 40, DefaultPinnedMiB: 2048}}
	t.Cleanup(func() { _, _ = n.Daemons(ctx, nil) })
	// The GPU shaped first, then the daemon (the agent's and the plugin's
	// order).
	if rep := realize(t, n, node.Want{Holds: []node.Hold{{Claim: "c", GPU: g.UUID, Mode: alloc.MPS, Make: true}}}); rep.Err(0) != nil {
		t.Fatal(rep.Err(0))
	}
	rep, err := n.Daemons(ctx, want)
	if err != nil || !slices.Equal(rep.Started, []string{g.UUID}) {
		t.Fatalf("start: %+v, %v", rep, err)
	}
	if p, err := b.threadPercent(pipe); err != nil || p != 40 {
		t.Fatalf("default active thread percentage %v, %v; want 40", p, err)
	}
	if m := gpuOf(t, b.dev, g.UUID).ComputeMode; m != gpu.ComputeExclusiveProcess {
		t.Fatalf("compute mode %v under MPS", m)
	}
	if rep, err := n.Daemons(ctx, want); err != nil || len(rep.Started)+len(rep.Restarted)+len(rep.Stopped) != 0 {
		t.Fatalf("second pass: %+v, %v", rep, err)
	}
	rep, err = n.Daemons(ctx, nil)
	if err != nil || !slices.Equal(rep.Stopped, []string{g.UUID}) {
		t.Fatalf("stop: %+v, %v", rep, err)
	}
	if m := gpuOf(t, b.dev, g.UUID).ComputeMode; m != gpu.ComputeDefault {
		t.Fatalf("compute mode %v after the daemon stopped", m)
	}
	if len(n.MPSServerPIDs()) != 0 {
		t.Fatalf("servers after stop: %v", n.MPSServerPIDs())
	}
}

// CDI: a spec is written (one name, read back valid) and removed; SyncSpecs
// keeps one per live claim and removes the rest.
func testCDI(t *testing.T, b backend) {
	g := anyWholeGPU(t, b)
	dir := t.TempDir()
	n := newNode(t, node.Config{Device: b.dev, CDIDir: dir})
	nodes, err := cdi.DeviceNodes(cdi.Host{GPUs: gpus(t, b.dev)}, g.UUID, g.UUID)
	if err != nil {
		t.Fatal(err)
	}
	spec := &specs.Spec{Version: "0.6.0", Kind: cdi.Kind, Devices: []specs.Device{{Name: "claim-uid-gpu-0",
		ContainerEdits: specs.ContainerEdits{Env: []string{"CUDA_VISIBLE_DEVICES=" + g.UUID}, DeviceNodes: deviceNodes(nodes)}}}}
	path, err := n.WriteSpec("dra-claim-uid", spec)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || !strings.Contains(string(b), g.UUID) {
		t.Fatalf("spec %s: %v\n%s", path, err, b)
	}
	if err := n.RemoveSpec("dra-claim-uid"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("spec after remove: %v", err)
	}
	claim := api.Claim{ID: "c1", State: api.Running, Allocation: &alloc.Allocation{Claim: "c1",
		Devices: []alloc.Assigned{{Node: "n", GPU: g.UUID, Device: g.UUID, Mode: alloc.Exclusive, MemoryMiB: 1024}}}}
	rep, err := n.SyncSpecs([]api.Claim{claim}, "n", cdi.Host{GPUs: gpus(t, b.dev)})
	if err != nil || !slices.Equal(rep.Written, []string{"c1"}) {
		t.Fatalf("sync: %+v, %v", rep, err)
	}
	if rep, err := n.SyncSpecs(nil, "n", cdi.Host{}); err != nil || !slices.Equal(rep.Removed, []string{"c1"}) {
		t.Fatalf("sync with no claim: %+v, %v", rep, err)
	}
}

func deviceNodes(paths []string) []*specs.DeviceNode {
	var out []*specs.DeviceNode
	for _, p := range append(slices.Clone(cdi.ControlNodes), paths...) {
		out = append(out, &specs.DeviceNode{Path: p})
	}
	return out
}

// Watchdog: a claim's device is measured (GPU-seconds while it has a
// process); a process over the claim's memory under policy kill is
// reported, then killed once over for the grace period.
func testWatchdog(t *testing.T, b backend) {
	g := anyWholeGPU(t, b)
	now := time.Unix(1_700_000_000, 0)
	var mu sync.Mutex
	var killed []int
	n := newNode(t, node.Config{Device: b.dev, Clock: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }, MemoryGrace: 10 * time.Second,
		Kill: func(pid int) error { mu.Lock(); defer mu.Unlock(); killed = append(killed, pid); return nil }})
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	claim := api.Claim{ID: "c1", Tenant: "t", State: api.Running, Spec: api.ClaimSpec{MemoryPolicy: watchdog.PolicyKill},
		Allocation: &alloc.Allocation{Claim: "c1", Tenant: "t",
			Devices: []alloc.Assigned{{Node: "n", GPU: g.UUID, Device: g.UUID, Mode: alloc.Exclusive, MemoryMiB: 1024}}}}
	ctx := context.Background()
	if res := n.Watch(ctx, []api.Claim{claim}, "n"); len(res.Errors) > 0 || len(res.Violations) > 0 {
		t.Fatalf("first pass: %+v", res)
	}
	if b.startProcess == nil {
		t.Skip("the backend cannot start a process on a GPU: enforcement not exercised")
	}
	const pid = 1 << 23
	if err := b.startProcess(g.UUID, pid, 4096); err != nil {
		t.Fatal(err)
	}
	advance(5 * time.Second)
	res := n.Watch(ctx, []api.Claim{claim}, "n")
	if len(res.Violations) != 1 || res.Violations[0].PID != pid || res.Violations[0].Policy != watchdog.PolicyKill {
		t.Fatalf("violations %+v", res.Violations)
	}
	if len(res.Usage) != 1 || res.Usage[0].GPUSeconds <= 0 || res.Usage[0].MemoryMiB != 4096 {
		t.Fatalf("usage %+v", res.Usage)
	}
	if len(killed) != 0 {
		t.Fatalf("killed %v before the grace period", killed)
	}
	advance(11 * time.Second)
	res = n.Watch(ctx, []api.Claim{claim}, "n")
	if !slices.Equal(killed, []int{pid}) || !slices.ContainsFunc(res.Enforced, func(e api.Event) bool { return e.Kind == watchdog.EventKilled }) {
		t.Fatalf("after the grace period: killed %v, events %+v", killed, res.Enforced)
	}
}

// shortDir is a temporary directory with a short path: unix socket paths
// (the MPS control socket) are limited to about 100 bytes.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "node")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}
