package spec

import (
	"fmt"
	"strings"
	"testing"
)

// nvExpect checks diagnostics against wants of the form
// "E 7:17 text" or "W 3:5 text": severity, line:column, and a piece of the
// message or hint. Every diagnostic must be wanted and every want found.
func nvExpect(t *testing.T, got Diagnostics, wants []string) {
	t.Helper()
	used := make([]bool, len(got))
	for _, w := range wants {
		sev, rest, _ := strings.Cut(w, " ")
		at, text, _ := strings.Cut(rest, " ")
		found := false
		for i, d := range got {
			if used[i] {
				continue
			}
			if strings.ToUpper(string(d.Severity[:1])) != sev || fmt.Sprintf("%d:%d", d.Pos.Line, d.Pos.Column) != at {
				continue
			}
			if !strings.Contains(d.Message+" ("+d.Hint+") "+d.Path, text) {
				continue
			}
			used[i], found = true, true
			break
		}
		if !found {
			t.Errorf("missing %q", w)
		}
	}
	for i, d := range got {
		if !used[i] {
			t.Errorf("unexpected %s %d:%d %s (%s) [%s]", d.Severity, d.Pos.Line, d.Pos.Column, d.Message, d.Hint, d.Path)
		}
	}
}
