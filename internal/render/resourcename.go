package render

import (
	"strings"

	"github.com/gpuslice/gpuslice/internal/model"
	"github.com/gpuslice/gpuslice/internal/plan"
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
	if profile != "" {
		name = migResourceName(profile)
	}
	if imp == nil {
		return name
	}
	return pluginName(imp, name)
}

// pluginResources renames the NVIDIA resources a rendered Deployment asks
// for to what its pool's imported device-plugin config advertises
// (renameByDefault, migStrategy single); without an imported config the
// names are already the plugin's.
func pluginResources(deploy obj, s *model.Spec, wl *model.Workload, p *plan.Plan) {
	pp := poolOf(p, wl)
	if pp == nil {
		return
	}
	sp := mpSpecPool(s, pp.Name)
	if sp == nil || sp.DevicePlugin == nil {
		return
	}
	spec, _ := deploy["spec"].(obj)
	tmpl, _ := spec["template"].(obj)
	pod, _ := tmpl["spec"].(obj)
	containers, _ := pod["containers"].([]obj)
	for _, c := range containers {
		res, _ := c["resources"].(obj)
		limits, _ := res["limits"].(obj)
		renamed := obj{}
		for name, v := range limits {
			if name == dpGPUResource || strings.HasPrefix(name, dpMIGResourcePrefix) {
				name = pluginName(sp.DevicePlugin, name)
			}
			if prev, ok := renamed[name].(int); ok {
				if n, ok := v.(int); ok {
					v = prev + n
				}
			}
			renamed[name] = v
		}
		if limits != nil {
			res["limits"] = renamed
		}
	}
}

// pluginName is the name a resource gpuslice's own render would use
// (nvidia.com/gpu, nvidia.com/mig-<profile>) has under an imported config.
func pluginName(imp *model.ImportedSharing, name string) string {
	if imp.MIGStrategy == "single" && strings.HasPrefix(name, dpMIGResourcePrefix) {
		name = dpGPUResource
	}
	if imp.DevicePlugin != nil && imp.DevicePlugin.RenameByDefault {
		if _, shared := imp.DevicePlugin.Replicas[name]; shared {
			name += ".shared"
		}
	}
	return name
}
