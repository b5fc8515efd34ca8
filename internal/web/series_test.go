package web

import (
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/catalog"
)

// The ring keeps the last n samples in order, however many are added.
func TestSeriesIsABoundedRing(t *testing.T) {
	s := NewSeries(5)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 12 {
		s.Add(Sample{Time: t0.Add(time.Duration(i) * time.Second), Pending: i})
		if got, want := s.Len(), min(i+1, 5); got != want {
			t.Fatalf("after %d adds: %d kept, want %d", i+1, got, want)
		}
	}
	all := s.Since(time.Time{}, nil)
	if len(all) != 5 {
		t.Fatalf("%d samples", len(all))
	}
	for i, x := range all {
		if x.Pending != 7+i {
			t.Errorf("sample %d is #%d, want #%d (oldest first)", i, x.Pending, 7+i)
		}
	}
	if got := s.Since(t0.Add(9*time.Second), nil); len(got) != 2 || got[0].Pending != 10 {
		t.Errorf("since 9s: %+v", got)
	}
}

// A tenant's view of a sample names no other tenant and counts only its
// own pending claims.
func TestForTenant(t *testing.T) {
	x := Sample{Pending: 5, GPUs: 8, Tenants: map[string]TenantSample{"a": {Pending: 2, GPUSeconds: 3}, "b": {Pending: 3}}}
	v := ForTenant("a")(x)
	if len(v.Tenants) != 1 || v.Tenants["a"].GPUSeconds != 3 || v.Pending != 2 || v.GPUs != 8 {
		t.Errorf("a's view: %+v", v)
	}
	if len(x.Tenants) != 2 {
		t.Errorf("the stored sample was changed: %+v", x)
	}
	if v := ForTenant("c")(x); len(v.Tenants) != 0 || v.Pending != 0 {
		t.Errorf("c's view: %+v", v)
	}
}

// Cost: a shared claim pays its share of the GPU at the cheapest catalog
// price per GPU-hour; dedicated pays a whole GPU per device. Both come
// from the catalog, not from constants here.
func TestTenantCost(t *testing.T) {
	cat := catalog.Default()
	prices := GPUHourPrices(cat)
	a100, ok := prices["A100-40GB"]
	if !ok || a100 <= 0 {
		t.Fatalf("no A100-40GB price in the catalog: %v", prices)
	}
	model, _ := cat.GPU("A100-40GB")
	p3g, _ := model.Profile("3g.20gb")
	claims := []api.Claim{
		{State: api.Running, Allocation: &alloc.Allocation{Devices: []alloc.Assigned{{GPU: "G1", Mode: alloc.MIG, Profile: "3g.20gb", MemoryMiB: p3g.MemoryMiB}}}},
		{State: api.Allocated, Allocation: &alloc.Allocation{Devices: []alloc.Assigned{{GPU: "G1", Mode: alloc.TimeSlice, MemoryMiB: model.MemoryMiB / 4, ComputePercent: 10}}}},
		{State: api.Pending},
		{State: api.Running, Allocation: &alloc.Allocation{Devices: []alloc.Assigned{{GPU: "G2", Mode: alloc.Exclusive}}}},
	}
	modelOf := func(g string) string { return map[string]string{"G1": "A100-40GB", "G2": "no-such-model"}[g] }
	c := TenantCost(claims, modelOf, prices, cat)
	share3g := max(float64(p3g.MemorySlices)/float64(model.MIG.MemorySlices), float64(p3g.ComputeSlices)/float64(model.MIG.ComputeSlices))
	want := a100*share3g + a100*0.25
	if diff := c.PerHour - want; diff > 1e-9 || diff < -1e-9 {
		t.Errorf("per hour %v, want %v", c.PerHour, want)
	}
	if c.DedicatedPerHour != 2*a100 || c.PerMonth != c.PerHour*HoursPerMonth {
		t.Errorf("dedicated %v (want %v), month %v", c.DedicatedPerHour, 2*a100, c.PerMonth)
	}
	if len(c.Unpriced) != 1 || c.Unpriced[0] != "no-such-model" {
		t.Errorf("unpriced %v", c.Unpriced)
	}
}

// The fleet view of a planned instance (not yet made by the agent) on a
// GPU whose MIG mode is not on yet: drawn at its planned start, marked
// planned, with the model's slices.
func TestBuildFleetPlanned(t *testing.T) {
	n := api.Node{Name: "n", State: api.NodeReady, Inventory: alloc.Node{Name: "n", GPUs: []alloc.GPU{{UUID: "GPU-1", Model: "A30", Healthy: true}}}}
	c := api.Claim{ID: "c1", Tenant: "t", State: api.Allocated, Allocation: &alloc.Allocation{Devices: []alloc.Assigned{
		{Node: "n", GPU: "GPU-1", Device: "GPU-1/1g.6gb@3", Profile: "1g.6gb", Start: 3, Mode: alloc.MIG, MemoryMiB: 5952}}}}
	f := BuildFleet(FleetInput{Nodes: []api.Node{n}, Claims: []api.Claim{c}, Catalog: catalog.Default()})
	g := f.Nodes[0].GPUs[0]
	if g.MemorySlices != 4 || !g.MIG || len(g.Devices) != 1 {
		t.Fatalf("A30: %+v", g)
	}
	d := g.Devices[0]
	if !d.Planned || d.Start != 3 || d.Size != 1 || d.Profile != "1g.6gb" || d.Claims[0].Claim != "c1" || d.Mode != "exclusive" {
		t.Errorf("planned device %+v", d)
	}
	f = BuildFleet(FleetInput{Nodes: []api.Node{n}, Claims: []api.Claim{c}, Viewer: "other"})
	if s := f.Nodes[0].GPUs[0].Devices[0].Claims[0]; s.Claim != "" || s.Tenant != "" {
		t.Errorf("another tenant sees %+v", s)
	}
}
