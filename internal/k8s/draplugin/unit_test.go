package draplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpu/fake"
	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// testDriver is a Driver on simulated GPUs, not started: Prepare and
// Unprepare are called directly with claims made here.
func testDriver(t *testing.T, spec fake.MachineSpec) (*Driver, *fake.Machine, string) {
	t.Helper()
	m, err := fake.New(spec, fake.WithSeed(3))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	d, err := New(context.Background(), Config{Node: "n1", Device: m, CDIDir: filepath.Join(dir, "cdi"), StateDir: filepath.Join(dir, "state"),
		MPSRoot: filepath.Join(dir, "mps"), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return d, m, dir
}

// allocated is a claim as the scheduler leaves it: device on node n1,
// with consumed memory and opaque parameters.
func allocated(uid, device, memory string, params string) *resourceapi.ResourceClaim {
	r := resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: dranames.DriverName, Pool: "n1", Device: device}
	if memory != "" {
		r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(memory)}
		share := types.UID("share-" + uid)
		r.ShareID = &share
	}
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c-" + uid, Namespace: "ns", UID: types.UID(uid)},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{r}}}},
	}
	c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "pod-" + uid, UID: "p"}}
	if params != "" {
		c.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{{Source: resourceapi.AllocationConfigSourceClaim,
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: dranames.DriverName, Parameters: runtime.RawExtension{Raw: []byte(params)}}}}}
	}
	return c
}

// Errors name the claim, the field and what would be valid; a refused
// claim leaves no trace.
func TestPrepareRefusals(t *testing.T) {
	d, _, _ := testDriver(t, fake.MachineSpec{GPUs: []fake.GPUSpec{{Model: "A100-40GB"}, {Model: "A100-40GB"}}})
	ctx := context.Background()
	for _, tc := range []struct {
		claim *resourceapi.ResourceClaim
		err   string
	}{
		{allocated("u1", "gpu-7", "", ""), `status.allocation.devices.results[0].device "gpu-7": node n1 publishes no such device`},
		{allocated("u2", "gpu-0-shared", "4Gi", `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultPinnedDeviceMemoryLimit":"8Gi"}}}`),
			"pinned memory limit 8192 MiB is more than the 4096 MiB"},
		{allocated("u3", "gpu-0-shared", "4Gi", `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"Fair"}}`),
			`status.allocation.devices.config[0].opaque.parameters.sharing.strategy "Fair"`},
	} {
		_, err := d.Prepare(ctx, tc.claim)
		if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "ns/"+tc.claim.Name) {
			t.Errorf("%s: error %v, want one naming the claim and containing %q", tc.claim.Name, err, tc.err)
		}
	}
	if len(d.claims) != 0 {
		t.Fatalf("refused claims left records: %v", d.claims)
	}
	// A shared GPU time-sliced by one claim refuses an MPS claim, and a
	// device held whole refuses a second claim (the scheduler would not
	// do this; the driver is the last line of defense).
	if _, err := d.Prepare(ctx, allocated("ts", "gpu-1-shared", "4Gi", "")); err != nil {
		t.Fatal(err)
	}
	_, err := d.Prepare(ctx, allocated("mps", "gpu-1-shared", "4Gi", `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS"}}`))
	if err == nil || !strings.Contains(err.Error(), "is set up for timeslice") {
		t.Fatalf("MPS beside time-slicing: %v", err)
	}
	if _, err := d.Prepare(ctx, allocated("w1", "gpu-0", "", "")); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Prepare(ctx, allocated("w2", "gpu-0", "", "")); err == nil || !strings.Contains(err.Error(), "is held by claim ns/c-w1") {
		t.Fatalf("a whole GPU twice: %v", err)
	}
}

// A whole-GPU claim on a GPU left in MIG mode with an idle instance turns
// MIG off; a MIG claim on a GPU outside MIG mode turns it on; a MIG
// instance in the way that no claim holds is destroyed to make room.
func TestPrepareReshapesGPUs(t *testing.T) {
	d, m, _ := testDriver(t, fake.MachineSpec{GPUs: []fake.GPUSpec{
		{Model: "A100-40GB", MIGEnabled: true, Instances: []string{"1g.5gb@0"}},
		{Model: "A100-40GB", MIGEnabled: true, Instances: []string{"4g.20gb@0"}},
	}})
	ctx := context.Background()
	if _, err := d.Prepare(ctx, allocated("w", "gpu-0", "", "")); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Prepare(ctx, allocated("m", "gpu-1-mig-3g-20gb-at-0", "", "")); err != nil {
		t.Fatal(err)
	}
	gs, _ := m.GPUs(ctx)
	if gs[0].MIGEnabled || len(gs[0].Instances) != 0 {
		t.Fatalf("GPU 0 given whole is still in MIG mode: %+v", gs[0])
	}
	if len(gs[1].Instances) != 1 || gs[1].Instances[0].Profile != "3g.20gb" || gs[1].Instances[0].Start != 0 {
		t.Fatalf("GPU 1: %+v; want only the 3g.20gb at 0", gs[1].Instances)
	}
	// The whole GPU is refused while a claim holds an instance on it.
	if _, err := d.Prepare(ctx, allocated("w1", "gpu-1", "", "")); err == nil || !strings.Contains(err.Error(), "held by claim ns/c-m") {
		t.Fatalf("whole GPU under a held instance: %v", err)
	}
}

// The checkpoint survives a new Driver: a prepared claim is answered
// from it, and Unprepare of it works without the ResourceClaim.
func TestCheckpointCarriesClaimsAcrossDrivers(t *testing.T) {
	d, m, dir := testDriver(t, fake.MachineSpec{GPUs: []fake.GPUSpec{{Model: "A100-40GB"}}})
	ctx := context.Background()
	first, err := d.Prepare(ctx, allocated("m", "gpu-0-mig-2g-10gb-at-4", "", ""))
	if err != nil {
		t.Fatal(err)
	}
	d2, err := New(ctx, Config{Node: "n1", Device: m, CDIDir: filepath.Join(dir, "cdi"), StateDir: filepath.Join(dir, "state"),
		MPSRoot: filepath.Join(dir, "mps"), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	again, err := d2.Prepare(ctx, allocated("m", "gpu-0-mig-2g-10gb-at-4", "", ""))
	if err != nil || len(again) != 1 || again[0].CDIDeviceIDs[0] != first[0].CDIDeviceIDs[0] {
		t.Fatalf("after a new driver: %+v %v, first %+v", again, err, first)
	}
	if err := d2.Unprepare(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	if gs, _ := m.GPUs(ctx); len(gs[0].Instances) != 0 {
		t.Fatalf("instances left: %+v", gs[0].Instances)
	}
	if err := d2.Unprepare(ctx, "m"); err != nil {
		t.Fatalf("unprepare twice: %v", err)
	}
	// Another node's checkpoint, or a damaged one, is refused by name.
	path := filepath.Join(dir, "state", CheckpointFile)
	if err := os.WriteFile(path, []byte(`{"version":1,"node":"n1","claims":{"x":{"uid":"x","state":"done","devices":[]}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = New(ctx, Config{Node: "n1", Device: m, StateDir: filepath.Join(dir, "state")})
	if err == nil || !strings.Contains(err.Error(), `claims["x"]: state "done": valid are binding, preparing, prepared`) {
		t.Fatalf("damaged checkpoint: %v", err)
	}
}

func FuzzParseCheckpoint(f *testing.F) {
	rec := map[string]*claimRecord{"u": {UID: "u", Namespace: "ns", Name: "c", State: statePrepared, Devices: []preparedDevice{{
		Request: "gpu", Pool: "n1", Device: "gpu-0", ID: "GPU-5fd4d9a8-4c6d-4e0d-9a3b-7c1a1f2e3d4c", Mode: alloc.Exclusive,
		deviceInfo: deviceInfo{Type: dranames.TypeGPU, GPU: "GPU-5fd4d9a8-4c6d-4e0d-9a3b-7c1a1f2e3d4c"}}}}}
	b, _ := json.Marshal(checkpoint{Version: 1, Node: "n1", Claims: rec})
	f.Add(b)
	f.Add([]byte(`{"version":1,"node":"n1","claims":{}}`))
	f.Add([]byte(`{"version":1,"node":"n1","claims":{"b":{"uid":"b","namespace":"ns","name":"c","state":"binding","devices":[{"request":"gpu","pool":"n1","device":"gpu-0-mig-1g-5gb-at-6","type":"mig","gpuIndex":0,"gpu":"GPU-5fd4d9a8-4c6d-4e0d-9a3b-7c1a1f2e3d4c","profile":"1g.5gb","start":6,"memoryMiB":4864,"mode":"exclusive","promisedMiB":4864}]}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		claims, err := parseCheckpoint("cp", data, "n1")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "checkpoint cp: ") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		for uid, r := range claims {
			if r == nil || r.UID != uid {
				t.Fatalf("accepted record %q: %+v", uid, r)
			}
			for _, d := range r.Devices {
				if d.ID != "" && !alloc.ValidDeviceID(d.ID) {
					t.Fatalf("accepted device id %q", d.ID)
				}
			}
		}
	})
}

// The watchdog of the standalone agent runs over prepared claims: a
// process on a claim's MIG instance is its usage, exported per claim with
// namespace, pod and claim labels, and per slice with the server's labels
// (slicemetrics): the GPU's uuid and the instance's GI id as DCGM has them.
func TestUsageMetricsPerClaim(t *testing.T) {
	now := time.Unix(1000, 0)
	m, err := fake.New(fake.MachineSpec{GPUs: []fake.GPUSpec{{Model: "A100-40GB"}}}, fake.WithSeed(3))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	d, err := New(context.Background(), Config{Node: "n1", Device: m, CDIDir: filepath.Join(dir, "cdi"), StateDir: filepath.Join(dir, "state"),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Clock: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := d.Prepare(ctx, allocated("m", "gpu-0-mig-3g-20gb-at-4", "", "")); err != nil {
		t.Fatal(err)
	}
	gs, _ := m.GPUs(ctx)
	if err := m.StartProcess(gs[0].Instances[0].UUID, 4242, 5000); err != nil {
		t.Fatal(err)
	}
	d.Watch(ctx)
	now = now.Add(10 * time.Second)
	d.Watch(ctx)
	reg := prometheus.NewRegistry()
	reg.MustRegister(d.Collector())
	want := `
# HELP gpuslice_slice_memory_used_bytes GPU memory a slice's processes use, as last measured (the agent's report, split equally among a claim's devices; on Kubernetes the watchdog's last pass, for claims with one device on the node).
# TYPE gpuslice_slice_memory_used_bytes gauge
gpuslice_slice_memory_used_bytes{GPU_I_ID="1",GPU_I_PROFILE="3g.20gb",Hostname="n1",UUID="` + gs[0].UUID + `",claim="c-m",container="",device="gpu-0-mig-3g-20gb-at-4",gpu="0",modelName="NVIDIA A100-SXM4-40GB",namespace="ns",pod="ns/pod-m",request="gpu",slice="c-m/0",tenant="ns"} 5.24288e+09
# HELP gpuslice_slice_claim_memory_mib_seconds_total GPU memory a claim's processes held, integrated over time (MiB × seconds).
# TYPE gpuslice_slice_claim_memory_mib_seconds_total counter
gpuslice_slice_claim_memory_mib_seconds_total{claim="c-m",namespace="ns",pod="ns/pod-m"} 50000
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "gpuslice_slice_memory_used_bytes", "gpuslice_slice_claim_memory_mib_seconds_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(d.Collector(), "gpuslice_slice_compute_allocated_ratio"); n != 1 {
		t.Fatalf("%d compute_allocated series", n)
	}
}

// Prepare, Unprepare, the watchdog and a scrape may run at once (the
// helper serializes gRPC calls, not the watchdog or /metrics): run under
// -race, and every claim ends prepared exactly once.
func TestConcurrentPrepareWatchAndScrape(t *testing.T) {
	d, m, _ := testDriver(t, fake.MachineSpec{GPUs: []fake.GPUSpec{{Model: "A100-40GB"}, {Model: "L4"}}})
	ctx := context.Background()
	devices := []string{"gpu-0-mig-1g-5gb-at-6", "gpu-0-mig-1g-5gb-at-5", "gpu-0-mig-2g-10gb-at-0", "gpu-1-shared", "gpu-1-shared"}
	done := make(chan error, len(devices))
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				d.Watch(ctx)
				testutil.CollectAndCount(d.Collector())
			}
		}
	}()
	for i, dev := range devices {
		mem := ""
		if dev == "gpu-1-shared" {
			mem = "2Gi"
		}
		go func() {
			uid := "c" + string(rune('a'+i))
			_, err := d.Prepare(ctx, allocated(uid, dev, mem, ""))
			if err == nil && i%2 == 0 {
				err = d.Unprepare(ctx, uid)
			}
			done <- err
		}()
	}
	for range devices {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	close(stop)
	gs, _ := m.GPUs(ctx)
	if len(gs[0].Instances) != 1 || gs[0].Instances[0].Start != 5 {
		t.Fatalf("instances left: %+v; want the one of the claim still prepared (1g.5gb at 5)", gs[0].Instances)
	}
	if len(d.claims) != 2 {
		t.Fatalf("%d claims prepared, want 2", len(d.claims))
	}
}

// BenchmarkPrepareUnprepare is one claim's prepare and unprepare on
// simulated GPUs: the plan, three checkpoint writes with fsync (intent,
// uuids, prepared) and one on unprepare, the CDI spec written (fsync) and
// removed, and for MIG the instance created and destroyed.
func BenchmarkPrepareUnprepare(b *testing.B) {
	for _, tc := range []struct{ name, device, memory string }{
		{"whole", "gpu-0", ""},
		{"shared", "gpu-0-shared", "4Gi"},
		{"mig", "gpu-0-mig-1g-5gb-at-6", ""},
	} {
		b.Run(tc.name, func(b *testing.B) {
			m, err := fake.New(fake.MachineSpec{GPUs: []fake.GPUSpec{{Model: "A100-40GB"}}}, fake.WithSeed(3))
			if err != nil {
				b.Fatal(err)
			}
			dir := b.TempDir()
			d, err := New(context.Background(), Config{Node: "n1", Device: m, CDIDir: filepath.Join(dir, "cdi"), StateDir: filepath.Join(dir, "state"),
				Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			claim := allocated("u", tc.device, tc.memory, "")
			b.ResetTimer()
			for b.Loop() {
				if _, err := d.Prepare(ctx, claim); err != nil {
					b.Fatal(err)
				}
				if err := d.Unprepare(ctx, "u"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A time-sliced GPU gets the interval its claims name (NVIDIA's
// timeSlicingConfig.interval or SliceConfig's interval); a claim naming
// none takes the GPU's; a claim naming another is refused, naming the
// claim that set it; the GPU returns to Default when the last claim
// naming an interval leaves. The compute mode is DEFAULT.
func TestTimeSliceIntervalOnPrepare(t *testing.T) {
	d, m, _ := testDriver(t, fake.MachineSpec{GPUs: []fake.GPUSpec{{Model: "A100-40GB"}, {Model: "A100-40GB"}}})
	ctx := context.Background()
	ts := func(interval string) string {
		return `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"` + interval + `"}}}`
	}
	level := func() gpu.TimeSlice {
		t.Helper()
		l, err := m.TimeSlice(1)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	if err := m.SetComputeMode(ctx, 1, gpu.ComputeProhibited); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Prepare(ctx, allocated("long", "gpu-1-shared", "4Gi", ts("Long"))); err != nil {
		t.Fatal(err)
	}
	if l := level(); l != gpu.TimeSliceLong {
		t.Fatalf("after a Long claim: %v", l)
	}
	if gs, _ := m.GPUs(ctx); gs[1].ComputeMode != gpu.ComputeDefault {
		t.Fatalf("compute mode %v, want DEFAULT", gs[1].ComputeMode)
	}
	if _, err := d.Prepare(ctx, allocated("plain", "gpu-1-shared", "4Gi", "")); err != nil {
		t.Fatal(err)
	}
	_, err := d.Prepare(ctx, allocated("short", "gpu-1-shared", "4Gi", ts("Short")))
	if err == nil || !strings.Contains(err.Error(), "time-sliced with interval Long for claim ns/c-long; this claim asks for Short") {
		t.Fatalf("a Short claim beside a Long one: %v", err)
	}
	if l := level(); l != gpu.TimeSliceLong {
		t.Fatalf("a refused claim changed the level to %v", l)
	}
	// Another GPU is independent.
	if _, err := d.Prepare(ctx, allocated("short0", "gpu-0-shared", "4Gi", ts("Short"))); err != nil {
		t.Fatal(err)
	}
	if l, _ := m.TimeSlice(0); l != gpu.TimeSliceShort {
		t.Fatalf("GPU 0: %v", l)
	}
	if err := d.Unprepare(ctx, "long"); err != nil {
		t.Fatal(err)
	}
	if l := level(); l != gpu.TimeSliceDefault {
		t.Fatalf("after the Long claim left: %v, want Default", l)
	}
	if _, err := d.Prepare(ctx, allocated("short", "gpu-1-shared", "4Gi", ts("Short"))); err != nil {
		t.Fatalf("Short once Long left: %v", err)
	}
	if l := level(); l != gpu.TimeSliceShort {
		t.Fatalf("%v, want Short", l)
	}
	for _, uid := range []string{"plain", "short"} {
		if err := d.Unprepare(ctx, uid); err != nil {
			t.Fatal(err)
		}
	}
	if l := level(); l != gpu.TimeSliceDefault {
		t.Fatalf("after the last claim: %v", l)
	}
}

func TestTimeSliceLevelsPlan(t *testing.T) {
	dev := func(gpuIdx int, mode alloc.Mode, typ, interval string) preparedDevice {
		return preparedDevice{deviceInfo: deviceInfo{Type: typ, GPUIndex: gpuIdx, GPU: "GPU-" + string(rune('a'+gpuIdx))}, Mode: mode, Interval: interval}
	}
	claims := map[string]*claimRecord{
		"a": {UID: "a", Devices: []preparedDevice{dev(0, alloc.TimeSlice, dranames.TypeShared, "")}},
		"b": {UID: "b", Devices: []preparedDevice{dev(0, alloc.TimeSlice, dranames.TypeShared, "Medium")}},
		"c": {UID: "c", Devices: []preparedDevice{dev(1, alloc.TimeSlice, dranames.TypeShared, "")}},
		"d": {UID: "d", Devices: []preparedDevice{dev(2, alloc.MPS, dranames.TypeShared, "")}},
		"e": {UID: "e", Devices: []preparedDevice{dev(3, alloc.Exclusive, dranames.TypeMIG, "")}},
	}
	got := timeSliceLevels(claims)
	want := map[int]gpu.TimeSlice{0: gpu.TimeSliceMedium, 1: gpu.TimeSliceDefault}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("levels %v, want %v", got, want)
	}
}

// With tenant isolation the driver publishes (and prepares) the tenants'
// copies of the shared GPUs: two claims of one tenant share its copy, a
// claim on another tenant's copy of the same GPU is refused (the counters
// keep the scheduler from doing this; the driver is the last line of
// defense), the tenant is in the checkpoint, and a restarted driver
// reads it back. A checkpoint written before tenants existed still loads.
func TestPrepareTenantCopies(t *testing.T) {
	m, err := fake.New(fake.MachineSpec{GPUs: []fake.GPUSpec{{Model: "L4"}, {Model: "L4"}}}, fake.WithSeed(3))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := Config{Node: "n1", Device: m, CDIDir: filepath.Join(dir, "cdi"), StateDir: filepath.Join(dir, "state"),
		MPSRoot: filepath.Join(dir, "mps"), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Isolation: dradriver.Options{TenantIsolation: true, Tenants: []string{"team-a", "team-b"}}}
	d, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a0, b0 := dranames.SharedDeviceName(0, "team-a"), dranames.SharedDeviceName(0, "team-b")
	if _, ok := d.table["gpu-0-shared"]; ok {
		t.Fatal("an untainted shared device beside the tenants' copies")
	}
	for _, uid := range []string{"a1", "a2"} {
		if _, err := d.Prepare(ctx, allocated(uid, a0, "4Gi", "")); err != nil {
			t.Fatalf("%s on %s: %v", uid, a0, err)
		}
	}
	_, err = d.Prepare(ctx, allocated("b1", b0, "4Gi", ""))
	if err == nil || !strings.Contains(err.Error(), `serves tenant "team-a" through claim ns/c-a1; this claim is tenant "team-b"'s`) {
		t.Fatalf("another tenant's copy of a held GPU: %v", err)
	}
	if _, err := d.Prepare(ctx, allocated("b2", dranames.SharedDeviceName(1, "team-b"), "4Gi", "")); err != nil {
		t.Fatal(err)
	}
	again, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r := again.claims["a2"]; r == nil || r.Devices[0].Tenant != "team-a" || r.Devices[0].Device != a0 {
		t.Fatalf("checkpoint after restart: %+v", r)
	}
	old := `{"version":1,"node":"n1","claims":{"u":{"uid":"u","namespace":"ns","name":"c","state":"prepared","devices":[` +
		`{"request":"gpu","pool":"n1","device":"gpu-0-shared","type":"shared","gpuIndex":0,"gpu":"GPU-8d7f2a39-4c1e-4b7e-9a51-0c2b6e3f1d20","start":0,"memoryMiB":24576,"id":"GPU-8d7f2a39-4c1e-4b7e-9a51-0c2b6e3f1d20","mode":"timeslice","promisedMiB":4096}]}}}`
	recs, err := parseCheckpoint("old.json", []byte(old), "n1")
	if err != nil || recs["u"].Devices[0].Tenant != "" {
		t.Fatalf("a checkpoint without tenants: %v %+v", err, recs)
	}
}

// Tenants come and go (SetTenants, as the namespace informer calls it)
// while claims of a tenant are prepared and unprepared on its copies: the
// copies of a tenant with prepared claims stay published, a prepare never
// sees a half-built device table, and the final slices hold exactly the
// last tenants plus those of the claims still prepared.
func TestSetTenantsWhilePreparing(t *testing.T) {
	m, err := fake.New(fake.MachineSpec{GPUs: []fake.GPUSpec{{Model: "L4"}, {Model: "L4"}}}, fake.WithSeed(3))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	d, err := New(context.Background(), Config{Node: "n1", Device: m, CDIDir: filepath.Join(dir, "cdi"), StateDir: filepath.Join(dir, "state"),
		MPSRoot: filepath.Join(dir, "mps"), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Isolation: dradriver.Options{TenantIsolation: true, Tenants: []string{"keep"}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dev := dranames.SharedDeviceName(1, "keep")
	if _, err := d.Prepare(ctx, allocated("held", dev, "2Gi", "")); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 8)
	for w := range 4 {
		go func() {
			var err error
			for i := range 20 {
				ts := []string{fmt.Sprintf("t-%d-%d", w, i)}
				if i%3 == 0 {
					ts = append(ts, "other")
				}
				if _, err = d.SetTenants(ctx, ts); err != nil {
					break
				}
			}
			done <- err
		}()
		go func() {
			var err error
			for i := range 10 {
				uid := fmt.Sprintf("c-%d-%d", w, i)
				if _, err = d.Prepare(ctx, allocated(uid, dev, "1Gi", "")); err != nil {
					break
				}
				if err = d.Unprepare(ctx, uid); err != nil {
					break
				}
			}
			done <- err
		}()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	if _, err := d.SetTenants(ctx, []string{"last"}); err != nil {
		t.Fatal(err)
	}
	copies := map[string]bool{}
	for _, s := range d.Slices() {
		for _, dv := range s.Spec.Devices {
			if tn := dv.Attributes[dranames.AttrTenant].StringValue; tn != nil {
				copies[*tn] = true
			}
		}
	}
	if len(copies) != 2 || !copies["keep"] || !copies["last"] {
		t.Fatalf("tenants with copies %v, want keep (a claim is prepared) and last", copies)
	}
}

// Only claims allocated a tenant copy in this pool wake the tenant
// recomputation (tombstones of deleted ones too).
func TestHoldsTenantCopy(t *testing.T) {
	claim := func(pool, device string) *resourceapi.ResourceClaim {
		return &resourceapi.ResourceClaim{Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
				Request: "gpu", Driver: dranames.DriverName, Pool: pool, Device: device}}}}}}
	}
	copyName := dranames.SharedDeviceName(1, "team-a")
	for _, c := range []struct {
		obj  any
		want bool
	}{
		{claim("node-1", copyName), true},
		{cache.DeletedFinalStateUnknown{Key: "ns/c", Obj: claim("node-1", copyName)}, true},
		{claim("node-2", copyName), false},
		{claim("node-1", "gpu-1-shared"), false},
		{claim("node-1", "gpu-1"), false},
		{&resourceapi.ResourceClaim{}, false},
		{"not a claim", false},
	} {
		if got := holdsTenantCopy(c.obj, "node-1"); got != c.want {
			t.Errorf("%+v: %v, want %v", c.obj, got, c.want)
		}
	}
}
