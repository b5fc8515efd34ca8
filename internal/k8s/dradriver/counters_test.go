package dradriver

import (
	"fmt"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
	"github.com/gpuslice/gpuslice/internal/mig"
)

// gpuSets counts the sets of one GPU's devices the published counters
// allow (the stock allocator's rule: a device fits when every counter it
// consumes has that much left) and fails the test on the first one the
// placement rules refuse: two MIG placements that overlap or break a
// count limit, or a whole GPU, shared GPU or tenant copy beside anything.
func gpuSets(t *testing.T, geo *mig.Geometry, set resourceapi.CounterSet, devs []resourceapi.Device) int {
	t.Helper()
	left := map[string]int64{}
	for k, c := range set.Counters {
		left[k] = c.Value.Value()
	}
	var chosen []string
	n := 0
	var dfs func(from int, occ mig.Occupancy, other int)
	dfs = func(from int, occ mig.Occupancy, other int) {
		n++
		for k := from; k < len(devs); k++ {
			d := devs[k]
			use := d.ConsumesCounters[0].Counters
			fits := true
			for c, q := range use {
				if _, ok := left[c]; !ok {
					t.Fatalf("%s consumes %s, which the set lacks", d.Name, c)
				}
				fits = fits && left[c] >= q.Value.Value()
			}
			if !fits {
				continue
			}
			next, nextOther := occ, other
			if *d.Attributes["type"].StringValue == dranames.TypeMIG {
				p, err := geo.Profile(*d.Attributes["profile"].StringValue)
				if err != nil {
					t.Fatal(err)
				}
				start := int(*d.Attributes["start"].IntValue)
				if other > 0 || !geo.CanAdd(occ, p, start) {
					t.Fatalf("%s: the counters allow %s beside %v, the placement rules do not", geo.Model, d.Name, chosen)
				}
				next = geo.Add(occ, p, start)
			} else {
				if other > 0 || occ.Instances > 0 {
					t.Fatalf("%s: the counters allow %s beside %v", geo.Model, d.Name, chosen)
				}
				nextOther++
			}
			for c, q := range use {
				left[c] -= q.Value.Value()
			}
			chosen = append(chosen, d.Name)
			dfs(k+1, next, nextOther)
			chosen = chosen[:len(chosen)-1]
			for c, q := range use {
				left[c] += q.Value.Value()
			}
		}
	}
	dfs(0, mig.Occupancy{}, 0)
	return n
}

// validLayouts counts the MIG layouts the placement rules allow among the
// published profiles (the empty one included).
func validLayouts(geo *mig.Geometry, publish func(string) bool) int {
	type pl struct{ p, start int }
	var ps []pl
	for p, s := range geo.Shapes {
		if publish(s.Name) {
			for _, st := range s.Starts {
				ps = append(ps, pl{p, st})
			}
		}
	}
	n := 0
	var dfs func(from int, occ mig.Occupancy)
	dfs = func(from int, occ mig.Occupancy) {
		n++
		for k := from; k < len(ps); k++ {
			if geo.CanAdd(occ, ps[k].p, ps[k].start) {
				dfs(k+1, geo.Add(occ, ps[k].p, ps[k].start))
			}
		}
	}
	dfs(0, mig.Occupancy{})
	return n
}

// Every set of one GPU's devices the published counters allow is one the
// placement rules allow, and there are as many: the cheaper counters
// (fewer per device, see counters.go) allow exactly the valid layouts,
// for every MIG-capable model of the catalog, with all profiles or a few,
// with the shared GPU or three tenants' copies of it. Exhaustive.
func TestCountersAllowExactlyTheValidSets(t *testing.T) {
	t.Parallel()
	cat := catalog.Default()
	models := 0
	for _, mm := range cat.GPUs() {
		m := &mm
		if m.MIG == nil {
			continue
		}
		models++
		geo, err := mig.New(m)
		if err != nil {
			t.Fatal(err)
		}
		names := geo.ProfileNames()
		for _, profiles := range [][]string{nil, {names[0]}, {names[0], names[len(names)-1]}, names[1:], {}} {
			for _, tenants := range [][]string{nil, {"a", "b", "c"}} {
				t.Run(fmt.Sprintf("%s/%v/%d", m.ID, profiles, len(tenants)), func(t *testing.T) {
					out, err := SlicesFor(node("n", m.ID, 1), 1, "", cat, Options{TenantIsolation: tenants != nil, Tenants: tenants, MIGProfiles: profiles})
					if err != nil {
						t.Fatal(err)
					}
					var set resourceapi.CounterSet
					var devs []resourceapi.Device
					for _, s := range out {
						if len(s.Spec.SharedCounters) > 0 {
							set = s.Spec.SharedCounters[0]
						}
						devs = append(devs, s.Spec.Devices...)
					}
					publish := func(p string) bool {
						if profiles == nil {
							return true
						}
						for _, q := range profiles {
							if q == p {
								return true
							}
						}
						return false
					}
					migs := 0
					for _, d := range devs {
						if *d.Attributes["type"].StringValue == dranames.TypeMIG {
							migs++
							if !publish(*d.Attributes["profile"].StringValue) {
								t.Fatalf("%s published, profiles %v", d.Name, profiles)
							}
						}
					}
					got := gpuSets(t, geo, set, devs)
					want := validLayouts(geo, publish) + len(devs) - migs
					if got != want {
						t.Fatalf("the counters allow %d sets of devices, the rules %d", got, want)
					}
					t.Logf("%d MIG devices, %d counters, %d sets", migs, len(set.Counters), got)
				})
			}
		}
	}
	if models < 3 {
		t.Fatalf("only %d MIG-capable models", models)
	}
}

func TestParseMIGProfiles(t *testing.T) {
	for in, want := range map[string]string{"": "[]", "all": "[]", " none ": "[]", "3g.20gb, 1g.5gb,1g.5gb": "[1g.5gb 3g.20gb]", "7g.80gb,": "[7g.80gb]"} {
		got, err := ParseMIGProfiles(in, nil)
		if err != nil || fmt.Sprint(got) != want {
			t.Errorf("%q: %v, %v; want %s", in, got, err, want)
		}
	}
	if got, _ := ParseMIGProfiles("all", nil); got != nil {
		t.Errorf("all: %v, want nil", got)
	}
	if got, _ := ParseMIGProfiles("none", nil); got == nil || len(got) != 0 {
		t.Errorf("none: %v, want empty", got)
	}
	for in, want := range map[string]string{"1g.5gbb": "did you mean", "all,1g.5gb": "stands alone", ",": "no profile named", "3g": "no MIG-capable GPU"} {
		if _, err := ParseMIGProfiles(in, nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error with %q", in, err, want)
		}
	}
}

func FuzzParseMIGProfiles(f *testing.F) {
	for _, s := range []string{"", "all", "none", "1g.5gb,3g.20gb", "x,,y", "7g.40gb+me"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseMIGProfiles(s, nil)
		if err != nil {
			return
		}
		if _, err := SlicesFor(node("n", "A100-40GB", 1), 1, "", nil, Options{MIGProfiles: got}); err != nil {
			t.Fatalf("%q → %v: %v", s, got, err)
		}
	})
}
