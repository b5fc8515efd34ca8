package schedcore

import (
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/admit"
)

// QuotaOf reads any annotation values without panicking: an error names
// the annotation and what would be valid; a quota read has every limit
// at least 0 or admit.NoLimit.
func FuzzQuotaOf(f *testing.F) {
	for _, s := range [][2]string{{"40Gi", "250"}, {"", ""}, {"-1", "-1"}, {"1e3", "0"}, {"9223372036854775807Ei", "99999999999999999999"}, {"1.5Gi", "x"}} {
		f.Add(s[0], s[1], true, true)
	}
	f.Fuzz(func(t *testing.T, mem, comp string, hasMem, hasComp bool) {
		ann := map[string]string{}
		if hasMem {
			ann[QuotaMemoryAnnotation] = mem
		}
		if hasComp {
			ann[QuotaComputeAnnotation] = comp
		}
		q, err := QuotaOf(ns(ann))
		switch {
		case err != nil:
			if !strings.Contains(err.Error(), "annotation gpuslice.dev/gpu-") || !strings.Contains(err.Error(), "want ") {
				t.Fatalf("error %q names no annotation or valid value", err)
			}
		case !hasMem && !hasComp:
			if q != nil {
				t.Fatalf("a quota without annotations: %+v", q)
			}
		default:
			if q.MemMiB < 0 && q.MemMiB != admit.NoLimit || q.Compute < 0 && q.Compute != admit.NoLimit {
				t.Fatalf("negative limit: %+v", q)
			}
			if (q.MemMiB == admit.NoLimit) == hasMem && (q.Compute == admit.NoLimit) == hasComp {
				t.Fatalf("limits do not follow the annotations: %+v", q)
			}
		}
	})
}
