// Package schedtest runs gpuslice-scheduler (cmd/gpuslice-scheduler)
// against a real etcd and kube-apiserver (internal/k8s/apitest): Node
// objects with internal/k8s/dradriver's ResourceSlices, ResourceClaims
// of gpuslice's DeviceClasses, pods bound by the scheduler, and the
// allocator's Check over what the API server then holds. The package
// has tests only; the binary comes from scripts/gpuslice-scheduler.sh.
package schedtest
