// Package node is gpuslice's one node side: it makes a node's GPUs match
// what was decided, for both the standalone agent (internal/agent, whose
// claims the server decided) and the Kubernetes DRA kubelet plugin
// (internal/k8s/draplugin, whose claims the scheduler allocated).
//
// What was decided is a Want: every device the node's claims hold
// (Hold: a whole GPU in a mode, or a MIG instance at a placement), those
// to make now marked, and the devices released. Decide (pure) turns it
// and the hardware as read (Observed) into ordered Steps — destroy idle
// instances in the way, MIG mode, create at the placement, compute mode,
// time slice — or refusals naming the claim that holds the hardware; Run
// applies the steps over internal/gpu's Device (simulated or NVML), each
// with a typed Outcome (done, gone, in use, failed, skipped). Node ties
// them together with the rest of a node's duties: the MPS control
// daemons (node/mps), the CDI specs (node/cdi) and the memory watchdog
// (node/watchdog).
package node
