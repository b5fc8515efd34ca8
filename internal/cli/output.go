package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"sigs.k8s.io/yaml"
)

// Output formats every command supports through -o.
var outputFormats = []string{"table", "json", "yaml"}

// table is what a command prints in the default format.
type table struct {
	header []string
	rows   [][]string
	// notes are printed after the table, one per line.
	notes []string
}

func (t *table) add(cells ...any) {
	row := make([]string, len(cells))
	for i, c := range cells {
		row[i] = fmt.Sprint(c)
	}
	t.rows = append(t.rows, row)
}

// render writes v in the chosen format: the table for "table", v itself as
// JSON or YAML otherwise (field names come from the json tags, so the two
// machine formats always agree).
func render(w io.Writer, format string, t *table, v any) error {
	switch format {
	case "table", "":
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		if len(t.header) > 0 {
			fmt.Fprintln(tw, strings.Join(t.header, "\t"))
		}
		for _, r := range t.rows {
			fmt.Fprintln(tw, strings.Join(r, "\t"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, n := range t.notes {
			fmt.Fprintln(w, n)
		}
		return nil
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	return fmt.Errorf("unknown output format %q; valid: %s", format, strings.Join(outputFormats, ", "))
}
