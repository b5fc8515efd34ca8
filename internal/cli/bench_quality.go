package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuslice/gpuslice/internal/model"
	"github.com/gpuslice/gpuslice/internal/plan"
	"github.com/gpuslice/gpuslice/internal/plan/plantest"
)

// qualityRow is one heuristic against the planner over the generated specs.
type qualityRow struct {
	Heuristic string `json:"heuristic"`
	// Placed counts the specs where the heuristic placed every replica
	// (only those are compared).
	Placed int `json:"placed"`
	// Wins, Ties and Losses count specs where the planner used fewer,
	// as many or more GPUs than the heuristic; Own* the same for the
	// planner's own order alone (the planner before it tried others).
	Wins      int `json:"wins"`
	Ties      int `json:"ties"`
	Losses    int `json:"losses"`
	OwnWins   int `json:"ownWins"`
	OwnTies   int `json:"ownTies"`
	OwnLosses int `json:"ownLosses"`
}

type qualityReport struct {
	Mix         string       `json:"mix"`
	FirstSeed   int          `json:"firstSeed"`
	Specs       int          `json:"specs"`
	MaxReplicas int          `json:"maxReplicas"`
	Rows        []qualityRow `json:"rows"`
	// Optimal counts the plans proved optimal (GPUs == lower bound);
	// OwnOptimal the same for the planner's own order alone.
	Optimal    int `json:"optimal"`
	OwnOptimal int `json:"ownOptimal"`
	// MeanGap is the mean of (GPUs − bound) ÷ bound over plans that
	// placed everything; Seconds and OwnSeconds the planning time in all.
	MeanGap    float64 `json:"meanGap"`
	Seconds    float64 `json:"seconds"`
	OwnSeconds float64 `json:"ownSeconds"`
	// Unplaced counts the specs whose plan leaves replicas out.
	Unplaced int `json:"unplaced"`
}

func benchPlanQualityCmd(e *env) *cobra.Command {
	var specs, maxReplicas, firstSeed int
	var mix string
	cmd := &cobra.Command{
		Use:   "plan-quality",
		Short: "GPUs `gpuslice plan` uses on random specs against first-fit-decreasing heuristics and its lower bound",
		Long: `Draws random specs (internal/plan/plantest.RandomSpec: models with and without MIG,
every sharing mode, 1-200 tenants, priorities, quotas, constraints, several pools,
maxNodes), plans each, and compares the GPUs holding work with first-fit decreasing under
each sort key (memory, compute, max, sum, product; priority first or not; MIG instance
caps; priority-first orders only on specs where the plan leaves replicas out, since
priorities change a plan only when capacity is short) placed alone through the same
allocator: wins, ties and losses, for the plan and for
the planner's own order alone (as before it tried others); and how many plans are proved
optimal against the lower bound.

--mix h100-mig-beside-whole draws plantest.MIGBesideWholeSpec instead: 2-4 pools of H100
nodes, the first with dynamic MIG, the second with MIG off, workloads pinned to either or
free; its seeds are a stream the planner was not tuned on (held out).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			draw, ok := qualityMixes[mix]
			if !ok {
				return fmt.Errorf("--mix %q: want one of random, h100-mig-beside-whole", mix)
			}
			if specs < 1 || firstSeed < 1 {
				return fmt.Errorf("--specs %d, --first-seed %d: want both at least 1", specs, firstSeed)
			}
			rep := qualityReport{Mix: mix, FirstSeed: firstSeed, Specs: specs, MaxReplicas: maxReplicas}
			rows := map[string]*qualityRow{}
			var order []string
			gaps := 0
			for seed := firstSeed; seed < firstSeed+specs; seed++ {
				s := draw(uint64(seed), maxReplicas)
				t0 := time.Now()
				p, err := plan.Make(s, plan.Options{})
				if err != nil {
					return fmt.Errorf("spec %d: %w", seed, err)
				}
				rep.Seconds += time.Since(t0).Seconds()
				t0 = time.Now()
				own, err := plan.Make(s, plan.Options{Quality: plan.QualityOptions{OwnOnly: true}})
				if err != nil {
					return fmt.Errorf("spec %d: %w", seed, err)
				}
				rep.OwnSeconds += time.Since(t0).Seconds()
				got, mine := p.Quality.GPUs, own.Quality.GPUs
				if len(p.Unplaced) > 0 {
					rep.Unplaced++
				} else {
					gaps++
					rep.MeanGap += p.Quality.Gap
				}
				if p.Quality.Optimal {
					rep.Optimal++
				}
				if own.Quality.Optimal {
					rep.OwnOptimal++
				}
				for _, h := range plan.Heuristics(s) {
					name := h.String()
					r := rows[name]
					if r == nil {
						r = &qualityRow{Heuristic: name}
						rows[name] = r
						order = append(order, name)
					}
					g, left, err := plan.HeuristicGPUs(s, h)
					if err != nil {
						return fmt.Errorf("spec %d, %s: %w", seed, name, err)
					}
					if left > 0 || (h.Priority && len(p.Unplaced) == 0) {
						// A priority-first order is compared only where
						// capacity is short: when everything fits,
						// priorities do not change a plan.
						continue
					}
					r.Placed++
					tally(len(p.Unplaced) == 0, got, g, &r.Wins, &r.Ties, &r.Losses)
					tally(len(own.Unplaced) == 0, mine, g, &r.OwnWins, &r.OwnTies, &r.OwnLosses)
				}
			}
			if gaps > 0 {
				rep.MeanGap /= float64(gaps)
			}
			t := &table{header: []string{"HEURISTIC", "SPECS PLACED", "PLAN WINS", "TIES", "LOSSES", "OWN ORDER WINS", "TIES", "LOSSES"}}
			for _, name := range order {
				r := rows[name]
				rep.Rows = append(rep.Rows, *r)
				t.add(r.Heuristic, r.Placed, r.Wins, r.Ties, r.Losses, r.OwnWins, r.OwnTies, r.OwnLosses)
			}
			t.notes = append(t.notes,
				fmt.Sprintf("%d specs of up to %d replicas (%s seeds %d-%d); %d leave replicas unplaced (capacity short)", specs, maxReplicas, qualityMixNames[mix], firstSeed, firstSeed+specs-1, rep.Unplaced),
				fmt.Sprintf("proved optimal: plan %d, own order alone %d; mean gap to the lower bound %.1f%%", rep.Optimal, rep.OwnOptimal, 100*rep.MeanGap),
				fmt.Sprintf("planning time in all: plan %.2fs, own order alone %.2fs", rep.Seconds, rep.OwnSeconds),
				"A heuristic is compared only on specs where it placed every replica (a priority-first one only where the plan left replicas out); a loss is a spec where it used fewer GPUs (or the plan left replicas out).")
			return e.render(t, rep)
		},
	}
	cmd.Flags().IntVar(&specs, "specs", 200, "random specs to draw (seeds first-seed..first-seed+N-1)")
	cmd.Flags().IntVar(&firstSeed, "first-seed", 1, "seed of the first spec")
	cmd.Flags().StringVar(&mix, "mix", "random", "spec generator: random (plantest.RandomSpec) or h100-mig-beside-whole (plantest.MIGBesideWholeSpec, held out)")
	cmd.Flags().IntVar(&maxReplicas, "max-replicas", 200, "most replicas in a spec")
	return cmd
}

// qualityMixes are the spec generators of bench plan-quality.
var qualityMixes = map[string]func(seed uint64, maxReplicas int) *model.Spec{
	"random":                plantest.RandomSpec,
	"h100-mig-beside-whole": plantest.MIGBesideWholeSpec,
}

var qualityMixNames = map[string]string{"random": "plantest.RandomSpec", "h100-mig-beside-whole": "plantest.MIGBesideWholeSpec"}

// tally counts one comparison: the plan (placed all or not, GPUs) against
// a heuristic that placed every replica on h GPUs.
func tally(placedAll bool, got, h int, wins, ties, losses *int) {
	switch {
	case !placedAll || got > h:
		*losses++
	case got < h:
		*wins++
	default:
		*ties++
	}
}
