package services

import (
	"fmt"
	"math"
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/catalog"
)

// A service's gpu and memory metrics count only its own replicas'
// processes. The node's agent already attributes every process on a
// device to the claim it was launched for (the watchdog: GPUSLICE_CLAIM in
// its environment, or the simulator's own processes) and reports each
// claim's GPU-, SM- and MiB-seconds in its heartbeat; the server keeps the
// totals in the claim (api.Claim.Used). The controller reads those totals
// and takes the change between two of its samples:
//
//	SM utilization = ΔSMSeconds / ΔGPUSeconds / the compute the replica can use
//	memory         = ΔMemoryMiBSeconds / ΔGPUSeconds / the memory promised
//
// ΔGPUSeconds is device-seconds during which the replica's processes ran,
// so the ratios are rates over exactly the time measured, whatever the
// heartbeat's timing. What "can use" means is the slice's compute limit
// (gpuslice_slice_compute_limit_ratio): a MIG instance's share of its GPU,
// an MPS client's active-thread percentage, else the whole GPU. A busy
// neighbour on the same GPU adds nothing to it, and reading the claim
// leaves the device's per-process samples to the agent (NVML hands each
// sample out once).
//
// Where SM activity is not sampled at all — MIG instances of GPUs without
// GPM (A100, A30): NVML keeps no per-process samples in MIG mode and
// cannot read an instance's utilization — the reading says so instead of
// passing for idle.

// usageReading is one replica's claim totals at a sample.
type usageReading struct {
	used api.Consumption
	at   time.Time // the sample's time
	ok   bool
}

// replicaUsage is what a replica used between two readings.
type replicaUsage struct {
	// SMPercent is SM activity in percent of the compute the replica can
	// use; MemPercent its memory in percent of the memory promised; NaN
	// when not measured.
	SMPercent, MemPercent float64
	// Unsampled names why SM activity cannot be measured on the replica's
	// devices ("" when it can).
	Unsampled string
}

// deviceLimits is the compute (fraction of its GPU) a replica's processes
// can use on each of its devices, and the memory promised there; unsampled
// names the first device where SM activity is not sampled.
func deviceLimits(devs []alloc.Assigned, modelOf func(gpu string) *catalog.GPU) (compute float64, memMiB int64, unsampled string) {
	n := 0
	for _, d := range devs {
		m := modelOf(d.GPU)
		frac := 1.0
		if d.Profile != "" && m != nil && m.MIG != nil && m.MIG.ComputeSlices > 0 {
			if p, err := m.Profile(d.Profile); err == nil {
				frac = float64(p.ComputeSlices) / float64(m.MIG.ComputeSlices)
			}
		}
		if d.MPS != nil && d.MPS.ActiveThreadPercent > 0 {
			frac *= float64(d.MPS.ActiveThreadPercent) / 100
		}
		if d.Profile != "" && unsampled == "" && (m == nil || !m.HasGPM()) {
			model := "this GPU"
			if m != nil {
				model = m.ID
			}
			unsampled = fmt.Sprintf("SM utilization is not measured on %s MIG instances (%s): NVML keeps no per-process samples in MIG mode, and only Hopper and newer measure an instance (GPM)", model, d.Profile)
		}
		compute += frac
		memMiB += d.MemoryMiB
		n++
	}
	if n > 0 {
		compute /= float64(n)
		memMiB /= int64(n)
	}
	return compute, memMiB, unsampled
}

// usageBetween is a replica's use between prev and cur, its claim's totals
// at two samples. beat is the node's last heartbeat: when no process of
// the replica ran in between (ΔGPUSeconds 0) and the node reported since
// prev, the replica was idle (0%); otherwise nothing is known yet (NaN).
func usageBetween(prev, cur usageReading, beat time.Time, compute float64, memMiB int64, unsampled string) replicaUsage {
	u := replicaUsage{SMPercent: math.NaN(), MemPercent: math.NaN(), Unsampled: unsampled}
	if !prev.ok || !cur.ok {
		return u
	}
	dGPU := cur.used.GPUSeconds - prev.used.GPUSeconds
	dSM := cur.used.SMSeconds - prev.used.SMSeconds
	dMem := cur.used.MemoryMiBSeconds - prev.used.MemoryMiBSeconds
	if dGPU <= 0 {
		if beat.After(prev.at) {
			if unsampled == "" {
				u.SMPercent = 0
			}
			u.MemPercent = 0
		}
		return u
	}
	if unsampled == "" && compute > 0 {
		u.SMPercent = clampPercent(dSM / dGPU / compute * 100)
	}
	if memMiB > 0 {
		u.MemPercent = clampPercent(dMem / dGPU / float64(memMiB) * 100)
	}
	return u
}

func clampPercent(v float64) float64 {
	if math.IsNaN(v) || v < 0 {
		return 0
	}
	return min(v, 100)
}
