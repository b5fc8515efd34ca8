//go:build cgo

package nvml

import (
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuslice/gpuslice/internal/agent"
	"github.com/gpuslice/gpuslice/internal/alloc"
)

// TestUUIDsAsTheServerTakesThem: over go-nvml's mock, GPU uuids, MIG
// uuids and the name of a GPU instance without a compute instance are ids
// the server accepts (alloc.ValidDeviceID), and the inventory an agent
// reports passes alloc.ValidateInventory.
func TestUUIDsAsTheServerTakesThem(t *testing.T) {
	m := newMockMachine(true)
	d := openMock(t, m)
	ctx := t.Context()
	if err := d.SetMIGMode(ctx, 0, true); err != nil {
		t.Fatal(err)
	}
	if _, err := d.CreateInstance(ctx, 0, "3g.20gb", 4); err != nil {
		t.Fatal(err)
	}
	// A GPU instance made outside gpuslice, without a compute instance.
	dev := m.device(0)
	info, _ := dev.GetGpuInstanceProfileInfo(gonvml.GPU_INSTANCE_PROFILE_2_SLICE)
	if _, ret := dev.CreateGpuInstanceWithPlacement(&info, &gonvml.GpuInstancePlacement{Start: 2, Size: 2}); ret != gonvml.SUCCESS {
		t.Fatal(ret)
	}
	gs, err := d.GPUs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(gs[0].Instances) != 2 {
		t.Fatalf("GPU 0 instances %+v", gs[0].Instances)
	}
	for _, g := range gs {
		if !alloc.ValidGPUUUID(g.UUID) {
			t.Errorf("GPU %d uuid %q", g.Index, g.UUID)
		}
		for _, in := range g.Instances {
			if !alloc.ValidDeviceID(in.UUID) || (in.CIID >= 0 && !alloc.ValidMIGUUID(in.UUID)) {
				t.Errorf("GPU %d instance uuid %q (CI %d)", g.Index, in.UUID, in.CIID)
			}
			if _, err := alloc.PipeDirectory(in.UUID); err != nil {
				t.Error(err)
			}
		}
	}
	inv, err := agent.Inventory("n1", gs)
	if err != nil {
		t.Fatal(err)
	}
	if err := alloc.ValidateInventory(inv); err != nil {
		t.Error(err)
	}
}
