// Package sim is the what-if simulator behind `gpuslice simulate`: a
// discrete-event simulation of a fleet under arrivals and departures of
// workloads (model.Profiles: Poisson arrivals, exponential run times),
// run once per sharing strategy on the same arrivals. Every placement is
// decided by the real allocator (internal/alloc) on the strategy's live
// fleet state; run times stretch by the performance model of
// internal/advise. It reports GPUs in use over time, queueing delay,
// utilization, stranded memory, MIG re-layouts and cost, and draws them
// (svg.go). Pure: no I/O, no wall clock; deterministic for a seed.
package sim
