package render

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// The karpenter target for gpuslice's claims: every input's NodePools
// are golden; each admits only instance types whose GPU serves its pool's
// claims (the pool's model for whole GPUs and shares, a GPU with the
// profile for MIG), always the planned one, and names no NVIDIA config
// label; without --dra-driver gpuslice the output is the plain target's.
func TestKarpenterForGpusliceClaims(t *testing.T) {
	cat := catalog.Default()
	for name, in := range goldenInputs {
		s, p := planFor(t, in)
		out, err := RenderWith("karpenter", s, p, Options{DRADriver: DRADriverGpuslice})
		if err != nil {
			t.Fatal(err)
		}
		testkit.Golden(t, filepath.Join("testdata", "golden", name+".karpenter-dra.yaml"), out)
		plain, err := RenderWith("karpenter", s, p, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := Render("karpenter", s, p); string(plain) != string(want) {
			t.Errorf("%s: the karpenter target without gpuslice's driver changed", name)
		}
		if !strings.Contains(string(out), "gpuslice dra slices --instance-type") || strings.Contains(string(out), devicePluginLabel) {
			t.Errorf("%s: header or labels wrong:\n%s", name, out)
		}
		pools := 0
		for _, doc := range strings.Split(string(out), "\n---\n")[1:] {
			var np struct {
				Spec struct {
					Template struct {
						Metadata struct{ Labels map[string]string }
						Spec     struct {
							Requirements []struct {
								Key    string
								Values []string
							}
						}
					}
				}
			}
			if err := yaml.Unmarshal([]byte(doc), &np); err != nil {
				t.Fatal(err)
			}
			pool := np.Spec.Template.Metadata.Labels["gpuslice.dev/pool"]
			if pool == "" || strings.HasSuffix(pool, "-warm") {
				continue
			}
			var its []string
			for _, r := range np.Spec.Template.Spec.Requirements {
				if r.Key == instanceTypeLabel {
					its = r.Values
				}
			}
			for i := range p.Pools {
				pp := &p.Pools[i]
				if pp.Name != pool {
					continue
				}
				pools++
				if !slices.Contains(its, pp.InstanceType) {
					t.Errorf("%s pool %s: %v lacks the planned %s", name, pool, its, pp.InstanceType)
				}
				for _, n := range its {
					it, err := cat.InstanceType(n)
					if err != nil {
						t.Fatal(err)
					}
					for _, pl := range p.Placements {
						if pl.Pool != pool {
							continue
						}
						for _, d := range pl.Devices {
							g, _ := cat.GPU(it.GPU)
							if d.Profile != "" && !slices.Contains(g.ProfileNames(), d.Profile) {
								t.Errorf("%s pool %s admits %s, whose %s has no %s", name, pool, n, it.GPU, d.Profile)
							}
							if d.Profile == "" && it.GPU != pp.GPU {
								t.Errorf("%s pool %s admits %s (%s) for a claim pinned to %s", name, pool, n, it.GPU, pp.GPU)
							}
						}
					}
				}
			}
		}
		if pools == 0 {
			t.Errorf("%s: no NodePool checked", name)
		}
	}
}
