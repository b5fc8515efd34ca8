package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpuslice/gpuslice/internal/mig"
)

func migCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mig",
		Short: "Answer MIG geometry questions: validate, layouts, place, fit, evict",
		Long: `Answer MIG geometry questions with explicit placements. A layout is
written PROFILE@START,... where START is the first memory slice, as
nvidia-smi mig -lgipp counts them: "3g.40gb@0,1g.10gb@4".`,
	}
	cmd.AddCommand(migValidateCmd(e), migLayoutsCmd(e), migPlaceCmd(e), migFitCmd(e), migEvictCmd(e))
	return cmd
}

func migValidateCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:               "validate MODEL LAYOUT",
		Short:             "Check a layout; every problem is named with the instances involved",
		Example:           "  gpuslice mig validate A100-40GB 3g.20gb@0,1g.5gb@3",
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: completeModels(e, true),
		RunE: func(cmd *cobra.Command, args []string) error {
			g, err := geometryOf(e, args[0])
			if err != nil {
				return err
			}
			l, err := mig.ParseLayout(args[1])
			if err != nil {
				return err
			}
			o, err := g.Occupancy(l)
			if err != nil {
				return err
			}
			res := struct {
				Model         string     `json:"model"`
				Layout        mig.Layout `json:"layout"`
				Valid         bool       `json:"valid"`
				UsedSlices    int        `json:"usedMemorySlices"`
				Capacity      int        `json:"capacity"`
				Fragmentation float64    `json:"fragmentation"`
			}{g.Model, l, true, o.Used(), g.Capacity(o), g.Fragmentation(o)}
			t := &table{notes: []string{fmt.Sprintf("valid: %s on %s uses %d of %d memory slices; capacity %d, fragmentation %.2f",
				l, g.Model, o.Used(), g.Slices, res.Capacity, res.Fragmentation)}}
			return e.render(t, res)
		},
	}
}

func migLayoutsCmd(e *env) *cobra.Command {
	var withME bool
	cmd := &cobra.Command{
		Use:               "layouts MODEL",
		Short:             "Enumerate every maximal layout (no further instance fits) of a model",
		Example:           "  gpuslice mig layouts A100-40GB\n  gpuslice mig layouts H100-80GB-SXM --with-me -o yaml",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeModels(e, true),
		RunE: func(cmd *cobra.Command, args []string) error {
			g, err := geometryOf(e, args[0])
			if err != nil {
				return err
			}
			layouts := g.MaximalLayouts(withME)
			t := &table{header: []string{"#", "PROFILES", "PLACEMENT", "INSTANCES"}}
			for i, l := range layouts {
				t.add(i+1, profilesOf(l), l.Sorted(), len(l))
			}
			t.notes = append(t.notes, fmt.Sprintf("%d maximal layouts on %s (+me profiles %s)", len(layouts), g.Model, map[bool]string{true: "included", false: "excluded; add --with-me"}[withME]))
			return e.render(t, layouts)
		},
	}
	cmd.Flags().BoolVar(&withME, "with-me", false, "include +me (media extension) profiles")
	return cmd
}

func migPlaceCmd(e *env) *cobra.Command {
	var have, want string
	cmd := &cobra.Command{
		Use:   "place MODEL --want PROFILE [--have LAYOUT]",
		Short: "Choose the explicit start for a new instance that keeps the most capacity free",
		Long: `Choose the start slice for a new instance of --want next to the
instances in --have. Among the starts that fit, the one that keeps the GPU's
capacity highest wins: capacity is the sum over profiles of (memory slices ×
how many more of that profile still fit).`,
		Example:           "  gpuslice mig place H100-80GB-SXM --have 3g.40gb@0,1g.10gb@4 --want 2g.20gb",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeModels(e, true),
		RunE: func(cmd *cobra.Command, args []string) error {
			g, err := geometryOf(e, args[0])
			if err != nil {
				return err
			}
			l, err := mig.ParseLayout(have)
			if err != nil {
				return fmt.Errorf("--have: %w", err)
			}
			p, err := g.Place(l, want)
			if mig.IsNoFit(err) && len(l) > 0 {
				return fmt.Errorf("%w\nhint: if some of these instances are idle, 'gpuslice mig evict %s --have %s --in-use LAYOUT --want %s' finds the cheapest to destroy", err, g.Model, l, want)
			}
			if err != nil {
				return err
			}
			t := &table{header: []string{"PLACE", "LAYOUT AFTER", "CAPACITY AFTER", "FRAGMENTATION AFTER"}}
			t.add(p.Instance, append(l, p.Instance).Sorted(), p.Capacity, fmt.Sprintf("%.2f", p.Fragmentation))
			return e.render(t, p)
		},
	}
	cmd.Flags().StringVar(&have, "have", "", "instances already on the GPU, PROFILE@START,...")
	cmd.Flags().StringVar(&want, "want", "", "profile to place (required)")
	_ = cmd.MarkFlagRequired("want")
	return cmd
}

func migFitCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "fit MODEL PROFILE...",
		Short: "Find explicit placements and a creation order for a multiset of profiles, or prove none exists",
		Example: "  gpuslice mig fit A100-40GB 3g.20gb 2g.10gb 1g.5gb 1g.5gb\n" +
			"  gpuslice mig fit A100-40GB 3g.20gb 2g.10gb 2g.10gb 1g.5gb   # impossible, and says why",
		Args:              cobra.MinimumNArgs(2),
		ValidArgsFunction: completeModels(e, true),
		RunE: func(cmd *cobra.Command, args []string) error {
			g, err := geometryOf(e, args[0])
			if err != nil {
				return err
			}
			res, err := g.Fit(args[1:])
			if err != nil {
				return err
			}
			t := &table{header: []string{"STEP", "CREATE", "START", "SLICES"}}
			for i, in := range res.Layout {
				p, _ := g.Profile(in.Profile)
				t.add(i+1, in.Profile, in.Start, fmt.Sprintf("%d-%d", in.Start, in.Start+g.Shapes[p].Size-1))
			}
			t.notes = append(t.notes, fmt.Sprintf("layout %s; capacity left %d, fragmentation %.2f", res.Layout, res.Capacity, res.Fragmentation))
			return e.render(t, res)
		},
	}
}

func migEvictCmd(e *env) *cobra.Command {
	var have, inUse, want string
	cmd := &cobra.Command{
		Use:   "evict MODEL --have LAYOUT --in-use LAYOUT --want PROFILE",
		Short: "Find the cheapest idle instances to destroy so a profile fits (never an in-use one)",
		Example: "  gpuslice mig evict A100-40GB --have 3g.20gb@0,1g.5gb@4,1g.5gb@5,1g.5gb@6 \\\n" +
			"      --in-use 3g.20gb@0 --want 3g.20gb",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeModels(e, true),
		RunE: func(cmd *cobra.Command, args []string) error {
			g, err := geometryOf(e, args[0])
			if err != nil {
				return err
			}
			l, err := mig.ParseLayout(have)
			if err != nil {
				return fmt.Errorf("--have: %w", err)
			}
			busy, err := mig.ParseLayout(inUse)
			if err != nil {
				return fmt.Errorf("--in-use: %w", err)
			}
			held := make([]mig.Held, len(l))
			for i, in := range l {
				held[i] = mig.Held{Instance: in}
			}
			for _, b := range busy {
				found := false
				for i := range held {
					if strings.EqualFold(held[i].Profile, b.Profile) && held[i].Start == b.Start {
						held[i].InUse, found = true, true
					}
				}
				if !found {
					return fmt.Errorf("--in-use: %s is not in --have %s", b, l)
				}
			}
			plan, err := g.Evict(held, want)
			if err != nil {
				return err
			}
			t := &table{header: []string{"DESTROY", "THEN PLACE", "CAPACITY AFTER"}}
			destroy := mig.Layout(plan.Destroy).String()
			if destroy == "" {
				destroy = "(nothing)"
			}
			t.add(destroy, plan.Place, plan.Capacity)
			return e.render(t, plan)
		},
	}
	cmd.Flags().StringVar(&have, "have", "", "instances on the GPU, PROFILE@START,...")
	cmd.Flags().StringVar(&inUse, "in-use", "", "the instances of --have that workloads are using")
	cmd.Flags().StringVar(&want, "want", "", "profile to make room for (required)")
	_ = cmd.MarkFlagRequired("want")
	return cmd
}

func profilesOf(l mig.Layout) string {
	names := make([]string, len(l))
	for i, in := range l {
		names[i] = in.Profile
	}
	return strings.Join(names, " + ")
}
