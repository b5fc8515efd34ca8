package alloc

import (
	"math/rand/v2"
	"testing"
)

// The index keeps no class without members: an idle shape or a MIG
// occupancy no device or GPU has any more leaves it, so a search walks
// only classes that exist (decisions are the same either way: the
// property tests hold the indexed search to a full scan).
func TestIndexDropsEmptyClasses(t *testing.T) {
	for seed := range 10 {
		rng := rand.New(rand.NewPCG(uint64(seed), 13))
		s, err := NewState(randomFleet(rng), nil, Options{})
		if err != nil {
			t.Fatal(err)
		}
		var live []string
		for step := range 200 {
			if len(live) > 0 && rng.IntN(3) == 0 {
				k := rng.IntN(len(live))
				if err := s.Release(live[k]); err != nil {
					t.Fatal(err)
				}
				live = append(live[:k], live[k+1:]...)
			} else if a, err := s.Allocate(randomClaim(rng, step)); err == nil {
				if err := s.Apply(a); err != nil {
					t.Fatal(err)
				}
				live = append(live, a.Claim)
			}
			for key, tiers := range s.idx.idle {
				if tiers[tierGPU].empty() && tiers[tierNode].empty() && tiers[tierNone].empty() {
					t.Fatalf("seed %d step %d: idle class %+v has no device", seed, step, key)
				}
			}
			for fk, byOcc := range s.idx.free {
				for occ, cl := range byOcc {
					if cl.tiers[tierGPU].empty() && cl.tiers[tierNode].empty() && cl.tiers[tierNone].empty() {
						t.Fatalf("seed %d step %d: %v occupancy %+v has no GPU", seed, step, fk, occ)
					}
				}
			}
		}
		if err := s.Check(); err != nil {
			t.Fatal(err)
		}
	}
}
