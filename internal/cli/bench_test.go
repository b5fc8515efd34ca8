package cli

import (
	"strings"
	"testing"
)

// bench packing's table is followed by a legend naming every column.
func TestBenchPackingLegend(t *testing.T) {
	out := run("bench", "packing", "--seeds", "1", "--mix", "inference-l4")
	lines := strings.Split(out, "\n")
	if len(lines) < 3 || !strings.HasPrefix(lines[1], "mix ") {
		t.Fatalf("no table:\n%s", out)
	}
	legend := map[string]bool{}
	for _, l := range lines[2:] {
		if strings.HasPrefix(l, "  ") {
			if f := strings.Fields(l); len(f) > 1 {
				legend[f[0]] = true
			}
		}
	}
	for _, col := range strings.Fields(lines[1]) {
		if !legend[col] {
			t.Errorf("column %s is not explained:\n%s", col, out)
		}
	}
	if !strings.Contains(out, "(4 over)") || !strings.Contains(out, `"N(k over)": N GPUs, k of them`) {
		t.Errorf("the overcommit cell is not explained:\n%s", out)
	}
}
