package api

import "github.com/gpuslice/gpuslice/internal/alloc"

// The bounds of ClaimSpec's fields the server enforces (and the CLI
// checks before asking).
const (
	// LowestPriority and HighestPriority bound claim priorities and
	// tenants' maxPriority, so no arithmetic on them can overflow.
	LowestPriority  = -1000
	HighestPriority = 1000
	// MaxLeaseSeconds bounds ClaimSpec.LeaseSeconds.
	MaxLeaseSeconds = 3600
)

// CreateClaimRequest is the body of POST /v1/claims.
type CreateClaimRequest struct {
	// Tenant is required for admin tokens and must match a tenant token's.
	Tenant string `json:"tenant,omitempty"`
	ClaimSpec
}

// CreateTokenRequest is the body of POST /v1/tokens.
type CreateTokenRequest struct {
	Role   Role   `json:"role"`
	Tenant string `json:"tenant,omitempty"`
	// Node binds an agent token to one node from the start.
	Node string `json:"node,omitempty"`
}

// PutServiceRequest is the body of PUT /v1/services/{name}.
type PutServiceRequest struct {
	// Tenant is required for admin tokens and must match a tenant token's.
	Tenant string `json:"tenant,omitempty"`
	// CreateTenant (admin tokens only) creates Tenant when it does not
	// exist, with no quota, maxPriority 0 and no allowed commands, in the
	// same transaction as the service: a compose file names its tenant
	// (the plan's slug) and runs as written. An existing tenant is left as
	// it is. A tenant token may not set it: its own tenant exists, and it
	// may create none.
	CreateTenant bool `json:"createTenant,omitempty"`
	ServiceSpec
}

// RegisterRequest is the body of PUT /v1/nodes/{name}: what the agent found.
type RegisterRequest struct {
	Inventory alloc.Node `json:"inventory"`
	Simulated bool       `json:"simulated"`
	Driver    string     `json:"driver,omitempty"`
	// Host is the name of the machine the agent runs on (its short host
	// name): gpuslice run starts a command only on the host of the node
	// its claim is on.
	Host string `json:"host,omitempty"`
}

// HeartbeatRequest is the body of POST /v1/nodes/{name}/heartbeat.
type HeartbeatRequest struct {
	// Inventory is set when the GPUs changed since the last report.
	Inventory *alloc.Node `json:"inventory,omitempty"`
	// Usage since the last heartbeat, per claim.
	Usage []UsageSample `json:"usage,omitempty"`
	// Events the agent saw (health, memory watchdog).
	Events []Event `json:"events,omitempty"`
}

// UsageSample is what one claim used since the last report.
type UsageSample struct {
	Claim            string  `json:"claim"`
	GPUSeconds       float64 `json:"gpuSeconds"`
	SMSeconds        float64 `json:"smSeconds"`
	MemoryMiBSeconds float64 `json:"memoryMiBSeconds"`
	MemoryMiB        int64   `json:"memoryMiB"`
}
