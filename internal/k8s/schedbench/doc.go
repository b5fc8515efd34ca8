// Package schedbench measures the stock kube-scheduler on gpuslice's
// ResourceSlices and on NVIDIA-shaped slices of the same GPUs
// (`gpuslice bench scheduler`): for each Kubernetes release and case it
// starts a fresh control plane (internal/k8s/controlplane), creates ready
// nodes with their slices and pods each with its own claim, runs the
// scheduler and times every bind, reporting the steady-state rate (10th
// to 90th percentile of binds), the scheduler's CPU time per pod and,
// when asked, a CPU profile. BenchmarkFilter times one Filter call of the
// linked structured allocator. docs/scheduler-cost.md says what the
// slices cost and why.
package schedbench
