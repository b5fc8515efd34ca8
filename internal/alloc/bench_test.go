package alloc

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// benchFleet builds n GPUs, 8 per node, in a realistic mix: A100-40GB and
// H100-80GB with dynamic MIG, L4 and A10G as whole GPUs that take any mode.
func benchFleet(n int) Fleet {
	models := []struct {
		model string
		share int // percent of nodes
		mig   bool
	}{{"A100-40GB", 40, true}, {"H100-80GB-SXM", 30, true}, {"L4", 20, false}, {"A10G", 10, false}}
	var f Fleet
	nodes := n / 8
	k := 0
	for _, m := range models {
		count := nodes * m.share / 100
		if m.model == models[len(models)-1].model {
			count = nodes - k
		}
		for range count {
			var opts []gpuOpt
			if m.mig {
				opts = append(opts, migDynamic)
			}
			f.Nodes = append(f.Nodes, gpuNode(fmt.Sprintf("node-%05d", k), m.model, 8, opts...))
			k++
		}
	}
	return f
}

// benchClaim draws from a realistic mix: light inference replicas (auto),
// notebooks, GPU-intensive batch jobs and explicit MIG requests, across
// many tenants.
func benchClaim(rng *rand.Rand, i int) *Claim {
	c := &Claim{Name: fmt.Sprintf("c%d", i), Tenant: fmt.Sprintf("tenant-%d", rng.IntN(200))}
	r := Request{Name: "gpu"}
	switch x := rng.IntN(100); {
	case x < 55:
		r.Workload, r.MemoryMiB, r.ComputePercent = WorkloadInference, int64(1024*(1+rng.IntN(8))), 5+rng.IntN(20)
	case x < 70:
		r.Workload, r.MemoryMiB = WorkloadInteractive, int64(1024*(2+rng.IntN(6)))
	case x < 85:
		r.Workload, r.MemoryMiB, r.ComputePercent = WorkloadBatch, int64(1024*(8+rng.IntN(24))), 50+rng.IntN(40)
	case x < 95:
		r.Mode, r.Profile = MIG, []string{"1g.10gb", "2g.20gb", "3g.40gb", "1g.5gb", "2g.10gb"}[rng.IntN(5)]
		c.Isolation = IsolationHardware
	default:
		r.Mode, r.MemoryMiB = Exclusive, 20000
	}
	c.Requests = []Request{r}
	return c
}

// steadyState fills a fleet to about half and returns the state, the live
// claims and the generator for more.
func steadyState(b *testing.B, gpus int) (*State, []string, *rand.Rand, int) {
	b.Helper()
	s, err := NewState(benchFleet(gpus), nil, Options{})
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var live []string
	i := 0
	for len(live) < gpus*3/2 {
		c := benchClaim(rng, i)
		i++
		if a, err := s.Allocate(c); err == nil {
			if err := s.Apply(a); err != nil {
				b.Fatal(err)
			}
			live = append(live, c.Name)
		}
	}
	return s, live, rng, i
}

// BenchmarkDecisions measures decisions on a fleet kept in steady state:
// every decision is paired with the release of a random live claim (not
// timed). A decision is Allocate; the commit (Apply) is timed apart.
// Reports decisions/s, p50/p99 decision latency and commits/s.
func BenchmarkDecisions(b *testing.B) {
	for _, gpus := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("gpus=%d", gpus), func(b *testing.B) {
			s, live, rng, i := steadyState(b, gpus)
			lat := make([]time.Duration, 0, b.N)
			var commit time.Duration
			commits, nofit := 0, 0
			b.ResetTimer()
			for b.Loop() {
				c := benchClaim(rng, i)
				i++
				t0 := time.Now()
				a, err := s.Allocate(c)
				t1 := time.Now()
				lat = append(lat, t1.Sub(t0))
				if err == nil {
					err = s.Apply(a)
					commit += time.Since(t1)
					commits++
				}
				b.StopTimer()
				if err == nil {
					live = append(live, c.Name)
				} else if IsNoFit(err) {
					nofit++
				} else {
					b.Fatal(err)
				}
				k := rng.IntN(len(live))
				if err := s.Release(live[k]); err != nil {
					b.Fatal(err)
				}
				live[k] = live[len(live)-1]
				live = live[:len(live)-1]
				b.StartTimer()
			}
			b.StopTimer()
			slices.Sort(lat)
			if len(lat) > 0 {
				var total time.Duration
				for _, d := range lat {
					total += d
				}
				b.ReportMetric(float64(len(lat))/total.Seconds(), "decisions/s")
				b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1000, "p50-µs")
				b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1000, "p99-µs")
				b.ReportMetric(float64(commits)/commit.Seconds(), "commits/s")
				b.ReportMetric(float64(nofit)/float64(len(lat))*100, "nofit-%")
			}
		})
	}
}
