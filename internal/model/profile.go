package model

import "time"

// WorkloadKind is the class of a workload profile, after the classes the
// seed benchmark study measured (KubeCon NA 2024, "Which GPU sharing
// strategy is right for you?") plus the two a platform also runs.
type WorkloadKind string

// The workload kinds a profile may name.
const (
	KindOnlineInference  WorkloadKind = "online-inference"
	KindOfflineInference WorkloadKind = "offline-inference"
	KindNotebook         WorkloadKind = "notebook"
	KindSmallBatch       WorkloadKind = "small-batch"
	KindIntensiveBatch   WorkloadKind = "gpu-intensive-batch"
	KindTraining         WorkloadKind = "training"
)

// WorkloadKinds lists every kind, in the order the docs give them.
var WorkloadKinds = []WorkloadKind{KindOnlineInference, KindOfflineInference, KindNotebook, KindSmallBatch,
	KindIntensiveBatch, KindTraining}

// Profiles is the input of `gpuslice advise` and `gpuslice simulate`: the
// GPUs on offer, a description per workload, and how long to simulate.
type Profiles struct {
	Sources   []string         `json:"sources,omitempty"`
	Fleet     ProfileFleet     `json:"fleet"`
	Workloads []Profile        `json:"workloads"`
	Sim       SimulationConfig `json:"simulation"`
}

// ProfileFleet is the GPUs the workloads may use: a catalog instance type,
// or a GPU model with GPUs per node.
type ProfileFleet struct {
	InstanceType string `json:"instanceType,omitempty"`
	GPU          string `json:"gpu,omitempty"`
	GPUsPerNode  int    `json:"gpusPerNode,omitempty"`
	// Nodes is the most nodes the simulated fleet has (0: as many as
	// the demand needs, bounded by the simulator's default).
	Nodes int `json:"nodes,omitempty"`
	Where Pos `json:"-"`
}

// Profile describes one workload: what it is, how much GPU it needs when
// it runs alone on a whole GPU, who owns it and how often it comes.
type Profile struct {
	Name   string       `json:"name"`
	Kind   WorkloadKind `json:"kind"`
	Tenant string       `json:"tenant"`
	// MemoryMiB is the GPU memory one replica uses at its peak.
	MemoryMiB int64 `json:"memoryMiB"`
	// Utilization is the percent of time a whole GPU is busy with one
	// replica alone (nvidia-smi's GPU-Util, 1..100).
	Utilization int `json:"utilization"`
	// SMOccupancy is the percent of the SMs its kernels keep busy while
	// they run (1..100; 0: the kind's default). MPS overlaps kernels of
	// several clients; this is what decides how many fit.
	SMOccupancy int `json:"smOccupancy,omitempty"`
	// LatencySensitive defaults by kind (online inference and notebooks).
	LatencySensitive bool `json:"latencySensitive"`
	// HardwareIsolation asks for fault and memory-bandwidth isolation
	// from every other workload (a MIG instance or a whole GPU).
	HardwareIsolation bool `json:"hardwareIsolation,omitempty"`
	// Replicas is how many run at once (advise; simulate's initial load).
	Replicas int `json:"replicas"`
	// ArrivalsPerHour and Duration drive simulate: Poisson arrivals of
	// replicas that each run for an exponentially distributed time of
	// mean Duration when alone on a whole GPU. With no Duration, a
	// replica of a workload with a trace runs for the trace's span, and
	// any other for an hour on average.
	ArrivalsPerHour float64       `json:"arrivalsPerHour,omitempty"`
	Duration        time.Duration `json:"duration,omitempty"`
	// TracePath is a measured trace (CSV time,utilization,memory); the
	// reader of the CLI loads it into Trace, which then sizes the
	// workload (peak memory, 95th-percentile utilization).
	TracePath string `json:"trace,omitempty"`
	Trace     *Trace `json:"-"`
	Where     Pos    `json:"-"`
}

// SimulationConfig is how long and how `gpuslice simulate` runs.
type SimulationConfig struct {
	Duration    time.Duration `json:"duration"`
	Seed        uint64        `json:"seed"`
	SampleEvery time.Duration `json:"sampleEvery"`
}

// Trace is a measured utilization and memory trace of one replica.
type Trace struct {
	File    string        `json:"file"`
	Samples []TraceSample `json:"samples"`
}

// TraceSample is one line of a trace.
type TraceSample struct {
	At          time.Duration `json:"at"`
	Utilization float64       `json:"utilization"`
	MemoryMiB   int64         `json:"memoryMiB"`
}
