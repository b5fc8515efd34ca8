package fake_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpu/fake"
	"github.com/gpuslice/gpuslice/internal/gpu/gputest"
)

// The contract suite on a small mixed machine: an A100 with MIG off, one
// with MIG on and an instance already there, and an L4.
func TestContract(t *testing.T) {
	gputest.Contract(t, func(t *testing.T) (gpu.Device, gputest.Controls) {
		m := mustNew(t, fake.MachineSpec{GPUs: []fake.GPUSpec{
			{Model: "A100-40GB"},
			{Model: "A100-40GB", MIGEnabled: true, Instances: []string{"3g.20gb@0"}},
			{Model: "L4"},
		}}, fake.WithSeed(7))
		return m, m
	})
}

// The contract on every preset with a MIG-capable GPU exercises the
// placement rules of A100-80GB, H100 and H200 too.
func TestContractOnPresets(t *testing.T) {
	for _, name := range []string{"dgx-a100", "dgx-a100-80", "dgx-h100", "dgx-h200", "mixed"} {
		t.Run(name, func(t *testing.T) {
			gputest.Contract(t, func(t *testing.T) (gpu.Device, gputest.Controls) {
				m := mustPreset(t, name)
				return m, m
			})
		})
	}
}

func mustNew(t testing.TB, spec fake.MachineSpec, opts ...fake.Option) *fake.Machine {
	t.Helper()
	m, err := fake.New(spec, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func mustPreset(t testing.TB, name string, opts ...fake.Option) *fake.Machine {
	t.Helper()
	spec, err := fake.Preset(name)
	if err != nil {
		t.Fatal(err)
	}
	return mustNew(t, spec, opts...)
}

func gpus(t testing.TB, m *fake.Machine) []gpu.GPU {
	t.Helper()
	gs, err := m.GPUs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return gs
}

func a100MIG(t testing.TB, opts ...fake.Option) *fake.Machine {
	t.Helper()
	return mustNew(t, fake.MachineSpec{GPUs: []fake.GPUSpec{{Model: "A100-40GB", MIGEnabled: true}, {Model: "A100-40GB"}}}, opts...)
}

func TestInfo(t *testing.T) {
	m := a100MIG(t)
	if got := m.Info(); got != (gpu.BackendInfo{Backend: "fake", DriverVersion: fake.DefaultDriverVersion, Simulated: true}) {
		t.Errorf("Info = %+v", got)
	}
	m = mustNew(t, fake.MachineSpec{DriverVersion: "570.86", GPUs: []fake.GPUSpec{{Model: "T4"}}})
	if got := m.Info().DriverVersion; got != "570.86" {
		t.Errorf("DriverVersion = %q", got)
	}
}

var (
	gpuUUIDRe = regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	migUUIDRe = regexp.MustCompile(`^MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
)

func TestUUIDsAreDeterministic(t *testing.T) {
	uuids := func(seed int64) []string {
		var out []string
		for _, g := range gpus(t, mustPreset(t, "dgx-a100", fake.WithSeed(seed))) {
			if !gpuUUIDRe.MatchString(g.UUID) {
				t.Errorf("GPU uuid %q", g.UUID)
			}
			out = append(out, g.UUID)
		}
		return out
	}
	a, b, c := uuids(1), uuids(1), uuids(2)
	if !slices.Equal(a, b) {
		t.Errorf("same seed, different uuids: %v vs %v", a, b)
	}
	for i := range a {
		if a[i] == c[i] {
			t.Errorf("GPU %d: seeds 1 and 2 both give %s", i, a[i])
		}
		if slices.Index(a, a[i]) != i {
			t.Errorf("uuid %s repeats", a[i])
		}
	}

	ctx := context.Background()
	m1, m2 := a100MIG(t, fake.WithSeed(3)), a100MIG(t, fake.WithSeed(3))
	in1, err := m1.CreateInstance(ctx, 0, "3g.20gb", 4)
	if err != nil {
		t.Fatal(err)
	}
	in2, err := m2.CreateInstance(ctx, 0, "3g.20gb", 4)
	if err != nil {
		t.Fatal(err)
	}
	if !migUUIDRe.MatchString(in1.UUID) || in1 != in2 {
		t.Errorf("instances differ across equal machines: %+v vs %+v", in1, in2)
	}
	// Same GPU, same GI id: same uuid after a destroy and re-create.
	if err := m1.DestroyInstance(ctx, 0, in1.UUID); err != nil {
		t.Fatal(err)
	}
	again, err := m1.CreateInstance(ctx, 0, "1g.5gb", 0)
	if err != nil {
		t.Fatal(err)
	}
	if again.GIID != in1.GIID || again.UUID != in1.UUID {
		t.Errorf("GI %d got %s; GI %d had %s", again.GIID, again.UUID, in1.GIID, in1.UUID)
	}
}

func TestGIIDsAreSmallAndReused(t *testing.T) {
	ctx := context.Background()
	m := a100MIG(t)
	var ids []int
	var made []gpu.Instance
	for start := range 7 {
		in, err := m.CreateInstance(ctx, 0, "1g.5gb", start)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, in.GIID)
		made = append(made, in)
		if in.CIID != 0 {
			t.Errorf("CI id %d, want 0", in.CIID)
		}
	}
	if want := []int{1, 2, 3, 4, 5, 6, 7}; !slices.Equal(ids, want) {
		t.Errorf("GI ids %v, want %v", ids, want)
	}
	if err := m.DestroyInstance(ctx, 0, made[2].UUID); err != nil {
		t.Fatal(err)
	}
	in, err := m.CreateInstance(ctx, 0, "1g.5gb", 2)
	if err != nil {
		t.Fatal(err)
	}
	if in.GIID != 3 {
		t.Errorf("re-created instance got GI %d, want the freed 3", in.GIID)
	}
}

func TestInstanceFactsComeFromTheCatalog(t *testing.T) {
	ctx := context.Background()
	m := a100MIG(t)
	in, err := m.CreateInstance(ctx, 0, "3G.20GB", 4)
	if err != nil {
		t.Fatal(err)
	}
	if in.Profile != "3g.20gb" || in.Start != 4 || in.Size != 4 || in.MemoryMiB != 19968 {
		t.Errorf("instance %+v, want 3g.20gb at 4+4 with 19968 MiB", in)
	}
	g := gpus(t, m)[0]
	if g.Name != "NVIDIA A100-SXM4-40GB" || g.Model != "A100-40GB" || g.MemoryMiB != 40960 || !g.MIGCapable {
		t.Errorf("GPU %+v", g)
	}
}

func TestPlacementErrorsExplain(t *testing.T) {
	ctx := context.Background()
	m := a100MIG(t)
	_, err := m.CreateInstance(ctx, 0, "3g.20gb", 2)
	if !errors.Is(err, gpu.ErrPlacement) || !strings.Contains(err.Error(), "{0,4}:4") {
		t.Errorf("wrong start: %v, want ErrPlacement naming {0,4}:4", err)
	}
	first, err := m.CreateInstance(ctx, 0, "3g.20gb", 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.CreateInstance(ctx, 0, "2g.10gb", 2)
	if !errors.Is(err, gpu.ErrPlacement) || !strings.Contains(err.Error(), "overlaps 3g.20gb@0") ||
		!strings.Contains(err.Error(), first.UUID) {
		t.Errorf("overlap: %v, want ErrPlacement naming 3g.20gb@0 and %s", err, first.UUID)
	}
	// Count limits: one 4g, at most one +me.
	if _, err := m.CreateInstance(ctx, 0, "1g.5gb+me", 4); err != nil {
		t.Fatal(err)
	}
	_, err = m.CreateInstance(ctx, 0, "1g.5gb+me", 5)
	if !errors.Is(err, gpu.ErrPlacement) || !strings.Contains(err.Error(), "+me") {
		t.Errorf("second +me: %v", err)
	}
	_, err = m.CreateInstance(ctx, 0, "1g.3gb", 5)
	if !catalog.IsNotFound(err) || errors.Is(err, gpu.ErrPlacement) {
		t.Errorf("unknown profile: %v, want a *catalog.NotFoundError", err)
	}
}

// NVIDIA's 3-2-1-1 example, created in the order where nvidia-smi's
// automatic placement fails: explicit starts make any order work.
func TestNVIDIAExample(t *testing.T) {
	ctx := context.Background()
	m := a100MIG(t)
	for _, in := range []struct {
		p string
		s int
	}{{"1g.5gb", 2}, {"1g.5gb", 3}, {"2g.10gb", 0}, {"3g.20gb", 4}} {
		if _, err := m.CreateInstance(ctx, 0, in.p, in.s); err != nil {
			t.Fatalf("%s@%d: %v", in.p, in.s, err)
		}
	}
	var got []string
	for _, in := range gpus(t, m)[0].Instances {
		got = append(got, fmt.Sprintf("%s@%d", in.Profile, in.Start))
	}
	if want := []string{"2g.10gb@0", "1g.5gb@2", "1g.5gb@3", "3g.20gb@4"}; !slices.Equal(got, want) {
		t.Errorf("instances %v, want %v (by start)", got, want)
	}
}

func TestSetMIGModeRules(t *testing.T) {
	ctx := context.Background()
	m := mustPreset(t, "mixed")
	if err := m.SetMIGMode(ctx, 2, true); !errors.Is(err, gpu.ErrNoMIG) {
		t.Errorf("MIG on an L4: %v", err)
	}
	if err := m.SetMIGMode(ctx, 2, false); err != nil {
		t.Errorf("MIG off on an L4 (already off): %v", err)
	}
	if err := m.StartProcess(gpus(t, m)[0].UUID, 10, 1); err == nil {
		t.Error("a process started on a GPU in MIG mode rather than on an instance")
	}
}

func TestProcessMemory(t *testing.T) {
	ctx := context.Background()
	m := a100MIG(t)
	in, err := m.CreateInstance(ctx, 0, "1g.5gb", 6)
	if err != nil {
		t.Fatal(err)
	}
	// A MIG instance cannot hand out more than its 4864 MiB.
	if err := m.StartProcess(in.UUID, 100, 4000); err != nil {
		t.Fatal(err)
	}
	if err := m.StartProcess(in.UUID, 101, 1000); !errors.Is(err, fake.ErrOutOfMemory) {
		t.Errorf("over the instance's memory: %v, want ErrOutOfMemory", err)
	}
	if err := m.SetProcessMemory(100, 5000); !errors.Is(err, fake.ErrOutOfMemory) {
		t.Errorf("growing past the instance: %v", err)
	}
	if err := m.SetProcessMemory(100, 4864); err != nil {
		t.Errorf("growing to exactly the instance: %v", err)
	}
	// A whole GPU lets one process take more than any claim's share (the
	// watchdog's job), but not more than the GPU.
	whole := gpus(t, m)[1]
	if err := m.StartProcess(whole.UUID, 200, 30000); err != nil {
		t.Errorf("a 30000 MiB process on a 40960 MiB GPU: %v", err)
	}
	if err := m.StartProcess(whole.UUID, 201, 20000); !errors.Is(err, fake.ErrOutOfMemory) {
		t.Errorf("over the GPU's memory: %v", err)
	}
	if err := m.SetProcessMemory(200, 40960); err != nil {
		t.Errorf("growing to the whole GPU: %v", err)
	}
	ps, err := m.Processes(ctx, whole.UUID)
	if err != nil || len(ps) != 1 || ps[0].PID != 200 || ps[0].MemoryMiB != 40960 || ps[0].SMPercent == nil || *ps[0].SMPercent != 25 {
		t.Errorf("Processes = %+v, %v; want pid 200 with 40960 MiB at 25%% SM", ps, err)
	}
	if err := m.SetProcessUtilization(200, 90); err != nil {
		t.Fatal(err)
	}
	if ps, _ := m.Processes(ctx, whole.UUID); len(ps) != 1 || ps[0].SMPercent == nil || *ps[0].SMPercent != 90 {
		t.Errorf("after pinning 90%%: %+v", ps)
	}
	if err := m.SetProcessUtilization(999, 10); !errors.Is(err, fake.ErrNoProcess) {
		t.Errorf("SetProcessUtilization(unknown pid) = %v", err)
	}
	if err := m.SetProcessUtilization(200, 101); err == nil {
		t.Error("SetProcessUtilization(101%) succeeded")
	}
	// The parent of a MIG instance lists its instances' processes.
	ps, err = m.Processes(ctx, gpus(t, m)[0].UUID)
	if err != nil || !slices.Equal(ps, []gpu.Process{{PID: 100, MemoryMiB: 4864}}) {
		t.Errorf("Processes(parent) = %+v, %v", ps, err)
	}

	for _, tc := range []struct {
		name string
		err  error
	}{
		{"duplicate pid", m.StartProcess(whole.UUID, 200, 1)},
		{"pid 0", m.StartProcess(whole.UUID, 0, 1)},
		{"negative memory", m.StartProcess(whole.UUID, 300, -1)},
		{"negative resize", m.SetProcessMemory(200, -1)},
	} {
		if tc.err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
	if err := m.StartProcess("GPU-nope", 300, 1); !errors.Is(err, gpu.ErrNotFound) {
		t.Errorf("unknown uuid: %v", err)
	}
	if err := m.StopProcess(999); !errors.Is(err, fake.ErrNoProcess) {
		t.Errorf("StopProcess(999): %v", err)
	}
	if err := m.SetProcessMemory(999, 1); !errors.Is(err, fake.ErrNoProcess) {
		t.Errorf("SetProcessMemory(999): %v", err)
	}
	if err := m.StopProcess(200); err != nil {
		t.Fatal(err)
	}
	if err := m.StartProcess(whole.UUID, 200, 1); err != nil {
		t.Errorf("reusing a stopped pid: %v", err)
	}
}

func TestComputeModeProhibitedRefusesProcesses(t *testing.T) {
	ctx := context.Background()
	m := mustPreset(t, "t4")
	g := gpus(t, m)[0]
	if err := m.SetComputeMode(ctx, 0, gpu.ComputeProhibited); err != nil {
		t.Fatal(err)
	}
	if err := m.StartProcess(g.UUID, 1, 1); err == nil {
		t.Error("a process started on a prohibited GPU")
	}
	if err := m.SetComputeMode(ctx, 0, gpu.ComputeExclusiveProcess); err != nil {
		t.Fatal(err)
	}
	// Exclusive-process is not enforced: MPS clients are several processes.
	for pid := 1; pid <= 2; pid++ {
		if err := m.StartProcess(g.UUID, pid, 1); err != nil {
			t.Errorf("pid %d on an exclusive-process GPU: %v", pid, err)
		}
	}
}

func TestUtilization(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	m := mustPreset(t, "t4", fake.WithClock(func() time.Time { return now }))
	g := gpus(t, m)[0] // 16384 MiB
	u, err := m.Utilization(ctx, g.UUID)
	if err != nil || u != (gpu.Utilization{Time: now}) {
		t.Errorf("idle: %+v, %v", u, err)
	}
	for pid, mib := range map[int]int64{1: 4096, 2: 4096} {
		if err := m.StartProcess(g.UUID, pid, mib); err != nil {
			t.Fatal(err)
		}
	}
	if u, _ := m.Utilization(ctx, g.UUID); u.SMPercent != 50 || u.MemoryPercent != 50 {
		t.Errorf("two processes, half the memory: %+v", u)
	}
	if err := m.SetUtilization(g.UUID, 97, -1); err != nil {
		t.Fatal(err)
	}
	if u, _ := m.Utilization(ctx, g.UUID); u.SMPercent != 97 || u.MemoryPercent != 50 {
		t.Errorf("pinned SM: %+v", u)
	}
	if err := m.SetUtilization(g.UUID, -1, -1); err != nil {
		t.Fatal(err)
	}
	if u, _ := m.Utilization(ctx, g.UUID); u.SMPercent != 50 {
		t.Errorf("unpinned: %+v", u)
	}
	if err := m.SetUtilization(g.UUID, 101, 0); err == nil {
		t.Error("SetUtilization(101) accepted")
	}
	if err := m.SetUtilization("GPU-nope", 1, 1); !errors.Is(err, gpu.ErrNotFound) {
		t.Errorf("SetUtilization on an unknown uuid: %v", err)
	}
}

func TestCanceledContext(t *testing.T) {
	m := a100MIG(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.GPUs(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("GPUs: %v", err)
	}
	if _, err := m.CreateInstance(ctx, 0, "1g.5gb", 0); !errors.Is(err, context.Canceled) {
		t.Errorf("CreateInstance: %v", err)
	}
	if err := m.SetMIGMode(ctx, 0, false); !errors.Is(err, context.Canceled) {
		t.Errorf("SetMIGMode: %v", err)
	}
	if _, err := m.Events(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Events: %v", err)
	}
}

// On an H100, a MIG instance's processes get SM utilization as gpu/nvml
// gets it from GPM: none on the first read, then the instance's busy share
// scaled to the GPU and split equally. An A100 gives none.
func TestMIGProcessUtilizationLikeGPM(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		model string
		want  int // per process on the second read, -1 for none
	}{
		{"H100-80GB-SXM", 21}, // (80 + 25)% capped at 100, × 3/7 of the SMs, ÷ 2
		{"A100-40GB", -1},
	} {
		m := mustNew(t, fake.MachineSpec{GPUs: []fake.GPUSpec{{Model: tc.model, MIGEnabled: true}}})
		profile := "3g.40gb"
		if tc.model == "A100-40GB" {
			profile = "3g.20gb"
		}
		in, err := m.CreateInstance(ctx, 0, profile, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, pid := range []int{11, 12} {
			if err := m.StartProcess(in.UUID, pid, 1024); err != nil {
				t.Fatal(err)
			}
		}
		if err := m.SetProcessUtilization(11, 80); err != nil {
			t.Fatal(err)
		}
		for read := 1; read <= 2; read++ {
			ps, err := m.Processes(ctx, in.UUID)
			if err != nil || len(ps) != 2 {
				t.Fatalf("%s: Processes = %+v, %v", tc.model, ps, err)
			}
			for _, p := range ps {
				got := -1
				if p.SMPercent != nil {
					got = *p.SMPercent
				}
				want := tc.want
				if read == 1 {
					want = -1
				}
				if got != want {
					t.Errorf("%s read %d: pid %d SM %d, want %d (-1: none)", tc.model, read, p.PID, got, want)
				}
			}
		}
	}
}
