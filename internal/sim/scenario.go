package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/gpuslice/gpuslice/internal/model"
)

// kindShapes are the workload shapes FleetScenario draws from, after the
// study's classes: memory range (MiB), utilization range (%), mean run
// time, and weight in the mix.
var kindShapes = []struct {
	kind         model.WorkloadKind
	memLo, memHi int64
	utLo, utHi   int
	dur          time.Duration
	weight       float64
}{
	{model.KindOnlineInference, 2048, 12288, 10, 70, 6 * time.Hour, 0.30},
	{model.KindOfflineInference, 4096, 16384, 40, 80, 2 * time.Hour, 0.15},
	{model.KindNotebook, 2048, 8192, 3, 15, 4 * time.Hour, 0.20},
	{model.KindSmallBatch, 512, 4096, 20, 45, 30 * time.Minute, 0.20},
	{model.KindIntensiveBatch, 4096, 20480, 70, 95, 90 * time.Minute, 0.10},
	{model.KindTraining, 20480, 38912, 85, 99, 8 * time.Hour, 0.05},
}

// FleetScenario is a seeded profile set for a fleet of about gpus
// A100-40GB GPUs (p4d.24xlarge nodes), for `gpuslice bench simulate`:
// gpus/20 tenants with one to four workloads each drawn from the study's
// classes, arrival rates set so that dedicated GPUs would be about load
// busy (Little's law: rate × mean run time = concurrent jobs).
func FleetScenario(gpus int, load float64, duration time.Duration, seed uint64) *model.Profiles {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	nodes := max(1, (gpus+7)/8)
	p := &model.Profiles{Sources: []string{fmt.Sprintf("bench: %d GPUs, load %.2f, seed %d", gpus, load, seed)},
		Fleet: model.ProfileFleet{InstanceType: "p4d.24xlarge", GPUsPerNode: 8, Nodes: nodes},
		Sim:   model.SimulationConfig{Duration: duration, Seed: seed, SampleEvery: max(time.Minute, (duration / 200).Round(time.Minute))}}
	total := 0.0
	for _, k := range kindShapes {
		total += k.weight
	}
	tenants := max(1, gpus/20)
	for t := 0; t < tenants; t++ {
		n := 1 + rng.IntN(4)
		for j := 0; j < n; j++ {
			x, ki := rng.Float64()*total, 0
			for ki = range kindShapes {
				if x -= kindShapes[ki].weight; x < 0 {
					break
				}
			}
			k := kindShapes[ki]
			mem := k.memLo + rng.Int64N(k.memHi-k.memLo+1)
			mem -= mem % 256
			p.Workloads = append(p.Workloads, model.Profile{
				Name: fmt.Sprintf("t%d-%s-%d", t, k.kind, j), Kind: k.kind, Tenant: fmt.Sprintf("tenant-%d", t),
				MemoryMiB: mem, Utilization: k.utLo + rng.IntN(k.utHi-k.utLo+1),
				LatencySensitive: k.kind == model.KindOnlineInference || k.kind == model.KindNotebook,
				Duration:         k.dur,
			})
		}
	}
	// Share the target concurrency out evenly over the workloads.
	per := load * float64(gpus) / float64(len(p.Workloads))
	for i := range p.Workloads {
		w := &p.Workloads[i]
		w.ArrivalsPerHour = math.Round(per/w.Duration.Hours()*1000) / 1000
		w.Replicas = int(math.Round(per))
	}
	return p
}
