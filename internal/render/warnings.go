package render

import (
	"github.com/gpuslice/gpuslice/internal/model"
	"github.com/gpuslice/gpuslice/internal/plan"
)

// warners maps a target to what it cannot express of a plan (read-only
// after init).
var warners = map[string]func(*model.Spec, *plan.Plan) []string{}

func registerWarnings(target string, f func(*model.Spec, *plan.Plan) []string) { warners[target] = f }

// Warnings lists what the named target cannot express of the plan (a
// tenant isolation or same-GPU constraint Kubernetes cannot keep, a shared
// device a claim cannot reach): the same sentences its output carries as
// WARNING comments, for the CLI to print on stderr. Nil for targets that
// have none.
func Warnings(target string, s *model.Spec, p *plan.Plan) []string {
	if f, ok := warners[target]; ok {
		return f(s, p)
	}
	return nil
}
