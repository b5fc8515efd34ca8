package drabench

import (
	"testing"
)

// The same claims on the same fleet, every side: all claims accounted for,
// no device given twice (upstreamOrder fails on that), gpuslice's state
// checked (gpusliceOrder fails on that); with room for every claim the
// memory shares take several times fewer GPUs than a whole GPU per claim,
// the device orders stay within a few claims of each other when claims
// name a profile, and largest-first wastes GPUs when they ask by memory.
func TestDeviceOrder(t *testing.T) {
	for _, mix := range OrderMixes {
		nodes := 3
		if len(mix.SharesGiB) > 0 {
			nodes = 6 // a GPU for each of the 40 claims served whole
		}
		r, err := CompareOrder(mix, nodes, 40, 1)
		if err != nil {
			t.Fatal(err)
		}
		by := map[string]OrderSide{}
		for _, s := range r.Sides {
			by[s.Allocator+"/"+s.Order] = s
			t.Logf("%s %-14s %-20s placed %3d unplaced %3d GPUs %3d", mix.Name, s.Allocator, s.Order, s.Placed, s.Unplaced, s.GPUs)
			if s.Placed+s.Unplaced != r.Claims || s.GPUs == 0 || s.GPUs > nodes*GPUsPerNode {
				t.Fatalf("%+v: want %d claims, 1..%d GPUs", s, r.Claims, nodes*GPUsPerNode)
			}
		}
		stock := "stock " + UpstreamVersion() + "/"
		ours, mine := by[stock+OrderGPUSlice], by["gpuslice/-"]
		if mine.Placed < ours.Placed || (mine.Placed == ours.Placed && mine.GPUs > ours.GPUs) {
			t.Errorf("%s: gpuslice's allocator %+v does worse than the stock one on the same slices %+v", mix.Name, mine, ours)
		}
		if len(mix.SharesGiB) > 0 {
			whole := by[stock+OrderNVIDIAWhole]
			if ours.Unplaced != 0 || whole.Unplaced != 0 || whole.GPUs < 3*ours.GPUs {
				t.Errorf("%s: shares %+v against a whole GPU per claim %+v: want all placed, ≥3× fewer GPUs", mix.Name, ours, whole)
			}
			continue
		}
		if len(mix.MIGMemoryGiB) > 0 {
			// Claims by memory take the first placement big enough:
			// largest-first gives every claim a whole-GPU instance.
			if lf := by[stock+OrderLargestFirst]; !(lf.Placed < ours.Placed || lf.GPUs >= 2*ours.GPUs) {
				t.Errorf("%s: largest-first %+v should do far worse than gpuslice's order %+v", mix.Name, lf, ours)
			}
			if n := by[stock+OrderNVML]; n.Placed != ours.Placed || n.GPUs < ours.GPUs-1 {
				t.Errorf("%s: NVML order %+v, gpuslice's %+v", mix.Name, n, ours)
			}
			continue
		}
		for _, o := range []string{OrderNVML, OrderLargestFirst} {
			if d := by[stock+o].Placed - ours.Placed; d > 4 || d < -4 {
				t.Errorf("%s: %s order placed %d, gpuslice's %d", mix.Name, o, by[stock+o].Placed, ours.Placed)
			}
		}
	}
}

func TestCompareOrderRefusesBadInput(t *testing.T) {
	for _, c := range []struct {
		mix           OrderMix
		nodes, claims int
	}{
		{OrderMixes[0], 0, 10},
		{OrderMixes[0], 1, 0},
		{OrderMix{Name: "x", Model: "A100-40GB", Profiles: []string{"1g.5gb"}}, 1, 1},
		{OrderMix{Name: "x", Model: "no-such-gpu", Profiles: []string{"1g.5gb"}, Weights: []int{1}}, 1, 1},
	} {
		if _, err := CompareOrder(c.mix, c.nodes, c.claims, 1); err == nil {
			t.Errorf("%+v nodes %d claims %d: no error", c.mix, c.nodes, c.claims)
		}
	}
}
