package alloc

// Mode is how a claim shares a device, or how a device is configured to be
// shared.
type Mode string

// Sharing mechanisms. Auto is a claim-only value: the allocator picks (see
// decideAuto). Dynamic is a device-only value: an idle device takes the mode
// of its first claim, with the fleet's defaults.
const (
	Auto      Mode = "auto"
	Exclusive Mode = "exclusive"
	TimeSlice Mode = "timeslice"
	MPS       Mode = "mps"
	MIG       Mode = "mig"
	Dynamic   Mode = "dynamic"
)

// Isolation is a claim's isolation class.
type Isolation string

// Isolation classes. Tenant is the default.
const (
	// IsolationNone may share a device with any claim that also allows it.
	IsolationNone Isolation = "none"
	// IsolationTenant shares time-sliced and MPS devices only with the same
	// tenant; other tenants only across MIG instances or GPUs.
	IsolationTenant Isolation = "tenant"
	// IsolationHardware gets a MIG instance or a whole GPU to itself.
	IsolationHardware Isolation = "hardware"
)

// Workload is a hint for Auto mode, after the benchmark study in the seed
// (KubeCon NA 2024, "Which GPU sharing strategy is right for you?").
type Workload string

// Workload kinds Auto understands.
const (
	WorkloadUnknown     Workload = ""
	WorkloadInference   Workload = "inference"
	WorkloadInteractive Workload = "interactive" // notebooks, dev, CI
	WorkloadBatch       Workload = "batch"
	WorkloadTraining    Workload = "training"
)

// Sharing is how a device is configured to be shared.
type Sharing struct {
	Mode Mode `json:"mode"`
	// Replicas is the most claims a time-sliced device takes.
	Replicas int `json:"replicas,omitempty"`
	// Interval is the time-slice length: Default, Short, Medium or Long.
	Interval string `json:"interval,omitempty"`
	// MaxClients is the most MPS clients (at most 48).
	MaxClients int `json:"maxClients,omitempty"`
	// DefaultThreadPercent and DefaultPinnedMiB are the MPS daemon's
	// defaults for clients that ask for nothing (0 = unset).
	DefaultThreadPercent int   `json:"defaultThreadPercent,omitempty"`
	DefaultPinnedMiB     int64 `json:"defaultPinnedMiB,omitempty"`
}

// MaxMPSClients is the MPS client limit per device on Volta and later
// (CUDA ≤ 13.0; see reference gpu-facts.md §2).
const MaxMPSClients = 48

// Fleet is a snapshot of the machines and their GPUs.
type Fleet struct {
	Nodes  []Node `json:"nodes"`
	Policy Policy `json:"policy"`
}

// Policy is fleet-wide allocation policy.
type Policy struct {
	// Placement is "binpack" (default) or "spread".
	Placement string `json:"placement,omitempty"`
	// AllowModeSwitch lets the allocator turn MIG on or off on a whole idle
	// GPU. Such a change is flagged disruptive: it resets the GPU.
	AllowModeSwitch bool `json:"allowModeSwitch,omitempty"`
	// DefaultReplicas and DefaultMaxClients configure devices whose sharing
	// is Dynamic (and new MIG instances) when they become time-sliced or
	// MPS. Zero means DefaultReplicas and 48 clients (MPS clients on a MIG
	// instance are scaled down by its share of compute slices).
	DefaultReplicas   int `json:"defaultReplicas,omitempty"`
	DefaultMaxClients int `json:"defaultMaxClients,omitempty"`
	// PreferMIG lets a time-sliced, MPS or auto claim that names no MIG
	// profile go into a MIG instance (which holds less of a GPU) while a
	// whole GPU could still take it. Off (the default), such a claim gets
	// a whole GPU whenever one can take it, and a MIG instance only when
	// none can; its allocation's Notes then say so (see wholeFirst).
	PreferMIG bool `json:"preferMIG,omitempty"`
}

// Node is one machine.
type Node struct {
	Name          string            `json:"name"`
	Labels        map[string]string `json:"labels,omitempty"`
	InstanceType  string            `json:"instanceType,omitempty"`
	Unschedulable bool              `json:"unschedulable,omitempty"`
	GPUs          []GPU             `json:"gpus"`
}

// GPU is one physical GPU.
type GPU struct {
	UUID  string `json:"uuid"`
	Index int    `json:"index"`
	// Model is a catalog GPU id.
	Model   string `json:"model"`
	Healthy bool   `json:"healthy"`
	// MIGEnabled GPUs are used through their Instances; others as one
	// device with Sharing.
	MIGEnabled bool    `json:"migEnabled,omitempty"`
	Sharing    Sharing `json:"sharing"`
	// DynamicMIG lets the allocator create and destroy idle instances.
	DynamicMIG bool          `json:"dynamicMIG,omitempty"`
	Instances  []MIGInstance `json:"instances,omitempty"`
}

// MIGInstance is an existing GPU instance (with one compute instance
// spanning it).
type MIGInstance struct {
	UUID    string  `json:"uuid"`
	Profile string  `json:"profile"`
	Start   int     `json:"start"`
	Sharing Sharing `json:"sharing"`
	// GIID is the GPU instance id the driver gave it, as the node's agent
	// reports it (dcgm-exporter's GPU_I_ID); nil in plans.
	GIID *int `json:"giID,omitempty"`
}

// Claim is the one request model: what a workload needs, for which tenant.
type Claim struct {
	Name      string    `json:"name"`
	Tenant    string    `json:"tenant"`
	Priority  int       `json:"priority,omitempty"`
	Isolation Isolation `json:"isolation,omitempty"`
	Requests  []Request `json:"requests"`
	// Constraints tie the devices of several requests together.
	Constraints []Constraint `json:"constraints,omitempty"`
}

// Request is a group of identical devices a claim needs.
type Request struct {
	Name  string `json:"name"`
	Count int    `json:"count,omitempty"` // 0 means 1
	// MemoryMiB is the GPU memory each device must give; 0 means an equal
	// share of the device (memory / replicas or clients).
	MemoryMiB int64 `json:"memoryMiB,omitempty"`
	// ComputePercent is the share of a whole GPU's SMs (1..100); 0 means
	// no promise.
	ComputePercent int    `json:"computePercent,omitempty"`
	Mode           Mode   `json:"mode,omitempty"`
	Profile        string `json:"profile,omitempty"`
	// Selector is a CEL expression over `device` and `node` (see
	// selector.go); empty matches everything.
	Selector         string   `json:"selector,omitempty"`
	Workload         Workload `json:"workload,omitempty"`
	LatencySensitive bool     `json:"latencySensitive,omitempty"`
}

// Constraint requires the devices of Requests (all requests when empty) to
// share a Node or a parent GPU, like DRA's matchAttribute.
type Constraint struct {
	Requests []string `json:"requests,omitempty"`
	Match    string   `json:"match"` // "node", "gpu", "attribute" or "distinct"
	// Attribute is the device attribute (as selectors name it: parentUUID,
	// model, index, ...) whose value the devices share (match attribute)
	// or all differ in (match distinct), like DRA's matchAttribute and
	// distinctAttribute.
	Attribute string `json:"attribute,omitempty"`
}

// Constraint matches beyond one node or GPU.
const (
	MatchAttribute = "attribute"
	MatchDistinct  = "distinct"
)

// Allocation is the answer for one claim.
type Allocation struct {
	Claim     string     `json:"claim"`
	Tenant    string     `json:"tenant"`
	Isolation Isolation  `json:"isolation"`
	Devices   []Assigned `json:"devices"`
	Changes   []Change   `json:"changes,omitempty"`
	// Env is the environment of a process using every device of the claim.
	Env map[string]string `json:"env"`
	// Why explains each decision: the auto-mode choice and the candidate
	// taken for every device.
	Why []string `json:"why,omitempty"`
	// Notes say, one line each, where the claim landed differently from
	// what it asked for: a MIG instance for a claim that named none, an
	// MPS percentage relative to an instance (see landingNotes).
	Notes []string `json:"notes,omitempty"`
}

// Assigned is one device given to a claim.
type Assigned struct {
	Request string `json:"request"`
	Node    string `json:"node"`
	GPU     string `json:"gpu"` // parent GPU uuid
	// Device is the device's id: the GPU uuid, a MIG uuid, or for an
	// instance this allocation creates, "<gpu>/<profile>@<start>" until the
	// agent reports its uuid.
	Device  string `json:"device"`
	Profile string `json:"profile,omitempty"`
	Start   int    `json:"start,omitempty"`
	Mode    Mode   `json:"mode"`
	// MemoryMiB and ComputePercent are what is promised on the device.
	MemoryMiB      int64 `json:"memoryMiB"`
	ComputePercent int   `json:"computePercent,omitempty"`
	// Slot is the replica (time-slicing) or client (MPS) slot taken.
	Slot int        `json:"slot,omitempty"`
	MPS  *MPSLimits `json:"mps,omitempty"`
	// New is set when this allocation creates the device (a MIG instance).
	New bool `json:"new,omitempty"`
}

// MPSLimits are the per-client limits of an MPS allocation.
type MPSLimits struct {
	ActiveThreadPercent int    `json:"activeThreadPercent"`
	PinnedMemoryMiB     int64  `json:"pinnedMemoryMiB"`
	PipeDirectory       string `json:"pipeDirectory"`
}

// ChangeKind names a layout change.
type ChangeKind string

// Layout changes the agent applies before the allocation is usable.
const (
	CreateInstance  ChangeKind = "create-instance"
	DestroyInstance ChangeKind = "destroy-instance"
	EnableMIG       ChangeKind = "enable-mig"
	DisableMIG      ChangeKind = "disable-mig"
	ConfigureShare  ChangeKind = "configure-sharing"
)

// Change is one layout or configuration change an allocation needs.
type Change struct {
	Kind    ChangeKind `json:"kind"`
	Node    string     `json:"node"`
	GPU     string     `json:"gpu"`
	Device  string     `json:"device,omitempty"`
	Profile string     `json:"profile,omitempty"`
	Start   int        `json:"start,omitempty"`
	Sharing *Sharing   `json:"sharing,omitempty"`
	// Disruptive changes reset a GPU (MIG mode switch).
	Disruptive bool `json:"disruptive,omitempty"`
}
