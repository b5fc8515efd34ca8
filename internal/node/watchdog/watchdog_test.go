package watchdog_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpu/fake"
	"github.com/gpuslice/gpuslice/internal/node/watchdog"
)

const node = "n1"

type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

// rig is a machine with a whole A100 (time-sliced or MPS) and an A100 in
// MIG mode with two 3g.20gb instances.
type rig struct {
	m     *fake.Machine
	whole gpu.GPU
	mig   []gpu.Instance
	clk   *clock
}

func newRig(t *testing.T) *rig {
	t.Helper()
	m, err := fake.New(fake.MachineSpec{GPUs: []fake.GPUSpec{
		{Model: "A100-40GB"},
		{Model: "A100-40GB", MIGEnabled: true, Instances: []string{"3g.20gb@0", "3g.20gb@4"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := m.GPUs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return &rig{m: m, whole: gpus[0], mig: gpus[1].Instances, clk: &clock{t: time.Unix(1_000_000, 0)}}
}

func (r *rig) start(t *testing.T, uuid string, pid int, mib int64) {
	t.Helper()
	if err := r.m.StartProcess(uuid, pid, mib); err != nil {
		t.Fatal(err)
	}
}

func claim(id, policy string, mode alloc.Mode, devs ...alloc.Assigned) api.Claim {
	for i := range devs {
		devs[i].Node, devs[i].Mode = node, mode
	}
	return api.Claim{ID: id, Tenant: "t-" + id, State: api.Running, Spec: api.ClaimSpec{MemoryPolicy: policy},
		Allocation: &alloc.Allocation{Claim: id, Tenant: "t-" + id, Devices: devs}}
}

func on(gpuID, device string, mib int64) alloc.Assigned {
	return alloc.Assigned{GPU: gpuID, Device: device, MemoryMiB: mib}
}

func owners(m map[int]string) watchdog.PIDOwner {
	return func(pid int) (string, bool) { id, ok := m[pid]; return id, ok }
}

// Two claims time-slice a whole GPU: processes are attributed by pid,
// each claim's total is held to its own promise, and an unknown process
// is reported once while it runs.
func TestWatchSharedGPU(t *testing.T) {
	r := newRig(t)
	g := r.whole.UUID
	claims := []api.Claim{
		claim("c-1", "", alloc.TimeSlice, on(g, g, 10240)),
		claim("c-2", "kill", alloc.TimeSlice, on(g, g, 10240)),
	}
	r.start(t, g, 101, 12000) // c-1, over
	r.start(t, g, 201, 6000)  // c-2: 12000 in all, over
	r.start(t, g, 202, 6000)
	r.start(t, g, 999, 100) // nobody's
	w := watchdog.New(watchdog.Config{Clock: r.clk.now, Owner: owners(map[int]string{101: "c-1", 201: "c-2", 202: "c-2"})})

	res := w.Watch(context.Background(), r.m, claims, node)
	if res.Err() != nil {
		t.Fatal(res.Err())
	}
	quarter := 25 // the fake's SM share of each of the GPU's four processes
	want := []watchdog.Violation{
		{Claim: "c-1", Tenant: "t-c-1", Node: node, Device: g, PID: 101, UsedMiB: 12000, PromisedMiB: 10240, Policy: "warn",
			Processes: []gpu.Process{{PID: 101, MemoryMiB: 12000, SMPercent: &quarter}}},
		{Claim: "c-2", Tenant: "t-c-2", Node: node, Device: g, PID: 201, UsedMiB: 12000, PromisedMiB: 10240, Policy: "kill",
			Processes: []gpu.Process{{PID: 201, MemoryMiB: 6000, SMPercent: &quarter}, {PID: 202, MemoryMiB: 6000, SMPercent: &quarter}}},
	}
	if !reflect.DeepEqual(res.Violations, want) {
		t.Errorf("violations\n got  %+v\n want %+v", res.Violations, want)
	}
	if len(res.Events) != 1 || res.Events[0].Kind != watchdog.EventUnknownProcess || !strings.Contains(res.Events[0].Message, "pid 999") ||
		!strings.Contains(res.Events[0].Message, "c-1, c-2") || res.Events[0].Node != node {
		t.Errorf("events %+v, want one unknown-process for pid 999", res.Events)
	}

	// Still there: not reported again. Gone and back: reported again.
	if res := w.Watch(context.Background(), r.m, claims, node); len(res.Events) != 0 {
		t.Errorf("unknown process reported twice: %+v", res.Events)
	}
	if err := r.m.StopProcess(999); err != nil {
		t.Fatal(err)
	}
	w.Watch(context.Background(), r.m, claims, node)
	r.start(t, g, 999, 100)
	if res := w.Watch(context.Background(), r.m, claims, node); len(res.Events) != 1 {
		t.Errorf("returning unknown process not reported: %+v", res.Events)
	}

	// Under the promise: no violation.
	if err := r.m.SetProcessMemory(101, 10240); err != nil {
		t.Fatal(err)
	}
	if res := w.Watch(context.Background(), r.m, claims, node); len(res.Violations) != 1 || res.Violations[0].Claim != "c-2" {
		t.Errorf("violations %+v, want only c-2", res.Violations)
	}
}

// With one claim on a device every process there is its own, known or
// not; a process launched for a claim that does not hold the device is
// reported; ignored pids (MPS servers) count for nobody.
func TestWatchAttribution(t *testing.T) {
	r := newRig(t)
	g, mig := r.whole.UUID, r.mig[0].UUID
	claims := []api.Claim{
		claim("c-1", "", alloc.MPS, on(g, g, 8192)),
		claim("c-2", "", alloc.MIG, on(r.mig[0].UUID, mig, r.mig[0].MemoryMiB)),
	}
	r.start(t, g, 10, 4096)   // unknown to Owner: c-1's (alone on the GPU)
	r.start(t, g, 11, 5000)   // c-1 by Owner
	r.start(t, g, 12, 900)    // the MPS server: ignored
	r.start(t, mig, 20, 1000) // launched for c-1 but on c-2's instance
	w := watchdog.New(watchdog.Config{Clock: r.clk.now,
		Owner:  owners(map[int]string{11: "c-1", 20: "c-1"}),
		Ignore: func(pid int) bool { return pid == 12 }})
	res := w.Watch(context.Background(), r.m, claims, node)
	if len(res.Violations) != 1 || res.Violations[0].UsedMiB != 9096 || res.Violations[0].PID != 11 {
		t.Errorf("violations %+v, want c-1 at 9096 MiB", res.Violations)
	}
	if len(res.Events) != 1 || res.Events[0].Claim != "c-1" || !strings.Contains(res.Events[0].Message, "does not hold "+mig) {
		t.Errorf("events %+v", res.Events)
	}
	wantUsage := []watchdog.Usage{{Claim: "c-1", MemoryMiB: 9096}, {Claim: "c-2"}}
	if !reflect.DeepEqual(res.Usage, wantUsage) {
		t.Errorf("usage %+v, want %+v", res.Usage, wantUsage)
	}
}

// MIG instances: an instance's own limit stops a process at its memory, so
// an exclusive claim cannot go over; two MPS claims sharing an instance are
// held to their shares.
func TestWatchMIG(t *testing.T) {
	r := newRig(t)
	a, b := r.mig[0], r.mig[1]
	claims := []api.Claim{
		claim("c-ex", "kill", alloc.MIG, on("GPU-p", a.UUID, a.MemoryMiB)),
		claim("c-m1", "kill", alloc.MPS, on("GPU-p", b.UUID, b.MemoryMiB/2)),
		claim("c-m2", "warn", alloc.MPS, on("GPU-p", b.UUID, b.MemoryMiB/2)),
	}
	r.start(t, a.UUID, 1, a.MemoryMiB)
	if err := r.m.StartProcess(a.UUID, 2, 1); !errors.Is(err, fake.ErrOutOfMemory) {
		t.Fatalf("instance over its memory: %v", err)
	}
	r.start(t, b.UUID, 3, b.MemoryMiB/2+100)
	r.start(t, b.UUID, 4, 100)
	w := watchdog.New(watchdog.Config{Clock: r.clk.now, Owner: owners(map[int]string{1: "c-ex", 3: "c-m1", 4: "c-m2"})})
	res := w.Watch(context.Background(), r.m, claims, node)
	if len(res.Violations) != 1 || res.Violations[0].Claim != "c-m1" || res.Violations[0].Device != b.UUID ||
		res.Violations[0].UsedMiB != b.MemoryMiB/2+100 || res.Violations[0].Policy != "kill" {
		t.Errorf("violations %+v, want c-m1 over on %s", res.Violations, b.UUID)
	}
}

// Usage accumulates with the clock: GPU-seconds per busy device,
// SM-seconds from per-process utilization (none on MIG instances),
// MiB-seconds of the memory held; the first call measures nothing.
func TestUsage(t *testing.T) {
	r := newRig(t)
	g, mig := r.whole.UUID, r.mig[0].UUID
	claims := []api.Claim{
		claim("c-1", "", alloc.TimeSlice, on(g, g, 20000), on(r.mig[0].UUID, mig, r.mig[0].MemoryMiB)),
		claim("c-2", "", alloc.TimeSlice, on(g, g, 20000)),
	}
	w := watchdog.New(watchdog.Config{Clock: r.clk.now, Owner: owners(map[int]string{1: "c-1", 2: "c-1", 3: "c-2"})})
	r.start(t, g, 1, 1000)
	r.start(t, mig, 2, 3000)
	res := w.Watch(context.Background(), r.m, claims, node)
	want := []watchdog.Usage{{Claim: "c-1", MemoryMiB: 4000}, {Claim: "c-2"}}
	if !reflect.DeepEqual(res.Usage, want) {
		t.Fatalf("first usage %+v, want %+v", res.Usage, want)
	}

	r.clk.advance(10 * time.Second)
	res = w.Watch(context.Background(), r.m, claims, node)
	want = []watchdog.Usage{
		{Claim: "c-1", GPUSeconds: 20, SMSeconds: 2.5, MemoryMiBSeconds: 40000, MemoryMiB: 4000},
		{Claim: "c-2"},
	}
	if !reflect.DeepEqual(res.Usage, want) {
		t.Fatalf("usage %+v, want %+v", res.Usage, want)
	}

	if err := r.m.StopProcess(2); err != nil {
		t.Fatal(err)
	}
	r.start(t, g, 3, 500)
	if err := r.m.SetProcessUtilization(1, 80); err != nil {
		t.Fatal(err)
	}
	r.clk.advance(5 * time.Second)
	res = w.Watch(context.Background(), r.m, claims, node)
	want = []watchdog.Usage{
		{Claim: "c-1", GPUSeconds: 5, SMSeconds: 4, MemoryMiBSeconds: 5000, MemoryMiB: 1000},
		{Claim: "c-2", GPUSeconds: 5, SMSeconds: 1.25, MemoryMiBSeconds: 2500, MemoryMiB: 500},
	}
	if !reflect.DeepEqual(res.Usage, want) {
		t.Fatalf("usage %+v, want %+v", res.Usage, want)
	}
}

// A device that cannot be read is an error; the others are still watched.
// Planned devices, other nodes and final claims are skipped.
func TestWatchSkipsAndErrors(t *testing.T) {
	r := newRig(t)
	g := r.whole.UUID
	released := claim("c-3", "", alloc.Exclusive, on(g, g, 1))
	released.State = api.Released
	other := claim("c-4", "", alloc.Exclusive, on(g, g, 1))
	other.Allocation.Devices[0].Node = "n2"
	claims := []api.Claim{
		claim("c-1", "", alloc.Exclusive, on(g, g, 100)),
		claim("c-2", "", alloc.MIG, on("GPU-gone", "MIG-gone", 100), on(g, g+"/1g.5gb@0", 100)),
		released, other,
	}
	r.start(t, g, 1, 200)
	w := watchdog.New(watchdog.Config{Clock: r.clk.now})
	res := w.Watch(context.Background(), r.m, claims, node)
	if len(res.Errors) != 1 || !errors.Is(res.Errors[0], gpu.ErrNotFound) || !strings.Contains(res.Err().Error(), "MIG-gone") {
		t.Errorf("errors %v", res.Errors)
	}
	if len(res.Violations) != 1 || res.Violations[0].Claim != "c-1" {
		t.Errorf("violations %+v", res.Violations)
	}
	if len(res.Usage) != 2 {
		t.Errorf("usage %+v, want c-1 and c-2", res.Usage)
	}
}

func violation(claimID, policy string, procs ...gpu.Process) watchdog.Violation {
	var used int64
	for _, p := range procs {
		used += p.MemoryMiB
	}
	return watchdog.Violation{Claim: claimID, Tenant: "t", Node: node, Device: "GPU-x", PID: procs[0].PID,
		UsedMiB: used, PromisedMiB: 10000, Policy: policy, Processes: procs}
}

func kinds(evs []api.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Kind+":"+e.Claim)
	}
	return out
}

func TestEnforceWarnIsRateLimited(t *testing.T) {
	e := watchdog.NewEnforcer(time.Minute)
	t0 := time.Unix(1000, 0)
	v := []watchdog.Violation{violation("c-1", "warn", gpu.Process{PID: 1, MemoryMiB: 12000})}
	killed := 0
	killer := func(int) error { killed++; return nil }
	for _, step := range []struct {
		at   time.Duration
		want []string
	}{
		{0, []string{"memory-over-limit:c-1"}},
		{30 * time.Second, nil},
		{59 * time.Second, nil},
		{60 * time.Second, []string{"memory-over-limit:c-1"}},
		{90 * time.Second, nil},
	} {
		evs := e.Enforce(context.Background(), v, killer, 0, t0.Add(step.at))
		if !reflect.DeepEqual(kinds(evs), step.want) {
			t.Errorf("at %v: events %v, want %v", step.at, kinds(evs), step.want)
		}
		for _, ev := range evs {
			if ev.Tenant != "t" || ev.Node != node || !ev.Time.Equal(t0.Add(step.at)) || !strings.Contains(ev.Message, "12000 MiB") {
				t.Errorf("event %+v", ev)
			}
		}
	}
	if killed != 0 {
		t.Errorf("warn policy killed %d processes", killed)
	}
}

// kill waits for the grace period over the limit, without a break, then
// kills the largest processes until the rest fits; the real processes go
// away on the fake machine and the claim is within its promise again.
func TestEnforceKillAfterGrace(t *testing.T) {
	r := newRig(t)
	g := r.whole.UUID
	claims := []api.Claim{claim("c-1", "kill", alloc.TimeSlice, on(g, g, 10000))}
	r.start(t, g, 1, 7000)
	r.start(t, g, 2, 3000)
	r.start(t, g, 3, 2000)
	w := watchdog.New(watchdog.Config{Clock: r.clk.now})
	e := watchdog.NewEnforcer(time.Minute)
	const grace = 30 * time.Second
	var killed []int
	killer := func(pid int) error { killed = append(killed, pid); return r.m.StopProcess(pid) }
	step := func(want ...string) {
		t.Helper()
		res := w.Watch(context.Background(), r.m, claims, node)
		evs := e.Enforce(context.Background(), res.Violations, killer, grace, r.clk.now())
		if !reflect.DeepEqual(kinds(evs), want) && !(len(want) == 0 && len(evs) == 0) {
			t.Fatalf("at %v: events %v, want %v", r.clk.now(), kinds(evs), want)
		}
	}

	step("memory-over-limit:c-1") // 12000 > 10000: the grace period starts
	r.clk.advance(20 * time.Second)
	if err := r.m.SetProcessMemory(3, 0); err != nil { // back under: grace resets
		t.Fatal(err)
	}
	step()
	r.clk.advance(5 * time.Second)
	if err := r.m.SetProcessMemory(3, 2000); err != nil {
		t.Fatal(err)
	}
	step() // over again, rate-limited event, grace from now
	r.clk.advance(29 * time.Second)
	step()
	if len(killed) != 0 {
		t.Fatalf("killed %v before the grace period", killed)
	}
	r.clk.advance(time.Second)
	step("memory-killed:c-1") // 30s over: pid 1 (7000) goes, 5000 left fits
	if !reflect.DeepEqual(killed, []int{1}) {
		t.Fatalf("killed %v, want [1]", killed)
	}
	r.clk.advance(5 * time.Second)
	step() // within the promise
}

func TestEnforceKillFailureAndMany(t *testing.T) {
	e := watchdog.NewEnforcer(0)
	v := []watchdog.Violation{violation("c-1", "kill",
		gpu.Process{PID: 1, MemoryMiB: 6000}, gpu.Process{PID: 2, MemoryMiB: 6000}, gpu.Process{PID: 3, MemoryMiB: 6000})}
	var tried []int
	killer := func(pid int) error {
		tried = append(tried, pid)
		if pid == 1 {
			return errors.New("operation not permitted")
		}
		return nil
	}
	evs := e.Enforce(context.Background(), v, killer, 0, time.Unix(0, 0))
	// 18000 of 10000: pid 1 cannot be killed, 2 and 3 must go.
	if got := kinds(evs); !reflect.DeepEqual(got, []string{"memory-kill-failed:c-1", "memory-killed:c-1", "memory-killed:c-1"}) {
		t.Errorf("events %v", got)
	}
	if !reflect.DeepEqual(tried, []int{1, 2, 3}) {
		t.Errorf("tried %v", tried)
	}
	if !strings.Contains(evs[0].Message, "operation not permitted") {
		t.Errorf("message %q", evs[0].Message)
	}

	// No killer: kill behaves like warn.
	evs = watchdog.NewEnforcer(0).Enforce(context.Background(), v, nil, 0, time.Unix(0, 0))
	if got := kinds(evs); !reflect.DeepEqual(got, []string{"memory-over-limit:c-1"}) {
		t.Errorf("events without killer %v", got)
	}
}

func TestPolicy(t *testing.T) {
	for in, want := range map[string]string{"": "warn", "warn": "warn", "kill": "kill", "KILL": "warn", "bogus": "warn"} {
		if got := watchdog.Policy(in); got != want {
			t.Errorf("Policy(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestEnvOwner(t *testing.T) {
	root := t.TempDir()
	write := func(pid, env string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(root, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, pid, "environ"), []byte(env), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("10", "PATH=/bin\x00GPUSLICE_CLAIM=c-7\x00CUDA_VISIBLE_DEVICES=GPU-1\x00")
	write("11", "PATH=/bin\x00GPUSLICE_CLAIM=\x00")
	write("12", "GPUSLICE_CLAIMX=c-1")
	owner := watchdog.EnvOwner(root)
	for pid, want := range map[int]string{10: "c-7", 11: "", 12: "", 13: ""} {
		got, ok := owner(pid)
		if got != want || ok != (want != "") {
			t.Errorf("pid %d: %q, %v; want %q", pid, got, ok, want)
		}
	}
	// This very process has no claim.
	if id, ok := watchdog.EnvOwner("")(os.Getpid()); ok && os.Getenv("GPUSLICE_CLAIM") == "" {
		t.Errorf("own pid owned by %q", id)
	}
}
