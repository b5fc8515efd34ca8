package cli

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/plan"
	artifacts "github.com/gpuslice/gpuslice/internal/render"
	"github.com/gpuslice/gpuslice/internal/spec"
	"github.com/gpuslice/gpuslice/schema"
)

// readSpecs reads and merges input files, printing warnings to errOut and
// failing with every error at once.
func readSpecs(e *env, files []string, format string) (*spec.Spec, error) {
	var merged *spec.Spec
	var all spec.Diagnostics
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		s, diags := spec.Read(f, data, spec.Format(format))
		all = append(all, diags...)
		if merged == nil {
			merged = s
		} else {
			merged = spec.Merge(merged, s)
		}
	}
	// Imported NVIDIA configs become the fixed setup of their pools.
	if merged != nil && all.Err() == nil {
		all = append(all, spec.ApplyImported(merged)...)
	}
	all.Sort()
	if err := all.Err(); err != nil {
		return nil, err
	}
	for _, d := range all {
		fmt.Fprintln(e.errOut, d.String())
	}
	return merged, nil
}

func planCmd(e *env) *cobra.Command {
	var format string
	var exact time.Duration
	cmd := &cobra.Command{
		Use:   "plan FILE...",
		Short: "Show what it takes to run these files: nodes, GPUs, MIG layouts, placements, cost",
		Long: `Reads compose.yaml (x-internal-integrations.multiTenantGpu), Kubernetes DRA claims,
NVIDIA device-plugin or mig-parted configs, or gpuslice's own YAML, places every replica
with the real allocator on a simulated fleet, and reports the nodes and GPUs each pool
needs, every GPU's MIG layout and sharing, which replica lands where, the cost per hour
against dedicated whole GPUs, and warnings. QUALITY compares the GPUs used with the best
lower bound gpuslice can prove (per pool, isolation-aware, raised by an exact search on
small tenant groups): "optimal" when they meet, else the gap.`,
		Example: "  gpuslice plan examples/compose-timeslicing.yaml\n  gpuslice plan examples/gpuslice.yaml -o yaml",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := readSpecs(e, args, format)
			if err != nil {
				return err
			}
			p, err := plan.Make(s, plan.Options{Quality: plan.QualityOptions{ExactBudget: exactBudget(exact)}})
			if err != nil {
				return err
			}
			return e.render(planTable(p), p)
		},
	}
	cmd.Flags().StringVar(&format, "format", "", "input format (default: detected): "+formatNames())
	cmd.Flags().DurationVar(&exact, "exact-budget", plan.DefaultExactBudget, "time the exact search may spend proving the plan optimal or finding a better packing (0: none)")
	return cmd
}

// exactBudget maps the flag to plan's option: 0 means no exact search.
func exactBudget(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

// qualityNotes is the QUALITY part of the plan's text: GPUs against the
// lower bound, and what was tried.
func qualityNotes(q *plan.Quality) []string {
	if q == nil {
		return nil
	}
	var head string
	switch {
	case q.Optimal:
		head = fmt.Sprintf("QUALITY  GPUs %d, lower bound %d: optimal", q.GPUs, q.LowerBound)
	case q.LowerBound > 0:
		head = fmt.Sprintf("QUALITY  GPUs %d, lower bound %d, within %.0f%%", q.GPUs, q.LowerBound, 100*q.Gap)
	default:
		head = fmt.Sprintf("QUALITY  GPUs %d", q.GPUs)
	}
	out := []string{head}
	var pools []string
	for _, pq := range q.Pools {
		if pq.GPUs > 0 || pq.LowerBound > 0 {
			pools = append(pools, fmt.Sprintf("%s %d/%d", pq.Name, pq.GPUs, pq.LowerBound))
		}
	}
	if len(pools) > 0 {
		out = append(out, "      per pool (GPUs/bound): "+strings.Join(pools, ", "))
	}
	tried := fmt.Sprintf("      orders tried: %d, kept %s", len(q.Tried), q.Chosen)
	if q.Moved > 0 {
		tried += fmt.Sprintf("; local search emptied %d GPU(s)", q.Moved)
	}
	if q.Exact.Groups > 0 {
		tried += fmt.Sprintf("; exact search solved %d of %d tenant groups", q.Exact.Proved, q.Exact.Groups)
		if q.Exact.Improved > 0 {
			tried += fmt.Sprintf(" and repacked %d", q.Exact.Improved)
		}
	}
	out = append(out, tried)
	if q.Note != "" {
		out = append(out, "      bound: "+q.Note)
	}
	return out
}

func formatNames() string {
	var out []string
	for _, f := range spec.Formats() {
		out = append(out, string(f))
	}
	return strings.Join(out, ", ")
}

func renderCmd(e *env) *cobra.Command {
	var format, target string
	var opts artifacts.Options
	cmd := &cobra.Command{
		Use:   "render FILE... --target " + strings.Join(artifacts.Targets(), "|"),
		Short: "Write the files other tools consume: device-plugin and mig-parted configs, DRA objects, Deployments, NodePools",
		Example: "  gpuslice render examples/gpuslice.yaml --target karpenter\n" +
			"  gpuslice render compose.yaml --target nvidia-device-plugin | kubectl apply -f -",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !slices.Contains(artifacts.Targets(), target) {
				return enumError("--target", "render target", target, artifacts.Targets())
			}
			if !slices.Contains(artifacts.DRADrivers(), opts.DRADriver) {
				return enumError("--dra-driver", "DRA driver", opts.DRADriver, artifacts.DRADrivers())
			}
			s, err := readSpecs(e, args, format)
			if err != nil {
				return err
			}
			p, err := plan.Make(s, plan.Options{})
			if err != nil {
				return err
			}
			out, err := artifacts.RenderWith(target, s, p, opts)
			if err != nil {
				return err
			}
			// What the target cannot express of the plan (also in its
			// output as WARNING comments).
			for _, w := range artifacts.WarningsWith(target, s, p, opts) {
				fmt.Fprintln(e.errOut, "warning: "+w)
			}
			_, err = e.out.Write(out)
			return err
		},
	}
	cmd.Flags().StringVar(&target, "target", "", "what to write: "+strings.Join(artifacts.Targets(), ", "))
	cmd.Flags().StringVar(&format, "format", "", "input format (default: detected): "+formatNames())
	cmd.Flags().BoolVar(&opts.DRADeviceClasses, "dra-device-classes", false, "with --target dra, also write the driver's DeviceClasses (NVIDIA's: gpu.nvidia.com, mig.nvidia.com; gpuslice's: gpu., shared., mig.gpuslice.dev)")
	cmd.Flags().StringVar(&opts.Namespace, "namespace", "", "with --target nvidia-device-plugin, the ConfigMap's namespace (default "+artifacts.DevicePluginNamespace+", the GPU operator's; kube-system for the device plugin's own Helm chart there)")
	cmd.Flags().StringVar(&opts.DRADriver, "dra-driver", artifacts.DRADriverNVIDIA, "with --target dra, the DRA driver the claims are for; with --target karpenter gpuslice, NodePools for its claims: "+strings.Join(artifacts.DRADrivers(), ", "))
	_ = cmd.RegisterFlagCompletionFunc("target", cobra.FixedCompletions(artifacts.Targets(), cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func schemaCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "schema",
		Short: "Print the JSON Schema of gpuslice's own YAML (for editors)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := e.out.Write(schema.JSON)
			return err
		},
	}
}

// planTable is the human view of a plan.
func planTable(p *plan.Plan) *table {
	t := &table{header: []string{"POOL", "INSTANCE", "GPU", "NODES", "GPUS USED", "LAYOUT / SHARING"}}
	for _, pp := range p.Pools {
		t.add(pp.Name, orDashS(pp.InstanceType), pp.GPU, pp.Nodes, fmt.Sprintf("%d/%d", pp.GPUsUsed, pp.Nodes*pp.GPUsPerNode), "")
		for _, f := range pp.FixedBy {
			t.add("", "", "", "", "", "config: "+f)
		}
		// Consecutive idle GPUs of a node with the same layout share one
		// row: "node/1-7".
		for i := 0; i < len(pp.GPUs); i++ {
			g := pp.GPUs[i]
			if len(g.Claims) == 0 && len(g.Instances) == 0 {
				continue
			}
			text, last := gpuText(g), g.Index
			for !gpuUsed(g) && i+1 < len(pp.GPUs) {
				n := pp.GPUs[i+1]
				if n.Node != g.Node || n.Index != last+1 || gpuUsed(n) || gpuText(n) != text {
					break
				}
				i, last = i+1, n.Index
			}
			where := fmt.Sprintf("  %s/%d", g.Node, g.Index)
			if last != g.Index {
				where += fmt.Sprintf("-%d", last)
			}
			t.add("", "", where, "", "", text)
		}
	}
	t.notes = append(t.notes, "")
	t.notes = append(t.notes, "PLACEMENTS")
	for _, pl := range p.Placements {
		var devs []string
		for _, d := range pl.Devices {
			devs = append(devs, fmt.Sprintf("%s %s %dMiB/%d%%", d.Device, d.Mode, d.MemoryMiB, d.ComputePercent))
		}
		t.notes = append(t.notes, fmt.Sprintf("  %s[%d] (%s) -> %s", pl.Workload, pl.Replica, pl.Tenant, strings.Join(devs, ", ")))
	}
	for _, u := range p.Unplaced {
		t.notes = append(t.notes, fmt.Sprintf("  %s[%d] UNPLACED: %s", u.Workload, u.Replica, u.Reason))
	}
	c := p.Cost
	used := 0
	for _, pp := range p.Pools {
		used += pp.GPUsUsed
	}
	t.notes = append(t.notes, "", fmt.Sprintf("COST  %d GPUs bought (%d in use), $%.2f/h   dedicated whole GPUs: %d GPUs needed, $%.2f/h", c.GPUs, used, c.PerHour, c.DedicatedGPUs, c.DedicatedPerHour))
	if c.DedicatedPerHour > 0 && c.Known {
		switch saved := c.DedicatedPerHour - c.PerHour; {
		case saved >= 0.005:
			t.notes = append(t.notes, fmt.Sprintf("      saves $%.2f/h (%.0f%%)", saved, 100*saved/c.DedicatedPerHour))
		case saved > -0.005:
			t.notes = append(t.notes, fmt.Sprintf("      no saving at this size: nodes are bought whole, so dedicated whole GPUs cost the same; sharing leaves %d of the %d GPUs bought free for more replicas", c.GPUs-used, c.GPUs))
		default:
			t.notes = append(t.notes, fmt.Sprintf("      costs $%.2f/h more than dedicated whole GPUs", -saved))
		}
	}
	if !c.Known {
		t.notes = append(t.notes, "      some prices are unknown: totals cover priced pools only")
	}
	if c.PriceNote != "" {
		t.notes = append(t.notes, "      prices: "+c.PriceNote)
	}
	t.notes = append(t.notes, qualityNotes(p.Quality)...)
	for _, w := range p.Warnings {
		t.notes = append(t.notes, "warning: "+w)
	}
	return t
}

func gpuText(g plan.GPUPlan) string {
	if !g.MIG {
		return fmt.Sprintf("whole, %s: %s", sharingText(g.Sharing.Mode, g.Sharing.Replicas, g.Sharing.MaxClients), strings.Join(g.Claims, " "))
	}
	// Instances of one profile and sharing, all idle or all in use, are
	// collapsed into one part: "7× 1g.5gb idle", "2× 3g.20gb exclusive:
	// a-0 a-1"; a lone instance keeps its start ("3g.20gb@4 exclusive: a-0").
	// Every instance's start is in -o yaml and in PLACEMENTS.
	type group struct {
		profile, sharing string
		start, n         int
		claims           []string
		used             bool
	}
	var groups []*group
	for _, in := range g.Instances {
		sh, used := sharingText(in.Sharing.Mode, in.Sharing.Replicas, in.Sharing.MaxClients), len(in.Claims) > 0
		var gr *group
		for _, x := range groups {
			if x.profile == in.Profile && x.sharing == sh && x.used == used {
				gr = x
			}
		}
		if gr == nil {
			gr = &group{profile: in.Profile, sharing: sh, start: in.Start, used: used}
			groups = append(groups, gr)
		}
		gr.n++
		gr.claims = append(gr.claims, in.Claims...)
	}
	var parts []string
	for _, gr := range groups {
		name := fmt.Sprintf("%d× %s", gr.n, gr.profile)
		if gr.n == 1 {
			name = fmt.Sprintf("%s@%d", gr.profile, gr.start)
		}
		switch {
		case gr.used:
			parts = append(parts, fmt.Sprintf("%s %s: %s", name, gr.sharing, strings.Join(gr.claims, " ")))
		case gr.sharing == string(alloc.Dynamic):
			parts = append(parts, name+" idle")
		default:
			parts = append(parts, fmt.Sprintf("%s %s idle", name, gr.sharing))
		}
	}
	return "MIG " + strings.Join(parts, "; ")
}

// gpuUsed reports whether any claim is on the GPU.
func gpuUsed(g plan.GPUPlan) bool {
	if len(g.Claims) > 0 {
		return true
	}
	for _, in := range g.Instances {
		if len(in.Claims) > 0 {
			return true
		}
	}
	return false
}

func sharingText(mode any, replicas, clients int) string {
	switch fmt.Sprint(mode) {
	case "timeslice":
		return fmt.Sprintf("timeslice×%d", replicas)
	case "mps":
		return fmt.Sprintf("mps≤%d", clients)
	}
	return fmt.Sprint(mode)
}
