package spec

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// This file holds what the readers of NVIDIA's own configs share
// (nvidia_deviceplugin.go, nvidia_migparted.go): scalars read as strictly
// as NVIDIA reads them, and configs embedded as strings in a Kubernetes
// ConfigMap, whose problems are reported at their line in the ConfigMap.
//
// NVIDIA reads both formats with sigs.k8s.io/yaml: YAML is converted to JSON
// and decoded with encoding/json. So a quoted "4" is not a number, a quoted
// "true" is not a boolean, and YAML 1.1 booleans (yes, no, on, off) are.

// nvDeref follows an alias.
func nvDeref(n *yaml.Node) *yaml.Node {
	if n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		return n.Alias
	}
	return n
}

func nvNull(n *yaml.Node) bool {
	n = nvDeref(n)
	return n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

func nvQuoted(n *yaml.Node) bool {
	return n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0
}

// nvInt reads a YAML integer; a quoted number or a fraction is an error,
// as it is for encoding/json decoding into an int.
func (w *walker) nvInt(n *yaml.Node, path string) (int64, bool) {
	n = nvDeref(n)
	if n == nil {
		return 0, false
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		hint := "want a whole number"
		if n.Kind == yaml.ScalarNode && nvQuoted(n) {
			hint = "want a whole number without quotes; NVIDIA's JSON decoding rejects a quoted number"
		}
		w.errorf(n, path, hint, "%s is not a whole number", kindName(n))
		return 0, false
	}
	s := strings.ReplaceAll(n.Value, "_", "")
	base := 10
	if t := strings.TrimLeft(s, "+-"); len(t) > 1 && t[0] == '0' && strings.ContainsAny(t[1:2], "xXoObB") {
		base = 0
	}
	v, err := strconv.ParseInt(s, base, 64)
	if err != nil || v > 1<<31-1 || v < -(1<<31) {
		w.errorf(n, path, "want a whole number that fits 32 bits", "%s is out of range", n.Value)
		return 0, false
	}
	return v, true
}

// nvYAML11Bools are the booleans sigs.k8s.io/yaml (YAML 1.1) accepts.
var nvYAML11Bools = map[string]bool{
	"true": true, "yes": true, "on": true, "y": true,
	"false": false, "no": false, "off": false, "n": false,
}

// nvBool reads a boolean; a quoted "true" is an error.
func (w *walker) nvBool(n *yaml.Node, path string) (bool, bool) {
	n = nvDeref(n)
	if n == nil {
		return false, false
	}
	if n.Kind == yaml.ScalarNode && !nvQuoted(n) {
		if v, ok := nvYAML11Bools[strings.ToLower(n.Value)]; ok {
			return v, true
		}
	}
	hint := "want true or false"
	if n.Kind == yaml.ScalarNode && nvQuoted(n) {
		hint = "want true or false without quotes; NVIDIA's JSON decoding rejects a quoted boolean"
	}
	w.errorf(n, path, hint, "%s is not a boolean", kindName(n))
	return false, false
}

// nvStr reads a string; numbers and booleans are errors (encoding/json
// does not turn them into strings).
func (w *walker) nvStr(n *yaml.Node, path string) (string, bool) {
	n = nvDeref(n)
	if n == nil {
		return "", false
	}
	if n.Kind != yaml.ScalarNode {
		w.errorf(n, path, "want a string", "%s is not a string", kindName(n))
		return "", false
	}
	if n.Tag != "!!str" && !nvQuoted(n) {
		what := map[string]string{"!!int": "a number", "!!float": "a number", "!!bool": "a boolean", "!!null": "null"}[n.Tag]
		if what == "" {
			what = "not a string"
		}
		w.errorf(n, path, fmt.Sprintf("quote it: \"%s\"", n.Value), "YAML reads %s as %s, and NVIDIA's JSON decoding wants a string here", n.Value, what)
		return "", false
	}
	return n.Value, true
}

// nvOneOf reads a string that must be one of valid.
func (w *walker) nvOneOf(n *yaml.Node, path string, valid ...string) (string, bool) {
	v, ok := w.nvStr(n, path)
	if !ok {
		return "", false
	}
	if !contains(valid, v) {
		w.errorf(n, path, "want "+nvOrList(valid), "%q is not valid", v)
		return "", false
	}
	return v, true
}

func nvOrList(xs []string) string {
	switch len(xs) {
	case 0:
		return ""
	case 1:
		return xs[0]
	}
	return strings.Join(xs[:len(xs)-1], ", ") + " or " + xs[len(xs)-1]
}

// nvLooksJSON reports whether data starts with a JSON object or array.
func nvLooksJSON(data []byte) bool {
	t := bytes.TrimLeft(data, " \t\r\n")
	return len(t) > 0 && (t[0] == '{' || t[0] == '[')
}

// nvJSONTabs makes JSON readable by the YAML parser, which rejects tabs as
// indentation: JSON allows a tab only as whitespace between tokens (never
// inside a string), so each becomes one space and columns stay the same.
func nvJSONTabs(data []byte) []byte {
	if !nvLooksJSON(data) || bytes.IndexByte(data, '\t') < 0 {
		return data
	}
	return bytes.ReplaceAll(data, []byte("\t"), []byte(" "))
}

// nvIsConfigMap reports whether a document is a Kubernetes ConfigMap.
func nvIsConfigMap(doc *yaml.Node) bool {
	doc = nvDeref(doc)
	if doc == nil || doc.Kind != yaml.MappingNode {
		return false
	}
	for i := 0; i+1 < len(doc.Content); i += 2 {
		if doc.Content[i].Value == "kind" {
			return nvDeref(doc.Content[i+1]).Value == "ConfigMap"
		}
	}
	return false
}

// nvConfigMapKeys are the fields of a Kubernetes ConfigMap.
var nvConfigMapKeys = []string{"apiVersion", "kind", "metadata", "data", "binaryData", "immutable"}

// nvReConfigMapKey is the rule Kubernetes applies to ConfigMap data keys.
var nvReConfigMapKey = regexp.MustCompile(`^[-._a-zA-Z0-9]+$`)

// nvEmbedded is one ConfigMap data entry whose value is a config.
type nvEmbedded struct {
	key     string
	keyNode *yaml.Node
	// text is the data value as written.
	text string
	// w reads the value; its positions are inside the value until
	// finish maps them into the file.
	w    *walker
	docs []*yaml.Node
	path string
	// remap turns a position inside the value into one in the file; exact
	// is false when only the value's own position is known.
	remap func(Pos) (Pos, bool)
}

// nvEachConfig calls read with the first YAML document of each of a
// ConfigMap's data values, then maps the value's findings into the file. A
// value holding more documents gets an error naming reader, which reads
// only the first.
func (w *walker) nvEachConfig(doc *yaml.Node, lines []string, reader string, read func(e *nvEmbedded, d *yaml.Node)) {
	for _, e := range w.nvConfigMapData(doc, lines) {
		for i, d := range e.docs {
			if e.w.nvTooBig(d) {
				continue
			}
			if i > 0 {
				e.w.errorf(d, "", "put each config under its own data key", "%s reads only the first YAML document of a config", reader)
				break
			}
			read(e, d)
		}
		e.finish(w)
	}
}

// nvConfigMapData reads a ConfigMap and parses each data value as YAML or
// JSON. lines are the file's raw lines (for the indentation of block
// scalars).
func (w *walker) nvConfigMapData(doc *yaml.Node, lines []string) []*nvEmbedded {
	top := w.mapping(doc, "", nvConfigMapKeys...)
	if v, ok := w.nvStr(top.get("apiVersion"), "apiVersion"); ok && v != "v1" {
		w.errorf(top.get("apiVersion"), "apiVersion", "want v1", "a ConfigMap's apiVersion is v1, not %q", v)
	}
	if md := top.get("metadata"); md != nil {
		w.mapping(md, "metadata")
	}
	if top.has("binaryData") {
		w.warnf(top.knode["binaryData"], "binaryData", "put configs under data", "binaryData is not read")
	}
	data := nvDeref(top.get("data"))
	if data == nil || nvNull(data) {
		w.errorf(doc, "data", "add data: {<config name>: |<config>}", "the ConfigMap has no data")
		return nil
	}
	f := w.mapping(data, "data")
	if data.Kind == yaml.MappingNode && len(f.keys) == 0 && len(data.Content) == 0 {
		w.errorf(data, "data", "add data: {<config name>: |<config>}", "the ConfigMap's data is empty")
	}
	var out []*nvEmbedded
	for _, key := range f.keys {
		kn, v := f.knode[key], nvDeref(f.get(key))
		path := "data[" + key + "]"
		if !nvReConfigMapKey.MatchString(key) {
			w.errorf(kn, path, "use letters, digits, '-', '_' and '.'", "%q is not a valid ConfigMap key", key)
		}
		if v.Kind != yaml.ScalarNode || (v.Tag != "!!str" && !nvQuoted(v)) {
			w.errorf(v, path, "write the config as a string: "+key+": |, then the config indented below it",
				"a ConfigMap's data values are strings; found %s", kindName(v))
			continue
		}
		e := &nvEmbedded{key: key, keyNode: kn, text: v.Value, w: &walker{file: w.file}, path: path, remap: nvRemapper(w.file, lines, v)}
		e.docs = e.w.parseDocs(nvJSONTabs([]byte(v.Value)))
		if len(e.docs) == 0 && len(e.w.diags) == 0 {
			w.errorf(v, path, "", "the config is empty")
		}
		out = append(out, e)
	}
	return out
}

// finish moves the embedded walker's diagnostics into w, at file positions
// and with the data key in their path.
func (e *nvEmbedded) finish(w *walker) {
	for _, d := range e.w.diags {
		inner := d.Pos
		var exact bool
		d.Pos, exact = e.remap(inner)
		if !exact && inner.Line > 0 {
			d.Message += fmt.Sprintf(" (line %d, column %d of the embedded config)", inner.Line, inner.Column)
		}
		if d.Path == "" {
			d.Path = e.path
		} else {
			d.Path = e.path + "." + d.Path
		}
		w.diags = append(w.diags, d)
	}
	e.w.diags = nil
}

// pos maps a node inside the value to its file position.
func (e *nvEmbedded) pos(n *yaml.Node) Pos {
	p, _ := e.remap(e.w.pos(n))
	return p
}

// nvRemapper maps positions inside the string value v to the file. A literal
// block scalar (|) maps exactly: its lines are the file's lines after the
// indicator, less the indentation. A one-line value maps by column.
// Anything else (folded or multi-line quoted strings) maps to v itself.
func nvRemapper(file string, lines []string, v *yaml.Node) func(Pos) (Pos, bool) {
	self := Pos{File: file, Line: v.Line, Column: v.Column}
	fallback := func(Pos) (Pos, bool) { return self, false }
	switch {
	case v.Style&yaml.LiteralStyle != 0:
		vl := strings.Split(v.Value, "\n")
		indent := -1
		for k, l := range vl {
			if strings.TrimSpace(l) == "" {
				continue
			}
			if i := v.Line + k; i < len(lines) {
				raw := strings.TrimSuffix(lines[i], "\r")
				if strings.HasSuffix(raw, l) {
					indent = len([]rune(raw)) - len([]rune(l))
				}
			}
			break
		}
		if indent < 0 {
			return fallback
		}
		return func(p Pos) (Pos, bool) {
			if p.Line <= 0 {
				return self, false
			}
			out := Pos{File: file, Line: v.Line + p.Line}
			if p.Column > 0 {
				out.Column = p.Column + indent
			}
			return out, true
		}
	case v.Style&yaml.FoldedStyle == 0 && !strings.Contains(v.Value, "\n"):
		shift := v.Column - 1
		if nvQuoted(v) {
			shift++
		}
		return func(p Pos) (Pos, bool) {
			if p.Line != 1 {
				return self, false
			}
			out := Pos{File: file, Line: v.Line}
			if p.Column > 0 {
				out.Column = p.Column + shift
			}
			return out, true
		}
	}
	return fallback
}

// nvText normalizes a config's text for ImportedSharing.Text: "\n" line
// endings, no trailing blank lines, one final newline ("" stays "").
func nvText(s string) string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.TrimRight(s, " \t\n")
	if s == "" {
		return ""
	}
	return s + "\n"
}

// nvLines splits a file into lines for nvRemapper.
func nvLines(data []byte) []string { return strings.Split(string(data), "\n") }

// nvReBlockHeader matches a line ending in a block scalar header (key: |).
var nvReBlockHeader = regexp.MustCompile(`^(\s*)(- )?[^#\s][^#]*:\s*[|>][-+0-9]*\s*$`)

// nvBlockHint explains a YAML syntax error caused by a block scalar whose
// content is not indented below its key, the usual way a config pasted
// into a ConfigMap breaks (`config.json: |` then `{` at the key's column).
func (w *walker) nvBlockHint(lines []string) {
	var syntax *Diagnostic
	for i := range w.diags {
		if strings.HasPrefix(w.diags[i].Message, "YAML syntax") {
			syntax = &w.diags[i]
		}
	}
	if syntax == nil {
		return
	}
	indent := func(s string) int { return len(s) - len(strings.TrimLeft(s, " ")) }
	for i, l := range lines {
		l = strings.TrimSuffix(l, "\r")
		m := nvReBlockHeader.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		for j := i + 1; j < len(lines); j++ {
			next := strings.TrimSuffix(lines[j], "\r")
			if strings.TrimSpace(next) == "" {
				continue
			}
			if keyCol := len(m[1]) + len(m[2]); indent(next) <= keyCol {
				syntax.Pos = Pos{File: syntax.Pos.File, Line: j + 1}
				syntax.Hint = fmt.Sprintf("the text under %q on line %d must be indented more than its key: indent lines %d and on by 2 more spaces", strings.TrimSpace(l), i+1, j+1)
				return
			}
			break
		}
	}
}

// nvMaxExpanded bounds how many nodes a document may reach through aliases.
// The readers follow aliases, so a few anchors referencing each other could
// otherwise make them walk billions of nodes.
const nvMaxExpanded = 1 << 20

// nvTooBig reports (once, as an error) a document whose aliases expand it
// past nvMaxExpanded nodes.
func (w *walker) nvTooBig(doc *yaml.Node) bool {
	memo := map[*yaml.Node]int{}
	var size func(n *yaml.Node, depth int) int
	size = func(n *yaml.Node, depth int) int {
		if n == nil {
			return 0
		}
		if v, ok := memo[n]; ok {
			return v
		}
		if depth > 1000 {
			return nvMaxExpanded + 1
		}
		memo[n] = nvMaxExpanded + 1 // a cycle counts as too big
		total := 1
		if n.Kind == yaml.AliasNode {
			total += size(n.Alias, depth+1)
		}
		for _, c := range n.Content {
			total += size(c, depth+1)
			if total > nvMaxExpanded {
				break
			}
		}
		total = min(total, nvMaxExpanded+1)
		memo[n] = total
		return total
	}
	if size(doc, 0) > nvMaxExpanded {
		w.errorf(doc, "", "write the config out without so many aliases", "the document expands to more than %d YAML nodes through aliases", nvMaxExpanded)
		return true
	}
	return false
}
