package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuslice/gpuslice/internal/advise"
	"github.com/gpuslice/gpuslice/internal/sim"
	"github.com/gpuslice/gpuslice/internal/spec"
)

func simulateCmd(e *env) *cobra.Command {
	var strategies, svgFile, duration string
	var seed uint64
	var nodes int
	var progress bool
	cmd := &cobra.Command{
		Use:   "simulate PROFILES.yaml",
		Short: "What-if: a fleet under the workloads' arrivals and departures, strategy against strategy",
		Long: `A discrete-event simulation of the fleet in the profiles under arrivals (Poisson, at each
workload's arrivalsPerHour, plus its replicas at the start) and departures (exponential run
times of mean duration, stretched by the performance model of sharing), once per strategy on
the same arrivals: "advised" (each workload as gpuslice advise recommends), time-slicing,
mps, mig and dedicated for every workload. Every placement is decided by the real allocator
on the strategy's fleet; a job that does not fit waits in a FIFO queue (departures start up
to 64 waiting jobs that fit). It reports GPUs in use over time, queueing delay, SM
utilization, stranded memory, MIG re-layouts and cost (nodes in use × price), as a table,
JSON/YAML (-o) or an SVG chart (--svg). The same seed gives the same result.`,
		Example: "  gpuslice simulate examples/advise/study.yaml\n  gpuslice simulate examples/advise/study.yaml --strategies advised,dedicated --seed 7 --svg /tmp/sim.svg",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := readProfiles(e, args[0])
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("seed") {
				p.Sim.Seed = seed
			}
			if duration != "" {
				d, err := spec.ParseDuration(duration)
				if err != nil || d < time.Minute {
					return fmt.Errorf("--duration %q: want a duration of a minute or more, e.g. 24h, 7d, 1w", duration)
				}
				p.Sim.Duration = d
				p.Sim.SampleEvery = max(time.Minute, (d / 200).Round(time.Minute))
			}
			opts := sim.Options{Catalog: e.catalog, Nodes: nodes}
			if strategies != "" {
				opts.Strategies = strings.Split(strategies, ",")
			}
			if progress {
				opts.Progress = progressBar(e.errOut)
			}
			r, err := sim.Run(p, opts)
			if progress {
				fmt.Fprintln(e.errOut)
			}
			if err != nil {
				return err
			}
			if svgFile != "" {
				if err := os.WriteFile(svgFile, sim.SVG(r), 0o644); err != nil {
					return err
				}
			}
			return e.render(simulateTable(r, svgFile), r)
		},
	}
	cmd.Flags().StringVar(&strategies, "strategies", "", "strategies to compare, comma-separated (default all): "+strings.Join(advise.Strategies(), ","))
	cmd.Flags().Uint64Var(&seed, "seed", 1, "random seed of the arrivals and run times (default: the profiles' simulation.seed)")
	cmd.Flags().StringVar(&duration, "duration", "", "simulated time (default: the profiles' simulation.duration), e.g. 24h, 7d")
	cmd.Flags().IntVar(&nodes, "nodes", 0, "nodes in the fleet (default: the profiles' fleet.nodes, else sized for the load)")
	cmd.Flags().BoolVar(&progress, "progress", false, "draw a progress bar on stderr")
	cmd.Flags().StringVar(&svgFile, "svg", "", "also write a chart (GPUs in use and queued jobs over time) to this SVG file")
	return cmd
}

// progressBar draws a bar on w, redrawn when the percentage changes.
func progressBar(w io.Writer) func(float64) {
	last := -1
	return func(f float64) {
		pct := int(f * 100)
		if pct == last {
			return
		}
		last = pct
		n := pct * 40 / 100
		fmt.Fprintf(w, "\rsimulating [%s%s] %3d%%", strings.Repeat("#", n), strings.Repeat(" ", 40-n), pct)
	}
}

func simulateTable(r *sim.Result, svgFile string) *table {
	t := &table{header: []string{"STRATEGY", "STARTED", "QUEUED", "REJECTED", "WAIT MEAN", "WAIT P95", "PEAK GPUS", "MEAN GPUS", "GPU-HOURS", "COST", "UTIL", "STRANDED", "MIG CHANGES", "SLOWDOWN"}}
	for _, s := range r.Strategies {
		cost := "-"
		if s.CostKnown {
			cost = fmt.Sprintf("$%.0f", s.Cost)
		}
		t.add(s.Name, s.Started, s.Queued, s.Rejected, secs(s.DelayMean), secs(s.DelayP95), s.PeakGPUs, fmt.Sprintf("%.1f", s.MeanGPUs),
			fmt.Sprintf("%.0f", s.GPUHours), cost, fmt.Sprintf("%.0f%%", s.Utilization*100), fmt.Sprintf("%.0f%%", s.Stranded*100), s.MIGChanges, fmt.Sprintf("%.2fx", s.MeanSlowdown))
	}
	t.notes = append(t.notes, "",
		fmt.Sprintf("%d nodes × %d %s (%d GPUs), %s simulated, seed %d: %d jobs arrived", r.Nodes, r.Fleet.GPUsPerNode, r.Fleet.GPU, r.GPUs, sim.Span(r.Duration), r.Seed, r.Arrivals),
		"UTIL is the running jobs' SM demand over the GPUs in use; STRANDED the memory of GPUs in use that no job needs;",
		"COST counts nodes holding at least one job at the instance type's price; SLOWDOWN is the performance model's run-time stretch.")
	if svgFile != "" {
		t.notes = append(t.notes, "chart: "+svgFile)
	}
	return t
}

func secs(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(time.Second).String()
}
