package web

import (
	"math"
	"slices"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/catalog"
)

// HoursPerMonth is the month cost figures use (365 × 24 / 12).
const HoursPerMonth = 730

// Cost is what a tenant's live claims cost at catalog prices: by the
// share of each GPU they hold, and as if each device they hold were a
// dedicated GPU of the same model.
type Cost struct {
	PerHour           float64 `json:"perHour"`
	PerMonth          float64 `json:"perMonth"`
	DedicatedPerHour  float64 `json:"dedicatedPerHour"`
	DedicatedPerMonth float64 `json:"dedicatedPerMonth"`
	// Unpriced names the GPU models held for which the catalog has no
	// price; they are left out of the figures.
	Unpriced []string `json:"unpriced,omitempty"`
}

// GPUHourPrices is the cheapest on-demand price of one GPU-hour per model:
// an instance type's hourly price divided by its GPUs, over every priced
// instance type in the catalog.
func GPUHourPrices(cat *catalog.Catalog) map[string]float64 {
	out := map[string]float64{}
	for _, g := range cat.GPUs() {
		best := math.Inf(1)
		for _, it := range cat.InstanceTypesWithGPU(func(m *catalog.GPU) bool { return m.ID == g.ID }) {
			if it.Price != nil && it.GPUCount > 0 {
				best = min(best, it.Price.USDPerHour/float64(it.GPUCount))
			}
		}
		if !math.IsInf(best, 1) {
			out[g.ID] = best
		}
	}
	return out
}

// GPUShare is the fraction of its GPU a device assignment holds: the larger
// of its memory and compute shares, or the whole device (a MIG instance's
// larger slice fraction, or the GPU) for an exclusive or MIG claim.
func GPUShare(d alloc.Assigned, model *catalog.GPU) float64 {
	if model == nil || model.MemoryMiB <= 0 {
		return 0
	}
	device := 1.0
	if d.Profile != "" && model.MIG != nil {
		if p, err := model.Profile(d.Profile); err == nil && model.MIG.MemorySlices > 0 && model.MIG.ComputeSlices > 0 {
			device = max(float64(p.MemorySlices)/float64(model.MIG.MemorySlices), float64(p.ComputeSlices)/float64(model.MIG.ComputeSlices))
		}
	}
	if d.Mode == alloc.Exclusive || d.Mode == alloc.MIG {
		return device
	}
	return min(device, max(float64(d.MemoryMiB)/float64(model.MemoryMiB), float64(d.ComputePercent)/100))
}

// TenantCost prices a tenant's live claims (others are ignored) with
// prices per GPU-hour by model (GPUHourPrices). modelOf maps a GPU uuid to
// its catalog model.
func TenantCost(claims []api.Claim, modelOf func(gpu string) string, prices map[string]float64, cat *catalog.Catalog) Cost {
	var c Cost
	for _, cl := range claims {
		if cl.Allocation == nil || (cl.State != api.Allocated && cl.State != api.Running) {
			continue
		}
		for _, d := range cl.Allocation.Devices {
			id := modelOf(d.GPU)
			price, ok := prices[id]
			model, err := cat.GPU(id)
			if !ok || err != nil {
				if id == "" {
					id = "unknown GPU " + d.GPU
				}
				if !slices.Contains(c.Unpriced, id) {
					c.Unpriced = append(c.Unpriced, id)
				}
				continue
			}
			c.PerHour += price * GPUShare(d, model)
			c.DedicatedPerHour += price
		}
	}
	c.PerMonth, c.DedicatedPerMonth = c.PerHour*HoursPerMonth, c.DedicatedPerHour*HoursPerMonth
	return c
}
