package cli

import (
	"fmt"
	"math"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuslice/gpuslice/internal/plan"
	"github.com/gpuslice/gpuslice/internal/plan/plantest"
)

// planScale is one size of `bench plan`.
type planScale struct {
	Replicas  int     `json:"replicas"`
	Workloads int     `json:"workloads"`
	Tenants   int     `json:"tenants"`
	Seconds   float64 `json:"seconds"`
	// PeakHeapBytes is the most live heap seen while planning (sampled
	// every millisecond), AllocBytes what was allocated in all.
	PeakHeapBytes uint64 `json:"peakHeapBytes"`
	AllocBytes    uint64 `json:"allocBytes"`
	GPUs          int    `json:"gpus"`
	GPUsUsed      int    `json:"gpusUsed"`
	Unplaced      int    `json:"unplaced"`
}

type planScaleReport struct {
	Seed  uint64      `json:"seed"`
	Sizes []planScale `json:"sizes"`
	// Exponent is k in seconds ≈ c·N^k, fitted by least squares on the
	// logarithms (0 with fewer than two sizes).
	Exponent float64 `json:"exponent"`
}

func benchPlanCmd(e *env) *cobra.Command {
	var sizes string
	var seed uint64
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Seconds and memory `gpuslice plan` takes on realistic specs of growing size, and the growth exponent",
		Long: `Generates a realistic spec at each size N (replicas): about N/20 tenants, inference
services, time-sliced notebooks on L4, explicit MIG profiles, whole GPUs, MPS batch on A10G,
training jobs constrained to one node or GPU, pools with dynamic MIG, a capped pool and a
fixed one (internal/plan/plantest.RealisticSpec), plans it, and prints the time, the peak
live heap, the bytes allocated, the GPUs bought and used, and the exponent k of a fit
seconds ≈ c·N^k.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var ns []int
			for _, f := range strings.Split(sizes, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(f))
				if err != nil || n < 1 {
					return fmt.Errorf("--sizes %q: %q is not a positive number of replicas (e.g. --sizes 1000,3000,10000)", sizes, f)
				}
				ns = append(ns, n)
			}
			rep := planScaleReport{Seed: seed}
			for _, n := range ns {
				r, err := measurePlan(n, seed)
				if err != nil {
					return err
				}
				rep.Sizes = append(rep.Sizes, r)
			}
			rep.Exponent = growthExponent(rep.Sizes)
			t := &table{header: []string{"REPLICAS", "WORKLOADS", "TENANTS", "SECONDS", "PEAK HEAP", "ALLOCATED", "GPUS", "USED", "UNPLACED"}}
			for _, r := range rep.Sizes {
				t.add(r.Replicas, r.Workloads, r.Tenants, fmt.Sprintf("%.2f", r.Seconds), byteSize(r.PeakHeapBytes), byteSize(r.AllocBytes), r.GPUs, r.GPUsUsed, r.Unplaced)
			}
			if len(rep.Sizes) > 1 {
				t.notes = append(t.notes, fmt.Sprintf("growth exponent %.2f (seconds ≈ c·N^k, least squares on logs); seed %d; GOMAXPROCS %d",
					rep.Exponent, seed, runtime.GOMAXPROCS(0)))
			}
			return e.render(t, rep)
		},
	}
	cmd.Flags().StringVar(&sizes, "sizes", "1000,3000,10000,30000,100000", "comma-separated numbers of replicas")
	cmd.Flags().Uint64Var(&seed, "seed", 1, "seed of the generated specs")
	return cmd
}

func byteSize(b uint64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// measurePlan plans one generated spec, timing it and sampling the live
// heap while it runs.
func measurePlan(n int, seed uint64) (planScale, error) {
	s := plantest.RealisticSpec(n, seed)
	out := planScale{Replicas: n, Workloads: len(s.Workloads), Tenants: len(s.Tenants)}
	runtime.GC()
	samples := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(samples)
	heap0, alloc0 := samples[0].Value.Uint64(), samples[1].Value.Uint64()
	var peak uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		own := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		for {
			metrics.Read(own)
			if v := own[0].Value.Uint64(); v > peak {
				peak = v
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	t0 := time.Now()
	p, err := plan.Make(s, plan.Options{})
	out.Seconds = time.Since(t0).Seconds()
	close(stop)
	wg.Wait()
	if err != nil {
		return out, fmt.Errorf("%d replicas: %w", n, err)
	}
	metrics.Read(samples)
	out.AllocBytes = samples[1].Value.Uint64() - alloc0
	if peak > heap0 {
		out.PeakHeapBytes = peak - heap0
	}
	for _, pp := range p.Pools {
		out.GPUs += pp.Nodes * pp.GPUsPerNode
		out.GPUsUsed += pp.GPUsUsed
	}
	out.Unplaced = len(p.Unplaced)
	return out, nil
}

// growthExponent fits log(seconds) = log(c) + k·log(N) by least squares.
func growthExponent(rs []planScale) float64 {
	var n, sx, sy, sxx, sxy float64
	for _, r := range rs {
		if r.Seconds <= 0 {
			continue
		}
		x, y := math.Log(float64(r.Replicas)), math.Log(r.Seconds)
		n++
		sx += x
		sy += y
		sxx += x * x
		sxy += x * y
	}
	if n < 2 || n*sxx-sx*sx == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / (n*sxx - sx*sx)
}
