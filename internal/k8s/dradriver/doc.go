// Package dradriver is gpuslice on Kubernetes as a DRA driver (driver name
// gpu.gpuslice.dev). This first part publishes a node's GPUs as
// ResourceSlices the stock kube-scheduler allocates from: every whole GPU
// (exclusive, or shared by memory through consumable capacity) and every
// MIG profile at every start (or those --mig-profiles names) as
// partitionable devices whose shared counters (memory slices, instances,
// and the compute, per-profile count and media-extension rules where
// the slices do not imply them: counters.go) allow exactly the layouts
// NVIDIA's placement rules allow (internal/mig), with as few counter
// consumptions per device as that allows, since the stock scheduler pays
// for each on every node it filters (docs/scheduler-cost.md). Slices is
// pure; the
// tests create its output on a real kube-apiserver and let the stock
// scheduler allocate from it. The kubelet plugin side (prepare, CDI, MPS)
// is internal/k8s/draplugin.
package dradriver
