package api

import (
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
)

// ClaimState is where a claim is in its life.
type ClaimState string

// Claim lifecycle: pending → allocated → running → released | failed.
// A pending claim waits for capacity; allocated means devices are
// reserved; running means a process uses them; released and failed are
// final.
const (
	Pending   ClaimState = "pending"
	Allocated ClaimState = "allocated"
	Running   ClaimState = "running"
	Released  ClaimState = "released"
	Failed    ClaimState = "failed"
)

// Final reports whether a state is terminal.
func (s ClaimState) Final() bool { return s == Released || s == Failed }

// Tenant is a team with optional quotas on what its live claims hold.
type Tenant struct {
	Name string `json:"name"`
	// MemoryMiB and ComputePercent are quotas (0 = unlimited).
	MemoryMiB      int64 `json:"memoryMiB,omitempty"`
	ComputePercent int   `json:"computePercent,omitempty"`
	// MaxPriority is the highest claim priority the tenant may ask for,
	// set by an admin (default 0: no tenant outranks another).
	MaxPriority int `json:"maxPriority,omitempty"`
	// Commands are what the tenant's services may run, set by an admin:
	// a tenant token may put a service only with one of these commands
	// (an admin token may put any). Empty: the tenant runs no services.
	Commands []AllowedCommand `json:"commands,omitempty"`
	Created  time.Time        `json:"created"`
}

// AllowedCommand is one command a tenant's services may run: the whole
// argv, matched exactly, and the environment variables the tenant may set
// on it (none unless listed).
type AllowedCommand struct {
	Command []string `json:"command"`
	// Env names the variables a tenant's service may set for it.
	Env []string `json:"env,omitempty"`
}

// Token is an API credential. The secret is shown once at creation and
// stored only as a hash.
type Token struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant,omitempty"` // empty for admin and agent tokens
	Role   Role   `json:"role"`
	// Node binds an agent token to one node: it may register, heartbeat
	// and read the claims of that node only. An agent token issued with
	// no node is bound to the first node it registers.
	Node string `json:"node,omitempty"`
	// Secret is set only in the answer that creates the token.
	Secret  string    `json:"secret,omitempty"`
	Created time.Time `json:"created"`
}

// Role of a token.
type Role string

// Roles: admin manages everything; tenant sees and changes its own claims;
// agent registers a node and reports on it.
const (
	RoleAdmin  Role = "admin"
	RoleTenant Role = "tenant"
	RoleAgent  Role = "agent"
)

// ClaimSpec is what a user asks for: the allocator's claim without the
// name and tenant, which the server sets.
type ClaimSpec struct {
	Priority    int                `json:"priority,omitempty"`
	Isolation   alloc.Isolation    `json:"isolation,omitempty"`
	Requests    []alloc.Request    `json:"requests"`
	Constraints []alloc.Constraint `json:"constraints,omitempty"`
	// Node pins the claim to one node (gpuslice run on that host).
	Node string `json:"node,omitempty"`
	// MemoryPolicy is what the agent does when a process uses more GPU
	// memory than its claim promised: warn (default) or kill.
	MemoryPolicy string `json:"memoryPolicy,omitempty"`
	// FaultPolicy is what happens to a running claim when its GPU becomes
	// unhealthy: fail (default; the process met the fault) or requeue.
	// Claims that are only allocated are always re-queued.
	FaultPolicy string `json:"faultPolicy,omitempty"`
	// WaitForNodes queues a claim that no registered node could ever
	// hold (even empty), for nodes that may join. Without it such a claim
	// is refused at once (422), saying why.
	WaitForNodes bool `json:"waitForNodes,omitempty"`
	// LeaseSeconds makes the claim last only while its holder renews it
	// (POST /v1/claims/{id}/renew, at least every LeaseSeconds): a claim
	// not renewed for LeaseSeconds plus the server's grace
	// (serve --lease-grace) is released. gpuslice run and serve's
	// replicas always hold one; 0: no lease (the claim lasts until
	// released). 1..3600.
	LeaseSeconds int `json:"leaseSeconds,omitempty"`
	// Service names the service whose replica this claim is: set by
	// serve's services controller (admin tokens only), so a restarted
	// controller finds and releases the claims of the replicas it lost.
	Service string `json:"service,omitempty"`
}

// Claim is a request and its state.
type Claim struct {
	ID      string     `json:"id"`
	Tenant  string     `json:"tenant"`
	Spec    ClaimSpec  `json:"spec"`
	State   ClaimState `json:"state"`
	Reason  string     `json:"reason,omitempty"`
	Created time.Time  `json:"created"`
	Updated time.Time  `json:"updated"`
	// Seq orders claims FIFO within a priority (assigned by the store).
	Seq int64 `json:"seq"`
	// Allocation is set once allocated.
	Allocation *alloc.Allocation `json:"allocation,omitempty"`
	// QueuePosition is set on pending claims in answers (1 = next).
	QueuePosition int `json:"queuePosition,omitempty"`
	// Used is what the claim's processes used, as its agents report it.
	Used *Consumption `json:"used,omitempty"`
	// Allocated is when the claim first got devices: billing counts its
	// life from then (a claim that waited in the queue used nothing).
	Allocated *time.Time `json:"allocated,omitempty"`
	// LeaseExpires is when a leased live claim is released unless renewed
	// (answers only; the server's grace comes on top).
	LeaseExpires *time.Time `json:"leaseExpires,omitempty"`
}

// NodeState is a node's health as the server sees it.
type NodeState string

// Node states.
const (
	NodeReady NodeState = "ready"
	NodeLost  NodeState = "lost"
)

// Node is a host with GPUs, as its agent reports it.
type Node struct {
	Name          string     `json:"name"`
	State         NodeState  `json:"state"`
	LastHeartbeat time.Time  `json:"lastHeartbeat"`
	Simulated     bool       `json:"simulated"`
	Inventory     alloc.Node `json:"inventory"`
	// Driver is the NVIDIA driver version, or "simulated".
	Driver string `json:"driver,omitempty"`
	// Host is the machine its agent runs on, as the agent reports it
	// (empty from older agents): gpuslice run starts CMD only there.
	Host string `json:"host,omitempty"`
	// Agent is the id of the agent token the node is bound to: only that
	// credential (or an admin) may register it again, heartbeat for it or
	// read its claims.
	Agent   string    `json:"agent,omitempty"`
	Created time.Time `json:"created"`
}

// Usage is what a tenant holds and has used.
type Usage struct {
	Tenant         string  `json:"tenant"`
	Claims         int     `json:"claims"`
	MemoryMiB      int64   `json:"memoryMiB"`
	ComputePercent int     `json:"computePercent"`
	GPUSeconds     float64 `json:"gpuSeconds"`
	SMSeconds      float64 `json:"smSeconds"`
	MemoryMiBSec   float64 `json:"memoryMiBSeconds"`
}

// Consumption is use accumulated over time, for billing: what agents
// measured from per-process samples.
type Consumption struct {
	// GPUSeconds counts, per device, the seconds one of the claim's
	// processes ran on it.
	GPUSeconds float64 `json:"gpuSeconds"`
	// SMSeconds is SM activity in whole-GPU seconds (per-process SM
	// utilization × time). NVML samples no processes on MIG instances, so
	// MIG devices add nothing here.
	SMSeconds float64 `json:"smSeconds"`
	// MemoryMiBSeconds is GPU memory held × time.
	MemoryMiBSeconds float64 `json:"memoryMiBSeconds"`
}

// Add returns c + o.
func (c Consumption) Add(o Consumption) Consumption {
	return Consumption{GPUSeconds: c.GPUSeconds + o.GPUSeconds, SMSeconds: c.SMSeconds + o.SMSeconds,
		MemoryMiBSeconds: c.MemoryMiBSeconds + o.MemoryMiBSeconds}
}

// Event is something that happened, for audit and watchers.
type Event struct {
	Seq     int64     `json:"seq"`
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`
	Claim   string    `json:"claim,omitempty"`
	Tenant  string    `json:"tenant,omitempty"`
	Node    string    `json:"node,omitempty"`
	Message string    `json:"message"`
}

// Error is the body of every 4xx/5xx answer.
type Error struct {
	Error string `json:"error"`
	// Field names the offending field when the request was invalid.
	Field string `json:"field,omitempty"`
	// State is a claim's current state, on a 409 answered because the
	// claim is no longer in the state the transition starts from.
	State string `json:"state,omitempty"`
}

// Planned reports whether any device of the claim's allocation is still
// only planned (a MIG instance the agent has not made yet): a process must
// wait for its real id before it starts.
func (c Claim) Planned() bool {
	if c.Allocation == nil {
		return false
	}
	for _, d := range c.Allocation.Devices {
		if alloc.IsPlanned(d.Device) {
			return true
		}
	}
	return false
}
