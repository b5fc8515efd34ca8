// Package fake is a simulated machine that implements gpu.Device. It powers
// `gpuslice serve` on hosts without an NVIDIA driver, the simulator and the
// tests.
//
// A Machine is built from a MachineSpec: a list of GPUs named by catalog id
// or NVML product name, each with its MIG mode and initial instances. Specs
// come from code, from a preset (Preset, Presets: dgx-a100, dgx-h100, l4x4,
// mixed, ...) or from a small YAML file (LoadSpec):
//
//	driverVersion: "580.00-sim"   # optional
//	gpus:
//	  - model: A100-40GB          # catalog id or NVML name
//	    count: 4                  # optional, default 1
//	    mig: true
//	    instances: [3g.20gb@4, 2g.10gb@0, 1g.5gb@2, 1g.5gb@3]
//	  - model: NVIDIA L4
//	    healthy: false            # optional, default true
//
// Unlike go-nvml's mocks the machine enforces the real MIG rules of the
// catalog through internal/mig: an instance must start at one of its
// profile's allowed starts, may not overlap another, and every count limit
// (per profile, per GPU, one "+me") holds. GPU instance ids are allocated
// like NVML's (the lowest free small integer) with one compute instance
// (id 0) spanning each.
//
// UUIDs are deterministic: "GPU-" plus a hash of the seed (WithSeed) and the
// GPU index, "MIG-" plus a hash of the GPU uuid and the GPU-instance id, both
// in the 8-4-4-4-12 form NVML prints.
//
// Simulated processes (StartProcess, SetProcessMemory, StopProcess) hold
// memory on a GPU or a MIG instance. A MIG instance cannot hand out more
// than its memory (ErrOutOfMemory, like a CUDA OOM) and neither can a whole
// GPU, but nothing stops one process from taking more of a whole GPU than a
// claim's share: catching that is the agent's job. Utilization is derived
// from the processes unless pinned with SetUtilization.
//
// Faults are injected on demand: InjectXID (79, 48, 94, 95 and 119 are fatal
// and make the GPU unhealthy; others such as 13, 31 and 43 are application
// faults), FailNextCreate, SetBusy (MIG changes are refused with ErrInUse)
// and Remove (the GPU falls off the bus: every call naming it fails with
// ErrNotFound and subscribers get an EventLost). Time comes from WithClock.
//
// From outside the process, a FaultWatcher applies the fault requests
// written to a directory (ParseFaultRequest: {"gpu": 0, "xid": 79},
// {"instance": "MIG-…", "xid": 94}, {"gpu": 1, "lost": true},
// {"gpu": 1, "recover": true}), each once, answering NAME.json with
// NAME.done or NAME.error: how `gpuslice dra simulate-fault` reaches a
// running simulated driver or agent.
//
// Every method is safe for concurrent use.
package fake
