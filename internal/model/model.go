package model

import (
	"github.com/gpuslice/gpuslice/internal/alloc"
)

// Spec is what every input format is read into: where workloads may run
// (pools), who they belong to (tenants) and what they need (workloads).
type Spec struct {
	// Sources lists the files the spec was read from.
	Sources   []string     `json:"sources,omitempty"`
	Policy    alloc.Policy `json:"policy,omitempty"`
	Pools     []Pool       `json:"pools,omitempty"`
	Tenants   []Tenant     `json:"tenants,omitempty"`
	Workloads []Workload   `json:"workloads,omitempty"`
	// Imported holds sharing setups read from NVIDIA configs; the
	// readers fill it and spec.ApplyImported matches each to the pools it
	// applies to (see ImportedSharing).
	Imported []ImportedSharing `json:"imported,omitempty"`
}

// Pool is a group of identical nodes.
type Pool struct {
	Name string `json:"name"`
	// InstanceType is a catalog instance type (p4d.24xlarge); or GPU and
	// GPUsPerNode describe the nodes directly.
	InstanceType string `json:"instanceType,omitempty"`
	GPU          string `json:"gpu,omitempty"`
	GPUsPerNode  int    `json:"gpusPerNode,omitempty"`
	// Nodes is the node count; 0 means "as many as the plan needs" up to
	// MaxNodes (0 = no limit).
	Nodes    int `json:"nodes,omitempty"`
	MaxNodes int `json:"maxNodes,omitempty"`
	// Sharing is how whole GPUs (MIG off) are shared.
	Sharing alloc.Sharing `json:"sharing,omitempty"`
	// MIG is "" (off), "dynamic", or a fixed layout on every GPU:
	// profiles with counts, placed explicitly by the planner.
	MIG       string         `json:"mig,omitempty"`
	MIGLayout map[string]int `json:"migLayout,omitempty"`
	// MIGSharing is how each MIG instance is shared (layered sharing).
	MIGSharing alloc.Sharing     `json:"migSharing,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
	Taints     []Taint           `json:"taints,omitempty"`
	// Where is the file position that defined the pool.
	Where Pos `json:"-"`
	// SharingWhere, MIGWhere and MIGSharingWhere are where the spec set
	// Sharing, MIG (and MIGLayout) and MIGSharing; the zero Pos means the
	// reader's default, which an imported config may replace. A value the
	// spec set that an imported config contradicts is an error naming both.
	SharingWhere    Pos `json:"-"`
	MIGWhere        Pos `json:"-"`
	MIGSharingWhere Pos `json:"-"`
	// MIGSharingByProfile overrides MIGSharing for the instances of one
	// profile (a device-plugin config shares each nvidia.com/mig-<profile>
	// resource on its own, and leaves the others unshared).
	MIGSharingByProfile map[string]alloc.Sharing `json:"migSharingByProfile,omitempty"`
	// DevicePlugin and MIGParted are the imported configs that fix this
	// pool's sharing and MIG layout (set by spec.ApplyImported); render
	// writes them back with every setting the planner does not decide.
	DevicePlugin *ImportedSharing `json:"devicePlugin,omitempty"`
	MIGParted    *ImportedSharing `json:"migParted,omitempty"`
	// FixedBy says, one line each, what an imported config fixed.
	FixedBy []string `json:"fixedBy,omitempty"`
}

// Taint is a Kubernetes node taint the pool's nodes carry.
type Taint struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
}

// Tenant is a team or customer with optional quotas.
type Tenant struct {
	Name string `json:"name"`
	// Quota limits what the tenant's workloads may hold at once (0 = none).
	MemoryMiB      int64 `json:"memoryMiB,omitempty"`
	ComputePercent int   `json:"computePercent,omitempty"`
}

// Workload is a set of identical replicas, each needing one claim.
type Workload struct {
	Name     string `json:"name"`
	Tenant   string `json:"tenant"`
	Replicas int    `json:"replicas"`
	// MinReplicas is the autoscaler's floor (compose autoscaling); the plan
	// sizes for Replicas (the ceiling).
	MinReplicas int                `json:"minReplicas,omitempty"`
	Pool        string             `json:"pool,omitempty"`
	Isolation   alloc.Isolation    `json:"isolation,omitempty"`
	Priority    int                `json:"priority,omitempty"`
	Requests    []alloc.Request    `json:"requests"`
	Constraints []alloc.Constraint `json:"constraints,omitempty"`
	// Container holds what render needs for Kubernetes objects.
	Image string `json:"image,omitempty"`
	Ports []int  `json:"ports,omitempty"`
	CPU   string `json:"cpu,omitempty"`    // limit, e.g. "500m"
	Mem   string `json:"memory,omitempty"` // limit, e.g. "250M"
	// CPURequest and MemRequest are what the scheduler reserves (compose
	// deploy.resources.reservations); empty means the limit.
	CPURequest string            `json:"cpuRequest,omitempty"`
	MemRequest string            `json:"memoryRequest,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	// Autoscaling and serverless settings carried from compose.
	Autoscaling *Autoscaling `json:"autoscaling,omitempty"`
	// ScaleMetric is what a service of the workload scales on (compose
	// x-gpuslice.metric: gpu, compute, memory or requests; "" is gpu), and
	// TargetConcurrency the requests in flight per replica that count as
	// 100% for requests (0: 10).
	ScaleMetric       string `json:"scaleMetric,omitempty"`
	TargetConcurrency int    `json:"targetConcurrency,omitempty"`
	Where             Pos    `json:"-"`
}

// Autoscaling carries x-omnistrate-capabilities.
type Autoscaling struct {
	MinReplicas                        int  `json:"minReplicas"`
	MaxReplicas                        int  `json:"maxReplicas"`
	IdleMinutesBeforeScalingDown       int  `json:"idleMinutesBeforeScalingDown,omitempty"`
	IdleThreshold                      int  `json:"idleThreshold,omitempty"`
	OverUtilizedMinutesBeforeScalingUp int  `json:"overUtilizedMinutesBeforeScalingUp,omitempty"`
	OverUtilizedThreshold              int  `json:"overUtilizedThreshold,omitempty"`
	TargetPort                         int  `json:"targetPort,omitempty"`
	EnableAutoStop                     bool `json:"enableAutoStop,omitempty"`
	MinimumNodesInPool                 int  `json:"minimumNodesInPool,omitempty"`
}

// ImportedSharing is the sharing setup an NVIDIA config describes: what
// the cluster's nodes have (or must have). spec.ApplyImported makes it the
// fixed configuration of the pools it applies to.
type ImportedSharing struct {
	// Source is "nvidia-device-plugin" or "mig-parted"; Name the config
	// name inside it (device-plugin config key, or "default" for a bare
	// config file; mig-parted config name).
	Source string `json:"source"`
	Name   string `json:"name"`
	// Key is the ConfigMap data key a config was read from ("" for a bare
	// file): the value of the node label that selects it.
	Key string `json:"key,omitempty"`
	// Text is a device-plugin config as written (the data value, or the
	// file), line endings normalized and one final newline; render writes
	// it back unchanged, so flags, renameByDefault,
	// failRequestsGreaterThanOne and every other setting survive.
	Text string `json:"-"`
	// DevicePlugin holds the device-plugin settings that decide resource
	// names and admission (nil for mig-parted).
	DevicePlugin *DevicePluginSettings `json:"devicePlugin,omitempty"`
	// SharingWhere is where the config sets Sharing (its replicas), for
	// messages about conflicts.
	SharingWhere Pos `json:"-"`
	// File is the file a mig-parted config came from: configs of one file
	// are written back together.
	File string `json:"-"`
	// Single marks a device-plugin config that is the only data key of its
	// ConfigMap: the device plugin's config manager takes it for every
	// node whose label selects no config (its "single" fallback, after
	// "named", which takes data key "default").
	Single bool `json:"-"`
	// Sharing applies to whole GPUs (and, with MIG strategy mixed, to MIG
	// devices of the listed resources).
	Sharing    alloc.Sharing `json:"sharing,omitempty"`
	MIGSharing alloc.Sharing `json:"migSharing,omitempty"`
	// MIGStrategy is the device plugin's none|single|mixed.
	MIGStrategy string `json:"migStrategy,omitempty"`
	// Devices lists per-device MIG settings (mig-parted).
	Devices []ImportedDevices `json:"devices,omitempty"`
	Where   Pos               `json:"-"`
}

// ImportedDevices is one mig-parted entry: which GPUs, MIG on or off, and
// the instance counts.
type ImportedDevices struct {
	// Devices is "all" or GPU indexes.
	All          bool           `json:"all,omitempty"`
	Indexes      []int          `json:"indexes,omitempty"`
	DeviceFilter []string       `json:"deviceFilter,omitempty"`
	MIGEnabled   bool           `json:"migEnabled"`
	MIGDevices   map[string]int `json:"migDevices,omitempty"`
	// Where is the entry's position; DevicesWhere that of its mig-devices.
	Where        Pos `json:"-"`
	DevicesWhere Pos `json:"-"`
}

// DevicePluginSettings are the parts of a device-plugin config that
// decide what a pod asks for and what the plugin admits.
type DevicePluginSettings struct {
	// Mode is the sharing section in force: "timeSlicing", "mps" or "".
	Mode string `json:"mode,omitempty"`
	// RenameByDefault advertises shared resources as <name>.shared.
	RenameByDefault bool `json:"renameByDefault,omitempty"`
	// FailRequestsGreaterThanOne as written (nil: not set).
	FailRequestsGreaterThanOne *bool `json:"failRequestsGreaterThanOne,omitempty"`
	// Replicas maps each shared resource (nvidia.com/gpu,
	// nvidia.com/mig-1g.5gb) to its replicas.
	Replicas map[string]int `json:"replicas,omitempty"`
}

// Pos is a position in an input file.
type Pos struct {
	File   string `json:"file,omitempty"`
	Line   int    `json:"line,omitempty"`
	Column int    `json:"column,omitempty"`
}
