package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpuslice/gpuslice/internal/advise"
	"github.com/gpuslice/gpuslice/internal/model"
	"github.com/gpuslice/gpuslice/internal/spec"
)

// readProfiles reads a Profiles file and the traces it names (relative to
// the file), failing with every problem at once.
func readProfiles(e *env, file string) (*model.Profiles, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	p, diags := spec.ReadProfiles(file, data)
	diags.Sort()
	if err := diags.Err(); err != nil {
		return nil, err
	}
	for _, d := range diags {
		fmt.Fprintln(e.errOut, d.String())
	}
	var errs []string
	for i := range p.Workloads {
		w := &p.Workloads[i]
		if w.TracePath == "" {
			continue
		}
		path := w.TracePath
		if !filepath.IsAbs(path) {
			path = filepath.Join(filepath.Dir(file), path)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: workloads[%d].trace: %v", file, i, err))
			continue
		}
		t, err := spec.ReadTrace(path, b)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		w.Trace = t
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return p, nil
}

func adviseCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "advise PROFILES.yaml",
		Short: "Which sharing strategy is right for these workloads: mechanism, sizing, GPUs and cost",
		Long: `Reads workload profiles (kind, GPU memory, how busy each keeps a whole GPU alone, latency
sensitivity, tenant, replicas, optionally a measured trace) and recommends, per workload and
for the mix, time-slicing, MPS (with per-client limits), MIG or a dedicated GPU — with the
sizing (MIG profile, MPS thread percentage and pinned memory, time-slice replicas), the
reasons and trade-offs as the benchmark study "Which GPU Sharing Strategy Is Right for
You?" (KubeCon NA 2024) states them, and warnings. The mix is then planned by the real
planner under every strategy: GPUs, $/h, replicas left out and the expected slowdown from
the performance model, against dedicated GPUs.`,
		Example: "  gpuslice advise examples/advise/study.yaml\n  gpuslice advise examples/advise/study.yaml -o json",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := readProfiles(e, args[0])
			if err != nil {
				return err
			}
			r, err := advise.Advise(p, advise.Options{Catalog: e.catalog})
			if err != nil {
				return err
			}
			return e.render(adviseTable(r), r)
		},
	}
	return cmd
}

func adviseTable(r *advise.Report) *table {
	t := &table{header: []string{"WORKLOAD", "KIND", "TENANT", "REPLICAS", "MEMORY", "UTIL", "ADVICE", "SIZING", "SLOWDOWN"}}
	for _, a := range r.Workloads {
		t.add(a.Name, a.Kind, a.Tenant, a.Replicas, advise.MiB(a.MemoryMiB), fmt.Sprintf("%d%%", a.Utilization),
			a.Mechanism, a.Sizing.Text, fmt.Sprintf("%.2fx", a.Slowdown))
	}
	n := func(s string) { t.notes = append(t.notes, s) }
	n("")
	fleet := fmt.Sprintf("FLEET %s, %d per node", r.Fleet.GPU, r.Fleet.GPUsPerNode)
	if r.Fleet.InstanceType != "" {
		fleet += " (" + r.Fleet.InstanceType
		if r.Fleet.PricePerNodeHour != nil {
			fleet += fmt.Sprintf(", $%.2f/h per node", *r.Fleet.PricePerNodeHour)
		}
		fleet += ")"
	}
	n(fleet)
	if r.Fleet.PriceFrom != "" {
		n("  price from " + r.Fleet.PriceFrom)
	}
	n("")
	n("THE MIX, PLANNED BY THE ALLOCATOR UNDER EACH STRATEGY")
	var b strings.Builder
	fmt.Fprintf(&b, "  %-13s %6s %6s %10s %12s %9s %9s %9s", "STRATEGY", "GPUS", "NODES", "$/H", "VS DEDICATED", "UNPLACED", "SLOWDOWN", "WORST")
	n(b.String())
	for _, s := range r.Strategies {
		cost := "-"
		if s.PriceKnown {
			cost = fmt.Sprintf("%.2f", s.PerHour)
		}
		mark := ""
		if s.Name == r.Best {
			mark = "  ← cheapest that places everything"
		}
		n(fmt.Sprintf("  %-13s %6d %6d %10s %11.0f%% %9d %8.2fx %8.2fx%s", s.Name, s.GPUs, s.Nodes, cost, s.VsDedicated*100, s.Unplaced, s.MeanSlowdown, s.WorstSlowdown, mark))
		var kinds []string
		for k, v := range s.Placed {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, v))
		}
		sort.Strings(kinds)
		if len(kinds) > 0 {
			n("      replicas on: " + strings.Join(kinds, ", "))
		}
		if s.Unplaced > 0 && s.UnplacedWhy != "" {
			n("      left out: " + s.UnplacedWhy)
		}
	}
	n("")
	n("WHY")
	for _, a := range r.Workloads {
		n(fmt.Sprintf("  %s → %s (%s)", a.Name, a.Mechanism, a.Sizing.Text))
		for _, s := range a.Reasons {
			n("    because " + s)
		}
		for _, s := range a.TradeOffs {
			n("    trade-off: " + s)
		}
		for _, s := range a.Warnings {
			n("    WARNING: " + s)
		}
		var alts []string
		for _, x := range a.Alternatives {
			if x.Mechanism == a.Mechanism {
				continue
			}
			if x.Possible {
				alts = append(alts, fmt.Sprintf("%s: %s", x.Mechanism, x.Sizing.Text))
			} else {
				alts = append(alts, fmt.Sprintf("%s: no (%s)", x.Mechanism, x.Note))
			}
		}
		n("    else " + strings.Join(alts, "; "))
		if a.SizedFrom != "profile" {
			n("    sized: " + a.SizedFrom)
		}
	}
	n("")
	n("THE STUDY'S COMPARISON")
	for _, c := range r.Comparison {
		n("  " + c)
	}
	for _, w := range r.Warnings {
		n("WARNING: " + w)
	}
	return t
}
