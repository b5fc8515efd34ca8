package catalog

import (
	"slices"
	"strings"
	"testing"
)

// The placement table of the reference (gpu-facts.md §1.1), by profile
// class: memory slices, compute slices, +me.
type class struct {
	mem, compute int
	me           bool
}

var eightSlice = map[class]struct {
	starts   []int
	size     int
	maxCount int
}{
	{1, 1, false}: {[]int{0, 1, 2, 3, 4, 5, 6}, 1, 7},
	{1, 1, true}:  {[]int{0, 1, 2, 3, 4, 5, 6}, 1, 1},
	{2, 1, false}: {[]int{0, 2, 4, 6}, 2, 4},
	{2, 2, false}: {[]int{0, 2, 4}, 2, 3},
	{4, 3, false}: {[]int{0, 4}, 4, 2},
	{4, 4, false}: {[]int{0}, 4, 1},
	{8, 7, false}: {[]int{0}, 8, 1},
}

var fourSlice = map[class][]int{
	{1, 1, false}: {0, 1, 2, 3},
	{1, 1, true}:  {0, 1, 2, 3},
	{2, 2, false}: {0, 2},
	{2, 2, true}:  {0, 2},
	{4, 4, false}: {0},
}

func TestPlacementsFollowReferenceTable(t *testing.T) {
	for _, g := range Default().GPUs() {
		if g.MIG == nil {
			continue
		}
		for _, p := range g.MIG.Profiles {
			c := class{p.MemorySlices, p.ComputeSlices, p.MediaExtensions}
			switch g.MIG.MemorySlices {
			case 8:
				want, ok := eightSlice[c]
				if !ok || !slices.Equal(p.Placement.Starts, want.starts) || p.Placement.Size != want.size || p.MaxCount != want.maxCount {
					t.Errorf("%s %s: placement %v:%d ×%d, want %v:%d ×%d", g.ID, p.Name,
						p.Placement.Starts, p.Placement.Size, p.MaxCount, want.starts, want.size, want.maxCount)
				}
			case 4:
				want, ok := fourSlice[c]
				if !ok || !slices.Equal(p.Placement.Starts, want) || p.Placement.Size != p.MemorySlices {
					t.Errorf("%s %s: placement %v:%d, want %v:%d", g.ID, p.Name, p.Placement.Starts, p.Placement.Size, want, p.MemorySlices)
				}
			default:
				t.Errorf("%s: unexpected %d memory slices", g.ID, g.MIG.MemorySlices)
			}
		}
	}
}

func TestKnownFacts(t *testing.T) {
	c := Default()
	get := func(gpu, profile string) (*GPU, *Profile) {
		t.Helper()
		g, err := c.GPU(gpu)
		if err != nil {
			t.Fatal(err)
		}
		if profile == "" {
			return g, nil
		}
		p, err := g.Profile(profile)
		if err != nil {
			t.Fatal(err)
		}
		return g, p
	}
	// A100-40GB's 1g.10gb takes two memory slices; A100-80GB's 1g.10gb one.
	if _, p := get("A100-40GB", "1g.10gb"); p.MemorySlices != 2 || p.GIProfileID != 15 || p.NVMLProfile != 9 {
		t.Errorf("A100-40GB 1g.10gb = %+v", p)
	}
	if _, p := get("A100-80GB", "1g.10gb"); p.MemorySlices != 1 || p.GIProfileID != 19 || p.NVMLProfile != 0 {
		t.Errorf("A100-80GB 1g.10gb = %+v", p)
	}
	if _, p := get("A100-80GB", "1g.20gb"); p.MemorySlices != 2 || p.Confidence != Inferred {
		t.Errorf("A100-80GB 1g.20gb = %+v", p)
	}
	if g, _ := get("H100-NVL-94GB", ""); g.MemoryMiB != 95830 || g.MIG.MaxInstances != 7 {
		t.Errorf("H100 NVL = %+v", g)
	}
	if _, p := get("NVIDIA H100 80GB HBM3", "3g.40gb"); p.SMs != 60 || p.MemoryMiB != 40448 || p.MemoryEstimated {
		t.Errorf("H100 3g.40gb = %+v", p)
	}
	if g, p := get("A30", "2g.12gb+me"); g.MIG.MaxInstances != 4 || p.GIProfileID != 6 || p.NVMLProfile != 8 || !p.MediaExtensions {
		t.Errorf("A30 2g.12gb+me = %+v", p)
	}
	if g, _ := get("RTX-PRO-6000-Blackwell", ""); g.MIG.MaxInstances != 4 ||
		!slices.Equal(g.ProfileNames(), []string{"1g.24gb", "1g.24gb+me", "2g.48gb", "4g.96gb"}) {
		t.Errorf("RTX PRO 6000 profiles = %v", g.ProfileNames())
	}
	// B200 per-profile SMs and memory are unknown: 0 and estimated.
	if _, p := get("B200-180GB", "1g.23gb"); p.SMs != 0 || !p.MemoryEstimated || p.MemoryMiB != 23040 {
		t.Errorf("B200 1g.23gb = %+v", p)
	}
	for _, id := range []string{"T4", "L40S", "L4", "A10G", "V100-16GB", "V100-32GB"} {
		if g, _ := get(id, ""); g.MIG != nil {
			t.Errorf("%s has MIG", id)
		}
	}
}

func TestUnknownsAreNotInvented(t *testing.T) {
	for _, g := range Default().GPUs() {
		if g.MIG == nil {
			continue
		}
		m := g.MIG
		for _, p := range m.Profiles {
			if (p.GIProfileID < 0) != (m.ProfileIDConfidence == Unknown) {
				t.Errorf("%s %s: giProfileID %d with profileIDConfidence %s", g.ID, p.Name, p.GIProfileID, m.ProfileIDConfidence)
			}
			if p.MemoryEstimated && p.Confidence == Verified && strings.Contains(p.Note, "memory") {
				t.Errorf("%s %s: estimated memory noted as verified", g.ID, p.Name)
			}
		}
		// Models whose placements no real -lgipp showed must say so.
		verified := map[string]bool{"A100-40GB": true, "A100-80GB": true, "H100-80GB-SXM": true, "H100-NVL-94GB": true}
		if !verified[g.ID] && m.PlacementConfidence == Verified {
			t.Errorf("%s: placements marked verified", g.ID)
		}
	}
	for _, it := range mustInstanceTypes(t, "") {
		if it.Price != nil && it.Price.Confidence != Secondary {
			t.Errorf("%s: price confidence %s, the reference's prices are secondary", it.Name, it.Price.Confidence)
		}
	}
	p5e, err := Default().InstanceType("p5e.48xlarge")
	if err != nil || p5e.Price != nil {
		t.Errorf("p5e.48xlarge = %+v, %v; its on-demand price is unknown", p5e, err)
	}
}

func mustInstanceTypes(t *testing.T, provider string) []InstanceType {
	t.Helper()
	its, err := Default().InstanceTypes(provider)
	if err != nil {
		t.Fatal(err)
	}
	return its
}
