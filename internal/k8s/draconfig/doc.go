// Package draconfig decodes the opaque configuration a ResourceClaim (or
// its DeviceClass) gives driver gpu.gpuslice.dev: NVIDIA's GpuConfig and
// MigDeviceConfig as users of NVIDIA's DRA driver write them, and
// gpuslice's own SliceConfig. Decoding is strict — unknown fields,
// duplicate fields, wrong types, out-of-range values and settings that
// contradict each other are errors that name the field's path and say what
// would be valid — and pure, so the kubelet plugin (at prepare) and the
// admission webhook (at create) give the same answer for the same claim.
package draconfig
