package services

import (
	"math"
	"strings"
	"testing"
)

// What Prometheus answers to /api/v1/query, and what the metric reads.
func TestParsePromAnswer(t *testing.T) {
	cases := []struct {
		body string
		want float64
		err  string
	}{
		{`{"status":"success","data":{"resultType":"scalar","result":[1700000000.1,"42.5"]}}`, 42.5, ""},
		{`{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1700000000,"0.75"]}]}}`, 0.75, ""},
		{`{"status":"success","data":{"resultType":"vector","result":[]}}`, 0, "0 series; want one"},
		{`{"status":"success","data":{"resultType":"vector","result":[{"value":[1,"1"]},{"value":[1,"2"]}]}}`, 0, "2 series; want one (aggregate it"},
		{`{"status":"error","errorType":"bad_data","error":"parse error at char 4"}`, 0, "parse error at char 4"},
		{`{"status":"success","data":{"resultType":"matrix","result":[]}}`, 0, `result type "matrix"`},
		{`{"status":"success","data":{"resultType":"scalar","result":[1,"NaN"]}}`, 0, "not a finite number"},
		{`{"status":"success","data":{"resultType":"scalar","result":[1,"+Inf"]}}`, 0, "not a finite number"},
		{`{"status":"success","data":{"resultType":"scalar","result":[1]}}`, 0, "want [time, value]"},
		{`<html>502 Bad Gateway</html>`, 0, "no JSON"},
	}
	for _, c := range cases {
		got, err := parsePromAnswer(200, []byte(c.body))
		if c.err == "" {
			if err != nil || got != c.want {
				t.Errorf("%s: %v, %v; want %v", c.body, got, err, c.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: error %v, want one saying %q", c.body, err, c.err)
		}
	}
}

// Whatever a server answers, the parser returns a finite number or an
// error, and never panics.
func FuzzParsePromAnswer(f *testing.F) {
	f.Add([]byte(`{"status":"success","data":{"resultType":"scalar","result":[1,"42"]}}`))
	f.Add([]byte(`{"status":"success","data":{"resultType":"vector","result":[{"value":[1,"0.5"]}]}}`))
	f.Add([]byte(`{"status":"success","data":{"resultType":"vector","result":[{"value":[1,null]}]}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		v, err := parsePromAnswer(200, body)
		if err == nil && (math.IsNaN(v) || math.IsInf(v, 0)) {
			t.Fatalf("%q gave %v", body, v)
		}
	})
}
