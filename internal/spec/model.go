package spec

import "github.com/gpuslice/gpuslice/internal/model"

// The model types, under the names the readers use.
type (
	Spec            = model.Spec
	Pool            = model.Pool
	Taint           = model.Taint
	Tenant          = model.Tenant
	Workload        = model.Workload
	Autoscaling     = model.Autoscaling
	ImportedSharing = model.ImportedSharing
	ImportedDevices = model.ImportedDevices
	// DevicePluginSettings are a device-plugin config's naming and admission settings.
	DevicePluginSettings = model.DevicePluginSettings
	Pos                  = model.Pos
)
