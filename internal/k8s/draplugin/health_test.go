package draplugin_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	drahealth "k8s.io/kubelet/pkg/apis/dra-health/v1alpha1"

	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpu/fake"
	"github.com/gpuslice/gpuslice/internal/k8s/apitest"
	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
	"github.com/gpuslice/gpuslice/internal/k8s/draplugin"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// devHealth is one device of a health report as the kubelet reads it.
type devHealth struct {
	pool    string
	health  drahealth.HealthStatus
	message string
	timeout int64
}

// healthReport is a NodeWatchResources response by device name (the
// send time left out: a resend equals the report before it).
type healthReport map[string]devHealth

func (r healthReport) String() string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(r)) {
		out = append(out, fmt.Sprintf("%s=%s %q", k, r[k].health, r[k].message))
	}
	return strings.Join(out, "; ")
}

// healthWatcher is the kubelet's health stream: NodeWatchResources on
// DRAResourceHealth v1alpha1, the version kubelet 1.36 calls, over the
// driver's socket. A goroutine receives; end gets the stream's error.
type healthWatcher struct {
	t       *testing.T
	cancel  context.CancelFunc
	reports chan healthReport
	end     chan error
}

func watchHealth(t *testing.T, ctx context.Context, conn *grpc.ClientConn) *healthWatcher {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	stream, err := drahealth.NewDRAResourceHealthClient(conn).NodeWatchResources(ctx, &drahealth.NodeWatchResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	w := &healthWatcher{t: t, cancel: cancel, reports: make(chan healthReport, 1000), end: make(chan error, 1)}
	go func() {
		for {
			resp, err := stream.Recv()
			if err != nil {
				w.end <- err
				return
			}
			r := healthReport{}
			for _, d := range resp.Devices {
				r[d.Device.DeviceName] = devHealth{pool: d.Device.PoolName, health: d.Health, message: d.Message, timeout: d.HealthCheckTimeoutSeconds}
			}
			w.reports <- r
		}
	}()
	return w
}

// next is the next report.
func (w *healthWatcher) next(what string) healthReport {
	w.t.Helper()
	select {
	case r := <-w.reports:
		return r
	case err := <-w.end:
		w.t.Fatalf("%s: the health stream ended: %v", what, err)
	case <-time.After(10 * time.Second):
		w.t.Fatalf("%s: no health report in 10s", what)
	}
	return nil
}

// nextChange skips resends of prev and returns the first report that
// differs.
func (w *healthWatcher) nextChange(what string, prev healthReport) healthReport {
	w.t.Helper()
	for {
		if r := w.next(what); !maps.Equal(r, prev) {
			return r
		}
	}
}

// until reads reports until one satisfies ok (the latest state wins; the
// ones between may be skipped).
func (w *healthWatcher) until(what string, ok func(healthReport) bool) healthReport {
	w.t.Helper()
	deadline := time.After(20 * time.Second)
	var last healthReport
	for {
		select {
		case r := <-w.reports:
			if ok(r) {
				return r
			}
			last = r
		case err := <-w.end:
			w.t.Fatalf("%s: the health stream ended: %v (last report %v)", what, err, last)
		case <-deadline:
			w.t.Fatalf("%s: not reported in 20s; last report %v", what, last)
		}
	}
}

// ended waits for the stream's end and returns its error.
func (w *healthWatcher) ended(what string) error {
	w.t.Helper()
	for {
		select {
		case <-w.reports:
		case err := <-w.end:
			return err
		case <-time.After(10 * time.Second):
			w.t.Fatalf("%s: the health stream did not end", what)
		}
	}
}

// onGPU reports whether a device name is one of GPU idx's (gpu-N and
// gpu-N-…: whole, shared, MIG placements).
func onGPU(name string, idx int) bool {
	p := fmt.Sprintf("gpu-%d", idx)
	return name == p || strings.HasPrefix(name, p+"-")
}

// with is r with every device of GPU idx set to h (message checked by
// contains, then copied from got).
func with(r, got healthReport, idx int, h drahealth.HealthStatus) healthReport {
	out := maps.Clone(r)
	for k, v := range out {
		if onGPU(k, idx) {
			v.health, v.message = h, got[k].message
			out[k] = v
		}
	}
	return out
}

// checkGPU fails unless every device of GPU idx in r has health h and a
// message containing msg.
func checkGPU(t *testing.T, what string, r healthReport, idx int, h drahealth.HealthStatus, msg string) {
	t.Helper()
	n := 0
	for k, v := range r {
		if !onGPU(k, idx) {
			continue
		}
		n++
		if v.health != h || !strings.Contains(v.message, msg) {
			t.Fatalf("%s: %s is %s %q, want %s with %q", what, k, v.health, v.message, h, msg)
		}
	}
	if n < 2 {
		t.Fatalf("%s: %d devices of GPU %d in %v", what, n, idx, r)
	}
}

// healthNode is a Node in the API server and a driver for it.
func healthNode(t *testing.T, ctx context.Context, srv *apitest.Server, cs kubernetes.Interface, name string, dev gpu.Device) (*draplugin.Driver, *kubelet) {
	t.Helper()
	// A group of the node's own: the Node is deleted when the test ends.
	apitest.NewCluster(t, srv, apitest.ClusterOptions{Group: name}).AddReadyNode(name)
	dir := shortDir(t)
	d, err := draplugin.New(ctx, draplugin.Config{Node: name, Device: dev, Kube: cs, CDIDir: filepath.Join(dir, "cdi"),
		StateDir: filepath.Join(dir, "state"), RegistrarDir: filepath.Join(dir, "reg"), MPSRoot: filepath.Join(dir, "mps"),
		Log: quietLog(), HealthResend: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	k := registerKubelet(t, ctx, filepath.Join(dir, "reg"))
	if !slices.Contains(k.versions, drahealth.DRAResourceHealthService) {
		t.Fatalf("GetInfo lists %v: the kubelet calls %s only when listed", k.versions, drahealth.DRAResourceHealthService)
	}
	return d, k
}

// The kubelet's health streams (KEP-4680) over real gRPC, on a node with
// an A100 (whole, shared and every MIG placement published) and an L4:
// every published device Healthy at first, pool = node; a fatal XID on
// GPU 0 turns exactly GPU 0's devices Unhealthy, in both concurrent
// streams; a NoSchedule XID keeps GPU 1 Healthy with the taint in the
// message. Two watchers that never read (a kubelet stuck over gRPC with
// the smallest flow-control window, and a WatchHealthStatus whose channel
// nobody drains) hold up neither the taint path (a flood of events ends
// in the right taints in the API server) nor the other streams (they get
// the latest state). Unchanged health is re-sent each HealthResend with a
// timeout of three; a cancelled stream's goroutine ends; a lost GPU is
// Unknown; the driver's Stop ends the streams.
func TestHealthStreamsToTheKubelet(t *testing.T) {
	t.Parallel()
	srv := apitest.Shared(t)
	cs, err := kubernetes.NewForConfig(srv.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	t.Cleanup(cancel)
	m, err := fake.New(fake.MachineSpec{GPUs: []fake.GPUSpec{{Model: "A100-40GB"}, {Model: "L4"}}}, fake.WithSeed(5))
	if err != nil {
		t.Fatal(err)
	}
	const node = "node-h"
	d, k := healthNode(t, ctx, srv, cs, node, m)

	var published []string
	for _, s := range d.Slices() {
		for _, dv := range s.Spec.Devices {
			published = append(published, dv.Name)
		}
	}
	a := watchHealth(t, ctx, k.conn)
	first := a.next("watcher A's first report")
	if got := slices.Sorted(maps.Keys(first)); !slices.Equal(got, slices.Sorted(slices.Values(published))) {
		t.Fatalf("first report lists %v, want every published device %v", got, published)
	}
	for name, h := range first {
		if h.pool != node || h.health != drahealth.HealthStatus_HEALTHY || h.message != "" || h.timeout != 1 {
			t.Fatalf("first report: %s %+v, want pool %s Healthy, no message, timeout 1s (3 × 300ms, rounded up)", name, h, node)
		}
	}
	b := watchHealth(t, ctx, k.conn)
	if r := b.next("watcher B's first report"); !maps.Equal(r, first) {
		t.Fatalf("watcher B's first report %v, want A's %v", r, first)
	}
	// Unchanged health is sent again within the timeout.
	if r := a.next("a resend"); !maps.Equal(r, first) {
		t.Fatalf("resend %v differs from %v", r, first)
	}

	// The attackers: a kubelet that opens the stream and never reads,
	// with the smallest windows gRPC allows so its sends block soon, and
	// a stream whose channel nobody drains (the helper stuck in Send).
	stuckConn, err := grpc.NewClient("unix://"+k.endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(1<<16), grpc.WithInitialConnWindowSize(1<<16))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stuckConn.Close() })
	stuckCtx, stuckCancel := context.WithCancel(ctx)
	defer stuckCancel()
	if _, err := drahealth.NewDRAResourceHealthClient(stuckConn).NodeWatchResources(stuckCtx, &drahealth.NodeWatchResourcesRequest{}); err != nil {
		t.Fatal(err)
	}
	undrainedCtx, undrainedCancel := context.WithCancel(ctx)
	defer undrainedCancel()
	undrained := make(chan error, 1)
	go func() { undrained <- d.WatchHealthStatus(undrainedCtx, make(chan kubeletplugin.DeviceHealthReport)) }()
	testkit.EventuallyCtx(t, ctx, "four health streams", func() (bool, string) {
		return d.HealthWatchers() == 4, fmt.Sprintf("%d", d.HealthWatchers())
	})

	// A fatal XID on GPU 0: its devices, and only they, Unhealthy.
	if err := m.InjectXID(0, 79); err != nil {
		t.Fatal(err)
	}
	ra := a.nextChange("XID 79 on GPU 0 (watcher A)", first)
	checkGPU(t, "XID 79 (A)", ra, 0, drahealth.HealthStatus_UNHEALTHY, "XID 79 (GPU has fallen off the bus)")
	if want := with(first, ra, 0, drahealth.HealthStatus_UNHEALTHY); !maps.Equal(ra, want) {
		t.Fatalf("after XID 79 on GPU 0: %v, want only GPU 0's devices changed: %v", ra, want)
	}
	if rb := b.nextChange("XID 79 on GPU 0 (watcher B)", first); !maps.Equal(rb, ra) {
		t.Fatalf("watcher B got %v, A %v", rb, ra)
	}

	// A NoSchedule XID: Healthy, the taint in the message.
	if err := m.InjectXID(1, 92); err != nil {
		t.Fatal(err)
	}
	r92 := a.nextChange("XID 92 on GPU 1", ra)
	checkGPU(t, "XID 92", r92, 1, drahealth.HealthStatus_HEALTHY, dranames.TaintKey+"=92:NoSchedule")
	checkGPU(t, "XID 92", r92, 0, drahealth.HealthStatus_UNHEALTHY, "XID 79")

	// A flood of events while two streams are stuck: the taint path and
	// the other streams go on; the last event (XID 63) is the state all
	// must reach.
	for range 100 {
		if err := m.Recover(1); err != nil {
			t.Fatal(err)
		}
		if err := m.InjectXID(1, 92); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Recover(1); err != nil {
		t.Fatal(err)
	}
	if err := m.InjectXID(1, 63); err != nil {
		t.Fatal(err)
	}
	testkit.EventuallyCtx(t, ctx, "node-h's taints after the flood: GPU 0 79:NoExecute, GPU 1 63:NoSchedule", func() (bool, string) {
		var got []string
		ok := true
		for _, dv := range nodeDevices(t, ctx, cs, node) {
			want := "79:" + string(resourceapi.DeviceTaintEffectNoExecute)
			if onGPU(dv.Name, 1) {
				want = "63:" + string(resourceapi.DeviceTaintEffectNoSchedule)
			}
			have := ""
			if len(dv.Taints) == 1 && dv.Taints[0].Key == dranames.TaintKey {
				have = dv.Taints[0].Value + ":" + string(dv.Taints[0].Effect)
			}
			ok = ok && have == want
			got = append(got, dv.Name+"="+have)
		}
		return ok, strings.Join(got, " ")
	})
	latest := func(r healthReport) bool {
		return r["gpu-1"].health == drahealth.HealthStatus_HEALTHY && strings.Contains(r["gpu-1"].message, "XID 63") &&
			r["gpu-0"].health == drahealth.HealthStatus_UNHEALTHY
	}
	r63 := a.until("watcher A at the latest state", latest)
	checkGPU(t, "XID 63", r63, 1, drahealth.HealthStatus_HEALTHY, dranames.TaintKey+"=63:NoSchedule")
	checkGPU(t, "XID 63", r63, 0, drahealth.HealthStatus_UNHEALTHY, "XID 79")
	if rb := b.until("watcher B at the latest state", latest); !maps.Equal(rb, r63) {
		t.Fatalf("watcher B %v, A %v", rb, r63)
	}
	select {
	case err := <-undrained:
		t.Fatalf("the undrained stream returned early: %v", err)
	default:
	}

	// Cancelled streams end and their goroutines return: the stuck ones
	// and watcher B.
	undrainedCancel()
	select {
	case err := <-undrained:
		if err != nil {
			t.Fatalf("WatchHealthStatus on a cancelled context: %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WatchHealthStatus blocked on a channel nobody reads did not return when cancelled")
	}
	stuckCancel()
	b.cancel()
	if err := b.ended("watcher B cancelled"); status.Code(err) != codes.Canceled {
		t.Fatalf("watcher B ended with %v, want Canceled", err)
	}
	testkit.EventuallyCtx(t, ctx, "only watcher A's stream left", func() (bool, string) {
		return d.HealthWatchers() == 1, fmt.Sprintf("%d streams", d.HealthWatchers())
	})

	// GPU 0 recovers, GPU 1 is lost: Healthy, then Unknown.
	if err := m.Recover(0); err != nil {
		t.Fatal(err)
	}
	rrec := a.until("GPU 0 recovered", func(r healthReport) bool { return r["gpu-0"].health == drahealth.HealthStatus_HEALTHY })
	if want := with(r63, rrec, 0, drahealth.HealthStatus_HEALTHY); !maps.Equal(rrec, want) {
		t.Fatalf("after GPU 0 recovered: %v, want %v", rrec, want)
	}
	for name, h := range rrec {
		if onGPU(name, 0) && h.message != "" {
			t.Fatalf("GPU 0 recovered: %s keeps the message %q", name, h.message)
		}
	}
	if err := m.Recover(1); err != nil {
		t.Fatal(err)
	}
	if err := m.Remove(1); err != nil {
		t.Fatal(err)
	}
	rlost := a.until("GPU 1 lost", func(r healthReport) bool { return r["gpu-1"].health == drahealth.HealthStatus_UNKNOWN })
	checkGPU(t, "GPU 1 lost", rlost, 1, drahealth.HealthStatus_UNKNOWN, "is lost")
	for name, h := range rlost {
		if !onGPU(name, 1) && (h.health != drahealth.HealthStatus_HEALTHY || h.message != "") {
			t.Fatalf("GPU 1 lost: %s is %+v, want Healthy", name, h)
		}
	}

	testkit.EventuallyCtx(t, ctx, "GPU 1's devices tainted lost:NoExecute", func() (bool, string) {
		var got []string
		ok := true
		for _, dv := range nodeDevices(t, ctx, cs, node) {
			lost := len(dv.Taints) == 1 && dv.Taints[0].Value == dradriver.ValueLost && dv.Taints[0].Effect == resourceapi.DeviceTaintEffectNoExecute
			ok = ok && lost == onGPU(dv.Name, 1) && (lost || len(dv.Taints) == 0)
			got = append(got, fmt.Sprintf("%s=%v", dv.Name, dv.Taints))
		}
		return ok, strings.Join(got, " ")
	})

	// The driver stops: the stream ends.
	d.Stop()
	if err := a.ended("driver stopped"); err == nil {
		t.Fatal("watcher A's stream ended without an error when the driver stopped")
	}
	if n := d.HealthWatchers(); n != 0 {
		t.Fatalf("%d health streams after Stop", n)
	}
}

// closingDevice is a GPU machine whose health events the test ends, as a
// device layer whose event source died.
type closingDevice struct {
	*fake.Machine
	events chan gpu.Event
}

func (c *closingDevice) Events(context.Context) (<-chan gpu.Event, error) { return c.events, nil }

// failingDevice is a GPU machine with no health events at all.
type failingDevice struct{ *fake.Machine }

func (failingDevice) Events(context.Context) (<-chan gpu.Event, error) {
	return nil, errors.New("no XID events on this host")
}

// Without health events the driver cannot vouch for a device: when the
// device layer ends its events, every device turns Unknown in the
// kubelet's stream; when it has none from the start, they are Unknown
// from the first report. The stream goes on either way.
func TestHealthUnknownWithoutHealthEvents(t *testing.T) {
	t.Parallel()
	srv := apitest.Shared(t)
	cs, err := kubernetes.NewForConfig(srv.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	newMachine := func() *fake.Machine {
		m, err := fake.New(fake.MachineSpec{GPUs: []fake.GPUSpec{{Model: "L4"}, {Model: "L4"}}}, fake.WithSeed(3))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	allOf := func(r healthReport, h drahealth.HealthStatus) bool {
		for _, v := range r {
			if v.health != h {
				return false
			}
		}
		return len(r) == 4
	}

	cd := &closingDevice{Machine: newMachine(), events: make(chan gpu.Event)}
	_, k := healthNode(t, ctx, srv, cs, "node-c", cd)
	w := watchHealth(t, ctx, k.conn)
	if r := w.next("first report"); !allOf(r, drahealth.HealthStatus_HEALTHY) {
		t.Fatalf("first report %v, want 4 devices Healthy", r)
	}
	close(cd.events)
	r := w.until("every device Unknown after the events ended", func(r healthReport) bool { return allOf(r, drahealth.HealthStatus_UNKNOWN) })
	for name, h := range r {
		if !strings.Contains(h.message, "no health events") {
			t.Fatalf("%s: %+v, want a message saying why", name, h)
		}
	}

	_, k2 := healthNode(t, ctx, srv, cs, "node-f", failingDevice{newMachine()})
	if r := watchHealth(t, ctx, k2.conn).next("first report without events"); !allOf(r, drahealth.HealthStatus_UNKNOWN) {
		t.Fatalf("first report %v, want 4 devices Unknown", r)
	}
}
