//go:build cgo

package nvml

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gpuslice/gpuslice/internal/gpu"
)

// TestSetTimeSliceRunsNvidiaSMI: SetTimeSlice runs exactly
// `nvidia-smi compute-policy -i <GPU uuid> --set-timeslice=<level>` for
// the GPU at the index, through the injected runner; a failing command's
// output is in the error; a bad level or index runs nothing.
func TestSetTimeSliceRunsNvidiaSMI(t *testing.T) {
	var (
		mu    sync.Mutex
		calls [][]string
		fail  bool
	)
	run := func(_ context.Context, name string, args ...string) ([]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, append([]string{name}, args...))
		if fail {
			return []byte("Failed to set timeslice for GPU 00000000:07:00.0: Insufficient Permissions\n"), errors.New("exit status 4")
		}
		return []byte("Set timeslice to 3 for GPU 00000000:07:00.0.\n"), nil
	}
	d := openMock(t, newMockMachine(true), WithCommandRunner(run), WithNvidiaSMI("/usr/bin/nvidia-smi"))
	ctx := context.Background()
	gpus, err := d.GPUs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SetTimeSlice(ctx, 1, gpu.TimeSliceLong); err != nil {
		t.Fatal(err)
	}
	if err := d.SetTimeSlice(ctx, 0, gpu.TimeSliceDefault); err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"/usr/bin/nvidia-smi", "compute-policy", "-i", gpus[1].UUID, "--set-timeslice=3"},
		{"/usr/bin/nvidia-smi", "compute-policy", "-i", gpus[0].UUID, "--set-timeslice=0"},
	}
	if !slices.EqualFunc(calls, want, slices.Equal) {
		t.Fatalf("ran %q, want %q", calls, want)
	}
	calls = nil
	if err := d.SetTimeSlice(ctx, 0, gpu.TimeSlice(4)); err == nil || !strings.Contains(err.Error(), "3 (Long)") {
		t.Fatalf("level 4: %v", err)
	}
	if err := d.SetTimeSlice(ctx, 99, gpu.TimeSliceShort); !errors.Is(err, gpu.ErrNotFound) {
		t.Fatalf("GPU 99: %v", err)
	}
	if len(calls) != 0 {
		t.Fatalf("a refused call ran %q", calls)
	}
	fail = true
	err = d.SetTimeSlice(ctx, 2, gpu.TimeSliceMedium)
	if err == nil || !strings.Contains(err.Error(), "Insufficient Permissions") || !strings.Contains(err.Error(), "--set-timeslice=2") {
		t.Fatalf("failing nvidia-smi: %v", err)
	}
}

func TestParseTimeSlice(t *testing.T) {
	for i, name := range []string{"Default", "Short", "Medium", "Long"} {
		l, err := gpu.ParseTimeSlice(name)
		if err != nil || int(l) != i || l.String() != name {
			t.Fatalf("%s: %v %v", name, l, err)
		}
	}
	if _, err := gpu.ParseTimeSlice("long"); err == nil || !strings.Contains(err.Error(), "Default, Short, Medium, Long") {
		t.Fatalf("long: %v", err)
	}
}
