package render

import (
	"strings"

	"github.com/gpuslice/gpuslice/internal/model"
)

// Resource names as NVIDIA's k8s-device-plugin advertises them (read from
// its source, v0.19: internal/rm AddDefaultResourcesToConfig and
// api/config/v1 replicas.go). Every target that names a resource derives
// it here, so a pod asks for what a node has.
//
//   - A whole GPU is nvidia.com/gpu.
//   - With migStrategy mixed, a MIG device is nvidia.com/mig-<profile>,
//     the profile as NVIDIA's go-nvlib prints it ("1g.10gb+me",
//     "1g.5gb-me") with every '+' written '.', because '+' is not allowed
//     in a resource name: nvidia.com/mig-1g.10gb.me. Only profiles whose
//     compute instance spans the GPU instance are advertised.
//   - With migStrategy single, every MIG device is nvidia.com/gpu.
//   - A shared resource of a config with renameByDefault: true is
//     advertised as <name>.shared.

// migResourceName is the resource of a MIG profile under migStrategy mixed.
func migResourceName(profile string) string {
	return dpMIGResourcePrefix + strings.ReplaceAll(profile, "+", ".")
}

// poolResourceName is the resource a device of a pool is advertised as: a
// MIG instance of profile, or a whole GPU when profile is "", under the
// pool's imported device-plugin config (nil: gpuslice's own render, which
// uses migStrategy mixed without renaming).
func poolResourceName(imp *model.ImportedSharing, profile string) string {
	name := dpGPUResource
	if profile != "" && (imp == nil || imp.MIGStrategy != "single") {
		name = migResourceName(profile)
	}
	if imp != nil && imp.DevicePlugin != nil && imp.DevicePlugin.RenameByDefault {
		if _, shared := imp.DevicePlugin.Replicas[name]; shared {
			name += ".shared"
		}
	}
	return name
}
