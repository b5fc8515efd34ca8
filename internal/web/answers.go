package web

import (
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
)

// The answers of the dashboard's own endpoints (internal/server serves
// them; the page's script and the tests read them). The HTTP API's
// request and answer bodies are in internal/api.

// Dashboard is the answer of GET /v1/dashboard: one page of the tenants
// the caller may see with quota, usage and cost, and the samples for the
// charts (thinned to ?points=, with the figures of ChartTenants only).
type Dashboard struct {
	Time time.Time `json:"time"`
	// Viewer is the caller's tenant ("" for an admin).
	Viewer  string       `json:"viewer,omitempty"`
	Tenants []TenantView `json:"tenants"`
	// TotalTenants is how many tenants match the query (every page's).
	TotalTenants int `json:"totalTenants"`
	// Next is the cursor of the next page (also in X-Next-Cursor); empty
	// on the last.
	Next   string   `json:"next,omitempty"`
	Series []Sample `json:"series"`
	// ChartTenants are the tenants whose figures the samples carry: the
	// caller's own for a tenant, the 12 with the most GPU-seconds for an
	// admin.
	ChartTenants []string `json:"chartTenants"`
	// GPUHourPrices is the cheapest catalog price of a GPU-hour by model.
	GPUHourPrices map[string]float64 `json:"gpuHourPrices"`
	// SampleSeconds is how often a sample is taken.
	SampleSeconds float64 `json:"sampleSeconds"`
}

// TenantView is one tenant in the dashboard.
type TenantView struct {
	Name                string    `json:"name"`
	MemoryQuotaMiB      int64     `json:"memoryQuotaMiB,omitempty"`
	ComputeQuotaPercent int       `json:"computeQuotaPercent,omitempty"`
	Usage               api.Usage `json:"usage"`
	Pending             int       `json:"pending"`
	Cost                Cost      `json:"cost"`
}

// TenantPage is the answer of GET /v1/dashboard/tenants/{name}.
type TenantPage struct {
	Time   time.Time  `json:"time"`
	Tenant TenantView `json:"tenant"`
	// Series is the tenant's figures (and the fleet's totals) over time.
	Series []Sample `json:"series"`
	// Claims are its pending and live claims (at most 500).
	Claims []api.Claim `json:"claims"`
	// Events are its newest events, newest first.
	Events []api.Event `json:"events"`
}

// GPUView is the answer of GET /v1/fleet/gpus/{node}/{index}.
type GPUView struct {
	Time time.Time `json:"time"`
	Node FleetNode `json:"node"` // without its GPUs
	GPU  FleetGPU  `json:"gpu"`
	// History is the GPU's memory promised and used, sample by sample.
	History []GPUPoint `json:"history"`
	// Claims are the claims that hold or held a device of the GPU, newest
	// first (at most 50; a tenant's own only).
	Claims []api.Claim `json:"claims"`
	// Events are the newest events of the GPU's node (a tenant's own
	// events only), newest first.
	Events []api.Event `json:"events"`
}
