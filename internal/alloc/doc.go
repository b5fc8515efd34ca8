// Package alloc is gpuslice's allocator: it turns a claim and a snapshot of
// the fleet into an allocation, over one request model that spans
// exclusive GPUs, time-slicing, MPS and MIG, alone or layered.
//
// A State is built once from a Fleet and the allocations already made. Its
// Allocate method is a pure decision: it returns an Allocation (devices,
// process environment, MIG layout changes, and why) or a *NoFitError that
// says per node why nothing fits, aggregated like kube-scheduler. The caller
// commits a decision with Apply and undoes it with Release; nothing else
// mutates a State, and Clone gives the what-if copies the planner and the
// simulator use.
//
// Placement is a pipeline of named steps (see pipeline.go): candidates are
// generated in four kinds, cheapest first — join a shared device already in
// use, open an idle device or create a MIG instance in free slices, destroy
// idle MIG instances to make room, switch an idle GPU's MIG mode — then
// filtered (health, selector, mode, isolation, capacity) and scored
// (binpack or spread). The rules in rules.go hold after every step and are
// checked by property tests.
package alloc
