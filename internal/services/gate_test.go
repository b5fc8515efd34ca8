package services

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/autoscale"
)

// fakeScaler is a workload's replica count, with the scale calls made.
type fakeScaler struct {
	mu    sync.Mutex
	n     int
	calls []int
}

func (f *fakeScaler) Replicas(context.Context) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n, nil
}
func (f *fakeScaler) Scale(_ context.Context, n int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n = n
	f.calls = append(f.calls, n)
	return nil
}

// A request at zero wakes the workload (scale to minReplicas), waits until
// a replica is added, and is served; with no request for the idle period
// the gate scales it to zero; a request that no replica answers in time
// gets a 503 naming the service.
func TestGateWakesAndStops(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") }))
	defer backend.Close()
	var mu sync.Mutex
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	sc := &fakeScaler{}
	g, err := NewGate(GateConfig{Name: "hello", Scaler: sc, Clock: clock, Interval: time.Minute, WakeTimeout: 5 * time.Second,
		Policy: autoscale.Policy{MinReplicas: 1, MaxReplicas: 3, DownAfter: 2 * time.Minute, AutoStop: true}})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(g.Proxy())
	defer front.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = g.Run(ctx) }()
	// The stand-in for the platform: once scaled to 1, a replica is ready.
	go func() {
		for ctx.Err() == nil {
			if n, _ := sc.Replicas(ctx); n > 0 && g.Proxy().Ready() == 0 {
				u, _ := url.Parse(backend.URL)
				g.Proxy().Add("pod-1", u)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	resp, err := http.Get(front.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "hello" {
		t.Fatalf("woken request: %d %q", resp.StatusCode, body)
	}
	if n, _ := sc.Replicas(ctx); n != 1 {
		t.Fatalf("woken to %d replicas, want 1", n)
	}
	// Idle: a step a minute for three minutes; the third stops it.
	for i := range 3 {
		advance(time.Minute)
		d, err := g.Step(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := i == 2; (d.Action == autoscale.Stop) != want {
			t.Fatalf("idle minute %d: %v", i+1, d)
		}
	}
	if sc.n != 0 || len(g.Decisions()) != 2 {
		t.Fatalf("after idle: %d replicas, decisions %v", sc.n, g.Decisions())
	}
}

// With nothing ever ready, a request waits the wake timeout and gets a 503
// that says why.
func TestGate503AfterWakeTimeout(t *testing.T) {
	sc := &fakeScaler{}
	g, err := NewGate(GateConfig{Name: "slow", Scaler: sc, WakeTimeout: 200 * time.Millisecond, Policy: autoscale.Policy{MaxReplicas: 1, AutoStop: true}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = g.Run(ctx) }()
	front := httptest.NewServer(g.Proxy())
	defer front.Close()
	start := time.Now()
	resp, err := http.Get(front.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		!contains(string(body), "service slow has no ready replica after 200ms") || time.Since(start) < 200*time.Millisecond {
		t.Fatalf("%d %q after %s", resp.StatusCode, body, time.Since(start))
	}
	if n, _ := sc.Replicas(ctx); n != 1 {
		t.Fatalf("the waiting request did not wake it: %d", n)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
