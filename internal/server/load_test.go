package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/agent"
	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/gpu/fake"
	"github.com/gpuslice/gpuslice/internal/server"
	"github.com/gpuslice/gpuslice/internal/state"
)

// BenchmarkLoad is the load test: 32 clients over loopback HTTP create
// claims against a server on SQLite (WAL, synchronous=FULL: every 201 is
// durable) with 64 simulated H100s, until b.N claims exist (those that do
// not fit are queued, also durably). Client and server share the machine's
// 2 cores. Reports claims/s and p50/p99 latency of the POST.
//
//	go test -run '^$' -bench Load -benchtime 4000x ./internal/server/
func BenchmarkLoad(b *testing.B) {
	for _, backend := range []string{"sqlite", "memory"} {
		b.Run(backend, func(b *testing.B) {
			var store state.Store
			if backend == "sqlite" {
				db, err := state.OpenSQLite(filepath.Join(b.TempDir(), "load.db"), state.SQLiteOptions{})
				if err != nil {
					b.Fatal(err)
				}
				store = db
			} else {
				store = state.NewMemory()
			}
			defer store.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			srv, err := server.New(ctx, server.Config{Store: store, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				b.Fatal(err)
			}
			srv.Run(ctx)
			hs := httptest.NewServer(srv.Handler())
			defer hs.Close()
			admin, _ := srv.CreateToken(ctx, api.RoleAdmin, "")
			ac, _ := client.New(hs.URL, admin.Secret, nil)
			for i := 0; i < 8; i++ {
				if err := ac.Do(ctx, "PUT", fmt.Sprintf("/v1/tenants/t%d", i), api.Tenant{}, nil); err != nil {
					b.Fatal(err)
				}
			}
			for n := 0; n < 8; n++ {
				spec, _ := fake.Preset("dgx-h100")
				m, _ := fake.New(spec, fake.WithSeed(int64(n+1)))
				agentTok, _ := srv.CreateTokenFor(ctx, api.RoleAgent, "", fmt.Sprintf("n%d", n))
				c, _ := client.New(hs.URL, agentTok.Secret, nil)
				a, _ := agent.New(agent.Config{Name: fmt.Sprintf("n%d", n), Client: c, Device: m, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
				if err := a.Register(ctx); err != nil {
					b.Fatal(err)
				}
			}
			const workers = 32
			lat := make([][]time.Duration, workers)
			var next, placed int64
			var mu sync.Mutex
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for w := 0; w < workers; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					c, _ := client.New(hs.URL, admin.Secret, nil)
					for {
						mu.Lock()
						if next >= int64(b.N) {
							mu.Unlock()
							return
						}
						next++
						mu.Unlock()
						spec := api.ClaimSpec{Isolation: alloc.IsolationNone,
							Requests: []alloc.Request{{Name: "gpu", MemoryMiB: int64(1024 * (1 + w%4)), ComputePercent: 5, Mode: alloc.MPS}}}
						t0 := time.Now()
						cl, err := c.CreateClaim(ctx, fmt.Sprintf("t%d", w%8), spec)
						lat[w] = append(lat[w], time.Since(t0))
						if err != nil {
							b.Error(err)
							return
						}
						if cl.State == api.Allocated {
							mu.Lock()
							placed++
							mu.Unlock()
						}
					}
				}(w)
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			var all []time.Duration
			for _, l := range lat {
				all = append(all, l...)
			}
			slices.Sort(all)
			if len(all) > 0 {
				b.ReportMetric(float64(len(all))/elapsed.Seconds(), "claims/s")
				b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
				b.ReportMetric(float64(placed)/float64(len(all))*100, "allocated-%")
			}
		})
	}
}
