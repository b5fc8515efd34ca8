package quantity

import (
	"strconv"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	good := []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"1", 1},
		{"10Gi", 10 << 30},
		{"500M", 500_000_000},
		{"1.5Gi", 3 << 29},
		{"0.5Mi", 1 << 19},
		{".5Ki", 512},
		{"1.Ki", 1024},
		{"1Ki", 1024},
		{"2Ti", 2 << 40},
		{"1Pi", 1 << 50},
		{"1Ei", 1 << 60},
		{"4k", 4000},
		{"3G", 3_000_000_000},
		{"1T", 1_000_000_000_000},
		{"1P", 1_000_000_000_000_000},
		{"2E", 2_000_000_000_000_000_000},
		{"2e3", 2000},
		{"1E3", 1000},
		{"5e+2", 500},
		{"1500e-3", 2}, // 1.5 rounds up
		{"100m", 1},    // 0.1 rounds up, as Quantity.Value does
		{"1500m", 2},
		{"7n", 1},
		{"3u", 1},
		{"+4k", 4000},
		{"-1Ki", -1024},
		{"-1500m", -2}, // away from zero
		{"1.000001Ki", 1025},
	}
	for _, c := range good {
		got, err := Parse(c.in)
		if err != nil || got != c.want {
			t.Errorf("Parse(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	bad := []struct{ in, msg string }{
		{"", "empty"},
		{"Gi", "does not start with a number"},
		{"-", "does not start with a number"},
		{".", "does not start with a number"},
		{"5G1", `unknown suffix "G1"`},
		{"5G1", `did you mean "5Gi"?`},
		{"5Gl", `did you mean "5Gi"?`},
		{"5GB", `did you mean "5Gi" or "5G"?`},
		{"5GiB", `did you mean "5Gi"?`},
		{"5K", `did you mean "5Ki" or "5k"?`},
		{"1.2.3", "unknown suffix"},
		{"10 Gi", "unknown suffix"},
		{"1e", "unknown suffix"},
		{"1e99", "unknown suffix"},
		{"1gi", "unknown suffix"},
		{"9Ei", "too large"},
		{"10000000000000000000", "too large"},
		{strings.Repeat("1", 80), "at most 64"},
	}
	for _, c := range bad {
		_, err := Parse(c.in)
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("Parse(%q) error = %v; want it to say %q", c.in, err, c.msg)
		}
	}
}

// FuzzParse: any text gets a value or an error, never a panic; the two
// parsers agree; a value round-trips through its plain decimal form.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"10Gi", "1.5Gi", "500M", "2e3", "-1500m", "5GB", "9Ei", ".", "1e-30"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := Parse(s)
		bare, berr := ParseBare(s)
		if (err == nil) != (berr == nil) || v != bare {
			t.Fatalf("Parse(%q) = %d, %v; ParseBare = %d, %v", s, v, err, bare, berr)
		}
		if err != nil {
			return
		}
		again, err := Parse(strconv.FormatInt(v, 10))
		if err != nil || again != v {
			t.Fatalf("%q = %d, but %d reads back as %d, %v", s, v, v, again, err)
		}
	})
}
