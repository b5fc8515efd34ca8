package spec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/gpuslice/gpuslice/internal/catalog"
)

// walker reads a yaml.v3 node tree and records diagnostics with positions
// and field paths. Readers use it instead of decoding into structs so that
// every problem names its line, column and path, and all are reported.
type walker struct {
	file  string
	diags Diagnostics
}

func (w *walker) pos(n *yaml.Node) Pos {
	if n == nil {
		return Pos{File: w.file}
	}
	return Pos{File: w.file, Line: n.Line, Column: n.Column}
}

func (w *walker) errorf(n *yaml.Node, path, hint, format string, args ...any) {
	w.diags = append(w.diags, Diagnostic{Severity: Error, Pos: w.pos(n), Path: path, Message: fmt.Sprintf(format, args...), Hint: hint})
}

func (w *walker) warnf(n *yaml.Node, path, hint, format string, args ...any) {
	w.diags = append(w.diags, Diagnostic{Severity: Warning, Pos: w.pos(n), Path: path, Message: fmt.Sprintf(format, args...), Hint: hint})
}

// maxYAMLBytes bounds an input file.
const maxYAMLBytes = 8 << 20

// parseDocs parses every YAML document in data. A syntax error becomes a
// diagnostic with the parser's line.
func (w *walker) parseDocs(data []byte) []*yaml.Node {
	if len(data) > maxYAMLBytes {
		w.errorf(nil, "", "split the file", "file is %d bytes; at most %d are read", len(data), maxYAMLBytes)
		return nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []*yaml.Node
	for {
		var doc yaml.Node
		err := safeDecode(dec, &doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			pos, msg := yamlSyntaxPos(data, err.Error())
			pos.File = w.file
			w.diags = append(w.diags, Diagnostic{Severity: Error, Pos: pos, Message: "YAML syntax: " + msg})
			return docs
		}
		if doc.Kind == 0 {
			continue
		}
		root := &doc
		if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
			root = doc.Content[0]
		}
		if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
			continue
		}
		docs = append(docs, root)
	}
	return docs
}

// safeDecode turns a panic inside the YAML library into an error.
func safeDecode(dec *yaml.Decoder, v any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("line 0: unreadable YAML (%v)", r)
		}
	}()
	return dec.Decode(v)
}

// fields is a mapping's keys with their value nodes, in file order.
type fields struct {
	node  *yaml.Node
	path  string
	keys  []string
	vals  map[string]*yaml.Node
	knode map[string]*yaml.Node
}

// mapping reads a mapping node. allowed lists the keys a reader knows;
// others are errors naming the valid ones (keys starting with "x-" are
// always allowed: extensions).
func (w *walker) mapping(n *yaml.Node, path string, allowed ...string) *fields {
	f := &fields{node: n, path: path, vals: map[string]*yaml.Node{}, knode: map[string]*yaml.Node{}}
	if n == nil {
		return f
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind != yaml.MappingNode {
		w.errorf(n, path, "", "want a mapping (key: value), found %s", kindName(n))
		return f
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if v.Kind == yaml.AliasNode && v.Alias != nil {
			v = v.Alias
		}
		if k.Value == "<<" { // merge key: fold the merged mapping in
			for _, m := range append([]*yaml.Node{v}, v.Content...) {
				if m.Kind == yaml.MappingNode {
					sub := w.mapping(m, path, allowed...)
					for _, key := range sub.keys {
						if _, dup := f.vals[key]; !dup {
							f.keys = append(f.keys, key)
							f.vals[key], f.knode[key] = sub.vals[key], sub.knode[key]
						}
					}
				}
			}
			continue
		}
		if _, dup := f.vals[k.Value]; dup {
			w.errorf(k, join(path, k.Value), "", "key %q appears twice", k.Value)
			continue
		}
		if len(allowed) > 0 && !strings.HasPrefix(k.Value, "x-") && !contains(allowed, k.Value) {
			sorted := append([]string(nil), allowed...)
			sort.Strings(sorted)
			hint := "valid: " + strings.Join(sorted, ", ")
			if s := catalog.Suggest(k.Value, allowed); s != "" {
				hint = fmt.Sprintf("did you mean %q? %s", s, hint)
			}
			w.errorf(k, join(path, k.Value), hint, "unknown field %q", k.Value)
			continue
		}
		f.keys = append(f.keys, k.Value)
		f.vals[k.Value], f.knode[k.Value] = v, k
	}
	return f
}

func (f *fields) get(key string) *yaml.Node { return f.vals[key] }

func (f *fields) has(key string) bool { _, ok := f.vals[key]; return ok }

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func index(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "something else"
}

// str reads a string scalar; present reports whether the key was there.
func (w *walker) str(f *fields, key string) (string, bool) {
	n := f.get(key)
	if n == nil {
		return "", false
	}
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		w.errorf(n, join(f.path, key), "", "want a string, found %s", kindName(n))
		return "", true
	}
	return n.Value, true
}

// integer reads an integer scalar within [lo, hi].
func (w *walker) integer(f *fields, key string, lo, hi int64) (int64, bool) {
	n := f.get(key)
	if n == nil {
		return 0, false
	}
	v, err := strconv.ParseInt(strings.TrimSpace(n.Value), 10, 64)
	if n.Kind != yaml.ScalarNode || err != nil {
		w.errorf(n, join(f.path, key), fmt.Sprintf("want a whole number from %d to %d", lo, hi), "%s is not a whole number", kindName(n))
		return 0, true
	}
	if v < lo || v > hi {
		w.errorf(n, join(f.path, key), fmt.Sprintf("want %d..%d", lo, hi), "%d is out of range", v)
		return 0, true
	}
	return v, true
}

// boolean reads a boolean scalar.
func (w *walker) boolean(f *fields, key string) (bool, bool) {
	n := f.get(key)
	if n == nil {
		return false, false
	}
	switch strings.ToLower(n.Value) {
	case "true", "yes", "on":
		return true, true
	case "false", "no", "off":
		return false, true
	}
	w.errorf(n, join(f.path, key), "want true or false", "%s is not a boolean", kindName(n))
	return false, true
}

// seq reads a sequence node's items.
func (w *walker) seq(n *yaml.Node, path string) []*yaml.Node {
	if n == nil {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		w.errorf(n, path, "", "want a list, found %s", kindName(n))
		return nil
	}
	return n.Content
}
