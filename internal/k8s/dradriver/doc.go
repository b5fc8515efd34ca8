// Package dradriver is gpuslice on Kubernetes as a DRA driver (driver name
// gpu.gpuslice.dev). This first part publishes a node's GPUs as
// ResourceSlices the stock kube-scheduler allocates from: every whole GPU
// (exclusive, or shared by memory through consumable capacity) and every
// MIG profile at every start as partitionable devices whose shared
// counters (one per memory slice, plus compute slices, instances, per-
// profile counts and the media extension) allow exactly the layouts
// NVIDIA's placement rules allow (internal/mig). Slices is pure; the
// tests create its output on a real kube-apiserver and let the stock
// scheduler allocate from it. The kubelet plugin side (prepare, CDI, MPS)
// is internal/k8s/draplugin.
package dradriver
