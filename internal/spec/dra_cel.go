package spec

import (
	"regexp"
	"strings"
)

// CEL helpers: joining selectors and reading the comparisons that set
// Request.Profile and a DeviceClass's device type. The reading is textual
// and conservative: only a top-level conjunct of the form
// device.attributes['gpu.nvidia.com'].<attr> == '<value>' (either side,
// either quote) counts; anything under ||, ?: or ! does not.

// draAttr is how a selector reads NVIDIA's device attributes.
const draAttr = "device.attributes['gpu.nvidia.com']"

func draGuard(typ string) string { return draAttr + ".type == '" + typ + "'" }

// draAnd joins CEL expressions with &&, each in parentheses.
func draAnd(exprs []string) string {
	if len(exprs) == 1 {
		return exprs[0]
	}
	parts := make([]string, len(exprs))
	for i, e := range exprs {
		parts[i] = "(" + e + ")"
		if _, ok := draUnwrap(strings.TrimSpace(e)); ok {
			parts[i] = strings.TrimSpace(e)
		}
	}
	return strings.Join(parts, " && ")
}

var (
	draAttrRE = regexp.MustCompile(`^device\.attributes\[\s*(?:'gpu\.nvidia\.com'|"gpu\.nvidia\.com")\s*\]\.([A-Za-z]+)$`)
	draStrRE  = regexp.MustCompile(`^(?:'([^'\\]*)'|"([^"\\]*)")$`)
)

// draEquals returns the values the top-level conjuncts of exprs compare
// attribute attr with (attr == 'v' or 'v' == attr).
func draEquals(exprs []string, attr string) []string {
	var out []string
	for _, e := range exprs {
		for _, c := range draConjuncts(e) {
			l, r, ok := strings.Cut(c, "==")
			if !ok || strings.Contains(r, "==") {
				continue
			}
			l, r = strings.TrimSpace(l), strings.TrimSpace(r)
			for _, pair := range [][2]string{{l, r}, {r, l}} {
				m, s := draAttrRE.FindStringSubmatch(pair[0]), draStrRE.FindStringSubmatch(pair[1])
				if m != nil && s != nil && m[1] == attr && !contains(out, s[1]+s[2]) {
					out = append(out, s[1]+s[2])
				}
			}
		}
	}
	return out
}

// draConjuncts splits a CEL expression into its top-level && operands,
// or returns nil when the top level also has || or ?: (then no operand
// must hold on its own).
func draConjuncts(e string) []string {
	e = strings.TrimSpace(e)
	depth, start := 0, 0
	var quote byte
	var parts []string
	for i := 0; i < len(e); i++ {
		c := e[i]
		switch {
		case quote != 0:
			if c == '\\' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '(' || c == '[' || c == '{':
			depth++
		case c == ')' || c == ']' || c == '}':
			depth--
		case depth != 0:
		case c == '?' || (c == '|' && i+1 < len(e) && e[i+1] == '|'):
			return nil
		case c == '&' && i+1 < len(e) && e[i+1] == '&':
			parts = append(parts, e[start:i])
			start, i = i+2, i+1
		}
	}
	parts = append(parts, e[start:])
	var out []string
	for _, p := range parts {
		p = strings.TrimSpace(p)
		if inner, ok := draUnwrap(p); ok {
			out = append(out, draConjuncts(inner)...)
			continue
		}
		out = append(out, p)
	}
	return out
}

// draUnwrap strips one pair of parentheses that encloses all of p.
func draUnwrap(p string) (string, bool) {
	if len(p) < 2 || p[0] != '(' || p[len(p)-1] != ')' {
		return "", false
	}
	depth := 0
	var quote byte
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case quote != 0:
			if c == '\\' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '(':
			depth++
		case c == ')':
			depth--
			if depth == 0 && i != len(p)-1 {
				return "", false
			}
		}
	}
	return p[1 : len(p)-1], true
}
