package render

import (
	"fmt"
	"sort"
	"strings"

	"github.com/gpuslice/gpuslice/internal/model"
	"github.com/gpuslice/gpuslice/internal/plan"
)

// Target writes one kind of artifact.
type Target func(s *model.Spec, p *plan.Plan) ([]byte, error)

// targets maps a target name to its writer (read-only after init).
var targets = map[string]Target{}

func register(name string, t Target) { targets[name] = t }

// Targets lists the target names.
func Targets() []string {
	out := make([]string, 0, len(targets))
	for k := range targets {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Render writes the named target.
func Render(target string, s *model.Spec, p *plan.Plan) ([]byte, error) {
	t, ok := targets[target]
	if !ok {
		return nil, fmt.Errorf("unknown render target %q; valid: %s", target, strings.Join(Targets(), ", "))
	}
	return t(s, p)
}
