// Package schedcore is what gpuslice-scheduler decides, apart from
// kube-scheduler's framework: the Ledger (every node's gpuslice
// ResourceSlices and every claim holding their devices, as the API server
// records them or as the scheduler reserved them, with an allocator State
// per node), a pod's claims decided on one node (Filter, Reserve: the
// allocator through internal/k8s/draalloc, then the namespace's quota),
// Filter's kept verdicts, the binpack/spread score, the namespaces' quota
// annotations (QuotaOf), the reserve-after hold (Holding, Starve) and the
// pods waiting for freed devices (Waiting). The shared admission rules
// (quota on what a claim is given, reserve-after) are internal/admit's;
// outcomes come back as admit.Outcome for the plugin in
// cmd/gpuslice-scheduler/plugin to map onto framework statuses. It does
// not import k8s.io/kubernetes, so the main module tests and lints it.
package schedcore
