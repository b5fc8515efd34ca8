package server

import (
	"math"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
)

// The billing bound and clamp the heartbeat applies (pure).

func TestUsageBoundAndClamp(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	c := api.Claim{ID: "c", State: api.Running, Created: t0, Allocation: &alloc.Allocation{Devices: []alloc.Assigned{
		{Node: "a", GPU: "G1", Device: "G1", MemoryMiB: 1000},
		{Node: "a", GPU: "G2", Device: "G2", MemoryMiB: 1000},
		{Node: "b", GPU: "G3", Device: "G3", MemoryMiB: 50000},
	}}}
	mem := func(node, gpu string) int64 { return map[string]int64{"G1": 24000, "G2": 24000, "G3": 16000}[gpu] }
	lim := usageBound(c, "a", mem, 2*time.Second, t0.Add(100*time.Second))
	want := usageLimit{
		Beat: api.Consumption{GPUSeconds: 14, SMSeconds: 14, MemoryMiBSeconds: 48000 * 7},
		Life: api.Consumption{GPUSeconds: 300, SMSeconds: 300, MemoryMiBSeconds: 98000 * 100},
	}
	if lim != want {
		t.Fatalf("usageBound = %+v, want %+v", lim, want)
	}
	// A final claim's life ends when it ended.
	done := c
	done.State, done.Updated = api.Released, t0.Add(10*time.Second)
	if l := usageBound(done, "a", mem, time.Hour, t0.Add(time.Hour)); l.Life.GPUSeconds != 30 {
		t.Fatalf("a claim released after 10 s: life bound %+v", l.Life)
	}
	for _, tc := range []struct {
		name             string
		prior, u         api.Consumption
		wantAdd, wantTot api.Consumption
		clamped          bool
	}{
		{"within both", api.Consumption{GPUSeconds: 10}, api.Consumption{GPUSeconds: 5, SMSeconds: 1},
			api.Consumption{GPUSeconds: 5, SMSeconds: 1}, api.Consumption{GPUSeconds: 15, SMSeconds: 1}, false},
		{"over the beat", api.Consumption{}, api.Consumption{GPUSeconds: 20},
			api.Consumption{GPUSeconds: 14}, api.Consumption{GPUSeconds: 14}, true},
		{"over the life", api.Consumption{GPUSeconds: 295}, api.Consumption{GPUSeconds: 10},
			api.Consumption{GPUSeconds: 5}, api.Consumption{GPUSeconds: 300}, true},
		{"billed past its bound before: nothing more, nothing back", api.Consumption{GPUSeconds: 400}, api.Consumption{GPUSeconds: 1},
			api.Consumption{}, api.Consumption{GPUSeconds: 400}, true},
		{"huge", api.Consumption{}, api.Consumption{GPUSeconds: math.MaxFloat64, SMSeconds: math.Inf(1), MemoryMiBSeconds: math.MaxFloat64},
			want.Beat, want.Beat, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			add, tot, clamped := clampUsage(tc.prior, tc.u, lim)
			if add != tc.wantAdd || tot != tc.wantTot || clamped != tc.clamped {
				t.Fatalf("clampUsage(%+v, %+v) = %+v, %+v, %v; want %+v, %+v, %v", tc.prior, tc.u, add, tot, clamped, tc.wantAdd, tc.wantTot, tc.clamped)
			}
		})
	}
	merged := mergeSamples([]api.UsageSample{{Claim: "x", GPUSeconds: 1, MemoryMiB: 5}, {Claim: "y", GPUSeconds: 2}, {Claim: "x", GPUSeconds: 3, SMSeconds: 1, MemoryMiB: 4}})
	if len(merged) != 2 || merged[0] != (api.UsageSample{Claim: "x", GPUSeconds: 4, SMSeconds: 1, MemoryMiB: 5}) || merged[1].Claim != "y" {
		t.Fatalf("mergeSamples = %+v", merged)
	}
}
