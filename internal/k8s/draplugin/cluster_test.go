package draplugin_test

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpu/fake"
	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
	"github.com/gpuslice/gpuslice/internal/k8s/draplugin"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

func quietLog() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// The seed study's four claim styles — a whole GPU, time-slicing, MPS with
// limits, MIG — written with NVIDIA's GpuConfig as opaque parameters for
// gpuslice's driver, are allocated by the stock kube-scheduler from the
// slices the plugin published through the kubelet-plugin helper, then
// prepared over the plugin's v1 DRA gRPC service by a kubelet-side peer:
// each gets the CDI edits its style needs. Three MPS claims of 4, 8 and
// 10 GiB share one GPU through one daemon, each with its own pinned
// memory limit; the time-slicing claim's interval (Long) is set on its
// GPU; the MIG claim's instance is created at the placement the scheduler
// chose. Preparing again gives the same answer; unpreparing
// tears everything down (the instance destroyed, the daemon stopped with
// its last claim; the time-sliced GPU back to the Default interval), and
// unpreparing a claim the driver never saw succeeds.
func TestPreparesTheSeedClaimStylesOnARealCluster(t *testing.T) {
	t.Parallel()
	const node = "seed-node"
	c := newCluster(t, node, "seed-claims")
	dir := shortDir(t)
	mpsBin, mpsLogFile := fakeMPS(t, dir)
	m, err := fake.New(fake.MachineSpec{GPUs: []fake.GPUSpec{{Model: "A100-40GB"}, {Model: "A100-40GB"}, {Model: "A100-40GB"}, {Model: "A100-40GB"}}}, fake.WithSeed(7))
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := m.GPUs(c.ctx)
	if err != nil {
		t.Fatal(err)
	}
	cdiDir, regDir := filepath.Join(dir, "cdi"), filepath.Join(dir, "reg")
	cfg := draplugin.Config{Node: node, Device: m, Kube: c.cs, CDIDir: cdiDir, StateDir: filepath.Join(dir, "state"),
		RegistrarDir: regDir, MPSRoot: filepath.Join(dir, "mps"), MPSControl: mpsBin, Log: quietLog()}
	d, err := draplugin.New(c.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(c.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	kl := registerKubelet(t, c.ctx, regDir)
	c.waitSlices(len(d.Slices()))

	onGPU := func(i int) string {
		return `device.attributes["gpu.gpuslice.dev"].index == ` + string(rune('0'+i))
	}
	whole := c.claimPod(claimSpec{name: "whole", class: dranames.ClassGPU, selector: onGPU(0)})
	ts := c.claimPod(claimSpec{name: "timeslicing", class: dranames.ClassShared, selector: onGPU(1), memory: "8Gi",
		params: gpuConfig("GpuConfig", map[string]any{"strategy": "TimeSlicing", "timeSlicingConfig": map[string]any{"interval": "Long"}})})
	var mpsClaims []*resourceapi.ResourceClaim
	for _, s := range []struct{ name, memory, pinned string }{{"mps-4gi", "4Gi", ""}, {"mps-8gi", "8Gi", ""}, {"mps-10gi", "10Gi", "10Gi"}} {
		mc := map[string]any{"defaultActiveThreadPercentage": 50}
		if s.pinned != "" {
			mc["defaultPinnedDeviceMemoryLimit"] = s.pinned
		}
		mpsClaims = append(mpsClaims, c.claimPod(claimSpec{name: s.name, class: dranames.ClassShared, selector: onGPU(2), memory: s.memory,
			params: gpuConfig("GpuConfig", map[string]any{"strategy": "MPS", "mpsConfig": mc})}))
	}
	migClaim := c.claimPod(claimSpec{name: "mig", class: dranames.ClassMIG,
		selector: `device.attributes["gpu.gpuslice.dev"].parentUUID == "` + gpus[3].UUID + `" && device.attributes["gpu.gpuslice.dev"].profile == "1g.5gb"`})

	for cl, want := range map[*resourceapi.ResourceClaim]string{whole: "gpu-0", ts: "gpu-1-shared", migClaim: "gpu-3-mig-1g-5gb-at-5"} { // the 1g first in mig.Geometry.FirstFitOrder
		if got := allocatedDevice(cl); got != want {
			t.Fatalf("claim %s allocated %s, want %s", cl.Name, got, want)
		}
	}
	for _, cl := range mpsClaims {
		if got := allocatedDevice(cl); got != "gpu-2-shared" {
			t.Fatalf("claim %s allocated %s, want gpu-2-shared", cl.Name, got)
		}
	}

	all := append([]*resourceapi.ResourceClaim{whole, ts, migClaim}, mpsClaims...)
	resp, err := kl.prepare(c.ctx, all...)
	if err != nil {
		t.Fatal(err)
	}
	cdiIDs := map[string][]string{}
	for _, cl := range all {
		r := resp[string(cl.UID)]
		if r == nil || r.Error != "" || len(r.Devices) != 1 {
			t.Fatalf("prepare %s: %+v", cl.Name, r)
		}
		dev := r.Devices[0]
		if dev.PoolName != node || dev.DeviceName != allocatedDevice(cl) || !slices.Equal(dev.RequestNames, []string{"gpu"}) {
			t.Fatalf("prepare %s answered device %+v", cl.Name, dev)
		}
		want := "gpuslice.dev/claim=" + string(cl.UID) + "-" + dev.DeviceName
		if !slices.Equal(dev.CdiDeviceIds, []string{want}) {
			t.Fatalf("prepare %s: CDI ids %v, want [%s]", cl.Name, dev.CdiDeviceIds, want)
		}
		cdiIDs[cl.Name] = dev.CdiDeviceIds
	}

	// The hardware now: MIG on GPU 3 with one 1g.5gb at slice 5, the rest
	// whole; GPU 2 in EXCLUSIVE_PROCESS for MPS.
	gpus, err = m.GPUs(c.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if g := gpus[3]; !g.MIGEnabled || len(g.Instances) != 1 || g.Instances[0].Profile != "1g.5gb" || g.Instances[0].Start != 5 {
		t.Fatalf("GPU 3 after prepare: MIG %v, instances %+v; want one 1g.5gb at 5", g.MIGEnabled, g.Instances)
	}
	if gpus[2].ComputeMode != gpu.ComputeExclusiveProcess {
		t.Fatalf("GPU 2 (MPS) compute mode %v", gpus[2].ComputeMode)
	}
	// The time-slicing claim's interval (Long) is set on GPU 1, in the
	// DEFAULT compute mode.
	if l, err := m.TimeSlice(1); err != nil || l != gpu.TimeSliceLong || gpus[1].ComputeMode != gpu.ComputeDefault {
		t.Fatalf("GPU 1 (time-slicing, interval Long): time slice %v (%v), compute mode %v", l, err, gpus[1].ComputeMode)
	}
	migUUID := gpus[3].Instances[0].UUID

	// CDI edits per style.
	spec := func(cl *resourceapi.ResourceClaim) (map[string]string, []string, int) {
		devs := readSpec(t, cdiDir, string(cl.UID))
		dv, ok := devs[string(cl.UID)+"-"+allocatedDevice(cl)]
		if !ok || len(devs) != 1 {
			t.Fatalf("claim %s: CDI devices %v", cl.Name, devs)
		}
		return envOf(dv), nodesOf(dv), len(dv.ContainerEdits.Mounts)
	}
	env, nodes, mounts := spec(whole)
	if env["CUDA_VISIBLE_DEVICES"] != gpus[0].UUID || env["NVIDIA_VISIBLE_DEVICES"] != gpus[0].UUID || env["GPUSLICE_CLAIM"] != string(whole.UID) ||
		!slices.Equal(nodes, []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0"}) || mounts != 0 || env["CUDA_MPS_PIPE_DIRECTORY"] != "" {
		t.Fatalf("whole GPU: env %v nodes %v mounts %d", env, nodes, mounts)
	}
	env, nodes, mounts = spec(ts)
	if env["CUDA_VISIBLE_DEVICES"] != gpus[1].UUID || env["GPUSLICE_MEMORY_LIMIT_MIB"] != "8192" || !slices.Contains(nodes, "/dev/nvidia1") ||
		mounts != 0 || env["CUDA_MPS_PIPE_DIRECTORY"] != "" {
		t.Fatalf("time-slicing: env %v nodes %v mounts %d", env, nodes, mounts)
	}
	for i, want := range []string{"4096M", "8192M", "10240M"} {
		cl := mpsClaims[i]
		env, nodes, mounts = spec(cl)
		devs := readSpec(t, cdiDir, string(cl.UID))
		mnt := devs[string(cl.UID)+"-gpu-2-shared"].ContainerEdits.Mounts
		pipe := env["CUDA_MPS_PIPE_DIRECTORY"]
		if env["CUDA_VISIBLE_DEVICES"] != gpus[2].UUID || env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] != "50" ||
			env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] != gpus[2].UUID+"="+want || !strings.HasPrefix(pipe, "/run/gpuslice/mps/") ||
			mounts != 1 || mnt[0].ContainerPath != pipe || mnt[0].HostPath != filepath.Join(dir, "mps", filepath.Base(pipe)) || !slices.Contains(nodes, "/dev/nvidia2") {
			t.Fatalf("MPS %s: env %v nodes %v mounts %+v", cl.Name, env, nodes, mnt)
		}
	}
	env, nodes, _ = spec(migClaim)
	if env["CUDA_VISIBLE_DEVICES"] != migUUID || !slices.Contains(nodes, "/dev/nvidia3") {
		t.Fatalf("MIG: env %v nodes %v", env, nodes)
	}
	log := mpsLog(t, mpsLogFile)
	if n := countPrefix(log, "start "+gpus[2].UUID); n != 1 {
		t.Fatalf("the MPS daemon for GPU 2 started %d times (log %q): three claims must share one", n, log)
	}

	// Preparing again (a kubelet restart) gives the same answer and
	// touches nothing.
	again, err := kl.prepare(c.ctx, all...)
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range all {
		if got := again[string(cl.UID)].Devices[0].CdiDeviceIds; !slices.Equal(got, cdiIDs[cl.Name]) {
			t.Fatalf("second prepare of %s: %v, first %v", cl.Name, got, cdiIDs[cl.Name])
		}
	}
	if gs, _ := m.GPUs(c.ctx); len(gs[3].Instances) != 1 {
		t.Fatalf("a second prepare made instances %+v", gs[3].Instances)
	}

	// Unprepare: two of the three MPS claims leave, the daemon stays; the
	// last leaves, it stops. The MIG instance is destroyed.
	res := kl.unprepare(c.ctx, mpsClaims[0], mpsClaims[1], migClaim)
	for uid, r := range res {
		if r.Error != "" {
			t.Fatalf("unprepare %s: %s", uid, r.Error)
		}
	}
	if n := countPrefix(mpsLog(t, mpsLogFile), "quit"); n != 0 {
		t.Fatalf("the daemon quit while claim %s still uses it", mpsClaims[2].Name)
	}
	if gs, _ := m.GPUs(c.ctx); len(gs[3].Instances) != 0 {
		t.Fatalf("after unprepare GPU 3 keeps instances %+v", gs[3].Instances)
	}
	kl.unprepare(c.ctx, mpsClaims[2], whole, ts)
	if n := countPrefix(mpsLog(t, mpsLogFile), "quit"); n != 1 {
		t.Fatalf("the daemon quit %d times after its last claim left", n)
	}
	if gs, _ := m.GPUs(c.ctx); gs[2].ComputeMode != gpu.ComputeDefault {
		t.Fatalf("GPU 2 left in compute mode %v", gs[2].ComputeMode)
	}
	if l, _ := m.TimeSlice(1); l != gpu.TimeSliceDefault {
		t.Fatalf("GPU 1 left with time slice %v after its last time-slicing claim", l)
	}
	left, _ := filepath.Glob(filepath.Join(cdiDir, "*.yaml"))
	if len(left) != 0 {
		t.Fatalf("CDI specs left after unprepare: %v", left)
	}
	ghost := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "ghost", Namespace: c.ns, UID: "0b7d0c4e-0000-4000-8000-000000000000"}}
	if r := kl.unprepare(c.ctx, ghost)[string(ghost.UID)]; r == nil || r.Error != "" {
		t.Fatalf("unprepare of an unknown claim: %+v", r)
	}
}

// With tenant isolation the plugin publishes the tenant's tainted copy of
// each shared GPU through the helper; two claims carrying the tenant's
// toleration (as the webhook adds it) are allocated one copy by the stock
// scheduler and prepared over gRPC with their CDI edits; a claim without
// the toleration finds no shared GPU and its pod stays unschedulable.
func TestPreparesTenantCopiesOnARealCluster(t *testing.T) {
	t.Parallel()
	const node = "tenant-node"
	c := newCluster(t, node, "team-a") // the namespace of tenant team-a
	dir := shortDir(t)
	m, err := fake.New(fake.MachineSpec{GPUs: []fake.GPUSpec{{Model: "L4"}, {Model: "L4"}}}, fake.WithSeed(7))
	if err != nil {
		t.Fatal(err)
	}
	cdiDir, regDir := filepath.Join(dir, "cdi"), filepath.Join(dir, "reg")
	d, err := draplugin.New(c.ctx, draplugin.Config{Node: node, Device: m, Kube: c.cs, CDIDir: cdiDir, StateDir: filepath.Join(dir, "state"),
		RegistrarDir: regDir, MPSRoot: filepath.Join(dir, "mps"), Log: quietLog(),
		Isolation: dradriver.Options{TenantIsolation: true, Tenants: []string{"team-a", "team-b"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(c.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	kl := registerKubelet(t, c.ctx, regDir)
	c.waitSlices(len(d.Slices()))

	tol := []resourceapi.DeviceToleration{dradriver.TenantToleration("team-a")}
	one := c.claimPod(claimSpec{name: "share-1", class: dranames.ClassShared, memory: "4Gi", tolerations: tol})
	two := c.claimPod(claimSpec{name: "share-2", class: dranames.ClassShared, memory: "8Gi", tolerations: tol})
	want := dranames.SharedDeviceName(0, "team-a")
	for _, cl := range []*resourceapi.ResourceClaim{one, two} {
		if got := allocatedDevice(cl); got != want {
			t.Fatalf("claim %s allocated %s, want team-a's copy %s", cl.Name, got, want)
		}
	}
	resp, err := kl.prepare(c.ctx, one, two)
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range []*resourceapi.ResourceClaim{one, two} {
		r := resp[string(cl.UID)]
		if r == nil || r.Error != "" || len(r.Devices) != 1 || r.Devices[0].DeviceName != want {
			t.Fatalf("prepare %s: %+v", cl.Name, r)
		}
		if devs := readSpec(t, cdiDir, string(cl.UID)); len(devs) != 1 {
			t.Fatalf("claim %s: CDI devices %v", cl.Name, devs)
		}
	}

	bare := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "bare", Namespace: c.ns},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: dranames.ClassShared, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}}}}}}
	if _, err := c.cs.ResourceV1().ResourceClaims(c.ns).Create(c.ctx, bare, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cn := "bare"
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bare", Namespace: c.ns}, Spec: corev1.PodSpec{
		ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &cn}},
		Containers:     []corev1.Container{{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}}}}
	c.SelectGroup(&pod.Spec)
	if _, err := c.cs.CoreV1().Pods(c.ns).Create(c.ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.EventuallyCtx(t, c.ctx, "the pod without a toleration bound or unschedulable", func() (bool, string) {
		p, err := c.cs.CoreV1().Pods(c.ns).Get(c.ctx, "bare", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.NodeName != "" {
			t.Fatal("a claim without its tenant's toleration was given a shared GPU")
		}
		return slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
			return c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable
		}), fmt.Sprintf("conditions %+v", p.Status.Conditions)
	})
}
