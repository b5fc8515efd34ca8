package render

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/model"
	"github.com/gpuslice/gpuslice/internal/plan"
)

// Node labels pods select GPU nodes by. Karpenter launches a node for a
// pending pod only when its NodePool's template carries every label the
// pod's nodeSelector or required node affinity names (a label of another
// system, set after the node joins, is unknown to it): the NodePool
// states them, with the values their owners set later.
const (
	// labelGPU is the label the EKS/Karpenter guides put on their GPU
	// NodePools (nvidia.com/gpu: "true") and their pods select (Exists).
	labelGPU = "nvidia.com/gpu"
	// labelGPUPresent is set by the GPU operator's node feature rule;
	// the device plugin's Helm chart schedules its DaemonSet on it.
	labelGPUPresent = "nvidia.com/gpu.present"
	// GPU feature discovery's (k8s-device-plugin v0.19 internal/lm).
	labelGPUProduct      = "nvidia.com/gpu.product"
	labelGPUCount        = "nvidia.com/gpu.count"
	labelGPUFamily       = "nvidia.com/gpu.family"
	labelGPUComputeMajor = "nvidia.com/gpu.compute.major"
	labelGPUComputeMinor = "nvidia.com/gpu.compute.minor"
	labelGPUReplicas     = "nvidia.com/gpu.replicas"
	labelGPUSharing      = "nvidia.com/gpu.sharing-strategy"
	labelMIGCapable      = "nvidia.com/mig.capable"
	labelMIGStrategy     = "nvidia.com/mig.strategy"
)

// reLabelValue is Kubernetes' rule for a label value.
var reLabelValue = regexp.MustCompile(`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`)

// gpuNodeLabels are the labels a node of pool pp will carry that pods
// select GPU nodes by, as GPU feature discovery sets them for the pool's
// GPU model and the pool's device-plugin config, for NodePool template
// labels. What depends on the node's driver (nvidia.com/cuda.*) or its
// DMI data (nvidia.com/gpu.machine) is left out, and so is gpu.memory
// (NVML's total, which the catalog does not hold for every model): a
// template label GFD would later overwrite with another value would
// promise pods a node that does not match them.
//
// gpu.product is the model's product name as current drivers report it,
// with GFD's suffix "-SHARED" when the device plugin shares whole GPUs
// without renaming them (its replicas > 1). With dra (gpuslice's DRA
// driver, no device plugin) nothing is shared through the device plugin.
func gpuNodeLabels(s *model.Spec, pp *plan.PoolPlan, g *catalog.GPU, dra bool) obj {
	out := obj{labelGPU: "true", labelGPUPresent: "true", labelGPUCount: strconv.Itoa(pp.GPUsPerNode)}
	if g == nil {
		return out
	}
	if g.MIG != nil {
		out[labelMIGCapable] = "true"
	} else {
		out[labelMIGCapable] = "false"
	}
	if major, minor, ok := computeCapability(g.ComputeCapability); ok {
		out[labelGPUComputeMajor] = strconv.Itoa(major)
		out[labelGPUComputeMinor] = strconv.Itoa(minor)
		out[labelGPUFamily] = gfdFamily(major, minor)
	}
	product := ""
	if len(g.NodeLabels) > 0 {
		product = g.NodeLabels[0]
	}
	if !dra {
		replicas, strategy, renamed, migStrategy := devicePluginSharing(s, pp)
		if strategy != "" {
			out[labelGPUReplicas] = strconv.Itoa(replicas)
			out[labelGPUSharing] = strategy
		}
		if migStrategy != "" && migStrategy != "none" {
			out[labelMIGStrategy] = migStrategy
			if migStrategy == "single" {
				product = "" // GFD appends the MIG profile of the node's devices
			}
		}
		if product != "" && replicas > 1 && !renamed {
			product += "-SHARED"
		}
	}
	if product != "" && len(product) <= 63 && reLabelValue.MatchString(product) {
		out[labelGPUProduct] = product
	}
	return out
}

// devicePluginSharing is how the device plugin will share the whole GPUs
// of pool pp's nodes: the pool's imported config, else the config the
// nvidia-device-plugin target renders for it. strategy is GFD's label
// value ("time-slicing", "mps", "none"; "" when no GPU of the pool is
// whole), renamed whether shared GPUs are advertised under another name.
func devicePluginSharing(s *model.Spec, pp *plan.PoolPlan) (replicas int, strategy string, renamed bool, migStrategy string) {
	whole := false
	for _, g := range pp.GPUs {
		whole = whole || !g.MIG
	}
	if sp := specPool(s, pp.Name); sp != nil && sp.DevicePlugin != nil {
		imp := sp.DevicePlugin
		migStrategy = imp.MIGStrategy
		if !whole {
			return 0, "", false, migStrategy
		}
		switch imp.Sharing.Mode {
		case alloc.TimeSlice:
			replicas, strategy = imp.Sharing.Replicas, "time-slicing"
		case alloc.MPS:
			replicas, strategy = imp.Sharing.MaxClients, "mps"
		default:
			return 1, "none", false, migStrategy
		}
		if imp.DevicePlugin != nil {
			renamed = imp.DevicePlugin.RenameByDefault
		}
		return replicas, strategy, renamed, migStrategy
	}
	c := dpPoolConfig(pp)
	if !whole {
		return 0, "", false, c.migStrategy
	}
	switch c.mode {
	case alloc.TimeSlice:
		return c.replicas, "time-slicing", false, c.migStrategy
	case alloc.MPS:
		return c.replicas, "mps", false, c.migStrategy
	}
	return 1, "none", false, c.migStrategy
}

// computeCapability reads "8.0".
func computeCapability(cc string) (int, int, bool) {
	a, b, ok := strings.Cut(cc, ".")
	major, err1 := strconv.Atoi(a)
	minor, err2 := strconv.Atoi(b)
	return major, minor, ok && err1 == nil && err2 == nil && major > 0
}

// gfdFamily is GPU feature discovery's nvidia.com/gpu.family for a
// compute capability (its getArchFamily).
func gfdFamily(major, minor int) string {
	switch major {
	case 1:
		return "tesla"
	case 2:
		return "fermi"
	case 3:
		return "kepler"
	case 5:
		return "maxwell"
	case 6:
		return "pascal"
	case 7:
		if minor < 5 {
			return "volta"
		}
		return "turing"
	case 8:
		if minor < 9 {
			return "ampere"
		}
		return "ada-lovelace"
	case 9:
		return "hopper"
	case 10, 12:
		return "blackwell"
	}
	return "undefined"
}
