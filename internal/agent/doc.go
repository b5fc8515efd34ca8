// Package agent is gpuslice's node agent: it registers its host's GPUs
// with the server, heartbeats, and makes the server's allocations true on
// the hardware through internal/node, the node side the DRA plugin uses
// too — MIG instances created and destroyed at the explicit placements
// the allocator chose (idle ones in the way cleared first), whole GPUs in
// their compute mode and time slice, in a safe order, never touching an
// instance that a claim holds or a process uses.
package agent
