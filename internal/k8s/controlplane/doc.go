// Package controlplane starts a real Kubernetes control plane from
// binaries built outside this module: etcd, kube-apiserver, kube-scheduler
// and kube-controller-manager of one release, which scripts/controlplane.sh
// builds from the Go module proxy (in the tools module test/controlplane,
// so this module never depends on k8s.io/kubernetes) into
// ${GPUSLICE_CACHE:-$HOME/.cache/gpuslice}/k8s/VERSION/, with the Karpenter
// NodePool/NodeClaim CRDs beside them. The release is v1.36.3 unless
// GPUSLICE_K8S_VERSION names another of [SupportedVersions]; it picks the
// directory and the feature gates ([FeatureGatesFor]), and [Launch] fails
// when the API server reports another. GPUSLICE_K8S_BIN names another
// directory holding the same files.
//
// [Launch] runs etcd and kube-apiserver on free loopback ports with state
// under a directory of the caller's, authenticates with a generated client
// certificate in system:masters (authorization mode RBAC), serves every
// version of resource.k8s.io with the DRA feature gates on and installs
// the Karpenter CRDs; its stop function stops both (their whole process
// groups; on Linux they also die with the parent). [LaunchScheduler] adds
// the stock kube-scheduler (or gpuslice-scheduler) with the API server's
// feature gates and leader election off, [LaunchControllerManager]
// kube-controller-manager with the controllers named. [Server.DryRun]
// and [Server.Apply] send YAML documents through the API server's own
// validation; [Server.CreateReadyNode] makes a Node as a kubelet would.
//
// It imports no testing: internal/k8s/apitest wraps it for tests (skipping
// or failing when the binaries are missing, stopping everything when the
// test ends, one control plane per test package), and `gpuslice bench
// scheduler` (internal/k8s/schedbench) uses it directly.
package controlplane
