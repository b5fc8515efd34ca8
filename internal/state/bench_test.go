package state

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/gpuslice/gpuslice/internal/api"
)

// BenchmarkCreateClaim measures one Update with one CreateClaim (an
// allocated claim with a full allocation), serially and from many
// goroutines (64 on 2 cores: SetParallelism(32)), and reports claims/s;
// for SQLite also the claims per group-committed transaction.
//
//	go test -run '^$' -bench CreateClaim -benchtime 3s ./internal/state/
func BenchmarkCreateClaim(b *testing.B) {
	for _, be := range backends() {
		b.Run(be.name+"/serial", func(b *testing.B) {
			s := be.open(b)
			i := 0
			for b.Loop() {
				c := sampleClaim(fmt.Sprintf("c-%d", i), "acme", api.Allocated, "n1")
				i++
				if err := s.Update(ctx, func(tx Tx) error { return tx.CreateClaim(&c) }); err != nil {
					b.Fatal(err)
				}
			}
			report(b, s)
		})
		b.Run(be.name+"/parallel", func(b *testing.B) {
			s := be.open(b)
			var n atomic.Int64
			b.SetParallelism(32)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					c := sampleClaim(fmt.Sprintf("c-%d", n.Add(1)), "acme", api.Allocated, "n1")
					if err := s.Update(ctx, func(tx Tx) error { return tx.CreateClaim(&c) }); err != nil {
						b.Error(err)
						return
					}
				}
			})
			report(b, s)
		})
	}
}

func report(b *testing.B, s Store) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "claims/s")
	if sq, ok := s.(*SQLite); ok {
		if st := sq.Stats(); st.Batches > 0 {
			b.ReportMetric(float64(st.Updates)/float64(st.Batches), "claims/txn")
		}
	}
}
