package cli

import (
	"fmt"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuslice/gpuslice/internal/sim"
	"github.com/gpuslice/gpuslice/internal/spec"
)

type simBench struct {
	GPUs          int           `json:"gpus"`
	Workloads     int           `json:"workloads"`
	Duration      time.Duration `json:"duration"`
	Seconds       float64       `json:"seconds"`
	Decisions     int           `json:"decisions"`
	PerSecond     float64       `json:"decisionsPerSecond"`
	PeakHeapBytes uint64        `json:"peakHeapBytes"`
	Result        *sim.Result   `json:"result"`
}

func benchSimCmd(e *env) *cobra.Command {
	var gpus int
	var load float64
	var duration, strategies string
	var seed uint64
	var progress bool
	cmd := &cobra.Command{
		Use:   "simulate",
		Short: "How long `gpuslice simulate` takes on a big fleet: a seeded mix on N GPUs for a simulated week",
		Long: `Generates a seeded mix of the study's workload classes (internal/sim.FleetScenario) for a
fleet of --gpus A100-40GB GPUs on p4d.24xlarge nodes, with gpus/20 tenants and arrival
rates that would keep dedicated GPUs --load busy, simulates it for --duration under every
strategy, and prints the wall time, the allocator decisions per second, the peak live heap
and the simulation's own table.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := spec.ParseDuration(duration)
			if err != nil || d < time.Minute {
				return fmt.Errorf("--duration %q: want a duration, e.g. 7d", duration)
			}
			if gpus < 8 || load <= 0 || load > 10 {
				return fmt.Errorf("--gpus %d --load %g: want at least 8 GPUs and a load in (0, 10]", gpus, load)
			}
			p := sim.FleetScenario(gpus, load, d, seed)
			opts := sim.Options{Catalog: e.catalog}
			if strategies != "" {
				opts.Strategies = strings.Split(strategies, ",")
			}
			if progress {
				opts.Progress = progressBar(e.errOut)
			}
			runtime.GC()
			var peak uint64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
				tick := time.NewTicker(10 * time.Millisecond)
				defer tick.Stop()
				for {
					metrics.Read(s)
					peak = max(peak, s[0].Value.Uint64())
					select {
					case <-stop:
						return
					case <-tick.C:
					}
				}
			}()
			t0 := time.Now()
			r, err := sim.Run(p, opts)
			secs := time.Since(t0).Seconds()
			close(stop)
			wg.Wait()
			if progress {
				fmt.Fprintln(e.errOut)
			}
			if err != nil {
				return err
			}
			b := simBench{GPUs: r.GPUs, Workloads: len(p.Workloads), Duration: d, Seconds: secs, PeakHeapBytes: peak, Result: r}
			for _, s := range r.Strategies {
				b.Decisions += s.Decisions
			}
			b.PerSecond = float64(b.Decisions) / secs
			t := simulateTable(r, "")
			t.notes = append(t.notes, fmt.Sprintf("simulated %s of %d GPUs (%d workloads, %d tenants' mix, %d strategies) in %.1f s wall: %d allocator decisions, %.0f/s; peak live heap %s; GOMAXPROCS %d",
				sim.Span(d), r.GPUs, len(p.Workloads), max(1, gpus/20), len(r.Strategies), secs, b.Decisions, b.PerSecond, byteSize(peak), runtime.GOMAXPROCS(0)))
			return e.render(t, b)
		},
	}
	cmd.Flags().IntVar(&gpus, "gpus", 10000, "GPUs in the fleet (8 per node)")
	cmd.Flags().Float64Var(&load, "load", 0.9, "the load as the share of the fleet dedicated GPUs would keep busy")
	cmd.Flags().StringVar(&duration, "duration", "7d", "simulated time")
	cmd.Flags().StringVar(&strategies, "strategies", "", "strategies (default all)")
	cmd.Flags().Uint64Var(&seed, "seed", 1, "seed of the mix and the arrivals")
	cmd.Flags().BoolVar(&progress, "progress", false, "draw a progress bar on stderr")
	return cmd
}
