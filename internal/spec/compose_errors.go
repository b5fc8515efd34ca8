package spec

import (
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"github.com/compose-spec/compose-go/v2/types"
	"gopkg.in/yaml.v3"

	"github.com/gpuslice/gpuslice/internal/catalog"
)

var (
	composeErrPrefix   = regexp.MustCompile(`^(validating|failed to parse) [^:]*: `)
	composeQuoted      = regexp.MustCompile(`'([^']+)'`)
	composeFalseSchema = regexp.MustCompile(`^(\S+)\.([^.\s]+) false schema$`)
	composeLine        = regexp.MustCompile(`line (\d+): ?`)
)

// composeError turns a compose-go error into a diagnostic placed at the
// field its message names.
func (c *composeFile) composeError(err error) {
	var parts []string
	for _, l := range strings.Split(err.Error(), "\n") {
		if l = strings.TrimSpace(l); l != "" && l != "decoding failed due to the following error(s):" {
			parts = append(parts, l)
		}
	}
	msg := composeErrPrefix.ReplaceAllString(strings.Join(parts, "; "), "")
	node, path := c.locate(msg)
	if strings.Contains(msg, "yaml: ") {
		// a YAML error names only lines: "line 1: line 4: mapping key "x" already defined at line 1"
		if m := composeLine.FindAllStringSubmatchIndex(msg, -1); m != nil {
			last := m[len(m)-1]
			line, _ := strconv.Atoi(msg[last[2]:last[3]])
			if n := composeOnLine(c.root, line); n != nil {
				node, path, msg = n, "", "YAML: "+msg[last[1]:]
			}
		}
	}
	hint := "compose-go, docker compose's loader, rejects this; see https://docs.docker.com/reference/compose-file/"
	if m := composeFalseSchema.FindStringSubmatch(msg); m != nil {
		// "services.a.imagee false schema": a key the compose schema lacks
		msg = fmt.Sprintf("unknown field %q in %s", m[2], m[1])
		if k := composeKey(c.resolve(m[1]), m[2]); k != nil {
			node = k
		}
		if s := catalog.Suggest(m[2], composeServiceKeys()); s != "" && strings.HasPrefix(m[1], "services.") && strings.Count(m[1], ".") == 1 {
			hint = fmt.Sprintf("did you mean %q? %s", s, hint)
		}
	}
	c.w.errorf(node, path, hint, "compose: %s", msg)
}

// locate finds the deepest node that a dotted path in msg names
// ("services.gpuinfo.ports.0", "'services[gpuinfo].deploy.resources'"),
// then a quoted key under it ("additional properties 'foo' not allowed").
func (c *composeFile) locate(msg string) (*yaml.Node, string) {
	best, bestAt, bestPath, bestDepth := c.root, c.root, "", 0
	for _, tok := range strings.FieldsFunc(msg, func(r rune) bool { return strings.ContainsRune(" :,'\"`()", r) }) {
		tok = strings.Trim(strings.NewReplacer("[", ".", "]", "").Replace(tok), ".")
		// a bare service name (service "b" has neither…) counts too
		for _, p := range []string{tok, "services." + tok} {
			segs := strings.Split(p, ".")
			n, at, depth := c.root, c.root, 0
			for _, seg := range segs {
				next := composeChild(n, seg)
				if next == nil {
					break
				}
				at = next
				if k := composeKey(n, seg); k != nil && next.Kind != yaml.ScalarNode {
					at = k // a mapping or list: its key
				}
				n, depth = next, depth+1
			}
			if depth > bestDepth {
				best, bestAt, bestPath, bestDepth = n, at, strings.Join(segs[:depth], "."), depth
			}
		}
	}
	if best.Kind == yaml.MappingNode {
		for _, q := range composeQuoted.FindAllStringSubmatch(msg, -1) {
			for i := 0; i+1 < len(best.Content); i += 2 {
				if best.Content[i].Value == q[1] {
					return best.Content[i], join(bestPath, q[1])
				}
			}
		}
	}
	return bestAt, bestPath
}

// composeOnLine is the first node on line, depth first.
func composeOnLine(n *yaml.Node, line int) *yaml.Node {
	if n.Line == line {
		return n
	}
	for _, k := range n.Content {
		if f := composeOnLine(k, line); f != nil {
			return f
		}
	}
	return nil
}

// resolve follows a dotted path from the root; nil when it leads nowhere.
func (c *composeFile) resolve(path string) *yaml.Node {
	n := c.root
	for _, seg := range strings.Split(path, ".") {
		if n = composeChild(n, seg); n == nil {
			return nil
		}
	}
	return n
}

// composeServiceKeys lists the keys of a compose service, from
// compose-go's struct tags.
func composeServiceKeys() []string {
	var out []string
	for _, f := range reflect.VisibleFields(reflect.TypeFor[types.ServiceConfig]()) {
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.Anonymous && name != "" && name != "-" && !strings.HasPrefix(name, "#") {
			out = append(out, name)
		}
	}
	return out
}

// composeChild is n's value under a key, or item at an index.
func composeChild(n *yaml.Node, seg string) *yaml.Node {
	if n.Kind == yaml.SequenceNode {
		if i, err := strconv.Atoi(seg); err == nil && i >= 0 && i < len(n.Content) {
			return n.Content[i]
		}
		return nil
	}
	return composeDig(n, seg)
}
