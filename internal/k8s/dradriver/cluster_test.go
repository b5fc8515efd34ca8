package dradriver_test

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/internal/k8s/apitest"
	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// TestMain runs the tests on the package's one control plane and stops
// it (and its scheduler) when they end.
func TestMain(m *testing.M) { os.Exit(apitest.Main(m)) }

// cluster is a test's part of the package's real kube-apiserver and stock
// kube-scheduler with gpuslice's DeviceClasses: a namespace of its own,
// which is also its group (its nodes are labelled with it and its pods
// select them: the scheduler sees every test's nodes).
type cluster struct {
	*apitest.Cluster
	t  *testing.T
	ns string
}

func newCluster(t *testing.T, ns string) *cluster {
	srv := apitest.Shared(t)
	sched := apitest.SharedScheduler(t, srv, apitest.SchedulerOptions{})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kube-scheduler log (all tests):\n%s", sched.Tail(6000))
		}
	})
	return &cluster{t: t, ns: ns, Cluster: apitest.NewCluster(t, srv, apitest.ClusterOptions{Namespaces: []string{ns}, Group: ns})}
}

// claimPod creates a ResourceClaim asking class for one device (with the
// selector and memory given) and a pod that uses it.
func (c *cluster) claimPod(name, class, selector string, memory string) {
	c.t.Helper()
	c.CreateClaimPod(apitest.ClaimPod{Namespace: c.ns, Name: name, Class: class, Selector: selector, Memory: memory})
}

// device waits until the claim's pod is bound and returns the claim's
// device, or "" once the pod is reported unschedulable.
func (c *cluster) device(name string) string {
	c.t.Helper()
	if _, msg := c.Scheduled(c.ns, name); msg != "" {
		return ""
	}
	a := c.Claim(c.ns, name).Status.Allocation
	if a == nil || len(a.Devices.Results) != 1 {
		c.t.Fatalf("pod %s bound with its claim allocated %+v", name, a)
	}
	return a.Devices.Results[0].Device
}

// The stock kube-scheduler allocates from gpuslice's slices: the API
// server accepts them for a DGX A100 (8 GPUs: partitionable devices,
// counters in slices of their own); on a one-GPU node a 3g.20gb and a
// 4g.20gb both fit because the small-first, high-start order leaves slice
// 0 for the 4g (a low-start-first order would put the 3g at 0 and the 4g
// nowhere); a 1g.5gb beside them is refused, since all 7 compute slices
// are taken; and the whole GPU is refused while MIG instances hold it.
func TestStockSchedulerAllocatesValidMIGLayouts(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "mig-layouts")
	c.AddNode("dgx", "A100-40GB", 8)
	c.AddNode("one", "A100-40GB", 1)
	onOne := `device.attributes["gpu.gpuslice.dev"].parentUUID == "GPU-one-0"`
	c.claimPod("small-first", dranames.ClassMIG, onOne+` && device.attributes["gpu.gpuslice.dev"].profile == "3g.20gb"`, "")
	if d := c.device("small-first"); d != "gpu-0-mig-3g-20gb-at-4" {
		t.Fatalf("3g.20gb got %q, want the placement at slice 4", d)
	}
	c.claimPod("big", dranames.ClassMIG, onOne+` && device.attributes["gpu.gpuslice.dev"].profile == "4g.20gb"`, "")
	if d := c.device("big"); d != "gpu-0-mig-4g-20gb-at-0" {
		t.Fatalf("4g.20gb got %q", d)
	}
	c.claimPod("no-compute-left", dranames.ClassMIG, onOne+` && device.attributes["gpu.gpuslice.dev"].profile == "1g.5gb"`, "")
	if d := c.device("no-compute-left"); d != "" {
		t.Fatalf("1g.5gb beside 4g+3g got %q; the GPU has no compute slice left", d)
	}
	c.claimPod("whole", dranames.ClassGPU, `device.attributes["gpu.gpuslice.dev"].uuid == "GPU-one-0"`, "")
	if d := c.device("whole"); d != "" {
		t.Fatalf("the whole GPU was allocated beside MIG instances: %q", d)
	}

	// Fill one DGX GPU with 1g.5gb instances: seven fit, at seven
	// different starts, and the eighth is refused.
	onDGX := `device.attributes["gpu.gpuslice.dev"].parentUUID == "GPU-dgx-3"`
	starts := map[string]bool{}
	for i := range 8 {
		name := fmt.Sprintf("tiny-%d", i)
		c.claimPod(name, dranames.ClassMIG, onDGX+` && device.attributes["gpu.gpuslice.dev"].profile == "1g.5gb"`, "")
		d := c.device(name)
		if i == 7 {
			if d != "" {
				t.Fatalf("an eighth 1g.5gb got %q", d)
			}
			break
		}
		if d == "" || starts[d] {
			t.Fatalf("1g.5gb #%d got %q (have %v)", i, d, starts)
		}
		starts[d] = true
	}
}

// Claims of three memory sizes share one L4 through consumable capacity
// (4 + 8 + 10 GiB of its 24 GiB), a fourth of
// 4 GiB that does not fit what is left is refused, and while the GPU is
// shared an exclusive claim on it is refused too (the shared device takes
// the GPU's counter once, however many shares it has).
func TestStockSchedulerSharesAGPUByMemory(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "share-by-memory")
	c.AddNode("l4", "L4", 1)
	var got []string
	for _, m := range []string{"4Gi", "8Gi", "10Gi"} {
		name := "share-" + strings.ToLower(m)
		c.claimPod(name, dranames.ClassShared, "", m)
		d := c.device(name)
		if d == "" {
			t.Fatalf("%s of shared memory was refused", m)
		}
		got = append(got, d)
	}
	sort.Strings(got)
	if got[0] != got[2] || got[0] != "gpu-0-shared" {
		t.Fatalf("the three shares got %v, want one shared GPU", got)
	}
	cl, err := c.CS.ResourceV1().ResourceClaims(c.ns).Get(c.Ctx, "share-8gi", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := cl.Status.Allocation.Devices.Results[0]
	if used := r.ConsumedCapacity["memory"]; r.ShareID == nil || used.Cmp(resource.MustParse("8Gi")) != 0 {
		t.Fatalf("share-8gi allocation %+v: want a share id and 8Gi consumed", r)
	}
	c.claimPod("too-big", dranames.ClassShared, "", "4Gi")
	if d := c.device("too-big"); d != "" {
		t.Fatalf("4Gi more than the L4 has left was allocated on %q", d)
	}
	c.claimPod("exclusive", dranames.ClassGPU, "", "")
	if d := c.device("exclusive"); d != "" {
		t.Fatalf("the whole GPU was allocated while shared: %q", d)
	}
}

// A pod written for NVIDIA's device plugin (nvidia.com/gpu: 2, no claim)
// is served by gpuslice's whole-GPU class through its extended resource
// name: the stock scheduler makes the claim, allocates two whole GPUs of
// the node and binds the pod; a second such pod does not fit the one GPU
// left.
func TestLegacyGPUPodsAreServedByTheWholeGPUClass(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "legacy")
	c.AddNode("t4x3", "T4", 3)
	pod := func(name string) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.ns}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{dranames.LegacyGPUResource: resource.MustParse("2")}}}}}}
		c.SelectGroup(&p.Spec)
		if _, err := c.CS.CoreV1().Pods(c.ns).Create(c.Ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod("legacy")
	var bound *corev1.Pod
	c.Eventually("the legacy pod bound", func() (bool, string) {
		p, err := c.CS.CoreV1().Pods(c.ns).Get(c.Ctx, "legacy", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.NodeName != "" {
			bound = p
		}
		return bound != nil, fmt.Sprintf("%+v", p.Status)
	})
	if bound.Spec.NodeName != "t4x3" || bound.Status.ExtendedResourceClaimStatus == nil {
		t.Fatalf("bound to %q with extended resource claim status %+v", bound.Spec.NodeName, bound.Status.ExtendedResourceClaimStatus)
	}
	cl, err := c.CS.ResourceV1().ResourceClaims(c.ns).Get(c.Ctx, bound.Status.ExtendedResourceClaimStatus.ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range cl.Status.Allocation.Devices.Results {
		got = append(got, r.Device)
	}
	sort.Strings(got)
	if len(got) != 2 || got[0] == got[1] || !strings.HasPrefix(got[0], "gpu-") || strings.Contains(got[0], "shared") {
		t.Fatalf("the legacy pod's claim got %v, want two whole GPUs", got)
	}
	pod("legacy-2")
	c.Eventually("the second pod bound or unschedulable", func() (bool, string) {
		p, err := c.CS.CoreV1().Pods(c.ns).Get(c.Ctx, "legacy-2", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.NodeName != "" {
			t.Fatalf("a second 2-GPU pod was bound with one GPU left")
		}
		unsched := false
		for _, cond := range p.Status.Conditions {
			unsched = unsched || (cond.Type == corev1.PodScheduled && cond.Reason == corev1.PodReasonUnschedulable)
		}
		return unsched, fmt.Sprintf("conditions %+v", p.Status.Conditions)
	})
}

// The instance-type templates (scaled counters, no uuid) are slices the
// API server accepts and on which the stock kube-scheduler decides as on
// the published ones: published for a node named as the templates say,
// an A100 takes four 4 GiB shares on its shared device and then neither
// a MIG instance nor the whole GPU; on a fresh A100 a MIG instance shuts
// out a share.
func TestStockSchedulerOnInstanceTypeTemplates(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "instance-types")
	for _, it := range []string{"a2-highgpu-1g", "a2-ultragpu-1g"} {
		slices, err := dradriver.InstanceTypeSlices(it, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: it}, Status: corev1.NodeStatus{
			Capacity:    corev1.ResourceList{"cpu": resource.MustParse("12"), "memory": resource.MustParse("85Gi"), "pods": resource.MustParse("110")},
			Allocatable: corev1.ResourceList{"cpu": resource.MustParse("12"), "memory": resource.MustParse("85Gi"), "pods": resource.MustParse("110")}}}
		c.AddNodeObject(node)
		c.CreateSlices(slices)
	}
	on40 := `device.attributes["gpu.gpuslice.dev"].model == "A100-40GB"`
	for i := range 4 {
		name := fmt.Sprintf("share-%d", i)
		c.claimPod(name, dranames.ClassShared, on40, "4Gi")
		if d := c.device(name); d != "gpu-0-shared" {
			t.Fatalf("%s got %q, want gpu-0-shared", name, d)
		}
	}
	c.claimPod("mig-beside-shares", dranames.ClassMIG, on40+` && device.attributes["gpu.gpuslice.dev"].profile == "1g.5gb"`, "")
	if d := c.device("mig-beside-shares"); d != "" {
		t.Fatalf("a MIG instance was allocated beside shares: %q", d)
	}
	c.claimPod("whole-beside-shares", dranames.ClassGPU, on40, "")
	if d := c.device("whole-beside-shares"); d != "" {
		t.Fatalf("the whole GPU was allocated beside shares: %q", d)
	}
	on80 := `device.attributes["gpu.gpuslice.dev"].model == "A100-80GB"`
	c.claimPod("mig-80", dranames.ClassMIG, on80+` && device.attributes["gpu.gpuslice.dev"].profile == "1g.10gb"`, "")
	if d := c.device("mig-80"); !strings.Contains(d, "-mig-1g-10gb-at-") {
		t.Fatalf("mig-80 got %q, want a 1g.10gb placement", d)
	}
	c.claimPod("share-beside-mig", dranames.ClassShared, on80, "4Gi")
	if d := c.device("share-beside-mig"); d != "" {
		t.Fatalf("a share was allocated beside a MIG instance: %q", d)
	}
}
