package spec

import (
	"fmt"
	"sort"
	"strings"
)

// Severity of a diagnostic.
type Severity string

// Severities.
const (
	Error   Severity = "error"
	Warning Severity = "warning"
)

// Diagnostic is one problem found in an input, with where and what would
// be valid.
type Diagnostic struct {
	Severity Severity `json:"severity"`
	Pos      Pos      `json:"pos"`
	// Path is the field path, e.g. services.gpuinfo.x-gpuslice.memoryMiB.
	Path    string `json:"path,omitempty"`
	Message string `json:"message"`
	// Hint says what would be valid, when known.
	Hint string `json:"hint,omitempty"`
}

func (d Diagnostic) String() string {
	var b strings.Builder
	if d.Pos.File != "" {
		b.WriteString(d.Pos.File)
		if d.Pos.Line > 0 {
			fmt.Fprintf(&b, ":%d", d.Pos.Line)
			if d.Pos.Column > 0 {
				fmt.Fprintf(&b, ":%d", d.Pos.Column)
			}
		}
		b.WriteString(": ")
	}
	b.WriteString(string(d.Severity))
	b.WriteString(": ")
	if d.Path != "" {
		b.WriteString(d.Path)
		b.WriteString(": ")
	}
	b.WriteString(d.Message)
	if d.Hint != "" {
		b.WriteString(" (")
		b.WriteString(d.Hint)
		b.WriteString(")")
	}
	return b.String()
}

// Diagnostics is a list of problems; as an error it lists every one.
type Diagnostics []Diagnostic

// Errors returns the diagnostics of severity Error, or nil.
func (ds Diagnostics) Errors() Diagnostics {
	var out Diagnostics
	for _, d := range ds {
		if d.Severity == Error {
			out = append(out, d)
		}
	}
	return out
}

// Err returns the diagnostics as an error when any is an Error, else nil.
func (ds Diagnostics) Err() error {
	if len(ds.Errors()) == 0 {
		return nil
	}
	return ds
}

func (ds Diagnostics) Error() string {
	sorted := append(Diagnostics(nil), ds...)
	sorted.Sort()
	lines := make([]string, len(sorted))
	for i, d := range sorted {
		lines[i] = d.String()
	}
	n := len(ds.Errors())
	return fmt.Sprintf("%d error(s):\n%s", n, strings.Join(lines, "\n"))
}

// Sort orders diagnostics by file, line, column.
func (ds Diagnostics) Sort() {
	sort.SliceStable(ds, func(i, j int) bool {
		a, b := ds[i].Pos, ds[j].Pos
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Column < b.Column
	})
}
