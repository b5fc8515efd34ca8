package mig

import (
	"testing"
)

// Benchmarks for the geometry questions; results are recorded in
// BENCHMARKS.md. Run: go test -run '^$' -bench . -benchmem ./internal/mig/

func BenchmarkPlace(b *testing.B) {
	for _, tc := range []struct{ model, have, want string }{
		{"A100-40GB", "", "1g.5gb"},
		{"A100-40GB", "3g.20gb@4,1g.5gb@0", "2g.10gb"},
		{"H100-80GB-SXM", "3g.40gb@0,1g.10gb@6", "2g.20gb"},
		{"B200-180GB", "1g.23gb@6,2g.45gb@0", "1g.45gb"},
		{"A30", "1g.6gb@3", "2g.12gb"},
	} {
		g := geometry(b, tc.model)
		have := mustParse(b, tc.have)
		b.Run(tc.model+"/"+tc.want, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := g.Place(have, tc.want); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBestStart is the allocator's hot path: an occupancy kept per GPU
// and a profile index, no parsing, no allocation.
func BenchmarkBestStart(b *testing.B) {
	g := geometry(b, "H100-80GB-SXM")
	o, err := g.Occupancy(mustParse(b, "3g.40gb@0,1g.10gb@6"))
	if err != nil {
		b.Fatal(err)
	}
	p, _ := g.Profile("1g.10gb")
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := g.BestStart(o, p); !ok {
			b.Fatal("no start")
		}
	}
}

func BenchmarkFit(b *testing.B) {
	g := geometry(b, "A100-40GB")
	want := []string{"3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.Fit(want); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEvict(b *testing.B) {
	g := geometry(b, "A100-40GB")
	have := []Held{
		{Instance{"2g.10gb", 0}, false}, {Instance{"1g.5gb", 2}, true}, {Instance{"1g.5gb", 3}, false},
		{Instance{"1g.5gb", 4}, false}, {Instance{"1g.5gb", 5}, false}, {Instance{"1g.5gb", 6}, false},
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.Evict(have, "3g.20gb"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkNew(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		geometry(b, "H100-80GB-SXM")
	}
}
