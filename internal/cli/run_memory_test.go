package cli

import (
	"strings"
	"testing"
)

// --memory needs a unit: a bare number is refused, not read as MiB.
func TestRunMemoryFlagNeedsAUnit(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  string
	}{
		{"10GiB", 10240, ""}, {"512MiB", 512, ""}, {"1.5Gi", 1536, ""},
		{"10", 0, `"10" has no unit: write 10GiB or 10MiB`}, {" 4 ", 0, "has no unit"}, {"1e3", 0, "has no unit"},
	} {
		got, err := flagMemoryMiB(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v, want an error with %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %d %v, want %d", tc.in, got, err, tc.want)
		}
	}
}
