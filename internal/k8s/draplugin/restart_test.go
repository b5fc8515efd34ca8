package draplugin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpu/fake"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
	"github.com/gpuslice/gpuslice/internal/k8s/draplugin"
)

// childConfig is what the parent test hands a driver process.
type childConfig struct {
	Node, StateDir, CDIDir, RegistrarDir, MPSRoot, MPSControl, MachineState string
	URL                                                                     string
	CA, Cert, Key                                                           []byte
	CrashAt                                                                 string
}

var childSpec = fake.MachineSpec{GPUs: []fake.GPUSpec{{Model: "A100-40GB"}, {Model: "A100-40GB"}}}

const childSeed = 11

// TestPluginChild is not a test: the restart test runs the test binary
// again with GPUSLICE_DRAPLUGIN_CHILD naming a childConfig, and this runs
// the driver (draplugin.Run, as `gpuslice dra-driver` does) on simulated
// GPUs whose state outlives the process. With CrashAt, the process kills
// itself with SIGKILL right after that step of a prepare.
func TestPluginChild(t *testing.T) {
	path := os.Getenv("GPUSLICE_DRAPLUGIN_CHILD")
	if path == "" {
		t.Skip("helper process for TestRestartMidPrepareAdoptsState")
	}
	var c childConfig
	b, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	m, err := fake.New(childSpec, fake.WithSeed(childSeed), fake.WithStateFile(c.MachineState))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cfg := draplugin.Config{Node: c.Node, Device: m, CDIDir: c.CDIDir, StateDir: c.StateDir, RegistrarDir: c.RegistrarDir,
		MPSRoot: c.MPSRoot, MPSControl: c.MPSControl, Log: slog.New(slog.NewTextHandler(os.Stderr, nil)),
		Observe: func(step, uid string) {
			if step == c.CrashAt {
				fmt.Fprintf(os.Stderr, "crashing after %s of claim %s\n", step, uid)
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {} // never returns
			}
		}}
	rc := &rest.Config{Host: c.URL, TLSClientConfig: rest.TLSClientConfig{CAData: c.CA, CertData: c.Cert, KeyData: c.Key}}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := draplugin.Run(ctx, cfg, draplugin.RunOptions{REST: rc, WatchInterval: time.Hour}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// A driver killed mid-prepare — once right after creating a MIG instance,
// once after creating it and starting its MPS daemon, both before the CDI
// spec and the checkpoint — is started again, and the kubelet's next
// prepare finishes the claim: the instance at the allocated placement is
// adopted (one instance, not two), the running MPS daemon joined (started
// once), the CDI edits right, the checkpoint saying prepared. A prepared
// claim survives a restart too (same answer). Everything runs as it
// would on a node: the stock scheduler allocates, the plugin is a separate
// process, the kubelet-side peer talks to it over its unix sockets.
func TestRestartMidPrepareAdoptsState(t *testing.T) {
	t.Parallel()
	const node = "restart-node"
	c := newCluster(t, node, "restart")
	dir := shortDir(t)
	mpsBin, mpsLogFile := fakeMPS(t, dir)
	base := childConfig{Node: node, StateDir: filepath.Join(dir, "state"), CDIDir: filepath.Join(dir, "cdi"),
		RegistrarDir: filepath.Join(dir, "reg"), MPSRoot: filepath.Join(dir, "mps"), MPSControl: mpsBin,
		MachineState: filepath.Join(dir, "gpus.json"), URL: c.srv.URL,
		CA: c.srv.Config.CAData, Cert: c.srv.Config.CertData, Key: c.srv.Config.KeyData}

	hardware := func() []gpu.GPU {
		t.Helper()
		m, err := fake.New(childSpec, fake.WithSeed(childSeed), fake.WithStateFile(base.MachineState))
		if err != nil {
			t.Fatal(err)
		}
		gs, err := m.GPUs(c.ctx)
		if err != nil {
			t.Fatal(err)
		}
		return gs
	}

	type child struct {
		cmd  *exec.Cmd
		logs *syncBuffer
		done chan error
	}
	start := func(crashAt string) *child {
		t.Helper()
		// The kubelet drops a dead plugin's sockets; the new process
		// makes its own.
		socks, _ := filepath.Glob(filepath.Join(base.RegistrarDir, "*.sock"))
		for _, s := range socks {
			os.Remove(s)
		}
		cc := base
		cc.CrashAt = crashAt
		b, _ := json.Marshal(cc)
		path := filepath.Join(dir, "child.json")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestPluginChild$")
		cmd.Env = append(os.Environ(), "GPUSLICE_DRAPLUGIN_CHILD="+path)
		ch := &child{cmd: cmd, logs: &syncBuffer{}, done: make(chan error, 1)}
		cmd.Stdout, cmd.Stderr = ch.logs, ch.logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { ch.done <- cmd.Wait() }()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			if t.Failed() {
				t.Logf("driver process (crash at %q):\n%s", crashAt, tail(ch.logs.String(), 3000))
			}
		})
		return ch
	}
	killed := func(ch *child) {
		t.Helper()
		select {
		case err := <-ch.done:
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("the driver ended with %v, want killed by SIGKILL:\n%s", err, ch.logs.String())
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the driver did not crash")
		}
	}

	// Round 1: crash right after creating the MIG instance.
	ch := start(draplugin.StepMIGCreated)
	kl := registerKubelet(t, c.ctx, base.RegistrarDir)
	gpus := hardware()
	c.waitSlices(2 + 1) // a counter slice and one slice per GPU
	onGPU := func(i int, profile string) string {
		return `device.attributes["gpu.gpuslice.dev"].parentUUID == "` + gpus[i].UUID + `" && device.attributes["gpu.gpuslice.dev"].profile == "` + profile + `"`
	}
	a := c.claimPod(claimSpec{name: "mig-a", class: dranames.ClassMIG, selector: onGPU(0, "3g.20gb")})
	if got := allocatedDevice(a); got != "gpu-0-mig-3g-20gb-at-4" {
		t.Fatalf("claim a allocated %s", got)
	}
	if _, err := kl.prepare(c.ctx, a); err == nil {
		t.Fatal("prepare answered although the driver was to crash")
	}
	killed(ch)
	if g := hardware()[0]; len(g.Instances) != 1 || g.Instances[0].Profile != "3g.20gb" || g.Instances[0].Start != 4 {
		t.Fatalf("after the crash GPU 0 holds %+v; want the one instance created before it", g.Instances)
	}
	ckpt := readCheckpoint(t, base.StateDir)
	if ckpt[string(a.UID)] != "preparing" {
		t.Fatalf("checkpoint after the crash: %v; want claim a preparing", ckpt)
	}

	// Round 2: restart; the kubelet prepares a again (adopted), then b,
	// MPS inside a MIG instance, crashes after its daemon started.
	ch = start(draplugin.StepMPSReady)
	kl = registerKubelet(t, c.ctx, base.RegistrarDir)
	resp, err := kl.prepare(c.ctx, a)
	if err != nil || resp[string(a.UID)].Error != "" {
		t.Fatalf("prepare of a after the restart: %v %+v", err, resp)
	}
	firstA := resp[string(a.UID)].Devices[0].CdiDeviceIds
	if !strings.Contains(ch.logs.String(), `msg="adopted MIG instance" gpu=0 profile=3g.20gb start=4`) {
		t.Fatalf("the restarted driver did not adopt a's instance:\n%s", tail(ch.logs.String(), 3000))
	}
	if g := hardware()[0]; len(g.Instances) != 1 {
		t.Fatalf("after the second prepare GPU 0 holds %d instances: %+v", len(g.Instances), g.Instances)
	}
	b := c.claimPod(claimSpec{name: "mps-in-mig-b", class: dranames.ClassMIG, selector: onGPU(1, "2g.10gb"),
		params: gpuConfig("MigDeviceConfig", map[string]any{"strategy": "MPS", "mpsConfig": map[string]any{"defaultActiveThreadPercentage": 30, "defaultPinnedDeviceMemoryLimit": "6Gi"}})})
	if _, err := kl.prepare(c.ctx, b); err == nil {
		t.Fatal("prepare of b answered although the driver was to crash")
	}
	killed(ch)
	g1 := hardware()[1]
	if len(g1.Instances) != 1 || g1.Instances[0].Profile != "2g.10gb" {
		t.Fatalf("after the crash GPU 1 holds %+v", g1.Instances)
	}
	bUUID := g1.Instances[0].UUID
	if n := countPrefix(mpsLog(t, mpsLogFile), "start "+bUUID); n != 1 {
		t.Fatalf("MPS daemon for b started %d times before the crash", n)
	}

	// Round 3: restart without a crash; b is finished by adoption, a is
	// answered from the checkpoint.
	ch = start("")
	kl = registerKubelet(t, c.ctx, base.RegistrarDir)
	resp, err = kl.prepare(c.ctx, a, b)
	if err != nil || resp[string(a.UID)].Error != "" || resp[string(b.UID)].Error != "" {
		t.Fatalf("prepare after the second restart: %v %+v", err, resp)
	}
	if logs := ch.logs.String(); !strings.Contains(logs, `msg="adopted MIG instance" gpu=1 profile=2g.10gb`) || !strings.Contains(logs, `msg="adopted MPS control daemon" device=`+bUUID) {
		t.Fatalf("the restarted driver did not adopt b's instance and daemon:\n%s", tail(logs, 3000))
	}
	if got := resp[string(a.UID)].Devices[0].CdiDeviceIds; len(got) != 1 || got[0] != firstA[0] {
		t.Fatalf("a after a restart: %v, before %v", got, firstA)
	}
	gs := hardware()
	if len(gs[0].Instances) != 1 || len(gs[1].Instances) != 1 || gs[1].Instances[0].UUID != bUUID ||
		gs[1].Instances[0].Start != startOf(t, allocatedDevice(b)) {
		t.Fatalf("instances after the restarts: GPU 0 %+v, GPU 1 %+v; want one each, b's at its allocated start", gs[0].Instances, gs[1].Instances)
	}
	if n := countPrefix(mpsLog(t, mpsLogFile), "start "+bUUID); n != 1 {
		t.Fatalf("MPS daemon for b started %d times: the restarted driver must join the running one (log %q)", n, mpsLog(t, mpsLogFile))
	}
	env := envOf(readSpec(t, base.CDIDir, string(b.UID))[string(b.UID)+"-"+allocatedDevice(b)])
	if env["CUDA_VISIBLE_DEVICES"] != bUUID || env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] != "30" || env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] != bUUID+"=6144M" {
		t.Fatalf("b's CDI environment: %v", env)
	}
	if ck := readCheckpoint(t, base.StateDir); ck[string(a.UID)] != "prepared" || ck[string(b.UID)] != "prepared" {
		t.Fatalf("checkpoint: %v", ck)
	}
	res := kl.unprepare(c.ctx, a, b)
	for uid, r := range res {
		if r.Error != "" {
			t.Fatalf("unprepare %s: %s", uid, r.Error)
		}
	}
	if gs := hardware(); len(gs[0].Instances)+len(gs[1].Instances) != 0 {
		t.Fatalf("instances left after unprepare: %+v %+v", gs[0].Instances, gs[1].Instances)
	}
	if n := countPrefix(mpsLog(t, mpsLogFile), "quit "+bUUID); n != 1 {
		t.Fatalf("b's MPS daemon quit %d times after unprepare", n)
	}
}

// readCheckpoint returns the state of each claim in the driver's checkpoint.
func readCheckpoint(t *testing.T, stateDir string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(stateDir, draplugin.CheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Claims map[string]struct {
			State string `json:"state"`
		} `json:"claims"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for uid, r := range c.Claims {
		out[uid] = r.State
	}
	return out
}

// startOf reads the start slice out of a MIG device name (…-at-N).
func startOf(t *testing.T, device string) int {
	var n int
	i := strings.LastIndex(device, "-at-")
	if i < 0 {
		t.Fatalf("%s is not a MIG device", device)
	}
	if _, err := fmt.Sscanf(device[i+4:], "%d", &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// syncBuffer is a buffer a child process writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
