package schedtest

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/k8s/apitest"
	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
	"github.com/gpuslice/gpuslice/internal/plan"
	"github.com/gpuslice/gpuslice/internal/spec"
)

// The scale run (BENCHMARKS.md, "gpuslice-scheduler at scale"), opt in:
//
//	GPUSLICE_SCHED_SCALE=500             nodes of 8 A100-40GB (simulated DGX A100s)
//	GPUSLICE_SCHED_SCALE_PODS=1008       pods, in groups of the mix's nine (default 1008)
//	GPUSLICE_SCHED_SCALE_STOCK=45        pods of the same mix through the stock kube-scheduler (0: skip; default 45)
//	GPUSLICE_SCHED_SCALE_STOCK_MINUTES=10 how long the stock scheduler's binds are waited for
//	GPUSLICE_SCHED_SCALE_QPS=1000        gpuslice-scheduler's clientConnection qps (burst twice it)
//	GPUSLICE_SCHED_SCALE_PROFILE=DIR     write gpuslice-scheduler's CPU profile of the bind window to DIR
//
// Every pod has a ResourceClaim of its own; pods and claims are created
// from 32 goroutines while the scheduler runs. Reported: the bind rate
// from the first bind to the last, create→bind p50/p99, the GPUs the
// allocations hold, shared GPUs under several namespaces, and
// `gpuslice plan`'s GPUs for the same workload (the spec is written next
// to the profile, or to the test's temp dir). Every allocation is checked
// with the allocator's Check.
func TestSchedulerScale(t *testing.T) {
	v := os.Getenv("GPUSLICE_SCHED_SCALE")
	if v == "" {
		t.Skip("GPUSLICE_SCHED_SCALE=500 (nodes) runs the scale benchmark")
	}
	if os.Getenv("GPUSLICE_SCHED_SCALE_PLANONLY") != "" {
		n := envInt(t, "GPUSLICE_SCHED_SCALE_PODS", 1008)
		t.Logf("plan: %d GPUs", planMix(t, mix((n+8)/9, ""), 500, filepath.Join(t.TempDir(), "x.yaml")))
		return
	}
	nodes, err := strconv.Atoi(v)
	if err != nil || nodes < 1 {
		t.Fatalf("GPUSLICE_SCHED_SCALE=%q: want a number of nodes such as 500", v)
	}
	pods := envInt(t, "GPUSLICE_SCHED_SCALE_PODS", 1008)
	stockPods := envInt(t, "GPUSLICE_SCHED_SCALE_STOCK", 45)
	qps := envInt(t, "GPUSLICE_SCHED_SCALE_QPS", 1000)
	stockMinutes := envInt(t, "GPUSLICE_SCHED_SCALE_STOCK_MINUTES", 10)
	profDir := os.Getenv("GPUSLICE_SCHED_SCALE_PROFILE")
	clusterTimeout = 90 * time.Minute
	groups := (pods + 8) / 9

	outDir := profDir
	if outDir == "" {
		outDir = t.TempDir()
	}
	planned := planMix(t, mix(groups, ""), nodes, filepath.Join(outDir, fmt.Sprintf("scale-%d.yaml", groups*9)))
	t.Logf("gpuslice plan, %d pods: %d GPUs", groups*9, planned)

	c, setup := newScaleCluster(t, nodes)
	t.Logf("%d nodes with slices in %.0fs", nodes, setup.Seconds())
	cfg := fmt.Sprintf("clientConnection: {qps: %d, burst: %d}\n", qps, 2*qps)
	ours := runScale(t, c, scaleRun{name: "gpuslice-scheduler", bin: apitest.GpusliceSchedulerBinary(t), profile: Profile, config: cfg,
		scheduler: SchedulerName, nodes: nodes, groups: groups, profDir: profDir})
	t.Log(ours)
	if ours.mixed != 0 {
		t.Errorf("gpuslice-scheduler put %d shared GPUs under several namespaces with tenant isolation", ours.mixed)
	}
	clearPods(t, c)
	backlog := runScale(t, c, scaleRun{name: "gpuslice-scheduler (backlog)", bin: apitest.GpusliceSchedulerBinary(t), profile: Profile, config: cfg,
		scheduler: SchedulerName, nodes: nodes, groups: groups, profDir: profDir, backlog: true})
	t.Log(backlog)
	if backlog.mixed != 0 {
		t.Errorf("gpuslice-scheduler put %d shared GPUs under several namespaces with tenant isolation", backlog.mixed)
	}
	if stockPods > 0 {
		// The same nodes, emptied, through the stock kube-scheduler.
		clearPods(t, c)
		sg := (stockPods + 8) / 9
		stockPlanned := planMix(t, mix(sg, ""), nodes, filepath.Join(outDir, fmt.Sprintf("scale-%d.yaml", sg*9)))
		stock := runScale(t, c, scaleRun{name: "stock kube-scheduler, our slices", profile: "-", scheduler: "default-scheduler",
			nodes: nodes, groups: sg, config: cfg, deadline: time.Duration(stockMinutes) * time.Minute})
		t.Log(stock)
		t.Logf("gpuslice plan, %d pods: %d GPUs", sg*9, stockPlanned)
	}
}

// newScaleCluster starts etcd and kube-apiserver with gpuslice's
// DeviceClasses, the five namespaces and nodes ready nodes of 8
// A100-40GB with their slices (created from 32 goroutines).
func newScaleCluster(t *testing.T, nodes int) (*cluster, time.Duration) {
	srv := apitest.Start(t)
	c := &cluster{t: t, own: true}
	c.Cluster = apitest.NewCluster(t, srv, apitest.ClusterOptions{Namespaces: mixNamespaces, Timeout: clusterTimeout})
	fast := rest.CopyConfig(srv.Config)
	fast.QPS, fast.Burst = 5000, 10000
	cs, err := kubernetes.NewForConfig(fast)
	if err != nil {
		t.Fatal(err)
	}
	c.CS = cs
	start := time.Now()
	if err := parallel(32, nodes, func(i int) error { return addScaleNode(c.Ctx, cs, fmt.Sprintf("node-%04d", i)) }); err != nil {
		t.Fatal(err)
	}
	return c, time.Since(start)
}

// clearPods deletes every pod and claim of the mix's namespaces, taking
// the allocations back first (no controller manager runs to).
func clearPods(t *testing.T, c *cluster) {
	t.Helper()
	for _, ns := range mixNamespaces {
		pods, err := c.CS.CoreV1().Pods(ns).List(c.Ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := parallel(32, len(pods.Items), func(i int) error {
			return c.CS.CoreV1().Pods(ns).Delete(c.Ctx, pods.Items[i].Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		}); err != nil {
			t.Fatal(err)
		}
		claims, err := c.CS.ResourceV1().ResourceClaims(ns).List(c.Ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := parallel(32, len(claims.Items), func(i int) error {
			rc := &claims.Items[i]
			rc.Status = resourceapi.ResourceClaimStatus{}
			rc, err := c.CS.ResourceV1().ResourceClaims(ns).UpdateStatus(c.Ctx, rc, metav1.UpdateOptions{})
			if err != nil {
				return err
			}
			rc.Finalizers = nil
			if _, err := c.CS.ResourceV1().ResourceClaims(ns).Update(c.Ctx, rc, metav1.UpdateOptions{}); err != nil {
				return err
			}
			return c.CS.ResourceV1().ResourceClaims(ns).Delete(c.Ctx, rc.Name, metav1.DeleteOptions{})
		}); err != nil {
			t.Fatal(err)
		}
	}
	c.Eventually("every pod and claim gone", func() (bool, string) {
		pods, err := c.CS.CoreV1().Pods("").List(c.Ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		claims, err := c.CS.ResourceV1().ResourceClaims("").List(c.Ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return len(pods.Items) == 0 && len(claims.Items) == 0, fmt.Sprintf("%d pods and %d claims left", len(pods.Items), len(claims.Items))
	})
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a whole number", name, v)
	}
	return n
}

type scaleRun struct {
	name, bin, profile, config, scheduler string
	nodes, groups                         int
	profDir                               string
	// backlog creates every pod before the scheduler starts: the bind
	// rate is then the scheduler's own, not the rate pods arrive at.
	backlog bool
	// deadline gives up waiting for binds after this long (0: the
	// cluster's timeout fails the test).
	deadline time.Duration
}

type scaleResult struct {
	name            string
	nodes, pods     int
	bound           int
	create          time.Duration // first create to last create
	bindWindow      time.Duration // first bind to last bind
	p50, p99, worst time.Duration // create → bind
	gpus, mixed     int
	// schedCPU and apiCPU are the CPU seconds the scheduler and the API
	// server used from the first create to the last bind.
	schedCPU, apiCPU float64
}

func (r scaleResult) String() string {
	if r.bound < r.pods {
		return fmt.Sprintf("%s on %d nodes: %d pods created in %.1fs; only %d bound in %.0fs; %d GPUs used, %d shared GPUs serving several namespaces; CPU per pod bound: scheduler %.1fms",
			r.name, r.nodes, r.pods, r.create.Seconds(), r.bound, r.bindWindow.Seconds(), r.gpus, r.mixed, 1000*r.schedCPU/float64(max(r.bound, 1)))
	}
	return fmt.Sprintf("%s on %d nodes: %d pods created in %.1fs (%.0f/s); bound first→last in %.1fs = %.1f pods/s; create→bind p50 %v p99 %v max %v; %d GPUs used, %d shared GPUs serving several namespaces; CPU per pod: scheduler %.1fms, API server %.1fms",
		r.name, r.nodes, r.pods, r.create.Seconds(), float64(r.pods)/r.create.Seconds(), r.bindWindow.Seconds(),
		float64(r.pods-1)/r.bindWindow.Seconds(), r.p50.Round(time.Millisecond), r.p99.Round(time.Millisecond), r.worst.Round(time.Millisecond),
		r.gpus, r.mixed, 1000*r.schedCPU/float64(r.pods), 1000*r.apiCPU/float64(r.pods))
}

// runScale starts the scheduler, creates the pods and waits for every
// bind.
func runScale(t *testing.T, c *cluster, r scaleRun) scaleResult {
	ctx, srv := c.Ctx, c.Srv
	res := scaleResult{name: r.name, nodes: r.nodes}
	profile := r.profile
	if profile == "-" {
		profile = ""
	}
	// The client CA lets the test's admin certificate read /metrics and
	// /debug/pprof (the scheduler skips the cluster's lookup).
	opts := apitest.SchedulerOptions{Binary: r.bin, Profiles: profile, Config: r.config, Args: []string{"--client-ca-file=" + srv.CAFile},
		ReadyTimeout: 15 * time.Minute}
	if r.profDir != "" {
		opts.Args = append(opts.Args, "--profiling=true")
	}
	if !r.backlog {
		c.sched = apitest.StartScheduler(t, srv, opts)
		defer c.sched.Stop()
	}

	// Binds, as a watch sees them.
	var mu sync.Mutex
	created := map[string]time.Time{}
	bound := map[string]time.Time{}
	done := make(chan struct{})
	specs := mix(r.groups, "")
	inf := informers.NewSharedInformerFactory(c.CS, 0)
	pi := inf.Core().V1().Pods().Informer()
	seen := func(o any) {
		p, ok := o.(*corev1.Pod)
		if !ok || p.Spec.NodeName == "" {
			return
		}
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		k := p.Namespace + "/" + p.Name
		if _, dup := bound[k]; !dup {
			bound[k] = now
			if len(bound) == len(specs) {
				close(done)
			}
		}
	}
	if _, err := pi.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: seen, UpdateFunc: func(_, o any) { seen(o) }}); err != nil {
		t.Fatal(err)
	}
	inf.Start(ctx.Done())
	inf.WaitForCacheSync(ctx.Done())

	var prof []byte
	var profErr error
	var profWG sync.WaitGroup
	var schedCPU0, apiCPU0 float64
	measure := func() {
		if r.profDir != "" {
			tag := fmt.Sprintf("%s-%d", strings.Fields(r.name)[0], r.nodes)
			profWG.Go(func() { prof, profErr = cpuProfile(ctx, srv, c.sched.URL, "/debug/pprof/profile?seconds=20") })
			profWG.Go(func() {
				// what the scheduling goroutines wait on, a few seconds in
				time.Sleep(4 * time.Second)
				if b, err := cpuProfile(ctx, srv, c.sched.URL, "/debug/pprof/goroutine?debug=1"); err == nil {
					_ = os.WriteFile(filepath.Join(r.profDir, "goroutines-"+tag+".txt"), b, 0o644)
				}
			})
		}
		schedCPU0, apiCPU0 = processCPU(ctx, srv, c.sched.URL), processCPU(ctx, srv, "")
	}
	if !r.backlog {
		measure()
	}
	first := time.Now()
	if err := parallel(32, len(specs), func(i int) error {
		p := specs[i]
		p.scheduler = r.scheduler
		if err := c.TryCreateClaimPod(p.claimPod()); err != nil {
			return err
		}
		mu.Lock()
		created[p.ns+"/"+p.name] = time.Now()
		mu.Unlock()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	res.create = time.Since(first)
	if r.backlog {
		// Every pod waits: the scheduler starts (its informers list the
		// nodes, slices and pods) and works through the queue.
		c.sched = apitest.StartScheduler(t, srv, opts)
		defer c.sched.Stop()
		measure()
	}
	res.pods = len(specs)
	var giveUp <-chan time.Time
	if r.deadline > 0 {
		giveUp = time.After(r.deadline)
	}
	select {
	case <-done:
	case <-giveUp:
		mu.Lock()
		t.Logf("%s: %d of %d pods bound in %v; the rest given up", r.name, len(bound), len(specs), r.deadline)
		mu.Unlock()
	case <-ctx.Done():
		mu.Lock()
		n := len(bound)
		mu.Unlock()
		t.Fatalf("%s: %d of %d pods bound before the deadline\n%s", r.name, n, len(specs), c.sched.Tail(3000))
	}
	mu.Lock()
	if len(bound) < len(specs) {
		// given up: the window ends now
		res.bindWindow = time.Since(first)
	}
	mu.Unlock()
	res.schedCPU, res.apiCPU = processCPU(ctx, srv, c.sched.URL)-schedCPU0, processCPU(ctx, srv, "")-apiCPU0
	profWG.Wait()
	if r.profDir != "" {
		if profErr != nil {
			t.Errorf("CPU profile: %v", profErr)
		} else {
			f := filepath.Join(r.profDir, fmt.Sprintf("%s-%d%s.pprof", strings.Fields(r.name)[0], r.nodes, map[bool]string{true: "-backlog"}[r.backlog]))
			if err := os.WriteFile(f, prof, 0o644); err != nil {
				t.Error(err)
			}
			t.Logf("CPU profile: %s", f)
		}
	}
	if r.profDir != "" {
		if b, err := os.ReadFile(c.sched.LogFile); err == nil {
			_ = os.WriteFile(filepath.Join(r.profDir, fmt.Sprintf("%s-%d%s.log", strings.Fields(r.name)[0], r.nodes, map[bool]string{true: "-backlog"}[r.backlog])), b, 0o644)
		}
	}
	mu.Lock()
	var lat []time.Duration
	var firstBind, lastBind time.Time
	for k, b := range bound {
		if firstBind.IsZero() || b.Before(firstBind) {
			firstBind = b
		}
		if b.After(lastBind) {
			lastBind = b
		}
		if cr, ok := created[k]; ok {
			lat = append(lat, max(b.Sub(cr), 0))
		}
	}
	mu.Unlock()
	slices.Sort(lat)
	res.bound = len(lat)
	res.bindWindow = lastBind.Sub(firstBind)
	if len(lat) > 0 {
		res.p50, res.p99, res.worst = lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1]
	}

	_, claims := c.snapshot()
	res.gpus, res.mixed = gpusUsed(claims)
	if r.bin != "" {
		c.check() // gpuslice's allocator's Check over what the API server holds
	}
	return res
}

// gpusUsed counts the GPUs holding an allocation and the shared GPUs
// serving more than one namespace.
func gpusUsed(claims []*resourceapi.ResourceClaim) (gpus, mixed int) {
	set := map[string]bool{}
	for dev, tenants := range tenantsPerDevice(claims) {
		node, device, _ := strings.Cut(dev, "/")
		gpu, _, _ := strings.Cut(device, "-shared")
		gpu, _, _ = strings.Cut(gpu, "-mig-")
		set[node+"/"+gpu] = true
		if isShared(device) && len(tenants) > 1 {
			mixed++
		}
	}
	return len(set), mixed
}

// parallel runs f(0..n-1) on workers goroutines; the first error stops
// the rest.
func parallel(workers, n int, f func(i int) error) error {
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for failed.Load() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					failed.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	wg.Wait()
	if p := failed.Load(); p != nil {
		return *p
	}
	return nil
}

// addScaleNode is addNode for many goroutines: a ready Node of 8
// A100-40GB and its slices. Each write is retried (a loaded API server
// times some out); one that went through before is taken as done.
func addScaleNode(ctx context.Context, cs kubernetes.Interface, name string) error {
	n := alloc.Node{Name: name}
	for i := range 8 {
		n.GPUs = append(n.GPUs, alloc.GPU{UUID: fmt.Sprintf("GPU-%s-%d", name, i), Index: i, Model: "A100-40GB", Healthy: true})
	}
	res := corev1.ResourceList{"cpu": resource.MustParse("256"), "memory": resource.MustParse("2Ti"), "pods": resource.MustParse("110")}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}}}
	if err := retried(ctx, func() error {
		_, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("node %s: %w", name, err)
	}
	// As a kubelet leaves it once ready (the API server's not-ready taint
	// lifted; no node controller runs to).
	if err := retried(ctx, func() error {
		cur, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		cur.Status.Capacity, cur.Status.Allocatable = res, res
		cur.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}}
		if cur, err = cs.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
			return err
		}
		if len(cur.Spec.Taints) > 0 {
			cur.Spec.Taints = nil
			_, err = cs.CoreV1().Nodes().Update(ctx, cur, metav1.UpdateOptions{})
		}
		return err
	}); err != nil {
		return fmt.Errorf("node %s: %w", name, err)
	}
	sl, err := dradriver.Slices(n, 1, "580.65.06", nil)
	if err != nil {
		return err
	}
	for i := range sl {
		if err := retried(ctx, func() error {
			_, err := cs.ResourceV1().ResourceSlices().Create(ctx, &sl[i], metav1.CreateOptions{})
			return err
		}); err != nil {
			return fmt.Errorf("slice %s: %w", sl[i].Name, err)
		}
	}
	return nil
}

// retried runs a write up to 30 times (backing off to 10 s) while it fails
// for a reason other than the object existing (a retried create that had
// gone through): an overloaded etcd times requests out for minutes.
func retried(ctx context.Context, write func() error) error {
	var err error
	wait := time.Second
	for range 30 {
		if err = write(); err == nil || apierrors.IsAlreadyExists(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, 10*time.Second)
	}
	return err
}

// processCPU is process_cpu_seconds_total of the scheduler at url, or of
// the API server ("" url); -1 when unreadable.
func processCPU(ctx context.Context, srv *apitest.Server, url string) float64 {
	var body []byte
	var err error
	if url == "" {
		var cs *kubernetes.Clientset
		if cs, err = kubernetes.NewForConfig(srv.Config); err == nil {
			body, err = cs.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		}
	} else {
		body, err = cpuProfile(ctx, srv, url, "/metrics")
	}
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "process_cpu_seconds_total "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// cpuProfile reads a path of the scheduler (/metrics; /debug/pprof/ when started with
// --profiling) as the test's admin.
func cpuProfile(ctx context.Context, srv *apitest.Server, url, what string) ([]byte, error) {
	tc := srv.Config.TLSClientConfig
	cert, err := tls.X509KeyPair(tc.CertData, tc.KeyData)
	if err != nil {
		return nil, err
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true}}} //nolint:gosec // loopback test process with a self-signed serving cert
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+what, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s %.300s", req.URL, resp.Status, body)
	}
	return body, err
}

// planMix writes the mix as a gpuslice spec (a pool of 8 × A100-40GB
// nodes with dynamic MIG, one workload per namespace and pod kind) to
// path, and returns the GPUs `gpuslice plan` uses for it.
func planMix(t *testing.T, pods []podSpec, nodes int, path string) int {
	t.Helper()
	type key struct{ ns, kind string }
	count := map[key]int{}
	for _, p := range pods {
		k := "whole"
		switch {
		case p.memory != "":
			k = "share-" + p.memory
		case p.selector != "":
			k = "mig-" + p.selector[strings.LastIndex(p.selector[:len(p.selector)-1], `"`)+1:len(p.selector)-1]
		}
		count[key{p.ns, k}]++
	}
	keys := make([]key, 0, len(count))
	for k := range count {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].ns != keys[j].ns {
			return keys[i].ns < keys[j].ns
		}
		return keys[i].kind < keys[j].kind
	})
	var b strings.Builder
	fmt.Fprintf(&b, "# The scale benchmark's pods (internal/k8s/schedtest TestSchedulerScale): gpuslice plan %s\n", filepath.Base(path))
	fmt.Fprintf(&b, "apiVersion: gpuslice.dev/v1alpha1\nkind: Spec\npolicy: {placement: binpack, allowModeSwitch: true}\npools:\n  - name: dgx-a100\n    gpu: A100-40GB\n    gpusPerNode: 8\n    sharing: {mode: dynamic}\n    mig: dynamic\n    maxNodes: %d\ntenants:\n", nodes)
	seen := map[string]bool{}
	for _, k := range keys {
		if !seen[k.ns] {
			seen[k.ns] = true
			fmt.Fprintf(&b, "  - name: %s\n", k.ns)
		}
	}
	b.WriteString("workloads:\n")
	for _, k := range keys {
		var gpu string
		switch {
		case k.kind == "whole":
			gpu = "{mode: exclusive}"
		case strings.HasPrefix(k.kind, "share-"):
			gpu = fmt.Sprintf("{memory: %sB, mode: timeslice}", strings.TrimPrefix(k.kind, "share-"))
		default:
			gpu = fmt.Sprintf("{profile: %s}", strings.TrimPrefix(k.kind, "mig-"))
		}
		name := strings.ToLower(strings.ReplaceAll(k.kind, ".", "-"))
		fmt.Fprintf(&b, "  - {name: %s-%s, tenant: %s, replicas: %d, pool: dgx-a100, gpu: %s}\n", name, k.ns, k.ns, count[k], gpu)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	s, diags := spec.Read(path, []byte(b.String()), "")
	if err := diags.Err(); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, b.String())
	}
	p, err := plan.Make(s, plan.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Unplaced) > 0 {
		t.Fatalf("gpuslice plan left %d replicas unplaced: %+v", len(p.Unplaced), p.Unplaced[0])
	}
	gpus := 0
	for _, pp := range p.Pools {
		gpus += pp.GPUsUsed
	}
	return gpus
}
