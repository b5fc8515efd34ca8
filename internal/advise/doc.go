// Package advise answers "which sharing strategy is right for my
// workloads?": from workload profiles (model.Profiles) it recommends a
// mechanism and its sizing per workload — MIG profile, MPS thread
// percentage and pinned memory, time-slice replicas — with the reasons and
// trade-offs the seed benchmark study states, and prices every strategy for
// the whole mix by planning it with the real planner (internal/plan on
// internal/alloc). The performance model of sharing (perf.go) is shared
// with internal/sim; its every parameter is calibrated in one place.
// The package is pure: no I/O.
package advise
