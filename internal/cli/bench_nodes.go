package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuslice/gpuslice/internal/autoscale"
)

func benchNodesCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "nodes",
		Short: "Nodes and $/h the node autoscaler buys for pending claims, counting slices vs whole GPUs",
		Long: `For each mix of pending claims (autoscale.NodeMixes) runs the node autoscaler's
decision (autoscale.PlanNodes: the real allocator on new nodes of each pool, cheapest pool
that places them all) and prints what it buys next to what an autoscaler that counts whole
GPUs (one GPU per requested device, on the same instance type) would buy.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			t := &table{header: []string{"PENDING", "CLAIMS", "POOL", "NODES", "GPUS", "$/H", "WHOLE-GPU NODES", "WHOLE-GPU $/H", "SAVED"}}
			// -o json|yaml: each mix with the decision itself (an
			// unpriced instance type's cost is null, with a note).
			type mixPlan struct {
				Mix     string             `json:"mix"`
				Pending int                `json:"pending"`
				Plan    autoscale.NodePlan `json:"plan"`
			}
			var plans []mixPlan
			usd := func(c autoscale.Cost) string {
				if !c.Known {
					return "unknown"
				}
				return fmt.Sprintf("%.2f", c.USD)
			}
			for _, m := range autoscale.NodeMixes() {
				np, err := autoscale.PlanNodes(m.Pools, m.Pending, nil, time.Time{}, nil)
				if err != nil {
					return err
				}
				plans = append(plans, mixPlan{Mix: m.Name, Pending: len(m.Pending), Plan: np})
				pool, nodes, gpus := "-", 0, 0
				for _, g := range np.Grow {
					pool, nodes, gpus = g.Pool, nodes+g.Nodes, gpus+g.GPUs
				}
				cost := autoscale.Total(np.Grow)
				wn, wc, saved := "-", "-", "-"
				if w := np.WholeGPU; w != nil {
					wc = "unknown"
					wn = fmt.Sprint(w.Nodes)
					if w.CostPerHour != nil {
						wc = fmt.Sprintf("%.2f", *w.CostPerHour)
						if *w.CostPerHour > 0 && cost.Known {
							saved = fmt.Sprintf("%.0f%%", 100*(1 - cost.USD / *w.CostPerHour))
						}
					}
				}
				t.rows = append(t.rows, []string{m.Name, fmt.Sprint(len(m.Pending)), pool, fmt.Sprint(nodes), fmt.Sprint(gpus),
					usd(cost), wn, wc, saved})
			}
			return e.render(t, plans)
		},
	}
}
