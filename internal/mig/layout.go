package mig

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Instance is one GPU instance: a profile at an explicit start slice.
type Instance struct {
	Profile string `json:"profile" yaml:"profile"`
	Start   int    `json:"start" yaml:"start"`
}

func (i Instance) String() string { return i.Profile + "@" + strconv.Itoa(i.Start) }

// Layout is the set of GPU instances on one GPU, in creation order.
type Layout []Instance

// String renders the layout as "3g.40gb@0,1g.10gb@4", the form ParseLayout
// reads.
func (l Layout) String() string {
	parts := make([]string, len(l))
	for i, in := range l {
		parts[i] = in.String()
	}
	return strings.Join(parts, ",")
}

// Sorted returns a copy ordered by start slice, then profile name.
func (l Layout) Sorted() Layout {
	out := append(Layout(nil), l...)
	sort.Slice(out, func(i, j int) bool {
		if out[i].Start != out[j].Start {
			return out[i].Start < out[j].Start
		}
		return out[i].Profile < out[j].Profile
	})
	return out
}

// maxLayoutLen bounds how many instances ParseLayout accepts; no GPU holds
// more than 16 memory slices, so longer input is a mistake.
const maxLayoutLen = 64

// ParseLayout reads "PROFILE@START[,PROFILE@START...]" such as
// "3g.40gb@0,1g.10gb@4". Whitespace around items is ignored; an empty string
// is the empty layout. Profile names are checked for syntax only (see
// ParseProfileName); whether they exist on a model is the geometry's job.
func ParseLayout(s string) (Layout, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Layout{}, nil
	}
	items := strings.Split(s, ",")
	if len(items) > maxLayoutLen {
		return nil, fmt.Errorf("layout has %d instances; at most %d are accepted", len(items), maxLayoutLen)
	}
	out := make(Layout, 0, len(items))
	for i, item := range items {
		item = strings.TrimSpace(item)
		name, startText, ok := strings.Cut(item, "@")
		if !ok {
			return nil, fmt.Errorf("layout item %d %q: want PROFILE@START, e.g. 3g.40gb@0", i+1, item)
		}
		if _, err := ParseProfileName(name); err != nil {
			return nil, fmt.Errorf("layout item %d %q: %w", i+1, item, err)
		}
		start, err := strconv.Atoi(strings.TrimSpace(startText))
		if err != nil || start < 0 || start >= maxSlices {
			return nil, fmt.Errorf("layout item %d %q: start %q is not a slice index 0..%d", i+1, item, startText, maxSlices-1)
		}
		out = append(out, Instance{Profile: strings.TrimSpace(name), Start: start})
	}
	return out, nil
}

// ProfileName is the parsed form of a MIG profile name such as "1g.5gb",
// "1c.3g.20gb" or "1g.24gb+me".
type ProfileName struct {
	// ComputeInstanceSlices is the "<n>c." prefix of a compute-instance
	// profile name; 0 when absent.
	ComputeInstanceSlices int
	ComputeSlices         int    // the "<n>g" part
	MemoryGB              int    // the "<m>gb" part
	Suffix                string // "", "+me", "+me.all", "-me", "+gfx"
}

// Known profile-name suffixes.
var profileSuffixes = []string{"+me.all", "+me", "-me", "+gfx"}

// ParseProfileName checks the syntax of a MIG profile name:
// [<c>c.]<g>g.<m>gb[+me|+me.all|-me|+gfx].
func ParseProfileName(s string) (ProfileName, error) {
	orig := s
	s = strings.ToLower(strings.TrimSpace(s))
	bad := func(why string) (ProfileName, error) {
		return ProfileName{}, fmt.Errorf("profile %q: %s; want <g>g.<m>gb with an optional +me, e.g. 1g.5gb, 3g.40gb, 1g.10gb+me", orig, why)
	}
	if s == "" {
		return bad("empty name")
	}
	if len(s) > 32 {
		return bad("name too long")
	}
	var p ProfileName
	for _, suf := range profileSuffixes {
		if strings.HasSuffix(s, suf) {
			p.Suffix = suf
			s = strings.TrimSuffix(s, suf)
			break
		}
	}
	parts := strings.Split(s, ".")
	if len(parts) == 3 {
		c, ok := countWithUnit(parts[0], "c")
		if !ok {
			return bad("compute-instance prefix must look like 1c")
		}
		p.ComputeInstanceSlices = c
		parts = parts[1:]
	}
	if len(parts) != 2 {
		return bad("wrong number of dot-separated parts")
	}
	g, ok := countWithUnit(parts[0], "g")
	if !ok {
		return bad("compute part must look like 1g..7g")
	}
	m, ok := countWithUnit(parts[1], "gb")
	if !ok {
		return bad("memory part must look like 5gb")
	}
	if p.ComputeInstanceSlices > g {
		return bad("compute instance larger than its GPU instance")
	}
	p.ComputeSlices, p.MemoryGB = g, m
	return p, nil
}

func countWithUnit(s, unit string) (int, bool) {
	num, ok := strings.CutSuffix(s, unit)
	if !ok || num == "" || len(num) > 4 {
		return 0, false
	}
	n, err := strconv.Atoi(num)
	if err != nil || n <= 0 || strconv.Itoa(n) != num {
		return 0, false
	}
	return n, true
}
