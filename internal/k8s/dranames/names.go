package dranames

// DriverName is the DRA driver name gpuslice publishes its devices under,
// and the driver its opaque configs are for.
const DriverName = "gpu.gpuslice.dev"

// DeviceClass names, one per device type.
const (
	ClassGPU    = "gpu.gpuslice.dev"    // a whole GPU held alone (TypeGPU)
	ClassShared = "shared.gpuslice.dev" // a share of a whole GPU, by memory (TypeShared)
	ClassMIG    = "mig.gpuslice.dev"    // a MIG instance (TypeMIG)
)

// LegacyGPUResource is the extended resource a pod written for NVIDIA's
// device plugin asks for; the whole-GPU class serves it (KEP-5004), so
// `nvidia.com/gpu: 1` pods run on gpuslice's devices unchanged.
const LegacyGPUResource = "nvidia.com/gpu"

// Device types, the value of the AttrType attribute.
const (
	TypeGPU    = "gpu"    // a whole GPU, exclusive (MIG off)
	TypeShared = "shared" // a whole GPU shared by several claims (time-slicing or MPS), by memory
	TypeMIG    = "mig"    // a MIG instance: a profile at a start
)

// Attribute names the driver publishes (in its domain, DriverName).
const (
	AttrType                  = "type"  // TypeGPU, TypeShared or TypeMIG
	AttrIndex                 = "index" // the GPU's index on its node
	AttrUUID                  = "uuid"  // whole and shared GPUs: the GPU's uuid
	AttrProductName           = "productName"
	AttrArchitecture          = "architecture"
	AttrModel                 = "model" // the catalog's id of the GPU model
	AttrCUDAComputeCapability = "cudaComputeCapability"
	AttrDriverVersion         = "driverVersion"
	AttrProfile               = "profile"    // MIG: the profile, e.g. 1g.10gb
	AttrStart                 = "start"      // MIG: the placement's first memory slice
	AttrParentUUID            = "parentUUID" // MIG: the GPU's uuid
	// AttrTenant names the tenant a shared GPU's copy is for (selectors
	// may read it; the TenantKey taint is what enforces it).
	AttrTenant = "tenant"
)

// Attributes lists every attribute the driver may publish (AttrTenant
// only on tenants' copies of shared GPUs).
func Attributes() []string {
	return []string{AttrType, AttrIndex, AttrUUID, AttrProductName, AttrArchitecture, AttrModel, AttrCUDAComputeCapability,
		AttrDriverVersion, AttrProfile, AttrStart, AttrParentUUID, AttrTenant}
}

// Capacity names: every device has memory; a shared GPU also compute, in
// percent of the GPU. A claim on a shared GPU consumes both.
const (
	CapacityMemory  = "memory"
	CapacityCompute = "compute"
)

// Capacities lists the capacities the driver publishes.
func Capacities() []string { return []string{CapacityMemory, CapacityCompute} }

// SliceAPIVersion and SliceKind name gpuslice's own opaque config.
const (
	SliceAPIVersion = DriverName + "/v1alpha1"
	SliceKind       = "SliceConfig"
)

// Labels, taints and conditions.
const (
	// TenantKey is the label a namespace carries to name its tenant
	// (without it the tenant is the namespace's name), and the key of the
	// device taint on each tenant's copy of a shared GPU.
	TenantKey = "gpuslice.dev/tenant"
	// TenantCopiesKey is the namespace label that turns its tenant copies
	// off ("false") or on ("true", even for a namespace excluded by name).
	TenantCopiesKey = "gpuslice.dev/tenant-copies"
	// NodeLabel labels each ResourceSlice with the node it is for.
	NodeLabel = "gpuslice.dev/node"
	// InstanceTypeLabel labels the slices published for an instance
	// type (before its node exists) with the instance type they are for.
	InstanceTypeLabel = "gpuslice.dev/instance-type"
	// TaintKey is the key of the device taint an unhealthy GPU's devices
	// carry. Its value is the XID ("79"), "lost" for a GPU that fell off
	// the bus, or "unhealthy" for a GPU the device layer listed unhealthy
	// when the driver started.
	TaintKey = DriverName + "/unhealthy"
	// ConditionMIGReady and ConditionMIGFailed are the binding conditions
	// of MIG devices (KEP-5007): the node side sets the first once it has
	// made the instance at the allocated placement, the second when it
	// cannot.
	ConditionMIGReady  = "gpuslice.dev/mig-ready"
	ConditionMIGFailed = "gpuslice.dev/mig-failed"
)
