package server

import (
	"errors"
	"net/http"
	"net/url"
	"testing"
)

// parseDashboardQuery never panics; what it refuses is a 422 naming one
// of its fields, and what it accepts is within its bounds.
func FuzzDashboardQuery(f *testing.F) {
	for _, q := range []string{"", "limit=3&after=t2", "sort=cost&after=50", "points=2", "since=2026-01-02T15:04:05Z&q=team",
		"sort=size", "limit=0", "points=1e9", "after=-1&sort=memory", "limit=%zz"} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		r := &http.Request{URL: &url.URL{RawQuery: raw}}
		dq, err := parseDashboardQuery(r)
		if err != nil {
			var he *httpError
			if !errors.As(err, &he) || he.status != http.StatusUnprocessableEntity || he.field == "" {
				t.Fatalf("%q: %v is not a 422 naming a field", raw, err)
			}
			return
		}
		if dq.limit < 1 || dq.limit > MaxPageSize || dq.points < 2 || dq.points > 5000 || len(dq.after) > 256 || len(dq.q) > 256 {
			t.Fatalf("%q accepted out of bounds: %+v", raw, dq)
		}
	})
}
