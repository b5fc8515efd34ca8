package render

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
	"github.com/gpuslice/gpuslice/internal/plan"
)

// karpenterDRAHeader is the karpenter target's header for the claims of
// gpuslice's DRA driver (render --target karpenter --dra-driver gpuslice).
var karpenterDRAHeader = []string{
	"For the ResourceClaims of gpuslice's DRA driver (" + dranames.DriverName + ", render --target dra --dra-driver gpuslice):",
	"Karpenter (v1.15+) provisions for them only when (1) its cloud provider gives each instance type the devices",
	"gpuslice will publish there, as InstanceType.DynamicResources.ResourceSliceTemplates: the output of",
	"gpuslice dra slices --instance-type NAME (or --provider), or the Go package github.com/gpuslice/gpuslice/pkg/karpenterdra;",
	"no NodePool or NodeOverlay field can declare them; and (2) it runs with --ignore-dra-requests=false",
	"(IGNORE_DRA_REQUESTS=false; the default ignores pods with claims). It then counts shares of a GPU and MIG",
	"placements, not whole GPUs. Each NodePool admits only the instance types whose gpuslice devices serve its",
	"pool's claims; the limits count GPUs (nvidia.com/gpu in the instance types' capacity).",
}

// draInstanceTypes lists, in catalog order, the instance types of it's
// cloud whose gpuslice devices serve the claims the dra target writes for
// pool pp: a MIG claim selects its profile by name, so the GPU must have
// that profile; a whole GPU or a share of one is pinned to the pool's GPU
// model (gpusliceModelSelector); and a node must hold the most GPUs one
// replica uses. The planned instance type is always among them (the plan
// placed the claims there). The notes say why.
func draInstanceTypes(p *plan.Plan, pp *plan.PoolPlan, it *catalog.InstanceType, cat *catalog.Catalog) ([]string, []string, error) {
	model, err := cat.GPU(pp.GPU)
	if err != nil {
		return nil, nil, fmt.Errorf("pool %s: %w", pp.Name, err)
	}
	var profiles []string
	pinned := false
	gpusPerReplica := 1
	for _, pl := range p.Placements {
		if pl.Pool != pp.Name {
			continue
		}
		gpus := map[string]bool{}
		for _, d := range pl.Devices {
			gpus[d.Node+"/"+d.GPU] = true
			if d.Profile != "" {
				if !slices.Contains(profiles, d.Profile) {
					profiles = append(profiles, d.Profile)
				}
			} else {
				pinned = true
			}
		}
		gpusPerReplica = max(gpusPerReplica, len(gpus))
	}
	its, err := cat.InstanceTypes(it.Provider)
	if err != nil {
		return nil, nil, err
	}
	var out []string
	for _, c := range its {
		if c.GPUCount < gpusPerReplica || c.GPU == "" {
			continue
		}
		g, err := cat.GPU(c.GPU)
		if err != nil {
			continue
		}
		ok := !pinned || g.ID == model.ID
		for _, prof := range profiles {
			ok = ok && slices.Contains(g.ProfileNames(), prof)
		}
		if ok || strings.EqualFold(c.Name, it.Name) {
			out = append(out, c.Name)
		}
	}
	var why []string
	if pinned {
		why = append(why, "whole GPUs or shares of a GPU pinned to "+model.ID)
	}
	if len(profiles) > 0 {
		why = append(why, "MIG profile(s) "+strings.Join(profiles, ", "))
	}
	if len(why) == 0 {
		why = append(why, "no claims placed here")
	}
	notes := []string{fmt.Sprintf("admits %d instance type(s) whose gpuslice devices serve its claims (%s; at least %d GPU(s) per node)",
		len(out), strings.Join(why, "; "), gpusPerReplica)}
	return out, notes, nil
}
