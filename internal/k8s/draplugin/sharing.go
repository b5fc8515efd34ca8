package draplugin

import "github.com/gpuslice/gpuslice/internal/k8s/draconfig"

// ClaimSharing is how a request's device is shared, as the opaque config
// for driver gpu.gpuslice.dev that applies to it asks (see
// internal/k8s/draconfig, which decodes NVIDIA's GpuConfig and
// MigDeviceConfig and gpuslice's SliceConfig). The zero value asks for
// nothing: the device type's default (a whole GPU or a MIG instance
// alone, a shared GPU time-sliced).
type ClaimSharing = draconfig.Sharing

// SharingDecoder decodes the opaque parameters (driver gpu.gpuslice.dev)
// that apply to a request. field is the parameters' path in the claim, for
// errors ("status.allocation.devices.config[0].opaque.parameters").
type SharingDecoder interface {
	DecodeSharing(field string, parameters []byte) (ClaimSharing, error)
}

// SharingDecoderFunc adapts a function to SharingDecoder.
type SharingDecoderFunc func(field string, parameters []byte) (ClaimSharing, error)

// DecodeSharing calls f.
func (f SharingDecoderFunc) DecodeSharing(field string, parameters []byte) (ClaimSharing, error) {
	return f(field, parameters)
}

// StrictSharingDecoder is the default decoder: draconfig.Decode, the same
// the admission webhook (gpuslice dra-webhook) runs when a claim is
// created, so a claim the webhook admitted prepares the same way.
var StrictSharingDecoder SharingDecoder = SharingDecoderFunc(draconfig.Decode)
