// Package mps runs one CUDA MPS control daemon per MPS-shared device (a
// whole GPU or a MIG instance) on the agent's node.
//
// WantFromClaims turns the node's live claims into the daemons they need
// and Resolve fills in GPU indexes from the hardware, dropping devices that
// do not exist yet. Manager.Reconcile then makes the running set match:
// it starts missing daemons (pipe and log directories 0700,
// CUDA_VISIBLE_DEVICES naming the one device, `nvidia-cuda-mps-control -d`,
// then set_default_active_thread_percentage and
// set_default_device_pinned_mem_limit 0 <N>M), quits those no claim needs
// any more, probes the others (pid file, process, get_server_list) and
// restarts a crashed or hung one, and adopts daemons a previous agent left
// running. Whole GPUs are put in EXCLUSIVE_PROCESS compute mode before
// their daemon starts and back to DEFAULT after it stops; MIG instances
// are left alone (compute mode is per GPU).
//
// The control binary is run through a Runner; ExecRunner is the real one.
// Each daemon's own metadata (device, GPU index, applied defaults) lives in
// StateFile beside its pid file, so a restarted agent can adopt the
// daemons it still wants and stop those it does not.
package mps
