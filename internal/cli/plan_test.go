package cli

import (
	"strings"
	"testing"
)

// A MIG plan's table collapses repeated instances and idle GPUs, never
// prints an empty claim list, and says nothing is saved when nothing is.
func TestPlanMIGTableReadable(t *testing.T) {
	out := run("plan", "../../examples/compose-mig.yaml")
	for _, l := range strings.Split(out, "\n") {
		if len([]rune(l)) > 200 {
			t.Errorf("line of %d characters:\n%s", len([]rune(l)), l)
		}
	}
	for _, bad := range []string{"[]", "saves $0.00", "dynamic"} {
		if strings.Contains(out, bad) {
			t.Errorf("output contains %q:\n%s", bad, out)
		}
	}
	for _, want := range []string{"-0/1-7 ", "MIG 7× 1g.5gb idle", "5× 1g.5gb exclusive: gpuinfo-0", "no saving at this size", "8 GPUs bought (1 in use)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
