// Package draalloc translates between Kubernetes DRA objects and gpuslice's
// allocator, for gpuslice-scheduler (cmd/gpuslice-scheduler): a node's
// ResourceSlices of driver gpu.gpuslice.dev (published by
// internal/k8s/dradriver) become an alloc.Node, a ResourceClaim whose
// requests name gpuslice's DeviceClasses becomes an alloc.Claim, an
// alloc.Allocation becomes the ResourceClaim status.allocation the stock
// scheduler would write (device results naming the slices' devices,
// consumed capacity and a share id for shared GPUs, the class and claim
// configuration, a node selector), and an allocation read back from the
// API server becomes an alloc.Allocation again. Everything here is pure:
// objects in, objects out; the scheduler plugin applies the effects.
package draalloc
