// Package drabench compares gpuslice's allocator with the upstream
// Kubernetes DRA structured-parameters allocator
// (k8s.io/dynamic-resource-allocation/structured) on equivalent inputs:
// the same fleet of whole GPUs (8 per node, a mix of models) described once
// as an alloc.Fleet and once as one ResourceSlice per node, and the same
// sequence of one-GPU claims that select a model with a CEL expression.
//
// One decision is what a scheduler does for one claim. For gpuslice that is
// State.Allocate followed by State.Apply. Upstream allocates for one
// candidate node at a time, so one decision is NewAllocator (as the DRA
// scheduler plugin does in PreFilter, with the devices already allocated)
// followed by Allocate on one node after the other, starting where the last
// decision stopped (like kube-scheduler's rotating start index), until a
// node fits; the devices it picks are then added to the allocated set. This
// is a first-fit lower bound: kube-scheduler keeps filtering until it has
// several feasible nodes to score.
//
// Compare runs both in one process and reports decisions per second; the
// benchmarks in the tests report the same as ns/op and decisions/s.
package drabench
