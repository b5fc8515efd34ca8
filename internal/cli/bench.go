package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpuslice/gpuslice/internal/k8s/drabench"
	"github.com/gpuslice/gpuslice/internal/packing"
)

func benchCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Reproduce the measurements in BENCHMARKS.md",
	}
	cmd.AddCommand(benchPackingCmd(e), benchDRACmd(e), benchDRAOrderCmd(e), benchPlanCmd(e), benchPlanQualityCmd(e), benchNodesCmd(e), benchSimCmd(e), benchSchedulerCmd(e))
	return cmd
}

func benchPackingCmd(e *env) *cobra.Command {
	var seeds int
	var mixName string
	cmd := &cobra.Command{
		Use:   "packing",
		Short: "GPUs used by gpuslice on seeded workload mixes against lower bounds and today's baselines",
		Long: `Runs the real allocator on seeded workload mixes (inference replicas, notebooks,
batch jobs, MIG requests, several tenants) and compares the GPUs it uses with a lower
bound, an isolation-aware lower bound and the baselines users have today: one claim per
whole GPU, device-plugin time-slicing (memory unchecked: overcommitted devices are
counted), a static MIG layout and plain first-fit.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			mixes := packing.Mixes()
			if mixName != "" {
				m, ok := packing.MixByName(mixName)
				if !ok {
					var names []string
					for _, m := range mixes {
						names = append(names, m.Name)
					}
					return fmt.Errorf("unknown mix %q; valid: %s", mixName, strings.Join(names, ", "))
				}
				mixes = []packing.Mix{m}
			}
			var reports []packing.Report
			for _, m := range mixes {
				for seed := 1; seed <= seeds; seed++ {
					r, err := packing.Run(m, uint64(seed))
					if err != nil {
						return err
					}
					reports = append(reports, r)
				}
			}
			if e.format == "table" {
				_, err := fmt.Fprint(e.out, packing.Summary(reports)+strings.Join(packing.SummaryLegend(), "\n")+"\n")
				return err
			}
			return e.render(&table{}, reports)
		},
	}
	cmd.Flags().IntVar(&seeds, "seeds", 5, "seeds per mix")
	cmd.Flags().StringVar(&mixName, "mix", "", "only this mix")
	return cmd
}

func benchDRACmd(e *env) *cobra.Command {
	var gpus, claims int
	cmd := &cobra.Command{
		Use:   "dra",
		Short: "Decisions per second against the upstream Kubernetes DRA structured allocator, in one run",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := drabench.Compare(gpus, claims)
			if err != nil {
				return err
			}
			t := &table{header: []string{"ALLOCATOR", "DECISIONS", "PER DECISION", "DECISIONS/S"}}
			t.add("gpuslice", res.GPUSlice.Decisions, res.GPUSlice.PerDecision, fmt.Sprintf("%.0f", res.GPUSlice.DecisionsPerSec))
			t.add("upstream "+res.UpstreamVersion, res.Upstream.Decisions, res.Upstream.PerDecision, fmt.Sprintf("%.0f", res.Upstream.DecisionsPerSec))
			t.notes = append(t.notes, fmt.Sprintf("%d GPUs on %d nodes; ratio %.1f× (gpuslice ÷ upstream); upstream made %.2f per-node Allocate calls per decision (first-fit, the cheapest way to drive it)",
				res.GPUs, res.Nodes, res.Ratio, res.UpstreamNodeCalls))
			return e.render(t, res)
		},
	}
	cmd.Flags().IntVar(&gpus, "gpus", 1000, "GPUs in the fleet (8 per node)")
	cmd.Flags().IntVar(&claims, "claims", 0, "decisions per side (0: fill 70% of the fleet once)")
	return cmd
}

func benchDRAOrderCmd(e *env) *cobra.Command {
	var nodes, claims, seeds int
	var mixName string
	cmd := &cobra.Command{
		Use:   "dra-order",
		Short: "MIG claims placed and GPUs used by the stock DRA allocator with gpuslice's device order against NVML's, and by gpuslice's allocator",
		Long: `The stock Kubernetes DRA allocator takes the first device that fits in ResourceSlice
order, so the order in which a driver lists MIG placements decides how it packs. This
allocates the same seeded MIG claims (ResourceClaims of mig.gpuslice.dev selecting a
profile) on the same nodes with the stock structured allocator, first fit over nodes and
devices, with the placements in gpuslice's order (smallest profile first, highest start
first), in NVML's enumeration order (starts ascending) and largest profile first; and with
gpuslice's allocator on the same slices, as the claims arrive and with all of them known
up front, biggest first. Sums over the seeds.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			mixes := drabench.OrderMixes
			if mixName != "" {
				var names []string
				mixes = nil
				for _, m := range drabench.OrderMixes {
					names = append(names, m.Name)
					if m.Name == mixName {
						mixes = append(mixes, m)
					}
				}
				if len(mixes) == 0 {
					return fmt.Errorf("unknown mix %q; valid: %s", mixName, strings.Join(names, ", "))
				}
			}
			if seeds < 1 {
				return fmt.Errorf("--seeds %d: want at least 1", seeds)
			}
			if nodes < 1 || claims < 1 {
				return fmt.Errorf("--nodes %d, --claims %d: want at least 1 of each", nodes, claims)
			}
			t := &table{header: []string{"MIX", "ALLOCATOR", "ORDER", "PLACED", "UNPLACED", "GPUS", "VS GPUSLICE ORDER"}}
			var all []drabench.OrderResult
			for _, m := range mixes {
				sum := map[string]*drabench.OrderSide{}
				var order []string
				for seed := 1; seed <= seeds; seed++ {
					r, err := drabench.CompareOrder(m, nodes, claims, uint64(seed))
					if err != nil {
						return err
					}
					all = append(all, r)
					for _, s := range r.Sides {
						k := s.Allocator + "/" + s.Order
						if sum[k] == nil {
							sum[k] = &drabench.OrderSide{Allocator: s.Allocator, Order: s.Order}
							order = append(order, k)
						}
						sum[k].Placed += s.Placed
						sum[k].Unplaced += s.Unplaced
						sum[k].GPUs += s.GPUs
					}
				}
				base := sum[order[0]]
				for _, k := range order {
					s := sum[k]
					vs := fmt.Sprintf("%+d placed, %.3f× GPUs", s.Placed-base.Placed, float64(s.GPUs)/float64(max(base.GPUs, 1)))
					t.add(m.Name, s.Allocator, s.Order, s.Placed, s.Unplaced, s.GPUs, vs)
				}
			}
			t.notes = append(t.notes, fmt.Sprintf("%d nodes × %d GPUs, %d claims per seed, seeds 1..%d; GPUs = GPUs holding at least one claim; compare GPUs only where as many were placed",
				nodes, drabench.GPUsPerNode, claims, seeds))
			return e.render(t, all)
		},
	}
	cmd.Flags().IntVar(&nodes, "nodes", 4, "nodes of 8 GPUs")
	cmd.Flags().IntVar(&claims, "claims", 120, "MIG claims per seed")
	cmd.Flags().IntVar(&seeds, "seeds", 5, "seeds per mix")
	cmd.Flags().StringVar(&mixName, "mix", "", "only this mix")
	return cmd
}
