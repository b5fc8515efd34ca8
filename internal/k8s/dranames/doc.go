// Package dranames is the vocabulary of gpuslice's DRA driver in one
// place: the driver and DeviceClass names, the device types, the
// attribute and capacity names its ResourceSlices publish, the apiVersion
// and kind of its opaque SliceConfig, the label, taint and condition keys,
// and the device names — ParseDeviceName and DeviceName.String are their
// only reader and writer, ReadDevice the one reader of what a published
// device says it is. It is pure and imports no Kubernetes package, so the
// renderers (internal/render) and the Kubernetes side (internal/k8s/...)
// name things the same way from one declaration.
package dranames
