package schedbench

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gpuslice/gpuslice/internal/k8s/controlplane"
	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
)

// Case is one measurement: a slice shape, what each pod claims, and (for
// gpuslice) whether shared GPUs are published once per tenant.
type Case struct {
	Shape        Shape
	Workload     Workload
	TenantCopies bool
	// MIGProfiles are the MIG profiles gpuslice publishes
	// (dra-driver --mig-profiles; nil: all).
	MIGProfiles []string
}

func (c Case) String() string {
	s := fmt.Sprintf("%s/%s", c.Shape, c.Workload)
	if c.TenantCopies {
		s += "/copies"
	}
	if c.MIGProfiles != nil {
		s += "/mig=" + strings.Join(c.MIGProfiles, ":")
		if len(c.MIGProfiles) == 0 {
			s += "none"
		}
	}
	return s
}

// DefaultCases are the comparison: gpuslice's slices with and without
// tenant copies, with every MIG profile and with none (--mig-profiles
// none), for memory shares and whole GPUs, and the NVIDIA shapes that
// serve the same claims.
func DefaultCases() []Case {
	none := []string{}
	return []Case{
		{Gpuslice, Share, true, nil}, {Gpuslice, Share, false, nil}, {Gpuslice, Share, true, none}, {Gpuslice, Share, false, none},
		{NVIDIAShares, Share, false, nil},
		{Gpuslice, Whole, true, nil}, {Gpuslice, Whole, false, nil}, {Gpuslice, Whole, false, none},
		{NVIDIAPartitionable, Whole, false, nil}, {NVIDIADynamicMIG, Whole, false, nil},
	}
}

// ParseCase reads SHAPE/WORKLOAD[/copies][/mig=PROFILES], PROFILES being
// none or profiles separated by ':' (gpuslice only).
func ParseCase(s string) (Case, error) {
	parts := strings.Split(s, "/")
	if len(parts) < 2 || len(parts) > 4 {
		return Case{}, fmt.Errorf("case %q: want SHAPE/WORKLOAD[/copies][/mig=PROFILES], e.g. gpuslice/share/copies or nvidia-shares/share", s)
	}
	sh, err := ParseShape(parts[0])
	if err != nil {
		return Case{}, fmt.Errorf("case %q: %w", s, err)
	}
	c := Case{Shape: sh, Workload: Workload(parts[1])}
	for _, p := range parts[2:] {
		switch {
		case p == "copies" && sh == Gpuslice && !c.TenantCopies:
			c.TenantCopies = true
		case strings.HasPrefix(p, "mig=") && sh == Gpuslice && c.MIGProfiles == nil:
			list := strings.ReplaceAll(strings.TrimPrefix(p, "mig="), ":", ",")
			if list == "all" || list == "" {
				return Case{}, fmt.Errorf("case %q: mig=%s: leave it out for all profiles; want none or a list such as 1g.5gb:3g.20gb", s, list)
			}
			if c.MIGProfiles, err = dradriver.ParseMIGProfiles(list, nil); err != nil {
				return Case{}, fmt.Errorf("case %q: %w", s, err)
			}
		default:
			return Case{}, fmt.Errorf("case %q: %q: after SHAPE/WORKLOAD only copies and mig=PROFILES, each once, on shape gpuslice", s, p)
		}
	}
	if _, err := Claim(c.Shape, c.Workload, "ns", "x", ""); err != nil {
		return Case{}, fmt.Errorf("case %q: %w", s, err)
	}
	return c, nil
}

// Config is one run.
type Config struct {
	// Nodes is how many simulated nodes each control plane gets.
	Nodes int
	// Model and GPUs describe each node (default an 8×A100-40GB DGX).
	Model string
	GPUs  int
	// Kubernetes are the control planes to run, each a directory holding
	// etcd, kube-apiserver and kube-scheduler (controlplane's layout).
	Kubernetes []string
	// Cases are the measurements on each control plane (DefaultCases).
	Cases []Case
	// Pods per case (capped at what the nodes hold); Tenants is how many
	// namespaces they come from, round robin.
	Pods, Tenants int
	// Timeout bounds the scheduling of one case: what is bound by then is
	// measured.
	Timeout time.Duration
	// Workers create the objects in parallel.
	Workers int
	// ProfileDir, if set, gets a CPU profile of kube-scheduler for each
	// case (ProfileSeconds long, from the tenth bind).
	ProfileDir     string
	ProfileSeconds int
	// AllGates runs the control planes with controlplane's feature gates
	// (every DRA gate, alpha ones too) instead of each release's
	// defaults (OffByDefault switched back off).
	AllGates bool
	// Tmp holds the control planes' files.
	Tmp string
	// Log gets progress lines.
	Log io.Writer
}

// Result is one case on one control plane.
type Result struct {
	Kubernetes   string  `json:"kubernetes"`
	Gates        string  `json:"featureGates"` // "defaults" or "all" (controlplane's)
	Nodes        int     `json:"nodes"`
	Shape        Shape   `json:"shape"`
	Workload     string  `json:"workload"`
	MIGProfiles  string  `json:"migProfiles"`  // gpuslice: dra-driver --mig-profiles
	TenantCopies int     `json:"tenantCopies"` // tenants with a copy of each shared GPU (0: none)
	Devices      int     `json:"devicesPerNode"`
	Slices       int     `json:"slicesPerNode"`
	Counters     int     `json:"counterConsumptionsPerNode"` // counters consumed, summed over the node's devices
	Pods         int     `json:"pods"`
	Bound        int     `json:"bound"`
	PodsPerSec   float64 `json:"podsPerSecond"` // steady state: binds from the 10th to the 90th percentile
	CPUPerPod    float64 `json:"cpuMsPerPod"`   // kube-scheduler's CPU time per bound pod
	Seconds      float64 `json:"seconds"`       // first to last bind
	Profile      string  `json:"profile,omitempty"`
	Error        string  `json:"error,omitempty"`
}

func (c *Config) defaults() error {
	if c.Nodes <= 0 {
		return fmt.Errorf("nodes: %d; want at least 1", c.Nodes)
	}
	if c.Model == "" {
		c.Model = "A100-40GB"
	}
	if c.GPUs <= 0 {
		c.GPUs = 8
	}
	if len(c.Cases) == 0 {
		c.Cases = DefaultCases()
	}
	if c.Pods <= 0 {
		c.Pods = 500
	}
	if c.Tenants <= 0 {
		c.Tenants = 10
	}
	if c.Tenants > dradriver.MaxTenants {
		return fmt.Errorf("tenants: %d; at most %d", c.Tenants, dradriver.MaxTenants)
	}
	if c.Timeout <= 0 {
		c.Timeout = 3 * time.Minute
	}
	if c.Workers <= 0 {
		c.Workers = 16
	}
	if c.ProfileSeconds <= 0 {
		c.ProfileSeconds = 20
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	if c.Tmp == "" {
		return errors.New("Tmp: a directory for the control planes' files is required")
	}
	return nil
}

// Version is the kube-scheduler version in dir ("kube-scheduler --version"),
// the release controlplane starts the control plane as (its feature gates).
func Version(dir string) string {
	out, err := exec.Command(filepath.Join(dir, "kube-scheduler"), "--version").Output()
	if err != nil {
		return filepath.Base(dir)
	}
	f := strings.Fields(string(out))
	return f[len(f)-1]
}

// Run measures every case on every control plane, one after the other,
// each on a fresh etcd and kube-apiserver: Nodes ready nodes with the
// case's slices, Pods pods each with its own ResourceClaim created first,
// then the stock kube-scheduler started and every bind timed.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	var out []Result
	for _, dir := range cfg.Kubernetes {
		v := Version(dir)
		for _, c := range cfg.Cases {
			if err := ctx.Err(); err != nil {
				return out, err
			}
			fmt.Fprintf(cfg.Log, "%s %d nodes %s: setting up\n", v, cfg.Nodes, c)
			r, err := runCase(ctx, cfg, dir, v, c)
			if err != nil {
				r.Error = err.Error()
				fmt.Fprintf(cfg.Log, "%s %d nodes %s: %v\n", v, cfg.Nodes, c, err)
			} else {
				fmt.Fprintf(cfg.Log, "%s %d nodes %s: %d/%d bound, %.2f pods/s, %.1f ms scheduler CPU per pod\n",
					v, cfg.Nodes, c, r.Bound, r.Pods, r.PodsPerSec, r.CPUPerPod)
			}
			out = append(out, r)
		}
	}
	return out, nil
}

func tenantsFor(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("team-%02d", i)
	}
	return out
}

func runCase(ctx context.Context, cfg Config, dir, version string, c Case) (Result, error) {
	r := Result{Kubernetes: version, Nodes: cfg.Nodes, Shape: c.Shape, Workload: string(c.Workload), Gates: "defaults"}
	if cfg.AllGates {
		r.Gates = "all"
	}
	if c.Shape == Gpuslice {
		r.MIGProfiles = "all"
		if c.MIGProfiles != nil {
			r.MIGProfiles = strings.Join(c.MIGProfiles, ",")
			if len(c.MIGProfiles) == 0 {
				r.MIGProfiles = "none"
			}
		}
	}
	tenants := tenantsFor(cfg.Tenants)
	var copies []string
	if c.TenantCopies {
		copies = tenants
		r.TenantCopies = len(tenants)
	}
	// What one node publishes, for the table and the pod cap.
	sample, err := NodeSlices(c.Shape, Node{Name: "node-0000", Model: cfg.Model, GPUs: cfg.GPUs}, copies, c.MIGProfiles)
	if err != nil {
		return r, err
	}
	r.Slices = len(sample)
	for _, s := range sample {
		r.Devices += len(s.Spec.Devices)
		for _, d := range s.Spec.Devices {
			for _, cc := range d.ConsumesCounters {
				r.Counters += len(cc.Counters)
			}
		}
	}
	perNode := cfg.GPUs
	if c.Workload == Share {
		perNode = cfg.GPUs * 10
	}
	r.Pods = min(cfg.Pods, perNode*cfg.Nodes)

	tmp, err := os.MkdirTemp(cfg.Tmp, "sched-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(tmp)
	// A loopback API server (controlplane turns the endpoint reconciler off
	// for it, which 1.37 requires).
	opts := controlplane.Options{Version: version}
	if !cfg.AllGates {
		opts.ExtraFeatureGates = offByDefault(version)
	}
	srv, stop, err := controlplane.Launch(ctx, dir, tmp, opts)
	defer stop()
	if err != nil {
		return r, err
	}
	rc := rest.CopyConfig(srv.Config)
	// Creating thousands of objects on a busy machine: no client-side
	// throttling (controlplane's config carries a rate limiter), a longer
	// timeout.
	rc.QPS, rc.Burst, rc.RateLimiter, rc.Timeout = 2000, 4000, nil, 2*time.Minute
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return r, err
	}
	for _, ns := range tenants {
		if err := srv.EnsureNamespace(ctx, ns); err != nil {
			return r, err
		}
	}
	for _, dc := range append(dradriver.DeviceClasses(), NVIDIAClasses()...) {
		if _, err := cs.ResourceV1().DeviceClasses().Create(ctx, &dc, metav1.CreateOptions{}); err != nil {
			return r, err
		}
	}
	setup := time.Now()
	err = parallel(ctx, cfg.Workers, cfg.Nodes, func(i int) error {
		name := fmt.Sprintf("node-%04d", i)
		if err := createNode(ctx, cs, name); err != nil {
			return err
		}
		sl, err := NodeSlices(c.Shape, Node{Name: name, Model: cfg.Model, GPUs: cfg.GPUs}, copies, c.MIGProfiles)
		if err != nil {
			return err
		}
		for j := range sl {
			if _, err := cs.ResourceV1().ResourceSlices().Create(ctx, &sl[j], metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("slice %s: %w", sl[j].Name, err)
			}
		}
		return nil
	})
	if err != nil {
		return r, err
	}
	err = parallel(ctx, cfg.Workers, r.Pods, func(i int) error {
		ns := tenants[i%len(tenants)]
		name := fmt.Sprintf("p-%05d", i)
		t := ""
		if c.TenantCopies {
			t = ns
		}
		claim, err := Claim(c.Shape, c.Workload, ns, name, t)
		if err != nil {
			return err
		}
		if _, err := cs.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
			return err
		}
		_, err = cs.CoreV1().Pods(ns).Create(ctx, Pod(ns, name), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return r, err
	}
	fmt.Fprintf(cfg.Log, "  %d nodes (%d slices) and %d pods created in %.1fs\n", cfg.Nodes, cfg.Nodes*r.Slices, r.Pods, time.Since(setup).Seconds())

	// Watch binds from here on; nothing is bound before the scheduler runs.
	list, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return r, err
	}
	w, err := cs.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		return r, err
	}
	defer func() { w.Stop() }()

	args := []string{"--v=1"}
	if cfg.ProfileDir != "" {
		args = append(args, "--profiling=true", "--authorization-always-allow-paths=/healthz,/readyz,/livez,/debug/pprof/*")
	}
	sched, err := controlplane.LaunchScheduler(ctx, srv, tmp, controlplane.SchedulerOptions{Args: args})
	if sched != nil {
		defer sched.Stop()
	}
	if err != nil {
		return r, err
	}
	cpu0 := cpuSeconds(sched.PID())

	var binds []time.Time
	seen := map[string]bool{}
	deadline := time.NewTimer(cfg.Timeout)
	defer deadline.Stop()
	var prof sync.WaitGroup
	profErr := make(chan error, 1)
	var cpu1 float64
loop:
	for len(binds) < r.Pods {
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-deadline.C:
			break loop
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type == watch.Error {
				// The API server ended the watch (or its resource
				// version expired): list, count the binds missed as of
				// now, and watch again from the list.
				w.Stop()
				all, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
				if err != nil {
					return r, fmt.Errorf("listing pods: %w", err)
				}
				for _, p := range all.Items {
					if k := p.Namespace + "/" + p.Name; p.Spec.NodeName != "" && !seen[k] {
						seen[k] = true
						binds = append(binds, time.Now())
					}
				}
				fmt.Fprintf(cfg.Log, "  the pod watch ended (%v); watching again\n", ev.Object)
				if w, err = cs.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{ResourceVersion: all.ResourceVersion}); err != nil {
					return r, fmt.Errorf("watching pods again: %w", err)
				}
				continue
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			if p.Spec.NodeName == "" || seen[p.Namespace+"/"+p.Name] {
				continue
			}
			seen[p.Namespace+"/"+p.Name] = true
			binds = append(binds, time.Now())
			cpu1 = cpuSeconds(sched.PID())
			if len(binds) == 10 && cfg.ProfileDir != "" {
				file := filepath.Join(cfg.ProfileDir, fmt.Sprintf("kube-scheduler-%s-%dnodes-%s.pprof", version, cfg.Nodes, strings.ReplaceAll(c.String(), "/", "-")))
				r.Profile = file
				prof.Add(1)
				go func() {
					defer prof.Done()
					profErr <- fetchProfile(ctx, sched.URL, cfg.ProfileSeconds, file)
				}()
			}
		}
	}
	prof.Wait()
	select {
	case err := <-profErr:
		if err != nil {
			fmt.Fprintf(cfg.Log, "  profile: %v\n", err)
			r.Profile = ""
		}
	default:
	}
	r.Bound = len(binds)
	if r.Bound > 0 {
		r.CPUPerPod = (cpu1 - cpu0) * 1000 / float64(r.Bound)
		r.Seconds = binds[len(binds)-1].Sub(binds[0]).Seconds()
	}
	r.PodsPerSec = SteadyRate(binds)
	if r.Bound == 0 {
		return r, fmt.Errorf("no pod was bound in %s; kube-scheduler log:\n%s", cfg.Timeout, sched.Tail(2000))
	}
	return r, nil
}

// OffByDefault are the DRA feature gates controlplane switches on that a
// release has off by default (its alpha gates, and 1.36's
// DRADeviceTaintRules), by minor version: some switch the scheduler to
// the allocator's experimental code (DRADeviceCompatibilityGroups) or
// add a pass over every slice of the cluster to each Filter
// (DRANodeAllocatableResources), which a cluster with default gates
// never runs.
var OffByDefault = map[string][]string{
	"1.36": {"DRADeviceTaintRules", "DRAListTypeAttributes", "DRANodeAllocatableResources", "DRAResourcePoolStatus"},
	"1.37": {"DRADerivedAttributes", "DRADeviceCompatibilityGroups", "DRAListTypeAttributes", "DRANodeAllocatableResources",
		"DRAPartitionableDevicesType", "DRAResourcePoolStatus"},
}

// offByDefault is the --feature-gates suffix that switches version's
// OffByDefault gates back off.
func offByDefault(version string) string {
	parts := strings.SplitN(strings.TrimPrefix(version, "v"), ".", 3)
	minor := strings.Join(parts[:min(2, len(parts))], ".")
	var out []string
	for _, g := range OffByDefault[minor] {
		out = append(out, g+"=false")
	}
	return strings.Join(out, ",")
}

// SteadyRate is binds per second over the middle 80% of the binds (from
// the one at the 10th percentile to the one at the 90th), leaving out
// the scheduler's start and the tail; 0 with fewer than 5 binds.
func SteadyRate(binds []time.Time) float64 {
	if len(binds) < 5 {
		return 0
	}
	b := slices.Clone(binds)
	sort.Slice(b, func(i, j int) bool { return b[i].Before(b[j]) })
	lo, hi := len(b)/10, len(b)-1-len(b)/10
	d := b[hi].Sub(b[lo]).Seconds()
	if d <= 0 {
		return 0
	}
	return float64(hi-lo) / d
}

// createNode makes a ready node as a kubelet would leave it.
func createNode(ctx context.Context, cs kubernetes.Interface, name string) error {
	rl := corev1.ResourceList{"cpu": resource.MustParse("256"), "memory": resource.MustParse("2Ti"), "pods": resource.MustParse("500")}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}}}
	created, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("node %s: %w", name, err)
	}
	now := metav1.Now()
	created.Status = corev1.NodeStatus{Capacity: rl, Allocatable: rl, Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady,
		Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}}}
	if created, err = cs.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("node %s status: %w", name, err)
	}
	var keep []corev1.Taint
	for _, t := range created.Spec.Taints {
		if t.Key != corev1.TaintNodeNotReady {
			keep = append(keep, t)
		}
	}
	if len(keep) != len(created.Spec.Taints) {
		created.Spec.Taints = keep
		if _, err = cs.CoreV1().Nodes().Update(ctx, created, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("node %s taints: %w", name, err)
		}
	}
	return nil
}

// parallel runs f(0..n-1) on workers goroutines; the first error stops it.
func parallel(ctx context.Context, workers, n int, f func(i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					cancel(err)
				}
			}
		})
	}
	for i := 0; i < n; i++ {
		select {
		case next <- i:
		case <-ctx.Done():
			i = n
		}
	}
	close(next)
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}

var statFields = regexp.MustCompile(`\) \S+ (.*)$`)

// cpuSeconds is a process's user+system CPU time (Linux /proc; 0 elsewhere).
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	m := statFields.FindSubmatch(bytes.TrimSpace(b))
	if m == nil {
		return 0
	}
	f := strings.Fields(string(m[1]))
	// After the state: ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime.
	if len(f) < 12 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[10], 64)
	s, _ := strconv.ParseFloat(f[11], 64)
	return (u + s) / 100 // USER_HZ
}

// fetchProfile saves seconds of the scheduler's CPU profile to file.
func fetchProfile(ctx context.Context, base string, seconds int, file string) error {
	client := &http.Client{Timeout: time.Duration(seconds+30) * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // loopback, a process this run started
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, seconds), nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 500))
		return fmt.Errorf("%s: %s", resp.Status, b)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
