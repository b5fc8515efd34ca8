package fake_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpu/fake"
)

// Like real GPUs, a simulated machine with a state file keeps its MIG mode
// and instances (same uuids) across a restart of what drives it; a file
// for other GPUs is ignored.
func TestStateFileKeepsTheHardwareAcrossRestarts(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sim.json")
	spec, err := fake.Preset("dgx-a100")
	if err != nil {
		t.Fatal(err)
	}
	m, err := fake.New(spec, fake.WithSeed(7), fake.WithStateFile(path))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetMIGMode(ctx, 2, true); err != nil {
		t.Fatal(err)
	}
	a, err := m.CreateInstance(ctx, 2, "3g.20gb", 4)
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.CreateInstance(ctx, 2, "1g.5gb", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.DestroyInstance(ctx, 2, b.UUID); err != nil {
		t.Fatal(err)
	}
	c, err := m.CreateInstance(ctx, 2, "2g.10gb", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetComputeMode(ctx, 5, gpu.ComputeExclusiveProcess); err != nil {
		t.Fatal(err)
	}
	before, _ := m.GPUs(ctx)

	again, err := fake.New(spec, fake.WithSeed(7), fake.WithStateFile(path))
	if err != nil {
		t.Fatal(err)
	}
	after, _ := again.GPUs(ctx)
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("after a restart:\n%+v\nwant\n%+v", after[2], before[2])
	}
	if got := after[2].Instances; len(got) != 2 || got[0].UUID != c.UUID || got[1].UUID != a.UUID {
		t.Fatalf("instances %+v, want %s and %s", got, c.UUID, a.UUID)
	}
	// Another machine (another seed: other uuids) ignores the file.
	other, err := fake.New(spec, fake.WithSeed(8), fake.WithStateFile(path))
	if err != nil {
		t.Fatal(err)
	}
	gs, _ := other.GPUs(ctx)
	if gs[2].MIGEnabled || len(gs[2].Instances) > 0 {
		t.Fatalf("another machine took this one's state: %+v", gs[2])
	}
	// A damaged file is ignored too.
	if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := fake.New(spec, fake.WithSeed(7), fake.WithStateFile(path)); err != nil {
		t.Fatal(err)
	}
}

// A state file written for other models (same uuids: another preset with
// as many GPUs) or with a layout the GPUs cannot hold is ignored: the
// machine starts from its spec instead of failing.
func TestStateFileForOtherHardwareIsIgnored(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sim.json")
	a100, _ := fake.Preset("dgx-a100")
	m, err := fake.New(a100, fake.WithStateFile(path))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetMIGMode(ctx, 0, true); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateInstance(ctx, 0, "3g.20gb", 4); err != nil {
		t.Fatal(err)
	}
	h100, _ := fake.Preset("dgx-h100")
	other, err := fake.New(h100, fake.WithStateFile(path))
	if err != nil {
		t.Fatalf("a state file of other GPUs: %v", err)
	}
	if gs, _ := other.GPUs(ctx); gs[0].MIGEnabled {
		t.Fatalf("an H100 took an A100's MIG layout: %+v", gs[0])
	}
	data, _ := os.ReadFile(path)
	bad := []byte(strings.Replace(string(data), `"start": 4`, `"start": 1`, 1)) // 3g.20gb cannot start at 1
	if err := os.WriteFile(path, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	again, err := fake.New(a100, fake.WithStateFile(path))
	if err != nil {
		t.Fatalf("an impossible layout: %v", err)
	}
	if gs, _ := again.GPUs(ctx); len(gs[0].Instances) != 0 {
		t.Fatalf("an impossible layout was restored: %+v", gs[0])
	}
}

// The time-slice level is recorded per GPU, kept in the state file's JSON
// across a restart, and refused on a GPU in MIG mode (nvidia-smi sets it
// on whole GPUs).
func TestTimeSliceIsRecordedAndKept(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sim.json")
	spec, err := fake.Preset("dgx-a100")
	if err != nil {
		t.Fatal(err)
	}
	m, err := fake.New(spec, fake.WithSeed(7), fake.WithStateFile(path))
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := m.TimeSlice(1); l != gpu.TimeSliceDefault {
		t.Fatalf("a new GPU's level %v", l)
	}
	if err := m.SetTimeSlice(ctx, 1, gpu.TimeSliceLong); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(b), `"timeSlice": 3`) {
		t.Fatalf("state file %s (%v): want timeSlice 3", b, err)
	}
	again, err := fake.New(spec, fake.WithSeed(7), fake.WithStateFile(path))
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := again.TimeSlice(1); l != gpu.TimeSliceLong {
		t.Fatalf("after a restart the level is %v, want Long", l)
	}
	if err := again.SetMIGMode(ctx, 2, true); err != nil {
		t.Fatal(err)
	}
	if err := again.SetTimeSlice(ctx, 2, gpu.TimeSliceShort); err == nil {
		t.Fatal("SetTimeSlice on a GPU in MIG mode succeeded")
	}
}
