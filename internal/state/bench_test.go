package state

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

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

// BenchmarkPruneEvents measures one prune transaction (PruneEvents with
// the server's defaults: keep 100,000, a batch of 1,000) on a store that
// holds a million events: "backlog" deletes a full batch each time (a
// store far past its bound, as after an upgrade), "at-bound" finds 100,001
// events and deletes one (the steady state: the walk of the newest
// 100,000 is the cost). It reports ms per prune transaction.
//
//	go test -run '^$' -bench PruneEvents -benchtime 50x ./internal/state/
func BenchmarkPruneEvents(b *testing.B) {
	const total, keep, batch = 1_000_000, 100_000, 1000
	for _, be := range backends() {
		b.Run(be.name+"/backlog", func(b *testing.B) {
			s := be.open(b)
			fillEvents(b, s, total)
			b.ResetTimer()
			for b.Loop() {
				var n int
				err := s.Update(ctx, func(tx Tx) (err error) {
					n, err = tx.PruneEvents(time.Time{}, keep, batch)
					return err
				})
				if err != nil || n != batch {
					b.Fatalf("pruned %d: %v", n, err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/prune")
		})
		b.Run(be.name+"/at-bound", func(b *testing.B) {
			s := be.open(b)
			fillEvents(b, s, keep)
			next := t0.Add(keep * time.Second)
			b.ResetTimer()
			for b.Loop() {
				var n int
				next = next.Add(time.Second)
				err := s.Update(ctx, func(tx Tx) (err error) {
					if err := tx.AppendEvent(&api.Event{Time: next, Kind: "k", Message: "one more"}); err != nil {
						return err
					}
					n, err = tx.PruneEvents(time.Time{}, keep, batch)
					return err
				})
				if err != nil || n != 1 {
					b.Fatalf("pruned %d: %v", n, err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/prune")
		})
	}
}

// fillEvents appends n events a second apart, 10,000 per transaction.
func fillEvents(b *testing.B, s Store, n int) {
	b.Helper()
	for i := 0; i < n; {
		err := s.Update(ctx, func(tx Tx) error {
			for j := 0; j < 10_000 && i < n; j, i = j+1, i+1 {
				e := &api.Event{Time: t0.Add(time.Duration(i) * time.Second), Kind: "claim-created", Claim: fmt.Sprintf("c-%d", i),
					Tenant: "acme", Node: "n1", Message: "1 × 10240 MiB MPS on GPU-1 (25% compute)"}
				if err := tx.AppendEvent(e); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPruneClaims is the steady state of claim retention: 100,000
// final claims (the default bound) and 1,000 live ones; each transaction
// releases one more claim and prunes (keep 100,000, batch 1,000), which
// deletes the one that ended first. It reports ms per prune transaction.
//
//	go test -run '^$' -bench PruneClaims -benchtime 50x ./internal/state/
func BenchmarkPruneClaims(b *testing.B) {
	const final, live, keep, batch = 100_000, 1000, 100_000, 1000
	for _, be := range backends() {
		b.Run(be.name+"/at-bound", func(b *testing.B) {
			s := be.open(b)
			for i := 0; i < final+live; {
				err := s.Update(ctx, func(tx Tx) error {
					for j := 0; j < 10_000 && i < final+live; j, i = j+1, i+1 {
						st := api.Released
						if i < live {
							st = api.Running
						}
						c := sampleClaim(fmt.Sprintf("c-%d", i), "acme", st, "n1")
						c.Updated = t0.Add(time.Duration(i) * time.Second)
						if err := tx.CreateClaim(&c); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			i := 0
			for b.Loop() {
				var n int
				i++
				err := s.Update(ctx, func(tx Tx) (err error) {
					c := sampleClaim(fmt.Sprintf("more-%d", i), "acme", api.Released, "n1")
					c.Updated = t0.Add(time.Duration(final+live+i) * time.Second)
					if err := tx.CreateClaim(&c); err != nil {
						return err
					}
					n, err = tx.PruneClaims(time.Time{}, keep, batch)
					return err
				})
				if err != nil || n != 1 {
					b.Fatalf("pruned %d: %v", n, err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/prune")
		})
	}
}
