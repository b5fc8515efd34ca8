package fake_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpu/fake"
)

func events(t *testing.T, m *fake.Machine) <-chan gpu.Event {
	t.Helper()
	ch, err := m.Events(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func next(t *testing.T, ch <-chan gpu.Event) gpu.Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("event channel closed")
		}
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
	}
	return gpu.Event{}
}

func TestInjectXID(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		xid   int
		fatal bool
		msg   string
	}{
		{79, true, "fallen off the bus"},
		{48, true, "double-bit ECC"},
		{94, true, "contained ECC"},
		{95, true, "uncontained ECC"},
		{119, true, "GSP"},
		{13, false, "graphics engine exception"},
		{31, false, "memory page fault"},
		{43, false, "stopped processing"},
		{63, false, "XID 63"},
	} {
		m := mustPreset(t, "l4x4", fake.WithClock(func() time.Time { return now }))
		ch := events(t, m)
		g := gpus(t, m)[2]
		if err := m.InjectXID(2, tc.xid); err != nil {
			t.Fatal(err)
		}
		ev := next(t, ch)
		want := gpu.Event{Kind: gpu.EventXID, Index: 2, UUID: g.UUID, XID: tc.xid, Time: now, Fatal: tc.fatal}
		msg := ev.Message
		ev.Message = ""
		if ev != want || !strings.Contains(msg, tc.msg) {
			t.Errorf("XID %d: event %+v %q, want %+v with %q", tc.xid, ev, msg, want, tc.msg)
		}
		if fake.FatalXID(tc.xid) != tc.fatal {
			t.Errorf("FatalXID(%d) = %v", tc.xid, !tc.fatal)
		}
		after := gpus(t, m)
		if after[2].Healthy == tc.fatal {
			t.Errorf("XID %d: healthy=%v", tc.xid, after[2].Healthy)
		}
		if !after[1].Healthy || !after[3].Healthy {
			t.Errorf("XID %d on GPU 2 touched its neighbours", tc.xid)
		}
		err := m.StartProcess(g.UUID, 1, 1)
		if tc.fatal && !errors.Is(err, gpu.ErrFault) {
			t.Errorf("XID %d: a process started on the unhealthy GPU: %v", tc.xid, err)
		}
		if !tc.fatal && err != nil {
			t.Errorf("XID %d: %v", tc.xid, err)
		}
	}

	m := mustPreset(t, "t4")
	if err := m.InjectXID(0, 0); err == nil {
		t.Error("XID 0 accepted")
	}
	if err := m.InjectXID(5, 79); !errors.Is(err, gpu.ErrNotFound) {
		t.Errorf("XID on GPU 5 of 1: %v", err)
	}
}

func TestInjectInstanceXID(t *testing.T) {
	ctx := context.Background()
	m := a100MIG(t)
	in, err := m.CreateInstance(ctx, 0, "3g.20gb", 0)
	if err != nil {
		t.Fatal(err)
	}
	ch := events(t, m)
	if err := m.InjectInstanceXID(in.UUID, 31); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, ch); ev.UUID != in.UUID || ev.Index != 0 || ev.Fatal || ev.XID != 31 {
		t.Errorf("instance XID 31: %+v", ev)
	}
	if err := m.InjectInstanceXID(in.UUID, 95); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, ch); !ev.Fatal || ev.UUID != in.UUID {
		t.Errorf("instance XID 95: %+v", ev)
	}
	if gpus(t, m)[0].Healthy {
		t.Error("a fatal XID on an instance left its GPU healthy")
	}
	if err := m.InjectInstanceXID("MIG-nope", 13); !errors.Is(err, gpu.ErrNotFound) {
		t.Errorf("unknown uuid: %v", err)
	}
}

func TestFailNextCreate(t *testing.T) {
	ctx := context.Background()
	m := a100MIG(t)
	boom := errors.New("NVML_ERROR_INSUFFICIENT_RESOURCES")
	m.FailNextCreate(nil)
	m.FailNextCreate(boom)
	_, err := m.CreateInstance(ctx, 0, "7g.40gb", 0)
	if !errors.Is(err, gpu.ErrFault) {
		t.Errorf("first create: %v, want ErrFault", err)
	}
	_, err = m.CreateInstance(ctx, 0, "7g.40gb", 0)
	if !errors.Is(err, gpu.ErrFault) || !errors.Is(err, boom) {
		t.Errorf("second create: %v, want ErrFault and %v", err, boom)
	}
	if n := len(gpus(t, m)[0].Instances); n != 0 {
		t.Errorf("failed creates left %d instances", n)
	}
	if _, err := m.CreateInstance(ctx, 0, "7g.40gb", 0); err != nil {
		t.Errorf("third create: %v", err)
	}
}

func TestSetBusy(t *testing.T) {
	ctx := context.Background()
	m := a100MIG(t)
	in, err := m.CreateInstance(ctx, 0, "4g.20gb", 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := m.SetBusy(i, true); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.CreateInstance(ctx, 0, "3g.20gb", 4); !errors.Is(err, gpu.ErrInUse) {
		t.Errorf("create on a busy GPU: %v", err)
	}
	if err := m.DestroyInstance(ctx, 0, in.UUID); !errors.Is(err, gpu.ErrInUse) {
		t.Errorf("destroy on a busy GPU: %v", err)
	}
	if err := m.SetMIGMode(ctx, 1, true); !errors.Is(err, gpu.ErrInUse) {
		t.Errorf("MIG mode on a busy GPU: %v", err)
	}
	// Reads and processes are not MIG changes.
	if err := m.StartProcess(in.UUID, 1, 1); err != nil {
		t.Errorf("process on a busy GPU: %v", err)
	}
	if err := m.StopProcess(1); err != nil {
		t.Fatal(err)
	}
	if err := m.SetBusy(0, false); err != nil {
		t.Fatal(err)
	}
	if err := m.DestroyInstance(ctx, 0, in.UUID); err != nil {
		t.Errorf("destroy once idle: %v", err)
	}
	if err := m.SetBusy(9, true); !errors.Is(err, gpu.ErrNotFound) {
		t.Errorf("SetBusy(9): %v", err)
	}
}

func TestRemove(t *testing.T) {
	ctx := context.Background()
	m := mustPreset(t, "mixed")
	in, err := m.CreateInstance(ctx, 1, "7g.40gb", 0)
	if err != nil {
		t.Fatal(err)
	}
	lost := gpus(t, m)[1]
	if err := m.StartProcess(in.UUID, 77, 100); err != nil {
		t.Fatal(err)
	}
	ch := events(t, m)
	if err := m.Remove(1); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, ch); ev.Kind != gpu.EventLost || ev.Index != 1 || ev.UUID != lost.UUID || !ev.Fatal {
		t.Errorf("event %+v, want a fatal EventLost for GPU 1", ev)
	}
	var idx []int
	for _, g := range gpus(t, m) {
		idx = append(idx, g.Index)
	}
	if want := []int{0, 2, 3}; !slices.Equal(idx, want) {
		t.Errorf("indexes after removing GPU 1: %v, want %v", idx, want)
	}
	checks := map[string]error{
		"SetMIGMode":      m.SetMIGMode(ctx, 1, false),
		"DestroyInstance": m.DestroyInstance(ctx, 1, in.UUID),
		"SetComputeMode":  m.SetComputeMode(ctx, 1, gpu.ComputeDefault),
		"InjectXID":       m.InjectXID(1, 13),
		"SetBusy":         m.SetBusy(1, true),
		"Remove":          m.Remove(1),
		"StartProcess":    m.StartProcess(lost.UUID, 78, 1),
	}
	_, checks["CreateInstance"] = m.CreateInstance(ctx, 1, "1g.5gb", 0)
	_, checks["Processes(GPU)"] = m.Processes(ctx, lost.UUID)
	_, checks["Processes(MIG)"] = m.Processes(ctx, in.UUID)
	_, checks["Utilization"] = m.Utilization(ctx, lost.UUID)
	for name, err := range checks {
		if !errors.Is(err, gpu.ErrNotFound) {
			t.Errorf("%s on a lost GPU: %v, want ErrNotFound", name, err)
		}
	}
	// Its processes died with it.
	if err := m.StopProcess(77); !errors.Is(err, fake.ErrNoProcess) {
		t.Errorf("process on a lost GPU: %v", err)
	}
	if _, err := m.CreateInstance(ctx, 0, "7g.40gb", 0); err != nil {
		t.Errorf("the other GPUs still work: %v", err)
	}
}

func TestEventsFanOutInOrderWithoutBlocking(t *testing.T) {
	m := mustPreset(t, "dgx-h100")
	a, b := events(t, m), events(t, m)
	const n = 500
	// Nobody reads while the faults go in: injecting must not block.
	for i := range n {
		if err := m.InjectXID(i%8, 13); err != nil {
			t.Fatal(err)
		}
	}
	for _, ch := range []<-chan gpu.Event{a, b} {
		for i := range n {
			if ev := next(t, ch); ev.Index != i%8 {
				t.Fatalf("event %d on GPU %d, want %d", i, ev.Index, i%8)
			}
		}
	}
}

func TestEventsOnlyAfterSubscribingAndCloseWithContext(t *testing.T) {
	m := mustPreset(t, "t4")
	if err := m.InjectXID(0, 43); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := m.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.InjectXID(0, 31); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, ch); ev.XID != 31 {
		t.Errorf("first event XID %d, want 31 (43 came before the subscription)", ev.XID)
	}
	cancel()
	select {
	case _, ok := <-ch:
		if ok {
			t.Error("an event after cancel")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("channel not closed after cancel")
	}
	// Injecting with no subscriber left is fine.
	if err := m.InjectXID(0, 13); err != nil {
		t.Error(err)
	}
}

// Recover makes a GPU healthy again after a fatal XID and announces it.
func TestRecoverAfterFatalXID(t *testing.T) {
	m := mustPreset(t, "l4x4")
	ch := events(t, m)
	if err := m.InjectXID(1, 48); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, ch); !ev.Fatal || gpus(t, m)[1].Healthy {
		t.Fatalf("after XID 48: event %+v, healthy %v", ev, gpus(t, m)[1].Healthy)
	}
	if err := m.Recover(1); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, ch); ev.Kind != gpu.EventRecovered || ev.Index != 1 || ev.UUID != gpus(t, m)[1].UUID || !gpus(t, m)[1].Healthy {
		t.Fatalf("after Recover: event %+v, healthy %v", ev, gpus(t, m)[1].Healthy)
	}
	if err := m.Recover(9); err == nil {
		t.Fatal("Recover of GPU 9 on a 4-GPU machine succeeded")
	}
}
