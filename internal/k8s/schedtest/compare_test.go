package schedtest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/internal/k8s/apitest"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// clusterTimeout bounds one cluster's test (the opt-in 500-node run
// raises it).
var clusterTimeout = 4 * time.Minute

// mix is the pod set of the comparison: n groups (one per node of four
// A100-40GB in the always-on test) of one whole GPU, six memory shares (two each of 4Gi, 10Gi and
// 20Gi) and two MIG instances (a 3g.20gb and a 1g.5gb), from five
// namespaces in turn.
func mix(n int, isolation string) []podSpec {
	prof := func(p string) string { return `device.attributes["gpu.gpuslice.dev"].profile == "` + p + `"` }
	var out []podSpec
	k := 0
	add := func(p podSpec) {
		p.ns = fmt.Sprintf("team-%d", k%5)
		p.name = fmt.Sprintf("p-%d", k)
		p.isolation = isolation
		out = append(out, p)
		k++
	}
	for range n {
		add(podSpec{class: dranames.ClassGPU})
		for _, m := range []string{"4Gi", "10Gi", "20Gi", "4Gi", "10Gi", "20Gi"} {
			add(podSpec{class: dranames.ClassShared, memory: m})
		}
		add(podSpec{class: dranames.ClassMIG, selector: prof("3g.20gb")})
		add(podSpec{class: dranames.ClassMIG, selector: prof("1g.5gb")})
	}
	return out
}

// runResult is one scheduler's run of the mix.
type runResult struct {
	name    string
	pods    int
	seconds float64
	gpus    int // distinct GPUs holding an allocation
	mixed   int // shared devices serving more than one namespace
}

func (r runResult) String() string {
	return fmt.Sprintf("%-34s %4d pods in %7.2fs = %7.2f pods/s, %3d GPUs used, %2d shared GPUs serving several namespaces",
		r.name, r.pods, r.seconds, float64(r.pods)/r.seconds, r.gpus, r.mixed)
}

// mixNamespaces are the namespaces of the mix's pods.
var mixNamespaces = []string{"team-0", "team-1", "team-2", "team-3", "team-4"}

// mixCluster starts a control plane of the test's own (the schedulers
// compared must see only these nodes) with n nodes of four A100-40GB and
// no scheduler: each runMix starts its own.
func mixCluster(t *testing.T, n int) *cluster {
	srv := apitest.Start(t)
	c := &cluster{t: t, own: true}
	c.Cluster = apitest.NewCluster(t, srv, apitest.ClusterOptions{Namespaces: mixNamespaces, Timeout: clusterTimeout})
	for i := range n {
		c.AddNode(fmt.Sprintf("node-%03d", i), "A100-40GB", 4)
	}
	return c
}

// runMix starts the given scheduler on c's empty nodes, creates the mix
// from 8 goroutines at once, waits for every pod to be bound, and stops
// the scheduler (clearPods empties the nodes for the next run).
func runMix(t *testing.T, c *cluster, name, bin, profile, scheduler string, groups int, isolation string) runResult {
	if profile == "-" {
		profile = ""
	}
	c.opts = apitest.SchedulerOptions{Binary: bin, Profiles: profile}
	c.sched = apitest.StartScheduler(t, c.Srv, c.opts)
	defer c.sched.Stop()
	pods := mix(groups, isolation)
	start := time.Now()
	var wg sync.WaitGroup
	next := make(chan podSpec)
	for range 8 {
		wg.Go(func() {
			for p := range next {
				p.scheduler = scheduler
				if err := c.TryCreateClaimPod(p.claimPod()); err != nil {
					t.Error(err)
				}
			}
		})
	}
	for _, p := range pods {
		next <- p
	}
	close(next)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	// Poll the whole list: every pod bound.
	c.Eventually(fmt.Sprintf("%s: every one of %d pods bound", name, len(pods)), func() (bool, string) {
		list, err := c.CS.CoreV1().Pods("").List(c.Ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		bound := 0
		for _, p := range list.Items {
			if p.Spec.NodeName != "" {
				bound++
			}
		}
		return bound == len(pods), fmt.Sprintf("%d of %d pods bound", bound, len(pods))
	})
	r := runResult{name: name, pods: len(pods), seconds: time.Since(start).Seconds()}
	_, claims := c.snapshot()
	gpus := map[string]bool{}
	for dev, tenants := range tenantsPerDevice(claims) {
		node, device, _ := strings.Cut(dev, "/")
		gpu, _, _ := strings.Cut(device, "-shared")
		gpu, _, _ = strings.Cut(gpu, "-mig-")
		gpus[node+"/"+gpu] = true
		if isShared(device) && len(tenants) > 1 {
			r.mixed++
		}
	}
	r.gpus = len(gpus)
	if bin != "" {
		c.check() // gpuslice's allocator's Check over what the API server holds
	}
	return r
}

// The same pod set through the stock kube-scheduler (first-fit over our
// ResourceSlices) and through gpuslice-scheduler, with tenant isolation
// (the default) and with isolation none (what the stock allocator does):
// every pod is bound by each; gpuslice-scheduler keeps every shared GPU to
// one namespace; with isolation none it uses no more GPUs than stock. The
// figures are logged (go test -v); GPUSLICE_SCHED_BENCH=1 runs 500 nodes
// (TestSchedulerBench).
func TestSchedulersCompared(t *testing.T) {
	t.Parallel()
	compare(t, 10)
}

// TestSchedulerBench is the comparison on 500 nodes (2,000 GPUs) for
// BENCHMARKS.md: GPUSLICE_SCHED_BENCH=1 (or =N nodes); the pod set is
// GPUSLICE_SCHED_BENCH_GROUPS (default 3) groups of the mix's nine pods,
// since the stock scheduler takes seconds per pod on that many nodes.
func TestSchedulerBench(t *testing.T) {
	v := os.Getenv("GPUSLICE_SCHED_BENCH")
	if v == "" {
		t.Skip("GPUSLICE_SCHED_BENCH=1 runs the 500-node comparison")
	}
	n := 500
	if k, err := strconv.Atoi(v); err == nil && k > 1 {
		n = k
	}
	groups := 3
	if k, err := strconv.Atoi(os.Getenv("GPUSLICE_SCHED_BENCH_GROUPS")); err == nil && k > 0 {
		groups = k
	}
	clusterTimeout = 90 * time.Minute
	compareOn(t, n, groups)
}

func compare(t *testing.T, n int) { compareOn(t, n, n) }

// compareOn runs groups groups of the mix on n nodes through each
// scheduler.
func compareOn(t *testing.T, n, groups int) {
	c := mixCluster(t, n)
	bin := ""
	stock := runMix(t, c, "stock kube-scheduler, our slices", bin, "-", "default-scheduler", groups, "")
	t.Log(stock)
	clearPods(t, c)
	ours := runMix(t, c, "gpuslice-scheduler, isolation tenant", apitest.GpusliceSchedulerBinary(t), Profile, SchedulerName, groups, "")
	t.Log(ours)
	clearPods(t, c)
	none := runMix(t, c, "gpuslice-scheduler, isolation none", apitest.GpusliceSchedulerBinary(t), Profile, SchedulerName, groups, "none")
	t.Log(none)
	t.Logf("ratio pods/s gpuslice/stock: %.2f (tenant), %.2f (none)",
		(float64(ours.pods)/ours.seconds)/(float64(stock.pods)/stock.seconds), (float64(none.pods)/none.seconds)/(float64(stock.pods)/stock.seconds))
	if ours.mixed != 0 {
		t.Errorf("gpuslice-scheduler put %d shared GPUs under several namespaces with tenant isolation", ours.mixed)
	}
	if none.gpus > stock.gpus {
		t.Errorf("with isolation none gpuslice-scheduler used %d GPUs, the stock scheduler %d", none.gpus, stock.gpus)
	}
}
