package spec

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// sizeUnits maps a memory suffix to MiB. Binary units (GiB, Gi) are powers
// of 1024; decimal ones (GB, G) are powers of 1000, converted and rounded
// down to whole MiB, as Kubernetes quantities are.
var sizeUnits = []struct {
	suffix string
	mib    float64
}{
	{"TiB", 1 << 20}, {"Ti", 1 << 20}, {"GiB", 1 << 10}, {"Gi", 1 << 10}, {"MiB", 1}, {"Mi", 1},
	{"KiB", 1.0 / 1024}, {"Ki", 1.0 / 1024},
	{"TB", 1e12 / (1 << 20)}, {"T", 1e12 / (1 << 20)}, {"GB", 1e9 / (1 << 20)}, {"G", 1e9 / (1 << 20)},
	{"MB", 1e6 / (1 << 20)}, {"M", 1e6 / (1 << 20)}, {"KB", 1e3 / (1 << 20)}, {"K", 1e3 / (1 << 20)}, {"k", 1e3 / (1 << 20)},
}

// sizeHint says which forms ParseMemoryMiB accepts.
const sizeHint = "write a size such as 10GiB, 512MiB, 8G, 1.5Gi, or a whole number of MiB"

// ParseMemoryMiB reads a memory size: a number with a unit (GiB, MiB, Gi,
// Mi, GB, G, ...) or a bare whole number of MiB.
func ParseMemoryMiB(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("empty size; %s", sizeHint)
	}
	num, mib := t, 1.0
	for _, u := range sizeUnits {
		if rest, ok := strings.CutSuffix(t, u.suffix); ok {
			num, mib = strings.TrimSpace(rest), u.mib
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%q is not a size; %s", s, sizeHint)
	}
	if v < 0 {
		return 0, fmt.Errorf("%q is negative", s)
	}
	out := v * mib
	if out > 1<<40 {
		return 0, fmt.Errorf("%q is larger than any GPU", s)
	}
	return int64(out), nil
}
