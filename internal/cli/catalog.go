package cli

import (
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/mig"
)

func catalogCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "catalog",
		Short: "Show the built-in facts: GPU models, MIG profiles, cloud instance types",
		Long: `Show the built-in facts gpuslice plans and allocates with. Every fact
carries its source and a confidence label (verified, inferred, unconfirmed,
secondary, unknown); unknown facts are shown as "-", never guessed.`,
	}
	cmd.AddCommand(catalogGPUsCmd(e), catalogProfilesCmd(e), catalogInstancesCmd(e), catalogSourcesCmd(e))
	return cmd
}

func catalogGPUsCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "gpus",
		Short: "List GPU models",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			gpus := e.catalog.GPUs()
			t := &table{header: []string{"ID", "NAME", "ARCH", "CC", "MEMORY", "SMS", "MIG", "CONFIDENCE"}}
			for _, g := range gpus {
				migText := "no"
				if g.MIG != nil {
					migText = fmt.Sprintf("%d instances", g.MIG.MaxInstances)
				}
				t.add(g.ID, g.Name, g.Arch, g.ComputeCapability, mib(g.MemoryMiB), orDash(g.SMs), migText, confidenceText(&g))
			}
			t.notes = append(t.notes, confidenceLegend...)
			return e.render(t, gpus)
		},
	}
}

// confidenceText is a model's CONFIDENCE column: its MIG facts (profile
// ids and placements, what gpuslice acts on, as catalog profiles shows
// them) and its spec figures (SMs, TFLOPS, bandwidth, TDP, memory: the
// weakest of them) each with their own label — one label for both would
// call the A100's verified MIG table unconfirmed, or its datasheet
// figures verified.
func confidenceText(g *catalog.GPU) string {
	specs := "specs " + string(g.Confidence)
	if g.MIG == nil {
		return specs
	}
	m := g.MIG
	if m.ProfileIDConfidence == m.PlacementConfidence {
		return fmt.Sprintf("MIG %s, %s", m.PlacementConfidence, specs)
	}
	return fmt.Sprintf("MIG ids %s, placements %s, %s", m.ProfileIDConfidence, m.PlacementConfidence, specs)
}

// confidenceLegend says what each confidence label means (see
// internal/catalog's package documentation).
var confidenceLegend = []string{
	"CONFIDENCE says how far a model's facts are checked: its MIG facts (profile ids and placements, as",
	"catalog profiles MODEL shows them) and its spec figures (the weakest of SMs, TFLOPS, bandwidth, TDP, memory):",
	"  verified     from a primary source: an NVIDIA document, NVIDIA source code or real nvidia-smi output",
	"  inferred     derived from verified facts about a sister part (e.g. H200 placements from H100)",
	"  unconfirmed  a datasheet value not yet checked against a primary source",
	"  secondary    taken from a third-party page or repository",
	"  unknown      no source gives the fact; it is shown as \"-\", never guessed",
	"Sources: gpuslice catalog sources.",
}

func catalogProfilesCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:               "profiles MODEL",
		Short:             "List a model's MIG profiles with their placements",
		Example:           "  gpuslice catalog profiles A100-40GB\n  gpuslice catalog profiles 'NVIDIA H100 80GB HBM3' -o json",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeModels(e, true),
		RunE: func(cmd *cobra.Command, args []string) error {
			g, err := migModel(e, args[0])
			if err != nil {
				return err
			}
			t := &table{header: []string{"PROFILE", "GI-ID", "MEMORY", "SMS", "SLICES(MEM/SM)", "MAX", "PLACEMENTS", "SOURCE"}}
			for _, p := range g.MIG.Profiles {
				memText := mib(p.MemoryMiB)
				if p.MemoryEstimated {
					memText += " (est.)"
				}
				t.add(p.Name, idOrDash(p.GIProfileID), memText, orDash(p.SMs),
					fmt.Sprintf("%d/%d", p.MemorySlices, p.ComputeSlices), p.MaxCount,
					placementText(p.Placement), p.Source)
			}
			t.notes = append(t.notes, fmt.Sprintf("%s: %d memory slices, %d compute slices, at most %d instances; IDs %s, placements %s.",
				g.ID, g.MIG.MemorySlices, g.MIG.ComputeSlices, g.MIG.MaxInstances, g.MIG.ProfileIDConfidence, g.MIG.PlacementConfidence))
			return e.render(t, g.MIG)
		},
	}
}

func catalogInstancesCmd(e *env) *cobra.Command {
	var provider, gpuName string
	cmd := &cobra.Command{
		Use:     "instances",
		Short:   "List cloud instance types with GPUs and their on-demand prices",
		Example: "  gpuslice catalog instances --provider aws\n  gpuslice catalog instances --gpu A100-40GB",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			its, err := e.catalog.InstanceTypes(provider)
			if err != nil {
				return err
			}
			if gpuName != "" {
				g, err := e.catalog.GPU(gpuName)
				if err != nil {
					return err
				}
				var keep []catalog.InstanceType
				for _, it := range its {
					if it.GPU == g.ID {
						keep = append(keep, it)
					}
				}
				its = keep
			}
			t := &table{header: []string{"PROVIDER", "NAME", "GPU", "GPUS", "VCPU", "MEMORY", "USD/H", "PRICE DATE", "REGION"}}
			for _, it := range its {
				price, date, region := "unknown", "-", "-"
				if it.Price != nil {
					price = fmt.Sprintf("%.4f", it.Price.USDPerHour)
					date, region = orDashS(it.Price.Date), orDashS(it.Price.Region)
				}
				t.add(it.Provider, it.Name, it.GPU, it.GPUCount, it.VCPU, fmt.Sprintf("%g GiB", it.MemoryGiB), price, date, region)
			}
			if its == nil {
				its = []catalog.InstanceType{}
			}
			return e.render(t, its)
		},
	}
	cmd.Flags().StringVar(&provider, "provider", "", "only this cloud: aws, azure or gcp")
	cmd.Flags().StringVar(&gpuName, "gpu", "", "only instance types with this GPU model")
	_ = cmd.RegisterFlagCompletionFunc("provider", cobra.FixedCompletions([]string{"aws", "azure", "gcp"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func catalogSourcesCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "sources",
		Short: "List the sources the catalog's facts cite",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			src := e.catalog.Sources()
			keys := make([]string, 0, len(src))
			for k := range src {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			t := &table{header: []string{"KEY", "SOURCE"}}
			for _, k := range keys {
				t.add(k, src[k])
			}
			return e.render(t, src)
		},
	}
}

// migModel resolves a model name and insists that it supports MIG, naming
// the models that do when it does not.
func migModel(e *env, name string) (*catalog.GPU, error) {
	g, err := e.catalog.GPU(name)
	if err != nil {
		return nil, err
	}
	if g.MIG == nil {
		var ids []string
		for _, m := range e.catalog.GPUs() {
			if m.MIG != nil {
				ids = append(ids, m.ID)
			}
		}
		return nil, fmt.Errorf("%s does not support MIG; MIG-capable models: %s", g.ID, strings.Join(ids, ", "))
	}
	return g, nil
}

func geometryOf(e *env, name string) (*mig.Geometry, error) {
	g, err := migModel(e, name)
	if err != nil {
		return nil, err
	}
	return mig.New(g)
}

func placementText(p catalog.Placement) string {
	parts := make([]string, len(p.Starts))
	for i, s := range p.Starts {
		parts[i] = fmt.Sprint(s)
	}
	return "{" + strings.Join(parts, ",") + "}:" + fmt.Sprint(p.Size)
}

func mib(v int64) string {
	if v <= 0 {
		return "-"
	}
	return fmt.Sprintf("%d MiB", v)
}

// orDash prints a count, or "-" for 0 (unknown).
func orDash(v int) string {
	if v <= 0 {
		return "-"
	}
	return fmt.Sprint(v)
}

// idOrDash prints an id, or "-" for -1 (unknown); 0 is a valid id.
func idOrDash(v int) string {
	if v < 0 {
		return "-"
	}
	return fmt.Sprint(v)
}

func orDashS(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
