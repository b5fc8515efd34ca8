package mig

import (
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/catalog"
)

func geometry(t testing.TB, model string) *Geometry {
	t.Helper()
	gpu, err := catalog.Default().GPU(model)
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(gpu)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func mustParse(t testing.TB, s string) Layout {
	t.Helper()
	l, err := ParseLayout(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// The example geometries of the MIG user guide (reference gpu-facts.md §1.1).
func TestA100GuideExamples(t *testing.T) {
	g := geometry(t, "A100-40GB")
	valid := []string{
		"7g.40gb@0",
		"4g.20gb@0,3g.20gb@4",
		"3g.20gb@0,3g.20gb@4",
		"4g.20gb@0,2g.10gb@4,1g.5gb@6",
		"4g.20gb@0,1g.5gb@4,1g.5gb@5,1g.5gb@6",
		"3g.20gb@4,2g.10gb@0,1g.5gb@2,1g.5gb@3",
		"3g.20gb@4,2g.10gb@0,2g.10gb@2",
		"3g.20gb@0,1g.5gb@4,1g.5gb@5,1g.5gb@6",
		"2g.10gb@0,2g.10gb@2,2g.10gb@4,1g.5gb@6",
		"1g.5gb@0,1g.5gb@1,1g.5gb@2,1g.5gb@3,1g.5gb@4,1g.5gb@5,1g.5gb@6",
		"1g.10gb@0,1g.10gb@2,1g.10gb@4,1g.10gb@6",
		"1g.10gb@6,1g.5gb@0,1g.5gb@1,1g.5gb@2,1g.5gb@3,1g.5gb@4,1g.5gb@5",
	}
	for _, s := range valid {
		if err := g.Validate(mustParse(t, s)); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	invalid := map[string]string{
		"3g.20gb@0,1g.5gb@3":      "1g.5gb@3 overlaps 3g.20gb@0 on memory slice 3",
		"4g.20gb@0,4g.20gb@0":     "4g.20gb@0 overlaps 4g.20gb@0 on memory slices 0-3",
		"1g.5gb+me@0,1g.5gb+me@1": "1g.5gb+me@0 and 1g.5gb+me@1: at most one +me profile per GPU",
		"1g.5gb@7":                "1g.5gb@7: start 7 is not allowed; 1g.5gb may start at {0,1,2,3,4,5,6}:1",
		"3g.20gb@2":               "may start at {0,4}:4",
		"1g.5gb@0,1g.5gb@1,1g.5gb@2,1g.5gb@3,1g.5gb@4,1g.5gb@5,1g.5gb@6,2g.10gb@6": "2g.10gb@6",
		"2g.20gb@0": `unknown MIG profile of A100-40GB "2g.20gb"`,
	}
	for s, want := range invalid {
		err := g.Validate(mustParse(t, s))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error containing %q", s, err, want)
		}
	}
}

func TestA100MaximalCount(t *testing.T) {
	g := geometry(t, "A100-40GB")
	if n := len(g.MaximalLayouts(false)); n != 38 {
		t.Fatalf("A100-40GB has %d maximal multisets without +me, the reference derives 38", n)
	}
}

// NVIDIA's own example: 3g+2g+1g+1g fails with automatic placement unless
// the 3g is created first. Fit must find explicit starts, 3g first.
func TestFitNVIDIAExample(t *testing.T) {
	g := geometry(t, "A100-40GB")
	res, err := g.Fit([]string{"1g.5gb", "2g.10gb", "1g.5gb", "3g.20gb"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Layout[0].Profile != "3g.20gb" {
		t.Fatalf("creation order %s does not start with the 3g", res.Layout)
	}
	if err := g.Validate(res.Layout); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Fit([]string{"4g.20gb", "4g.20gb"}); !IsNoFit(err) || !strings.Contains(err.Error(), "2× 4g.20gb but at most 1 fit") {
		t.Fatalf("4g+4g: %v", err)
	}
	// Next to a badly placed 1g at slice 0 no 4g fits: 4g may only start
	// at 0. The search proves it.
	if _, err := g.FitInto(mustParse(t, "1g.5gb@0"), []string{"4g.20gb", "2g.10gb"}); !IsNoFit(err) || !strings.Contains(err.Error(), "every arrangement") {
		t.Fatalf("4g+2g next to 1g@0: %v", err)
	}
}

// On an empty GPU of every catalog model, the count limits (per profile,
// +me, memory slices, compute slices, instances) decide alone whether a
// multiset fits: the exhaustive search never finds a multiset within the
// limits that it cannot place. Fit still searches; this pins down the fact.
func TestFitFromEmptyIsDecidedByLimits(t *testing.T) {
	for model, g := range migModels(t) {
		var rec func(from int, cur []string)
		rec = func(from int, cur []string) {
			if len(cur) > 0 {
				if _, err := g.Fit(cur); err != nil && strings.Contains(err.Error(), "every arrangement") {
					t.Fatalf("%s: %v within limits but unplaceable", model, cur)
				}
			}
			if len(cur) == g.MaxInstances {
				return
			}
			for p := from; p < len(g.Shapes); p++ {
				rec(p, append(cur, g.Shapes[p].Name))
			}
		}
		rec(0, nil)
	}
}

func TestPlaceKeepsBigProfilesPossible(t *testing.T) {
	g := geometry(t, "A100-40GB")
	p, err := g.Place(nil, "1g.5gb")
	if err != nil {
		t.Fatal(err)
	}
	// At 4 the 1g leaves room for a 4g at 0 and a 3g at 0, and 1g@5,
	// 1g@6 next to either: the most combinations (Room). At 6 Capacity
	// is higher (a 2g still fits at 4) but fewer combinations remain.
	if p.Instance.Start != 4 {
		t.Fatalf("1g.5gb on an empty A100 placed at %d, want 4", p.Instance.Start)
	}
	h := geometry(t, "H100-80GB-SXM")
	// 2g starts at 0, 2 or 4 only: next to 3g@0 and 1g@4 nothing is left,
	// and the error names the blocker of every start.
	_, err = h.Place(mustParse(t, "3g.40gb@0,1g.10gb@4"), "2g.20gb")
	if !IsNoFit(err) || !strings.Contains(err.Error(), "start 4 blocked by 1g.10gb@4") {
		t.Fatalf("2g.20gb next to 3g@0 and 1g@4: %v", err)
	}
	p, err = h.Place(mustParse(t, "3g.40gb@0,1g.10gb@4"), "1g.20gb")
	if err != nil || p.Instance.Start != 6 {
		t.Fatalf("1g.20gb next to 3g@0 and 1g@4: %+v %v, want start 6", p, err)
	}
	p, err = h.Place(mustParse(t, "3g.40gb@0,1g.10gb@6"), "2g.20gb")
	if err != nil || p.Instance.Start != 4 {
		t.Fatalf("2g.20gb next to 3g@0 and 1g@6: %+v %v, want start 4", p, err)
	}
	_, err = h.Place(mustParse(t, "4g.40gb@0,3g.40gb@4"), "1g.10gb")
	if !IsNoFit(err) || !strings.Contains(err.Error(), "compute slices") {
		t.Fatalf("full H100: %v", err)
	}
}

func TestEvictNeverTouchesInUse(t *testing.T) {
	g := geometry(t, "A100-40GB")
	have := []Held{
		{Instance{"3g.20gb", 0}, true},
		{Instance{"1g.5gb", 4}, false},
		{Instance{"1g.5gb", 5}, true},
		{Instance{"1g.5gb", 6}, false},
	}
	if _, err := g.Evict(have, "2g.10gb"); !IsNoFit(err) {
		t.Fatalf("2g.10gb: every start overlaps an in-use instance, got %v", err)
	}
	plan, err := g.Evict(have, "1g.10gb")
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Destroy) != 1 || plan.Destroy[0] != (Instance{"1g.5gb", 6}) || plan.Place != (Instance{"1g.10gb", 6}) {
		t.Fatalf("1g.10gb should replace the idle 1g.5gb@6: got %+v", plan)
	}
	_, err = g.Evict(have, "3g.20gb")
	if !IsNoFit(err) || !strings.Contains(err.Error(), "start 4 overlaps in-use 1g.5gb@5") {
		t.Fatalf("3g with a busy 1g at 5: %v", err)
	}
	have[2].InUse = false
	plan, err = g.Evict(have, "3g.20gb")
	if err != nil || len(plan.Destroy) != 3 || plan.Place.Start != 4 {
		t.Fatalf("3g after freeing: %+v %v", plan, err)
	}
}

func TestEveryCatalogModelBuilds(t *testing.T) {
	for model, g := range migModels(t) {
		if g.Capacity(Occupancy{}) == 0 {
			t.Errorf("%s: empty GPU has no capacity", model)
		}
		if len(g.MaximalLayouts(false)) == 0 {
			t.Errorf("%s: no maximal layouts", model)
		}
	}
}

func TestParseLayout(t *testing.T) {
	l, err := ParseLayout(" 3g.40gb@0, 1g.10gb@4 ")
	if err != nil || l.String() != "3g.40gb@0,1g.10gb@4" {
		t.Fatalf("got %v %v", l, err)
	}
	for _, bad := range []string{"3g.40gb", "3g.40gb@x", "3g@0", "3g.40gb@-1", "@0", "3g.40gb@0,,1g.10gb@4", "0g.5gb@0"} {
		if _, err := ParseLayout(bad); err == nil {
			t.Errorf("ParseLayout(%q) accepted", bad)
		}
	}
}

func TestParseProfileName(t *testing.T) {
	ok := map[string]ProfileName{
		"1g.5gb":     {ComputeSlices: 1, MemoryGB: 5},
		"1g.10gb+me": {ComputeSlices: 1, MemoryGB: 10, Suffix: "+me"},
		"1c.3g.20gb": {ComputeInstanceSlices: 1, ComputeSlices: 3, MemoryGB: 20},
		"2g.48gb-me": {ComputeSlices: 2, MemoryGB: 48, Suffix: "-me"},
		"7G.80GB":    {ComputeSlices: 7, MemoryGB: 80},
	}
	for in, want := range ok {
		got, err := ParseProfileName(in)
		if err != nil || got != want {
			t.Errorf("ParseProfileName(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "1g", "g.5gb", "1g.5", "01g.5gb", "4c.3g.20gb", "1g.5gb+xx", "1g.5gb.1"} {
		if _, err := ParseProfileName(bad); err == nil {
			t.Errorf("ParseProfileName(%q) accepted", bad)
		}
	}
}

func FuzzParseLayout(f *testing.F) {
	for _, s := range []string{"3g.40gb@0,1g.10gb@4", "", "1g.5gb+me@6", "7g.80gb@0", "x@y", "1g.5gb@99"} {
		f.Add(s)
	}
	g := geometry(f, "A100-40GB")
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseLayout(s)
		if err != nil {
			return
		}
		// Round trip, and the geometry never panics on a parsed layout.
		again, err := ParseLayout(l.String())
		if err != nil || again.String() != l.String() {
			t.Fatalf("round trip of %q: %q, %v", s, again, err)
		}
		_ = g.Validate(l)
		_, _ = g.Place(l, "1g.5gb")
	})
}

func FuzzParseProfileName(f *testing.F) {
	for _, s := range []string{"1g.5gb", "1c.3g.20gb", "1g.24gb+me.all", "", "9999g.1gb"} {
		f.Add(s)
	}
	g := geometry(f, "H100-80GB-SXM")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseProfileName(s)
		if err == nil && (p.ComputeSlices <= 0 || p.MemoryGB <= 0) {
			t.Fatalf("%q parsed to %+v", s, p)
		}
		_, _ = g.Profile(s)
		_, _ = g.Fit([]string{s})
	})
}
