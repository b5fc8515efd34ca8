package services

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/model"
)

func p99(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)*99/100]
}

func timedGet(b *testing.B, c *http.Client, u string) time.Duration {
	start := time.Now()
	resp, err := c.Get(u)
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		b.Fatalf("%d", resp.StatusCode)
	}
	return time.Since(start)
}

// BenchmarkProxyOverhead: the same small GET straight to a backend and
// through the service proxy, interleaved, on keep-alive connections; it
// reports both p99 latencies and their ratio.
// The backend answers at once (the hop alone) or after 2ms of work (a
// small inference call).
func BenchmarkProxyOverhead(b *testing.B) {
	for _, work := range []time.Duration{0, 2 * time.Millisecond} {
		b.Run("work="+work.String(), func(b *testing.B) { benchProxy(b, work) })
	}
}

func benchProxy(b *testing.B, work time.Duration) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if work > 0 {
			time.Sleep(work)
		}
		_, _ = w.Write([]byte("ok\n"))
	}))
	defer backend.Close()
	p := NewProxy("bench", time.Second, nil)
	u, _ := url.Parse(backend.URL)
	p.Add("r-1", u)
	front := httptest.NewServer(p)
	defer front.Close()
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	var direct, proxied []time.Duration
	b.ResetTimer()
	for range b.N {
		direct = append(direct, timedGet(b, c, backend.URL))
		proxied = append(proxied, timedGet(b, c, front.URL))
	}
	d, pr := p99(direct), p99(proxied)
	b.ReportMetric(float64(d.Microseconds()), "direct-p99-µs")
	b.ReportMetric(float64(pr.Microseconds()), "proxy-p99-µs")
	b.ReportMetric(float64(pr)/float64(d), "p99-ratio")
}

// TestWakeFromZeroLatency measures wake-from-zero on simulated GPUs
// (GPUSLICE_WAKE_ROUNDS rounds; default 3, a check that every wake
// answers); `go test -run WakeFromZeroLatency -v` prints the latencies
// recorded in BENCHMARKS.md. It asserts only that every request at zero
// is answered, never a time.
func TestWakeFromZeroLatency(t *testing.T) {
	rounds := 3
	if v, err := strconv.Atoi(os.Getenv("GPUSLICE_WAKE_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	e := newEnv(t)
	p := port(t)
	if _, err := e.admin.PutService(e.ctx, "cold", "default", replicaSpec(p, model.Autoscaling{MinReplicas: 1, MaxReplicas: 1,
		IdleMinutesBeforeScalingDown: 1, EnableAutoStop: true})); err != nil {
		t.Fatal(err)
	}
	u := "http://127.0.0.1:" + strconv.Itoa(p) + "/"
	var lat []time.Duration
	for range rounds {
		e.waitFor("cold", "stopped", func(s api.Service) bool {
			return s.Status.Replicas == 0 && len(s.Status.Claims) == 0 && len(s.Status.Decisions) > 0
		})
		start := time.Now()
		code, body := get(t, u)
		lat = append(lat, time.Since(start))
		if code != 200 {
			t.Fatalf("request at zero: %d %s", code, body)
		}
	}
	slices.Sort(lat)
	t.Logf("wake from zero over %d rounds: min %s, median %s, p99 %s, max %s", rounds, lat[0], lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1])
}
