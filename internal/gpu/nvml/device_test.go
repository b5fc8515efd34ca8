//go:build cgo

package nvml

import (
	"context"
	"errors"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"

	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpu/gputest"
)

// skipOnMock lists the contract subtests that need NVML to enforce
// placement, which go-nvml's mock does not: its
// CreateGpuInstanceWithPlacement succeeds at any start, over other
// instances and past every count limit. The adapter leaves those rules to
// the driver (it only checks a start against NVML's possible placements,
// which the mock does list), so on the mock these subtests would fail for
// the mock's sake, not the adapter's.
var skipOnMock = map[string]string{
	"NVIDIAExample3211": "ends by creating 1g.5gb on a full 3-2-1-1 A100, which NVML refuses with INSUFFICIENT_RESOURCES and the mock accepts",
	"OverlapRejected":   "needs NVML to refuse a GPU instance over another (INSUFFICIENT_RESOURCES); the mock has no occupancy",
	"CountLimits":       "needs NVML to refuse a second 1g.5gb+me; the mock ignores InstanceCount",
}

// TestContract runs the gpu.Device contract over go-nvml's dgxa100 mock
// (seven A100-40GB and an L4, see mockMachine).
func TestContract(t *testing.T) {
	gputest.Contract(t, func(t *testing.T) (gpu.Device, gputest.Controls) {
		if why, ok := skipOnMock[path.Base(t.Name())]; ok {
			t.Skip("go-nvml's mock does not enforce placement: " + why)
		}
		m := newMockMachine(true)
		return openMock(t, m), m
	})
}

// openMock opens a Device over a mock machine, closed with the test.
func openMock(t *testing.T, m *mockMachine, opts ...Option) *Device {
	t.Helper()
	opts = append([]Option{WithInterface(m.srv), WithEventPoll(10 * time.Millisecond)}, opts...)
	d, err := Open(opts...)
	if err != nil {
		t.Fatalf("Open over the mock: %v", err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return d
}

func TestOpenWithoutDriver(t *testing.T) {
	for _, tc := range []struct {
		ret    gonvml.Return
		nodrv  bool
		substr string
	}{
		{gonvml.ERROR_LIBRARY_NOT_FOUND, true, "no NVIDIA driver found (libnvidia-ml.so.1 could not be loaded): use --simulate"},
		{gonvml.ERROR_DRIVER_NOT_LOADED, true, "kernel driver is not loaded"},
		{gonvml.ERROR_LIB_RM_VERSION_MISMATCH, true, "does not match the loaded kernel driver"},
		{gonvml.ERROR_NO_PERMISSION, false, "no permission"},
		{gonvml.ERROR_UNKNOWN, false, "initialising NVML"},
	} {
		lib := &mock.Interface{InitFunc: func() gonvml.Return { return tc.ret }}
		d, err := Open(WithInterface(lib))
		if d != nil || err == nil {
			t.Fatalf("Init returning %v: Open = %v, %v", tc.ret, d, err)
		}
		if errors.Is(err, gpu.ErrNoDriver) != tc.nodrv || !strings.Contains(err.Error(), tc.substr) {
			t.Errorf("Init returning %d: %v; want ErrNoDriver=%v and %q", int32(tc.ret), err, tc.nodrv, tc.substr)
		}
	}
	if got, want := func() string {
		_, err := Open(WithInterface(&mock.Interface{InitFunc: func() gonvml.Return { return gonvml.ERROR_LIBRARY_NOT_FOUND }}))
		return err.Error()
	}(), "no NVIDIA driver found (libnvidia-ml.so.1 could not be loaded): use --simulate"; got != want {
		t.Errorf("no-library message %q, want %q", got, want)
	}
}

// TestOpenPanicsAreErrors: an Init that panics (go-nvml does when a symbol
// is missing; a bare moq mock does for any method) is an ErrNoDriver
// error, not a crash.
func TestOpenPanicsAreErrors(t *testing.T) {
	for name, lib := range map[string]gonvml.Interface{
		"bare mock":      &mock.Interface{},
		"panicking Init": &mock.Interface{InitFunc: func() gonvml.Return { panic("undefined symbol: nvmlInit_v2") }},
	} {
		d, err := Open(WithInterface(lib))
		if d != nil || !errors.Is(err, gpu.ErrNoDriver) || !strings.Contains(err.Error(), "use --simulate") {
			t.Errorf("%s: Open = %v, %v; want an ErrNoDriver error", name, d, err)
		}
	}
	// Enumeration failing after Init shuts NVML down again.
	shut := 0
	lib := &mock.Interface{
		InitFunc:                   func() gonvml.Return { return gonvml.SUCCESS },
		ShutdownFunc:               func() gonvml.Return { shut++; return gonvml.SUCCESS },
		SystemGetDriverVersionFunc: func() (string, gonvml.Return) { return "1", gonvml.SUCCESS },
		DeviceGetCountFunc:         func() (int, gonvml.Return) { return 0, gonvml.ERROR_UNKNOWN },
	}
	if _, err := Open(WithInterface(lib)); err == nil || shut != 1 {
		t.Errorf("failed enumeration: err %v, %d shutdowns", err, shut)
	}
}

// TestOpenRealLibrary opens go-nvml's real library: on a host without
// libnvidia-ml.so.1 (CI, this project's build machines) it must fail with
// ErrNoDriver and the --simulate hint, not panic.
func TestOpenRealLibrary(t *testing.T) {
	d, err := Open()
	if err == nil {
		defer d.Close()
		gs, err := d.GPUs(t.Context())
		t.Logf("NVML is present (driver %s): %d GPUs, %v", d.Info().DriverVersion, len(gs), err)
		for _, g := range gs {
			t.Logf("  %d %s %q model=%q %d MiB mig=%v/%v mode=%d instances=%d", g.Index, g.UUID, g.Name, g.Model, g.MemoryMiB, g.MIGCapable, g.MIGEnabled, g.ComputeMode, len(g.Instances))
		}
		return
	}
	if !errors.Is(err, gpu.ErrNoDriver) || !strings.Contains(err.Error(), "use --simulate") {
		t.Fatalf("Open without a driver: %v; want an ErrNoDriver error telling to use --simulate", err)
	}
	t.Logf("Open: %v", err)
}

func TestEnumerateOverMock(t *testing.T) {
	m := newMockMachine(true)
	d := openMock(t, m)
	if info := d.Info(); info.Backend != "nvml" || info.DriverVersion != m.srv.DriverVersion || info.Simulated {
		t.Errorf("Info = %+v", info)
	}
	gs, err := d.GPUs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(gs) != 8 {
		t.Fatalf("%d GPUs", len(gs))
	}
	// "Mock NVIDIA A100-SXM4-40GB" is no product name: the PCI device id
	// 0x20B0 resolves it.
	if g := gs[0]; g.Model != "A100-40GB" || !g.MIGCapable || g.MIGEnabled || g.MemoryMiB != 40960 {
		t.Errorf("GPU 0 = %+v", g)
	}
	if g := gs[7]; g.Model != "L4" || g.MIGCapable || g.Name != "NVIDIA L4" {
		t.Errorf("GPU 7 = %+v", g)
	}
}

// TestProfileTableOverMock: with MIG on, the profiles NVML reports for the
// mock A100 are named after the catalog's.
func TestProfileTableOverMock(t *testing.T) {
	m := newMockMachine(false)
	d := openMock(t, m)
	ctx := t.Context()
	if err := d.SetMIGMode(ctx, 0, true); err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	table, err := d.gpus[0].profiles()
	d.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, e := range table {
		got[e.name] = e.nvmlConst
	}
	want := map[string]int{"1g.5gb": 0, "1g.5gb+me": 7, "1g.10gb": 9, "2g.10gb": 1, "3g.20gb": 2, "4g.20gb": 3, "7g.40gb": 4}
	if len(got) != len(want) {
		t.Errorf("profiles %v, want %v", got, want)
	}
	for name, c := range want {
		if got[name] != c {
			t.Errorf("profile %s: constant %d, want %d (table %v)", name, got[name], c, got)
		}
	}
}

// TestCreatePlacementSequence checks, through a recording wrapper around
// the mock GPU, that CreateInstance places explicitly: it looks the
// profile up by its NVML constant, checks the start against NVML's
// possible placements and calls CreateGpuInstanceWithPlacement with the
// requested start and the profile's size, never CreateGpuInstance.
func TestCreatePlacementSequence(t *testing.T) {
	m := newMockMachine(false)
	rec := &recorder{Device: m.srv.Devices[0]}
	m.srv.Devices[0] = rec
	d := openMock(t, m)
	ctx := t.Context()
	if err := d.SetMIGMode(ctx, 0, true); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		profile     string
		start, size int
		nvmlConst   int
	}{
		{"2g.10gb", 4, 2, gonvml.GPU_INSTANCE_PROFILE_2_SLICE},
		{"1g.10gb", 6, 2, gonvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2},
		{"1g.5gb", 1, 1, gonvml.GPU_INSTANCE_PROFILE_1_SLICE},
		{"1G.5GB+ME", 3, 1, gonvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1},
	} {
		rec.take()
		in, err := d.CreateInstance(ctx, 0, tc.profile, tc.start)
		if err != nil {
			t.Fatalf("%s@%d: %v", tc.profile, tc.start, err)
		}
		calls := rec.take()
		var creates []string
		for _, c := range calls {
			if strings.HasPrefix(c, "Create") {
				creates = append(creates, c)
			}
		}
		wantCreate := "CreateGpuInstanceWithPlacement(profile " + strconv.Itoa(tc.nvmlConst) + ", start " + strconv.Itoa(tc.start) + ", size " + strconv.Itoa(tc.size) + ")"
		if !slices.Equal(creates, []string{wantCreate}) {
			t.Errorf("%s@%d: create calls %q, want [%s]", tc.profile, tc.start, creates, wantCreate)
		}
		lookup := slices.Index(calls, "GetGpuInstanceProfileInfo("+strconv.Itoa(tc.nvmlConst)+")")
		check := slices.Index(calls, "GetGpuInstancePossiblePlacements(profile "+strconv.Itoa(tc.nvmlConst)+")")
		create := slices.Index(calls, wantCreate)
		// The profile table is read once, after MIG is turned on; later
		// creates reuse it.
		if (lookup >= 0 && lookup > check) || check < 0 || check > create {
			t.Errorf("%s@%d: call order %q", tc.profile, tc.start, calls)
		}
		if in.Start != tc.start || in.Size != tc.size || !strings.HasPrefix(in.UUID, "MIG-") || in.CIID < 0 {
			t.Errorf("%s@%d: created %+v", tc.profile, tc.start, in)
		}
		// The mock recorded the placement it was given.
		var found bool
		dev := m.device(0)
		dev.RLock()
		for gi := range dev.GpuInstances {
			if int(gi.Info.Id) == in.GIID {
				found = gi.Info.Placement == gonvml.GpuInstancePlacement{Start: uint32(tc.start), Size: uint32(tc.size)}
			}
		}
		dev.RUnlock()
		if !found {
			t.Errorf("%s@%d: the mock holds no GI %d at that placement", tc.profile, tc.start, in.GIID)
		}
	}
	// A start NVML does not list is refused before any create.
	rec.take()
	_, err := d.CreateInstance(ctx, 0, "1g.10gb", 1)
	if !errors.Is(err, gpu.ErrPlacement) || !strings.Contains(err.Error(), "{0,2,4,6}:2") || !strings.Contains(err.Error(), "GPU 0 (A100-40GB)") {
		t.Errorf("1g.10gb@1: %v; want ErrPlacement naming the GPU and the allowed starts", err)
	}
	for _, c := range rec.take() {
		if strings.HasPrefix(c, "Create") {
			t.Errorf("1g.10gb@1 called %s", c)
		}
	}
}

// TestCreateErrorMapping: NVML's refusals map to the gpu errors and name
// the GPU and profile@start.
func TestCreateErrorMapping(t *testing.T) {
	m := newMockMachine(false)
	d := openMock(t, m)
	ctx := t.Context()
	if err := d.SetMIGMode(ctx, 0, true); err != nil {
		t.Fatal(err)
	}
	first, err := d.CreateInstance(ctx, 0, "1g.5gb", 4)
	if err != nil {
		t.Fatal(err)
	}
	dev := m.device(0)
	orig := dev.CreateGpuInstanceWithPlacementFunc
	for ret, want := range map[gonvml.Return]error{
		gonvml.ERROR_INSUFFICIENT_RESOURCES: gpu.ErrPlacement,
		gonvml.ERROR_INVALID_ARGUMENT:       gpu.ErrPlacement,
		gonvml.ERROR_IN_USE:                 gpu.ErrInUse,
		gonvml.ERROR_NOT_SUPPORTED:          gpu.ErrNoMIG,
	} {
		dev.CreateGpuInstanceWithPlacementFunc = func(*gonvml.GpuInstanceProfileInfo, *gonvml.GpuInstancePlacement) (gonvml.GpuInstance, gonvml.Return) {
			return nil, ret
		}
		_, err := d.CreateInstance(ctx, 0, "3g.20gb", 4)
		if !errors.Is(err, want) || !errors.Is(err, ret) || !strings.Contains(err.Error(), "GPU 0 (A100-40GB): creating 3g.20gb@4") {
			t.Errorf("create returning %v: %v; want one wrapping %v and the NVML code", ret, err, want)
		}
		if want == gpu.ErrPlacement && !strings.Contains(err.Error(), "overlapping 1g.5gb@4") || strings.Contains(err.Error(), "overlapping") && want != gpu.ErrPlacement {
			t.Errorf("create returning %v: %v; want the overlapping instance named on placement errors only", ret, err)
		}
	}
	dev.CreateGpuInstanceWithPlacementFunc = orig

	// A compute instance that cannot be made takes its GPU instance back.
	dev.CreateGpuInstanceWithPlacementFunc = func(info *gonvml.GpuInstanceProfileInfo, p *gonvml.GpuInstancePlacement) (gonvml.GpuInstance, gonvml.Return) {
		gi, ret := orig(info, p)
		gi.(*dgxa100.GpuInstance).CreateComputeInstanceFunc = func(*gonvml.ComputeInstanceProfileInfo) (gonvml.ComputeInstance, gonvml.Return) {
			return nil, gonvml.ERROR_INSUFFICIENT_RESOURCES
		}
		return gi, ret
	}
	if _, err := d.CreateInstance(ctx, 0, "3g.20gb", 0); err == nil || !strings.Contains(err.Error(), "compute instance") {
		t.Errorf("failing compute instance: %v", err)
	}
	dev.CreateGpuInstanceWithPlacementFunc = orig
	g, err := d.GPUs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ins := g[0].Instances; len(ins) != 1 || ins[0] != first {
		t.Errorf("after the failed creates: %+v, want only %+v", ins, first)
	}

	// Destroy: NVML's IN_USE is ErrInUse and the instance stays.
	dev.RLock()
	for gi := range dev.GpuInstances {
		gi.DestroyFunc = func() gonvml.Return { return gonvml.ERROR_IN_USE }
	}
	dev.RUnlock()
	if err := d.DestroyInstance(ctx, 0, first.UUID); !errors.Is(err, gpu.ErrInUse) || !strings.Contains(err.Error(), first.UUID) {
		t.Errorf("destroy refused by NVML: %v", err)
	}
}

// TestMIGModeErrors covers a GPU without MIG, a pending reset and a GPU
// falling off the bus.
func TestMIGModeErrors(t *testing.T) {
	m := newMockMachine(true)
	d := openMock(t, m)
	ctx := t.Context()

	if err := d.SetMIGMode(ctx, 7, true); !errors.Is(err, gpu.ErrNoMIG) || !strings.Contains(err.Error(), "GPU 7 (L4)") {
		t.Errorf("SetMIGMode on the L4: %v", err)
	}

	// NVML records the change but something holds the GPU: a reset is
	// pending and MIG stays off.
	dev := m.device(1)
	pending := 0
	dev.SetMigModeFunc = func(mode int) (gonvml.Return, gonvml.Return) {
		pending = mode
		return gonvml.ERROR_IN_USE, gonvml.SUCCESS
	}
	dev.GetMigModeFunc = func() (int, int, gonvml.Return) { return 0, pending, gonvml.SUCCESS }
	err := d.SetMIGMode(ctx, 1, true)
	if !errors.Is(err, ErrResetPending) || !errors.Is(err, gpu.ErrInUse) || !strings.Contains(err.Error(), "nvidia-smi -r -i 1") {
		t.Errorf("pending SetMIGMode: %v", err)
	}
	_, err = d.CreateInstance(ctx, 1, "1g.5gb", 0)
	if !errors.Is(err, gpu.ErrNoMIG) || !errors.Is(err, ErrResetPending) {
		t.Errorf("create while the MIG change is pending: %v", err)
	}

	// NVML refusing with NOT_SUPPORTED is ErrNoMIG.
	dev = m.device(2)
	dev.SetMigModeFunc = func(int) (gonvml.Return, gonvml.Return) { return gonvml.SUCCESS, gonvml.ERROR_NOT_SUPPORTED }
	if err := d.SetMIGMode(ctx, 2, true); !errors.Is(err, gpu.ErrNoMIG) {
		t.Errorf("SetMigMode NOT_SUPPORTED: %v", err)
	}

	// A GPU that falls off the bus leaves the listing and its index is
	// not found.
	m.device(3).GetMigModeFunc = func() (int, int, gonvml.Return) { return 0, 0, gonvml.ERROR_GPU_IS_LOST }
	gs, err := d.GPUs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gs {
		if g.Index == 3 {
			t.Errorf("lost GPU 3 is listed: %+v", g)
		}
	}
	if len(gs) != 7 {
		t.Errorf("%d GPUs after losing one", len(gs))
	}
	if err := d.SetComputeMode(ctx, 3, gpu.ComputeDefault); !errors.Is(err, gpu.ErrNotFound) {
		t.Errorf("SetComputeMode on the lost GPU: %v", err)
	}
}

// TestMockPanicIsAnError: a mock method nobody set up panics inside
// go-nvml's moq code; the adapter reports it as an error.
func TestMockPanicIsAnError(t *testing.T) {
	m := newMockMachine(false)
	d := openMock(t, m)
	m.device(0).GetComputeModeFunc = nil
	_, err := d.GPUs(t.Context())
	if err == nil || !strings.Contains(err.Error(), "panicked") || !strings.Contains(err.Error(), "GetComputeModeFunc: method is nil") {
		t.Errorf("GPUs over a panicking mock: %v", err)
	}
	// The device still works afterwards (the lock was released).
	if _, err := d.Processes(t.Context(), m.device(1).UUID); err != nil {
		t.Errorf("Processes after a recovered panic: %v", err)
	}
}

// TestEventsMIGAndClose: an XID NVML attributes to a GPU instance carries
// the instance's uuid; Close ends the watchers and frees their sets, and
// later calls fail with ErrClosed.
func TestEventsMIGAndClose(t *testing.T) {
	m := newMockMachine(false)
	d, err := Open(WithInterface(m.srv), WithEventPoll(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := d.SetMIGMode(ctx, 2, true); err != nil {
		t.Fatal(err)
	}
	in, err := d.CreateInstance(ctx, 2, "3g.20gb", 4)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := d.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.inject(2, 31, uint32(in.GIID)); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-ch:
		if ev.UUID != in.UUID || ev.Index != 2 || ev.XID != 31 || ev.Fatal || !strings.Contains(ev.Message, "3g.20gb@4") {
			t.Errorf("event %+v, want XID 31 on %s", ev, in.UUID)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
	}
	if err := m.inject(2, 48, noInstance); err != nil {
		t.Fatal(err)
	}
	if ev := <-ch; !ev.Fatal || ev.XID != 48 {
		t.Errorf("event %+v, want a fatal XID 48", ev)
	}
	gs, _ := d.GPUs(ctx)
	if gs[2].Healthy || !gs[1].Healthy {
		t.Errorf("after XID 48 on GPU 2: GPU 2 healthy=%v, GPU 1 healthy=%v", gs[2].Healthy, gs[1].Healthy)
	}

	ch2, err := d.Events(context.Background()) // only Close ends this one
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []<-chan gpu.Event{ch, ch2} {
		select {
		case _, open := <-c:
			if open {
				t.Error("event after Close")
			}
		case <-time.After(5 * time.Second):
			t.Fatal("an event channel stayed open after Close")
		}
	}
	if n := m.openSets(); n != 0 {
		t.Errorf("%d event sets left after Close", n)
	}
	if _, err := d.GPUs(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("GPUs after Close: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestOrphanGPUInstance: a GPU instance without a compute instance (made
// outside gpuslice) has no MIG device; it is listed under a synthetic uuid
// that DestroyInstance accepts.
func TestOrphanGPUInstance(t *testing.T) {
	m := newMockMachine(false)
	d := openMock(t, m)
	ctx := t.Context()
	if err := d.SetMIGMode(ctx, 0, true); err != nil {
		t.Fatal(err)
	}
	dev := m.device(0)
	info, _ := dev.GetGpuInstanceProfileInfo(gonvml.GPU_INSTANCE_PROFILE_2_SLICE)
	if _, ret := dev.CreateGpuInstanceWithPlacement(&info, &gonvml.GpuInstancePlacement{Start: 2, Size: 2}); ret != gonvml.SUCCESS {
		t.Fatal(ret)
	}
	gs, err := d.GPUs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ins := gs[0].Instances
	if len(ins) != 1 || ins[0].Profile != "2g.10gb" || ins[0].Start != 2 || ins[0].CIID != -1 || ins[0].UUID != "MIG-"+dev.UUID+"/0" {
		t.Fatalf("orphan GPU instance listed as %+v", ins)
	}
	if err := d.DestroyInstance(ctx, 0, ins[0].UUID); err != nil {
		t.Fatal(err)
	}
	if gs, _ := d.GPUs(ctx); len(gs[0].Instances) != 0 {
		t.Errorf("after destroy: %+v", gs[0].Instances)
	}
}

// TestEventsGPULost: when NVML's event wait says a GPU is lost, every
// watcher reports the GPUs that fell off the bus once, and they leave the
// listing.
func TestEventsGPULost(t *testing.T) {
	m := newMockMachine(false)
	d := openMock(t, m)
	ctx := t.Context()
	a, err := d.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m.device(3).GetMemoryInfoFunc = func() (gonvml.Memory, gonvml.Return) { return gonvml.Memory{}, gonvml.ERROR_GPU_IS_LOST }
	m.failWaits(gonvml.ERROR_GPU_IS_LOST)
	uuid := m.device(3).UUID
	for name, ch := range map[string]<-chan gpu.Event{"first": a, "second": b} {
		select {
		case ev := <-ch:
			if ev.Kind != gpu.EventLost || ev.Index != 3 || ev.UUID != uuid || !ev.Fatal {
				t.Errorf("%s watcher: %+v, want GPU 3 lost", name, ev)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s watcher: no event", name)
		}
	}
	m.failWaits(gonvml.ERROR_GPU_IS_LOST)
	if err := m.InjectXID(1, 13); err != nil {
		t.Fatal(err)
	}
	if ev := <-a; ev.Kind != gpu.EventXID || ev.Index != 1 {
		t.Errorf("after a second lost wait: %+v, want only the XID on GPU 1 (GPU 3 announced once)", ev)
	}
	gs, err := d.GPUs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(gs) != 7 || slices.ContainsFunc(gs, func(g gpu.GPU) bool { return g.Index == 3 }) {
		t.Errorf("GPU 3 still listed: %d GPUs", len(gs))
	}
	if _, err := d.Processes(ctx, uuid); !errors.Is(err, gpu.ErrNotFound) {
		t.Errorf("Processes on the lost GPU: %v", err)
	}
}

// TestProcessUtilizationOverMock: per-process SM utilization is NVML's
// samples since the previous read, averaged per pid; a read with no newer
// sample reports idle processes; MIG devices report none.
func TestProcessUtilizationOverMock(t *testing.T) {
	m := newMockMachine(false)
	d := openMock(t, m)
	ctx := t.Context()
	gs, err := d.GPUs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g := gs[1]
	for pid, mem := range map[int]int64{501: 1024, 502: 2048} {
		if err := m.StartProcess(g.UUID, pid, mem); err != nil {
			t.Fatal(err)
		}
	}
	m.sample(1, 501, 10, 40)
	m.sample(1, 501, 20, 60)
	m.sample(1, 502, 20, 10)
	m.sample(0, 502, 30, 99) // another GPU's sample is not this one's
	sm := func() map[int]int {
		t.Helper()
		ps, err := d.Processes(ctx, g.UUID)
		if err != nil {
			t.Fatal(err)
		}
		out := map[int]int{}
		for _, p := range ps {
			if p.SMPercent == nil {
				t.Fatalf("pid %d: no SM sample on a whole GPU", p.PID)
			}
			out[p.PID] = *p.SMPercent
		}
		return out
	}
	if got := sm(); got[501] != 50 || got[502] != 10 {
		t.Errorf("first read: %v, want 501:50 502:10", got)
	}
	if got := sm(); got[501] != 0 || got[502] != 0 {
		t.Errorf("no newer samples: %v, want both idle", got)
	}
	m.sample(1, 502, 40, 80)
	if got := sm(); got[501] != 0 || got[502] != 80 {
		t.Errorf("third read: %v, want 501:0 502:80", got)
	}

	// A MIG device: no per-process samples.
	if err := d.SetMIGMode(ctx, 2, true); err != nil {
		t.Fatal(err)
	}
	in, err := d.CreateInstance(ctx, 2, "1g.5gb", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.StartProcess(in.UUID, 601, 512); err != nil {
		t.Fatal(err)
	}
	ps, err := d.Processes(ctx, in.UUID)
	if err != nil || len(ps) != 1 || ps[0].SMPercent != nil {
		t.Errorf("Processes(MIG) = %+v, %v; want one process without SM sample", ps, err)
	}
}

// On a GPU with GPM (Hopper and newer), a MIG device's SM utilization is
// the GPM measure between two reads, scaled from the instance's SMs to the
// GPU's and shared equally by its processes;
// without GPM (the A100) there is none. Samples are freed when replaced,
// when the instance is destroyed and on Close.
func TestMIGUtilizationFromGPM(t *testing.T) {
	for _, hopper := range []bool{false, true} {
		m := newMockMachine(false)
		m.hopper = hopper
		d := openMock(t, m)
		ctx := t.Context()
		if err := d.SetMIGMode(ctx, 2, true); err != nil {
			t.Fatal(err)
		}
		in, err := d.CreateInstance(ctx, 2, "3g.20gb", 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, pid := range []int{701, 702} {
			if err := m.StartProcess(in.UUID, pid, 512); err != nil {
				t.Fatal(err)
			}
		}
		m.setMigSM(2, in.GIID, 60)
		read := func() []*int {
			t.Helper()
			ps, err := d.Processes(ctx, in.UUID)
			if err != nil || len(ps) != 2 {
				t.Fatalf("Processes = %+v, %v", ps, err)
			}
			return []*int{ps[0].SMPercent, ps[1].SMPercent}
		}
		if got := read(); got[0] != nil || got[1] != nil {
			t.Errorf("hopper=%v: first read has SM samples %v; one GPM sample is not a rate", hopper, got)
		}
		got := read()
		switch {
		case !hopper && (got[0] != nil || got[1] != nil):
			t.Errorf("A100 (no GPM): SM samples %d, %d", *got[0], *got[1])
		case hopper && (got[0] == nil || got[1] == nil || *got[0] != 13 || *got[1] != 13):
			// 60% of a 3g.20gb's 42 SMs is 25.7% of the GPU's 98 (the
			// mock's 7g has 98), shared by two processes: 12.9 each.
			t.Errorf("GPM: SM samples %v, want 13%% of the GPU each", derefs(got))
		}
		if hopper && m.live != 1 {
			t.Errorf("%d GPM samples held, want 1 (the last)", m.live)
		}
		for _, pid := range []int{701, 702} {
			if err := m.StopProcess(pid); err != nil {
				t.Fatal(err)
			}
		}
		if err := d.DestroyInstance(ctx, 2, in.UUID); err != nil {
			t.Fatal(err)
		}
		if m.live != 0 {
			t.Errorf("hopper=%v: %d GPM samples held after the instance was destroyed", hopper, m.live)
		}
	}
}

func derefs(ps []*int) []any {
	out := make([]any, len(ps))
	for i, p := range ps {
		out[i] = "nil"
		if p != nil {
			out[i] = *p
		}
	}
	return out
}
