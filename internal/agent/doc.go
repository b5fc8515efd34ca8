// Package agent is gpuslice's node agent: it registers its host's GPUs
// with the server, heartbeats, and makes the server's allocations true on
// the hardware through the gpu.Device layer — MIG instances created and
// destroyed at the explicit placements the allocator chose, in a safe
// order, never touching an instance that a process uses.
package agent
