package cli

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/testkit"
)

// run executes the command tree with args and returns what a user sees:
// stdout, stderr and the error main would print.
func run(args ...string) string {
	var out, errOut bytes.Buffer
	cmd := New(&out, &errOut)
	cmd.SetArgs(args)
	err := cmd.Execute()
	var b strings.Builder
	b.WriteString("$ gpuslice " + strings.Join(args, " ") + "\n")
	b.WriteString(out.String())
	b.WriteString(errOut.String())
	if err != nil {
		b.WriteString("error: " + err.Error() + "\n")
	}
	return b.String()
}

// Each case's output is compared with testdata/NAME.golden; run with
// -update to rewrite them after an intended change, and review the diff.
func TestGolden(t *testing.T) {
	t.Parallel()
	cases := map[string][]string{
		"catalog-gpus":            {"catalog", "gpus"},
		"catalog-profiles-a100":   {"catalog", "profiles", "A100-40GB"},
		"catalog-profiles-nvml":   {"catalog", "profiles", "NVIDIA H100 80GB HBM3", "-o", "yaml"},
		"catalog-profiles-t4":     {"catalog", "profiles", "T4"},
		"catalog-instances-aws":   {"catalog", "instances", "--provider", "aws"},
		"catalog-instances-bad":   {"catalog", "instances", "--provider", "ibm"},
		"catalog-unknown-model":   {"catalog", "profiles", "A100-40G"},
		"mig-layouts-a100":        {"mig", "layouts", "A100-40GB"},
		"mig-layouts-a30-json":    {"mig", "layouts", "A30", "--with-me", "-o", "json"},
		"mig-place-h100":          {"mig", "place", "H100-80GB-SXM", "--have", "3g.40gb@0,1g.10gb@6", "--want", "2g.20gb"},
		"mig-place-nofit":         {"mig", "place", "H100-80GB-SXM", "--have", "3g.40gb@0,1g.10gb@4", "--want", "2g.20gb"},
		"mig-place-bad-profile":   {"mig", "place", "H100-80GB-SXM", "--want", "1g.5gb"},
		"mig-fit-nvidia-example":  {"mig", "fit", "A100-40GB", "3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"},
		"mig-fit-impossible":      {"mig", "fit", "A100-40GB", "4g.20gb", "4g.20gb", "1g.5gb"},
		"mig-fit-json":            {"mig", "fit", "A100-80GB", "3g.40gb", "1g.20gb", "1g.10gb", "-o", "json"},
		"mig-validate-overlap":    {"mig", "validate", "A100-40GB", "3g.20gb@0,1g.5gb@3,1g.5gb+me@5,1g.5gb+me@6"},
		"mig-validate-ok":         {"mig", "validate", "A100-40GB", "3g.20gb@4,2g.10gb@0,1g.5gb@2"},
		"mig-evict":               {"mig", "evict", "A100-40GB", "--have", "3g.20gb@0,1g.5gb@4,1g.5gb@5,1g.5gb@6", "--in-use", "3g.20gb@0", "--want", "3g.20gb"},
		"mig-evict-busy":          {"mig", "evict", "A100-40GB", "--have", "3g.20gb@0,1g.5gb@4", "--in-use", "3g.20gb@0,1g.5gb@4", "--want", "3g.20gb", "-o", "yaml"},
		"mig-non-mig-model":       {"mig", "layouts", "L4"},
		"bad-output-format":       {"catalog", "gpus", "-o", "xml"},
		"plan-seed-timeslicing":   {"plan", "../../examples/compose-timeslicing.yaml"},
		"plan-seed-mig":           {"plan", "../../examples/compose-mig.yaml"},
		"plan-example":            {"plan", "../../examples/gpuslice.yaml"},
		"plan-broken":             {"plan", "../spec/testdata/compose/broken.yaml"},
		"plan-unknown-format":     {"plan", "../../go.mod"},
		"render-karpenter":        {"render", "../../examples/gpuslice.yaml", "--target", "karpenter"},
		"dra-slices-g5":           {"dra", "slices", "--instance-type", "g5.xlarge"},
		"dra-slices-unknown":      {"dra", "slices", "--instance-type", "p4dd.24xlarge"},
		"dra-slices-simulate-too": {"dra", "slices", "--instance-type", "g5.xlarge", "--simulate", "dgx-a100"},
		"dra-slices-bad-provider": {"dra", "slices", "--provider", "ibm"},
		"render-karpenter-dra":    {"render", "../../examples/gpuslice.yaml", "--target", "karpenter", "--dra-driver", "gpuslice"},
		"render-bad-target":       {"render", "../../examples/gpuslice.yaml", "--target", "helm"},
		"advise-study":            {"advise", "../../examples/advise/study.yaml"},
		"advise-broken":           {"advise", "testdata/advise/broken.yaml"},
		"simulate-study":          {"simulate", "../../examples/advise/study.yaml", "--duration", "2d", "--seed", "3"},
		"simulate-bad-strategy":   {"simulate", "../../examples/advise/study.yaml", "--strategies", "advised,fair"},
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			testkit.Golden(t, filepath.Join("testdata", name+".golden"), []byte(run(args...)))
		})
	}
}
