package advise

import (
	"math"
	"time"

	"github.com/gpuslice/gpuslice/internal/model"
)

// Calibration is the performance model of GPU sharing: every number it
// uses, in one place, each with where it comes from. "Study" is the seed
// benchmark (Klues & Chen, "Which GPU Sharing Strategy Is Right for You?",
// KubeCon NA 2024, shared/seeds/001); "assumption" marks a number the
// study does not give, chosen to reproduce its qualitative findings.
//
// The model. A workload alone on a whole GPU keeps it busy a fraction u of
// the time (utilization) and, while busy, keeps a fraction o of its SMs
// occupied (SM occupancy); d = u·o is its average demand for SMs.
//   - dedicated GPU: slowdown 1.
//   - MIG instance with a fraction f of the compute slices, alone: its
//     busy part runs max(1, o/f) times slower: (1−u) + u·max(1, o/f);
//     no interference from other instances (study: MIG "performance
//     isolation", "guaranteed memory bandwidth QoS").
//   - MPS: clients' kernels run at the same time, so demands add up:
//     slowdown max(1, Σd/f, d/(f·t))·(1+MPSOverhead), where t is the
//     client's active-thread limit (1 without limits) and each other
//     client's demand is capped by its own limit.
//   - time-slicing: contexts take turns, so busy time adds up:
//     slowdown max(1, Σu·max(1, o/f))·(1+TimeSliceSwitch·(k−1)) for k
//     busy contexts.
type Calibration struct {
	// MPSOverhead: study, small batch job (256×256 matmul ×100k on an
	// RTX 4090): one job alone real 26.752 s at 35 % GPU use; four jobs
	// under MPS real 27.213 s each at 91 % — 1.7 % longer.
	MPSOverhead float64
	// TimeSliceSwitch is the extra time per additional busy context under
	// time-slicing. Assumption: the study reports "increased completion
	// time" and "context switch overhead" for time-slicing, no figure.
	TimeSliceSwitch float64
	// Startup is how long a replica takes to start per mechanism. Study:
	// light inference, "slower startup - MPS: 6s vs TS: 1s". MIG (an
	// instance created for the replica) is an assumption (GPU-instance
	// create + compute-instance create, a few seconds); dedicated as TS.
	Startup map[Mechanism]time.Duration
	// Occupancy is the SM occupancy assumed for a kind when a profile
	// gives none (assumption: typical nsys/DCGM SM-active over GPU-busy
	// ratios; the study's four MPS matmul jobs at 35 % use fitting on one
	// GPU at 1.7 % overhead needs occupancy ≤ 0.71).
	Occupancy map[model.WorkloadKind]float64
	// HeavyUtilization splits light from heavy load (percent). Study:
	// light inference (1 thread, batch 1) vs heavy (5 threads, batch 5);
	// the same split as the allocator's auto table (alloc/auto.go).
	HeavyUtilization int
	// WholeGPUUtilization: a workload that keeps a GPU this busy alone
	// gains nothing from sharing (assumption).
	WholeGPUUtilization int
	// Headroom multiplies a workload's demand when sizing an MPS thread
	// limit or a MIG instance: latency-sensitive work gets room for bursts
	// (study: "MPS + limits … require proper resource limits"; MIG
	// "proper sizing is important").
	HeadroomLatency, HeadroomBatch float64
	// TargetLatency and TargetBatch are the slowdowns a sizing accepts:
	// a MIG profile is the smallest whose slowdown stays within it, and
	// time-sliced replicas per GPU are as many as keep it (assumption:
	// a latency-sensitive service tolerates 1.2×, a batch job 1.5×).
	TargetLatency, TargetBatch float64
	// MPSLimitedShare is the active-thread percentage of an MPS client
	// that alone would take every SM (a GPU-intensive job). Study: "MPS
	// with resource limits" for GPU-intensive batch jobs, two gpu-burn
	// jobs each with defaultActiveThreadPercentage 50 — "cap resource",
	// "resource fair sharing and isolation". A limit of 100% is none.
	MPSLimitedShare int
}

// Default is the calibration advise and simulate use.
var Default = Calibration{
	MPSOverhead:     (27.213 - 26.752) / 26.752,
	TimeSliceSwitch: 0.05,
	Startup: map[Mechanism]time.Duration{
		TimeSlicing: time.Second, MPS: 6 * time.Second, MIG: 4 * time.Second, Dedicated: time.Second,
	},
	Occupancy: map[model.WorkloadKind]float64{
		model.KindOnlineInference: 0.5, model.KindOfflineInference: 0.7, model.KindNotebook: 0.3,
		model.KindSmallBatch: 0.5, model.KindIntensiveBatch: 1.0, model.KindTraining: 0.9,
	},
	HeavyUtilization:    50,
	WholeGPUUtilization: 90,
	HeadroomLatency:     1.5,
	HeadroomBatch:       1.2,
	TargetLatency:       1.2,
	TargetBatch:         1.5,
	MPSLimitedShare:     50,
}

// Load is one workload on a device, for the performance model.
type Load struct {
	// Util and Occ are fractions (0..1): time busy alone, SMs busy while
	// busy.
	Util, Occ float64
	// Limit is an MPS client's active-thread limit as a fraction (0 or 1:
	// none).
	Limit float64
}

func (l Load) demand() float64 {
	d := l.Util * l.Occ
	if l.Limit > 0 && l.Limit < 1 {
		d = math.Min(d, l.Limit)
	}
	return d
}

// Slowdown is how much longer a workload takes on a device it shares with
// others than alone on a whole GPU. m is how the device is shared
// (Dedicated or MIG: the workload has it to itself); frac is the device's
// share of the GPU's compute (a MIG instance's compute slices over the
// GPU's; 1 for a whole GPU). A MIG instance shared by time-slicing or MPS
// (layered sharing) is modelled as a smaller GPU: every demand is divided
// by frac.
func (c *Calibration) Slowdown(m Mechanism, own Load, others []Load, frac float64) float64 {
	if frac <= 0 || frac > 1 {
		frac = 1
	}
	switch m {
	case MPS:
		sum := own.demand() / frac
		for _, l := range others {
			sum += l.demand() / frac
		}
		s := math.Max(1, sum)
		if own.Limit > 0 && own.Limit < 1 {
			// The limit is a share of the whole GPU's threads, like
			// the demand: neither depends on the device's size.
			s = math.Max(s, own.Util*own.Occ/own.Limit)
		}
		return s * (1 + c.MPSOverhead)
	case TimeSlicing:
		busy := own.Util * math.Max(1, own.Occ/frac)
		k := 1
		for _, l := range others {
			busy += l.Util * math.Max(1, l.Occ/frac)
			if l.Util > 0 {
				k++
			}
		}
		return math.Max(1, busy) * (1 + c.TimeSliceSwitch*float64(k-1))
	}
	// Alone on the device: its busy part runs slower on fewer SMs.
	return (1 - own.Util) + own.Util*math.Max(1, own.Occ/frac)
}

// OccupancyOf is a profile's SM occupancy as a fraction: its own or the
// kind's default.
func (c *Calibration) OccupancyOf(p *model.Profile) float64 {
	if p.SMOccupancy > 0 {
		return float64(p.SMOccupancy) / 100
	}
	if o, ok := c.Occupancy[p.Kind]; ok {
		return o
	}
	return 0.5
}
