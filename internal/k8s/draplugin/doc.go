// Package draplugin is the node side of gpuslice's DRA driver
// (gpu.gpuslice.dev): a kubelet plugin built on
// k8s.io/dynamic-resource-allocation/kubeletplugin. It registers with the
// kubelet over the plugin registration socket, serves the DRA gRPC
// service (v1 and v1beta1), and publishes the node's ResourceSlices
// (dradriver.Slices) through the helper.
//
// Prepare reads a claim's allocation — the device names of those slices:
// a whole GPU, a shared GPU (consumable memory and compute), a MIG
// profile at a start — and the opaque parameters for this driver
// (ClaimSharing, decoded by a SharingDecoder), and makes it true on the
// GPUs through internal/node (the node side the standalone agent uses
// too): MIG mode and the instance at the allocated placement, whole GPUs
// out of MIG mode in their compute mode and time slice, the MPS control
// daemon of each MPS device (internal/node/mps: started, or joined; the client's thread
// percentage and pinned memory limit go in its environment), and a CDI
// spec per claim (internal/node/cdi) whose edits carry the device nodes,
// CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES, the MPS pipe directory
// mount and CUDA_MPS_* variables. The CDI device ids go back to the
// kubelet. Unprepare undoes it: the spec removed, the MIG instance
// destroyed, the MPS daemon stopped with its last claim.
//
// Restart safety: every prepare saves its plan in a checkpoint (atomic
// write, fsync) before touching the hardware and marks the claim prepared
// after; a claim prepared twice gets the same answer; a driver killed
// mid-prepare adopts what it finds (the MIG instance at the placement,
// the running MPS daemon) when the kubelet asks again; unprepare of an
// unknown claim succeeds. Decisions are pure (planClaim, conflict,
// cdiSpec, node.Decide); Driver applies them.
//
// The memory watchdog (internal/node/watchdog, through node.Node) runs
// over the prepared claims (Watch), and Collector exports per-claim
// gpuslice_slice_* metrics with namespace, pod and claim labels.
//
// Health: the device layer's events (XIDs, a lost GPU) become device
// taints on the published slices (dradriver.HealthPolicy, TaintSlices)
// and, from the same faults, the device health the kubelet's
// DRAResourceHealth streams receive (WatchHealthStatus,
// dradriver.DeviceHealths, KEP-4680): the full list at once, on every
// change and every Config.HealthResend.
package draplugin
