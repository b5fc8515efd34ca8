package render

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/model"
	"github.com/gpuslice/gpuslice/internal/plan"
)

// obj is a Kubernetes object as nested maps; sigs.k8s.io/yaml writes its
// keys in order, so output is stable.
type obj = map[string]any

// documents writes objects as a multi-document YAML stream, each preceded
// by its comment lines.
func documents(header []string, objs []obj, comments [][]string) ([]byte, error) {
	var b bytes.Buffer
	for _, h := range header {
		b.WriteString("# " + h + "\n")
	}
	for i, o := range objs {
		if i > 0 || len(header) > 0 {
			b.WriteString("---\n")
		}
		if i < len(comments) {
			for _, c := range comments[i] {
				b.WriteString("# " + c + "\n")
			}
		}
		y, err := yaml.Marshal(o)
		if err != nil {
			return nil, err
		}
		b.Write(y)
	}
	return b.Bytes(), nil
}

var notDNS = regexp.MustCompile(`[^a-z0-9-]+`)

// dnsName makes a Kubernetes object name (RFC 1123 label) from any string.
func dnsName(s string) string {
	n := notDNS.ReplaceAllString(strings.ToLower(s), "-")
	n = strings.Trim(n, "-")
	if len(n) > 63 {
		n = strings.TrimRight(n[:63], "-")
	}
	if n == "" {
		n = "x"
	}
	return n
}

// workloadModes is the mode each request of a workload got in the plan
// (from its first placed replica), and whether replicas disagree.
func workloadModes(p *plan.Plan, wl *model.Workload) (map[string]alloc.Assigned, bool) {
	out := map[string]alloc.Assigned{}
	mixed := false
	for _, pl := range p.Placements {
		if pl.Workload != wl.Name {
			continue
		}
		for _, d := range pl.Devices {
			if prev, ok := out[d.Request]; ok {
				mixed = mixed || prev.Mode != d.Mode || prev.Profile != d.Profile
				continue
			}
			out[d.Request] = d
		}
	}
	return out, mixed
}

// poolOf returns the pool a workload's replicas landed in.
func poolOf(p *plan.Plan, wl *model.Workload) *plan.PoolPlan {
	name := wl.Pool
	if name == "" {
		for _, pl := range p.Placements {
			if pl.Workload == wl.Name {
				name = pl.Pool
				break
			}
		}
	}
	for i := range p.Pools {
		if p.Pools[i].Name == name {
			return &p.Pools[i]
		}
	}
	return nil
}

func quantityMiB(mib int64) string { return fmt.Sprintf("%dMi", mib) }

func tenantNamespace(t string) string { return dnsName(t) }
