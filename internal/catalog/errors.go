package catalog

import (
	"errors"
	"fmt"
	"strings"

	"github.com/agnivade/levenshtein"
)

// ErrNoMIG is wrapped by errors about GPU models that cannot be partitioned.
var ErrNoMIG = errors.New("does not support MIG")

// NotFoundError reports a name that matches nothing in the catalog.
type NotFoundError struct {
	// Kind is what was looked up: "GPU model", "MIG profile of A100-40GB",
	// "instance type", "cloud provider".
	Kind string
	// Name is the name as given.
	Name string
	// Valid lists the accepted names.
	Valid []string
	// Suggestion is the closest valid name, or "" when nothing is close.
	Suggestion string
}

// maxListed bounds how many valid names Error prints.
const maxListed = 30

func (e *NotFoundError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "unknown %s %q", e.Kind, e.Name)
	if e.Suggestion != "" {
		fmt.Fprintf(&b, "; did you mean \"%s\"?", e.Suggestion)
	}
	if len(e.Valid) > 0 {
		if e.Suggestion == "" {
			b.WriteByte(';')
		}
		b.WriteString(" valid: ")
		n := min(len(e.Valid), maxListed)
		b.WriteString(strings.Join(e.Valid[:n], ", "))
		if rest := len(e.Valid) - n; rest > 0 {
			fmt.Fprintf(&b, ", … (%d more)", rest)
		}
	}
	return b.String()
}

// IsNotFound reports whether err is or wraps a *NotFoundError.
func IsNotFound(err error) bool {
	var nf *NotFoundError
	return errors.As(err, &nf)
}

// maxSuggestLen bounds the names Suggest compares, keeping it cheap on
// arbitrary input.
const maxSuggestLen = 128

// Suggest returns the candidate closest to name, or "" when none is close
// enough to be a likely typo. Matching ignores case. A candidate wins when it
// is the only one at the smallest edit distance and that distance is at most
// a quarter of name's length (at least 1); failing that, when it is the only
// candidate that starts with name, or the only one that contains it (names
// of three characters or more).
func Suggest(name string, candidates []string) string {
	key := strings.ToLower(strings.TrimSpace(name))
	if key == "" || len(key) > maxSuggestLen {
		return ""
	}
	lower := make([]string, len(candidates))
	for i, c := range candidates {
		lower[i] = strings.ToLower(c)
		if lower[i] == key {
			return c
		}
	}

	// A name that starts a few candidates ("A100") suggests them, unless
	// the closest by edit distance is one of them ("1g.5g" -> "1g.5gb").
	var prefixed []string
	if len(key) >= 3 {
		for i, c := range lower {
			if strings.HasPrefix(c, key) {
				prefixed = append(prefixed, candidates[i])
			}
		}
	}
	if len(prefixed) > 3 {
		prefixed = nil
	}

	limit := max(1, len([]rune(key))/4)
	best, bestDist := []int(nil), limit+1
	for i, c := range lower {
		if len(c) > maxSuggestLen {
			continue
		}
		d := levenshtein.ComputeDistance(key, c)
		switch {
		case d < bestDist:
			best, bestDist = []int{i}, d
		case d == bestDist:
			best = append(best, i)
		}
	}
	if len(best) == 1 && (len(prefixed) == 0 || strings.HasPrefix(lower[best[0]], key)) {
		return candidates[best[0]]
	}
	if len(prefixed) > 0 {
		return strings.Join(prefixed, `" or "`)
	}
	// Several equally close: prefer the only one that starts with name.
	if len(best) > 1 {
		if i, ok := only(best, func(i int) bool { return strings.HasPrefix(lower[i], key) }); ok {
			return candidates[i]
		}
		return ""
	}
	if len(key) < 3 {
		return ""
	}
	all := make([]int, len(lower))
	for i := range all {
		all[i] = i
	}
	if i, ok := only(all, func(i int) bool { return strings.HasPrefix(lower[i], key) }); ok {
		return candidates[i]
	}
	if i, ok := only(all, func(i int) bool { return strings.Contains(lower[i], key) }); ok {
		return candidates[i]
	}
	return ""
}

// only returns the single index in idx that satisfies pred.
func only(idx []int, pred func(int) bool) (int, bool) {
	found := -1
	for _, i := range idx {
		if pred(i) {
			if found >= 0 {
				return -1, false
			}
			found = i
		}
	}
	return found, found >= 0
}

// Problem is one validation failure found by Load.
type Problem struct {
	// Line is the 1-based line of the offending YAML node, 0 if unknown.
	Line int
	// Path names the entry, e.g.
	// "gpus[7] (A100-40GB).mig.profiles[2] (1g.10gb)".
	Path string
	Msg  string
}

func (p *Problem) Error() string {
	var b strings.Builder
	if p.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", p.Line)
	}
	if p.Path != "" {
		b.WriteString(p.Path)
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// naturalLess orders names case-insensitively with digit runs compared as
// numbers, so "A10G" < "A30" < "A100-40GB".
func naturalLess(a, b string) bool {
	a, b = strings.ToLower(a), strings.ToLower(b)
	for a != "" && b != "" {
		ca, ra := chunk(a)
		cb, rb := chunk(b)
		if ca != cb {
			da, db := isDigit(ca[0]), isDigit(cb[0])
			if da && db {
				ta, tb := strings.TrimLeft(ca, "0"), strings.TrimLeft(cb, "0")
				if len(ta) != len(tb) {
					return len(ta) < len(tb)
				}
				if ta != tb {
					return ta < tb
				}
			} else {
				return ca < cb
			}
		}
		a, b = ra, rb
	}
	return len(a) < len(b)
}

// chunk splits off s's leading run of digits or of non-digits.
func chunk(s string) (string, string) {
	d := isDigit(s[0])
	i := 1
	for i < len(s) && isDigit(s[i]) == d {
		i++
	}
	return s[:i], s[i:]
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
