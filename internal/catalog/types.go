package catalog

// Confidence says how sure the catalog is of a fact. The labels follow
// shared/reference/gpu-facts.md: a primary source (verified), derived from a
// sister part (inferred), a datasheet value never checked (unconfirmed), or a
// third-party page (secondary). Unknown facts are left at their zero value and
// labelled "unknown"; they are never invented.
type Confidence string

// The confidence labels the data may carry.
const (
	Verified    Confidence = "verified"
	Inferred    Confidence = "inferred"
	Unconfirmed Confidence = "unconfirmed"
	Secondary   Confidence = "secondary"
	Unknown     Confidence = "unknown"
)

// GPU is one GPU model.
type GPU struct {
	// ID is gpuslice's own short name, e.g. "A100-40GB", "H100-80GB-SXM".
	ID string `yaml:"id" json:"id"`
	// Name is a human-readable product name.
	Name string `yaml:"name" json:"name"`
	// ProductNames are the names NVML and nvidia-smi report
	// (nvmlDeviceGetName), e.g. "NVIDIA A100-SXM4-40GB".
	ProductNames []string `yaml:"productNames" json:"productNames"`
	// NodeLabels are the values of the Kubernetes node label
	// nvidia.com/gpu.product that GPU feature discovery sets for this model,
	// e.g. "NVIDIA-A100-SXM4-40GB" (spaces become dashes).
	NodeLabels []string `yaml:"nodeLabels" json:"nodeLabels"`
	// PCIDeviceIDs are the PCI device ids ("0x20B0") where known.
	PCIDeviceIDs []string `yaml:"pciDeviceIDs,omitempty" json:"pciDeviceIDs,omitempty"`

	Arch              string `yaml:"arch" json:"arch"`
	ComputeCapability string `yaml:"computeCapability" json:"computeCapability"`
	// MemoryMiB is the memory a workload can use, as NVML reports it where
	// known, else the marketing size × 1024.
	MemoryMiB  int64  `yaml:"memoryMiB" json:"memoryMiB"`
	MemoryType string `yaml:"memoryType" json:"memoryType"`
	SMs        int    `yaml:"sms" json:"sms"`
	// FP16DenseTFLOPS is 0 when unknown.
	FP16DenseTFLOPS float64 `yaml:"fp16DenseTFLOPS,omitempty" json:"fp16DenseTFLOPS,omitempty"`
	MemBandwidthGBs int     `yaml:"memBandwidthGBs,omitempty" json:"memBandwidthGBs,omitempty"`
	TDPWatts        int     `yaml:"tdpWatts,omitempty" json:"tdpWatts,omitempty"`

	// MIG is nil when the model cannot be partitioned.
	MIG *MIGSpec `yaml:"mig,omitempty" json:"mig,omitempty"`

	// Source names the source keys (comma-separated) the entry comes from.
	Source string `yaml:"source" json:"source"`
	// Confidence is the weakest label among the entry's own figures (SMs,
	// TFLOPS, bandwidth, TDP, memory); MIG facts carry their own labels.
	Confidence Confidence `yaml:"confidence" json:"confidence"`
	// Note flags unverified or unknown facts.
	Note string `yaml:"note,omitempty" json:"note,omitempty"`
}

// MIGSpec is a model's MIG geometry: how many memory and compute slices it
// has and the GPU-instance profiles with their placements.
type MIGSpec struct {
	MemorySlices  int `yaml:"memorySlices" json:"memorySlices"`
	ComputeSlices int `yaml:"computeSlices" json:"computeSlices"`
	// MaxInstances is the most GPU instances the GPU holds at once.
	MaxInstances int `yaml:"maxInstances" json:"maxInstances"`
	// SMsInMIGMode is 0 when unknown.
	SMsInMIGMode int       `yaml:"smsInMIGMode,omitempty" json:"smsInMIGMode,omitempty"`
	Profiles     []Profile `yaml:"profiles" json:"profiles"`

	ProfileIDConfidence Confidence `yaml:"profileIDConfidence" json:"profileIDConfidence"`
	PlacementConfidence Confidence `yaml:"placementConfidence" json:"placementConfidence"`
	Source              string     `yaml:"source" json:"source"`
	Note                string     `yaml:"note,omitempty" json:"note,omitempty"`
}

// Profile is one GPU-instance profile of a model.
type Profile struct {
	// Name as nvidia-smi prints it: "1g.5gb", "1g.5gb+me", "3g.40gb".
	Name string `yaml:"name" json:"name"`
	// GIProfileID is the id `nvidia-smi mig -lgip` prints (usable with
	// -cgi); -1 when unknown.
	GIProfileID int `yaml:"giProfileID" json:"giProfileID"`
	// NVMLProfile is the NVML GPU_INSTANCE_PROFILE_* constant to pass to
	// nvmlDeviceGetGpuInstanceProfileInfo; -1 when unknown.
	NVMLProfile int `yaml:"nvmlProfile" json:"nvmlProfile"`

	MemorySlices  int `yaml:"memorySlices" json:"memorySlices"`
	ComputeSlices int `yaml:"computeSlices" json:"computeSlices"`
	// MemoryMiB is the instance's memory. When no source gives it,
	// MemoryEstimated is true and the value is the GPU's memory ×
	// memorySlices / slices, rounded down to 64 MiB.
	MemoryMiB       int64 `yaml:"memoryMiB" json:"memoryMiB"`
	MemoryEstimated bool  `yaml:"memoryEstimated,omitempty" json:"memoryEstimated,omitempty"`
	// SMs is 0 when unknown.
	SMs int `yaml:"sms,omitempty" json:"sms,omitempty"`
	// MaxCount is the most instances of this profile one GPU holds.
	MaxCount int `yaml:"maxCount" json:"maxCount"`
	// Placement lists the memory slices an instance may start at and how
	// many it occupies: nvidia-smi's "{0,2,4}:2".
	Placement Placement `yaml:"placement" json:"placement"`
	// MediaExtensions is true for "+me" profiles (at most one per GPU).
	MediaExtensions bool `yaml:"mediaExtensions,omitempty" json:"mediaExtensions,omitempty"`

	CopyEngines int `yaml:"copyEngines,omitempty" json:"copyEngines,omitempty"`
	Decoders    int `yaml:"decoders,omitempty" json:"decoders,omitempty"`
	Encoders    int `yaml:"encoders,omitempty" json:"encoders,omitempty"`
	JPEG        int `yaml:"jpeg,omitempty" json:"jpeg,omitempty"`
	OFA         int `yaml:"ofa,omitempty" json:"ofa,omitempty"`

	Source string `yaml:"source" json:"source"`
	// Confidence labels the profile's figures (memory, SMs, engines,
	// count); its GI ID and placement are labelled on the MIGSpec.
	Confidence Confidence `yaml:"confidence" json:"confidence"`
	// Note carries caveats such as a minimum driver version.
	Note string `yaml:"note,omitempty" json:"note,omitempty"`
}

// Placement is a profile's allowed start slices and its size in memory
// slices, as `nvidia-smi mig -lgipp` prints it.
type Placement struct {
	Starts []int `yaml:"starts" json:"starts"`
	Size   int   `yaml:"size" json:"size"`
}

// InstanceType is a cloud machine type with GPUs.
type InstanceType struct {
	Provider  string  `yaml:"provider" json:"provider"` // aws, gcp, azure
	Name      string  `yaml:"name" json:"name"`
	GPU       string  `yaml:"gpu" json:"gpu"` // a GPU ID in this catalog
	GPUCount  int     `yaml:"gpuCount" json:"gpuCount"`
	VCPU      int     `yaml:"vcpu" json:"vcpu"`
	MemoryGiB float64 `yaml:"memoryGiB" json:"memoryGiB"`
	// Price is nil when no source gives an on-demand price.
	Price  *Price `yaml:"price,omitempty" json:"price,omitempty"`
	Source string `yaml:"source" json:"source"`
	// Confidence labels the specs (GPU, count, vCPU, memory).
	Confidence Confidence `yaml:"confidence" json:"confidence"`
	Note       string     `yaml:"note,omitempty" json:"note,omitempty"`
}

// Price is an on-demand hourly price with where and when it was seen.
// Region and Date are "unstated" when the source does not say them.
type Price struct {
	USDPerHour float64 `yaml:"usdPerHour" json:"usdPerHour"`
	Region     string  `yaml:"region,omitempty" json:"region,omitempty"`
	// Date is when the price was seen, YYYY-MM-DD, or "unstated".
	Date       string     `yaml:"date,omitempty" json:"date,omitempty"`
	Source     string     `yaml:"source" json:"source"`
	Confidence Confidence `yaml:"confidence" json:"confidence"`
}
