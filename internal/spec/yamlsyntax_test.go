package spec

import (
	"strings"
	"testing"
)

// A YAML syntax error names the line (and column) of the problem, not the
// line before its context.
func TestYAMLSyntaxPosition(t *testing.T) {
	cases := []struct {
		name, in string
		format   Format
		want     string
	}{
		{"compose flow sequence", "services:\n  web:\n    image: x\n    deploy:\n      replicas: [1\n    x: 2\n", "compose",
			"x.yaml:6:6: error: YAML syntax: did not find expected ',' or ']' (while parsing a flow sequence started at 5:17)"},
		{"device plugin block mapping", "version: v1\nsharing:\n  timeSlicing:\n    resources:\n  - name: x\n     replicas: 2\n", "nvidia-device-plugin",
			"x.yaml:5:3: error: YAML syntax: did not find expected key (while parsing a block mapping started at 3:3)"},
		{"scanner", "services: b: c\n", "compose",
			"x.yaml:1:12: error: YAML syntax: mapping values are not allowed in this context"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, diags := Read("x.yaml", []byte(c.in), c.format)
			var got []string
			for _, d := range diags {
				got = append(got, d.String())
			}
			if !strings.Contains(strings.Join(got, "\n"), c.want) {
				t.Errorf("got\n%s\nwant %s", strings.Join(got, "\n"), c.want)
			}
		})
	}
}
