package cli

import (
	"fmt"
	"sort"
	"strings"

	"github.com/agnivade/levenshtein"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// didYouMean returns the candidates closest to got by edit distance (case
// ignored), when they are close enough to be a likely typo: at most a
// third of got's length (at least 1), where swapping two adjacent letters
// ("memroy", "mgi") counts as one edit. A candidate that got starts is a
// match too. Empty when nothing is close.
func didYouMean(got string, candidates []string) []string {
	key := strings.ToLower(strings.TrimSpace(got))
	if key == "" {
		return nil
	}
	limit := max(1, len([]rune(key))/3)
	best, bestDist := []string(nil), limit+1
	for _, c := range candidates {
		lc := strings.ToLower(c)
		d := levenshtein.ComputeDistance(key, lc)
		if swapped(key, lc) || (len(key) >= 3 && strings.HasPrefix(lc, key)) {
			d = min(d, 1)
		}
		switch {
		case d > limit:
		case d < bestDist:
			best, bestDist = []string{c}, d
		case d == bestDist && !contains(best, c):
			best = append(best, c)
		}
	}
	if len(best) > 3 {
		return nil
	}
	return best
}

// swapped reports whether a and b differ only by two adjacent letters
// trading places.
func swapped(a, b string) bool {
	ra, rb := []rune(a), []rune(b)
	if len(ra) != len(rb) {
		return false
	}
	i := 0
	for i < len(ra) && ra[i] == rb[i] {
		i++
	}
	return i+1 < len(ra) && ra[i] == rb[i+1] && ra[i+1] == rb[i] && string(ra[i+2:]) == string(rb[i+2:])
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// suggestText is "; did you mean "a"?" (or "a" or "b"), or "" when nothing
// is close to got.
func suggestText(got string, candidates []string) string {
	s := didYouMean(got, candidates)
	if len(s) == 0 {
		return ""
	}
	return fmt.Sprintf("; did you mean %q?", s[0]) + orMore(s[1:])
}

func orMore(rest []string) string {
	if len(rest) == 0 {
		return ""
	}
	q := make([]string, len(rest))
	for i, r := range rest {
		q[i] = fmt.Sprintf("%q", r)
	}
	return " (or " + strings.Join(q, ", ") + ")"
}

// enumError is the error for a value of an enumerated flag that is not one
// of valid: the value, a did-you-mean and the valid values.
func enumError(flag, what, got string, valid []string) error {
	if got == "" {
		return fmt.Errorf("%s is required: the %s; valid: %s", flag, what, strings.Join(valid, ", "))
	}
	return fmt.Errorf("%s %q: unknown %s%s valid: %s", flag, got, what, suggestSep(got, valid), strings.Join(valid, ", "))
}

func suggestSep(got string, valid []string) string {
	if s := suggestText(got, valid); s != "" {
		return s
	}
	return ";"
}

// flagError adds a did-you-mean to pflag's unknown-flag errors, comparing
// with the flags cmd takes (its own and those it inherits).
func flagError(cmd *cobra.Command, err error) error {
	msg := err.Error()
	var got string
	var long bool
	switch {
	case strings.HasPrefix(msg, "unknown flag: --"):
		got, long = strings.TrimPrefix(msg, "unknown flag: --"), true
	case strings.HasPrefix(msg, "unknown shorthand flag: "):
		// unknown shorthand flag: 'x' in -xyz
		if i := strings.Index(msg, " in -"); i >= 0 {
			got = msg[i+len(" in -"):]
			// "-memroy" (one dash) reads as shorthands: compare the whole word.
			long = len(got) > 1
		}
	default:
		return err
	}
	var names []string
	seen := map[string]bool{}
	add := func(f *pflag.Flag) {
		if f.Hidden || seen[f.Name] {
			return
		}
		seen[f.Name] = true
		names = append(names, f.Name)
	}
	cmd.Flags().VisitAll(add)
	cmd.InheritedFlags().VisitAll(add)
	sort.Strings(names)
	if !long || got == "" {
		return fmt.Errorf("%w (see %s --help)", err, cmd.CommandPath())
	}
	s := didYouMean(got, names)
	if len(s) == 0 {
		return fmt.Errorf("%w (see %s --help)", err, cmd.CommandPath())
	}
	q := make([]string, len(s))
	for i, n := range s {
		q[i] = "--" + n
	}
	return fmt.Errorf("%w; did you mean %s?", err, strings.Join(q, " or "))
}

// requireSubcommand makes a command group (subcommands, no Run of its own)
// fail on an argument that names none of its subcommands, instead of
// printing its help and exiting 0. With no argument it still prints help.
func requireSubcommand(cmd *cobra.Command) {
	for _, c := range cmd.Commands() {
		requireSubcommand(c)
	}
	if !cmd.HasSubCommands() || cmd.Runnable() || !cmd.HasParent() {
		return
	}
	cmd.Args = func(c *cobra.Command, args []string) error {
		if len(args) == 0 {
			return nil
		}
		var names []string
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() {
				names = append(names, sub.Name())
				names = append(names, sub.Aliases...)
			}
		}
		var valid []string
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() {
				valid = append(valid, sub.Name())
			}
		}
		return fmt.Errorf("unknown command %q for %q%s valid: %s", args[0], c.CommandPath(), suggestSep(args[0], names), strings.Join(valid, ", "))
	}
	cmd.RunE = func(c *cobra.Command, args []string) error { return c.Help() }
}
