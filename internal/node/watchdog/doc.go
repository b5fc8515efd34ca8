// Package watchdog holds the node's claims to the GPU memory they were
// promised and measures what they use.
//
// A Watcher reads the processes of every device the node's claims hold
// (gpu.Device.Processes) and attributes each to a claim: a process
// belongs to the claim that holds the device it runs on; where several
// claims share one device (time-slicing, MPS) it belongs to the claim the
// injected PIDOwner names (the agent knows which pids it launched), and a
// process nobody owns is reported once as an "unknown-process" event.
// Watch returns the claims whose processes on a device hold more memory
// than the allocation promised there (Violations) and per-claim usage
// since the previous call (GPU-seconds and MiB-seconds, by an injected
// clock).
//
// An Enforcer applies each claim's memory policy to the violations: warn
// (the default) emits a rate-limited "memory-over-limit" event; kill
// emits the same while a grace period runs and, once the claim has stayed
// over its promise for the whole grace period, kills its largest
// processes on the device until what is left fits, with a "memory-killed"
// event for each.
package watchdog
