package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
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

// BenchmarkHostileStreams is issue 25's attack: one tenant token opens 300
// event streams (GET /v1/events?since=0) on a server over SQLite (default
// pool of 4 read connections) that holds 6,000 events (half of them the
// hostile tenant's), while another tenant creates and releases claims
// (new events, every commit a wake-up). Each op is one agent read of its
// node's claims (GET /v1/nodes/{n}/claims) and one read of another
// tenant's claims (GET /v1/claims), timed apart; p50/p99 of each are
// reported, and how many of the 300 streams the server let open.
// "capped" runs with the default caps (16 per token, 64 per tenant),
// "uncapped" with none (every stream open: the reads alone).
//
//	go test -run '^$' -bench HostileStreams -benchtime 200x ./internal/server/
func BenchmarkHostileStreams(b *testing.B) {
	for _, capped := range []bool{true, false} {
		name := "uncapped"
		if capped {
			name = "capped"
		}
		b.Run(name, func(b *testing.B) { benchHostileStreams(b, capped) })
	}
}

func benchHostileStreams(b *testing.B, capped bool) {
	const streams = 300
	db, err := state.OpenSQLite(filepath.Join(b.TempDir(), "hostile.db"), state.SQLiteOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := server.Config{Store: db, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	streamCaps(&cfg, capped)
	srv, err := server.New(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	srv.Run(ctx)
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	admin, _ := srv.CreateToken(ctx, api.RoleAdmin, "")
	ac, _ := client.New(hs.URL, admin.Secret, nil)
	for _, t := range []string{"evil", "good", "churn"} {
		if err := ac.Do(ctx, "PUT", "/v1/tenants/"+t, api.Tenant{}, nil); err != nil {
			b.Fatal(err)
		}
	}
	evil, _ := srv.CreateToken(ctx, api.RoleTenant, "evil")
	good, _ := srv.CreateToken(ctx, api.RoleTenant, "good")
	churn, _ := srv.CreateToken(ctx, api.RoleTenant, "churn")
	spec, _ := fake.Preset("dgx-h100")
	m, _ := fake.New(spec, fake.WithSeed(1))
	agentTok, _ := srv.CreateTokenFor(ctx, api.RoleAgent, "", "n0")
	agc, _ := client.New(hs.URL, agentTok.Secret, nil)
	ag, _ := agent.New(agent.Config{Name: "n0", Client: agc, Device: m, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := ag.Register(ctx); err != nil {
		b.Fatal(err)
	}
	gc, _ := client.New(hs.URL, good.Secret, nil)
	mps := api.ClaimSpec{Isolation: alloc.IsolationNone, Requests: []alloc.Request{{Name: "gpu", MemoryMiB: 1024, ComputePercent: 5, Mode: alloc.MPS}}}
	for range 4 {
		if _, err := gc.CreateClaim(ctx, "good", mps); err != nil {
			b.Fatal(err)
		}
	}
	// The backlog: 6,000 events, half the hostile tenant's.
	now := time.Now()
	for start := 0; start < 6000; start += 500 {
		err := db.Update(ctx, func(tx state.Tx) error {
			for i := start; i < start+500; i++ {
				if err := tx.AppendEvent(&api.Event{Time: now, Kind: "backlog", Tenant: []string{"evil", "churn"}[i%2], Message: fmt.Sprint(i)}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}

	// The hostile streams, read and thrown away.
	tr := &http.Transport{MaxIdleConnsPerHost: streams}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	var opened, refused atomic.Int64
	var ready sync.WaitGroup
	sctx, stopStreams := context.WithCancel(ctx)
	var streamsDone sync.WaitGroup
	for range streams {
		ready.Add(1)
		streamsDone.Add(1)
		go func() {
			defer streamsDone.Done()
			req, _ := http.NewRequestWithContext(sctx, "GET", hs.URL+"/v1/events?since=0", nil)
			req.Header.Set("Authorization", "Bearer "+evil.Secret)
			resp, err := hc.Do(req)
			if err != nil {
				ready.Done()
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				opened.Add(1)
			} else {
				refused.Add(1)
			}
			ready.Done()
			_, _ = io.Copy(io.Discard, resp.Body)
		}()
	}
	ready.Wait()
	// Churn: another tenant's claims come and go (events, wake-ups).
	churnDone := make(chan struct{})
	go func() {
		defer close(churnDone)
		cc, _ := client.New(hs.URL, churn.Secret, nil)
		for sctx.Err() == nil {
			c, err := cc.CreateClaim(sctx, "churn", mps)
			if err == nil {
				_ = cc.Do(sctx, "DELETE", "/v1/claims/"+c.ID, nil, nil)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	time.Sleep(500 * time.Millisecond) // the streams start reading their backlog

	var agentLat, tenantLat []time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		var cs []api.Claim
		if err := agc.Do(ctx, "GET", "/v1/nodes/n0/claims", nil, &cs); err != nil {
			b.Fatal(err)
		}
		agentLat = append(agentLat, time.Since(t0))
		t0 = time.Now()
		if err := gc.Do(ctx, "GET", "/v1/claims", nil, &cs); err != nil {
			b.Fatal(err)
		}
		tenantLat = append(tenantLat, time.Since(t0))
		if len(cs) != 4 {
			b.Fatalf("the good tenant lists %d claims, want 4", len(cs))
		}
	}
	b.StopTimer()
	stopStreams()
	<-churnDone
	streamsDone.Wait()
	for _, l := range []struct {
		name string
		lat  []time.Duration
	}{{"agent", agentLat}, {"tenant", tenantLat}} {
		slices.Sort(l.lat)
		b.ReportMetric(float64(l.lat[len(l.lat)/2].Microseconds())/1000, l.name+"-p50-ms")
		b.ReportMetric(float64(l.lat[len(l.lat)*99/100].Microseconds())/1000, l.name+"-p99-ms")
	}
	b.ReportMetric(float64(opened.Load()), "streams-open")
}
