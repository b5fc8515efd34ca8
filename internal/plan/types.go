package plan

import "github.com/gpuslice/gpuslice/internal/alloc"

// Plan is the answer for one spec.
type Plan struct {
	Pools      []PoolPlan  `json:"pools"`
	Placements []Placement `json:"placements"`
	// Unplaced lists replicas that fit nowhere, with the allocator's reason.
	Unplaced []Unplaced `json:"unplaced,omitempty"`
	Cost     Cost       `json:"cost"`
	Warnings []string   `json:"warnings,omitempty"`
	// Quality is how good the plan is: GPUs, lower bound, gap (quality.go).
	Quality *Quality `json:"quality,omitempty"`
}

// PoolPlan is what one pool needs.
type PoolPlan struct {
	Name         string `json:"name"`
	InstanceType string `json:"instanceType,omitempty"`
	GPU          string `json:"gpu"`
	GPUsPerNode  int    `json:"gpusPerNode"`
	// Nodes is how many nodes the pool needs (or has, when fixed).
	Nodes int `json:"nodes"`
	// GPUsUsed counts GPUs holding at least one replica.
	GPUsUsed int `json:"gpusUsed"`
	// PricePerNodeHour is nil when the instance type has no known price.
	PricePerNodeHour *float64          `json:"pricePerNodeHour,omitempty"`
	GPUs             []GPUPlan         `json:"gpus"`
	Labels           map[string]string `json:"labels,omitempty"`
	// FixedBy says what imported NVIDIA configs fixed (model.Pool.FixedBy).
	FixedBy []string `json:"fixedBy,omitempty"`
}

// GPUPlan is one physical GPU: whole (with its sharing) or partitioned.
type GPUPlan struct {
	Node  string `json:"node"`
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	MIG   bool   `json:"mig"`
	// Sharing is the whole GPU's sharing when MIG is off.
	Sharing alloc.Sharing `json:"sharing,omitempty"`
	// Instances is the MIG layout with explicit starts, in creation order.
	Instances []InstancePlan `json:"instances,omitempty"`
	// Claims on the whole GPU (MIG off).
	Claims []string `json:"claims,omitempty"`
}

// InstancePlan is one MIG instance and who uses it.
type InstancePlan struct {
	Profile string        `json:"profile"`
	Start   int           `json:"start"`
	Sharing alloc.Sharing `json:"sharing"`
	Claims  []string      `json:"claims,omitempty"`
}

// Placement is where one replica of a workload landed.
type Placement struct {
	Workload string           `json:"workload"`
	Tenant   string           `json:"tenant"`
	Replica  int              `json:"replica"`
	Pool     string           `json:"pool"`
	Devices  []alloc.Assigned `json:"devices"`
	Why      []string         `json:"why,omitempty"`
}

// Unplaced is a replica that fits nowhere.
type Unplaced struct {
	Workload string `json:"workload"`
	Replica  int    `json:"replica"`
	Reason   string `json:"reason"`
}

// Cost compares the plan with giving every replica's devices whole GPUs
// ("dedicated"): of the cheapest pool whose GPU holds each device, or the
// workload's own pool, in whole nodes.
type Cost struct {
	// PerHour is the plan's on-demand cost; Known is false when a pool's
	// price is unknown (the total then covers the priced pools only).
	PerHour          float64 `json:"perHour"`
	DedicatedPerHour float64 `json:"dedicatedPerHour"`
	Known            bool    `json:"known"`
	// GPUs and DedicatedGPUs count physical GPUs in use.
	GPUs          int `json:"gpus"`
	DedicatedGPUs int `json:"dedicatedGPUs"`
	// PriceNote names the price sources and dates.
	PriceNote string `json:"priceNote,omitempty"`
}
