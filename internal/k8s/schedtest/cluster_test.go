package schedtest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/k8s/apitest"
	"github.com/gpuslice/gpuslice/internal/k8s/draalloc"
	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
)

// SchedulerName is the profile gpuslice-scheduler runs in these tests.
const SchedulerName = "gpuslice-scheduler"

// Profile enables GpusliceDynamicResources in place of DynamicResources;
// every other plugin is the default profile's.
const Profile = `
- schedulerName: gpuslice-scheduler
  plugins:
    multiPoint:
      enabled: [{name: GpusliceDynamicResources, weight: 5}]
      disabled: [{name: DynamicResources}]
`

type cluster struct {
	t     *testing.T
	ctx   context.Context
	cs    *kubernetes.Clientset
	srv   *apitest.Server
	bin   string
	sched *apitest.Scheduler
	opts  apitest.SchedulerOptions
}

// newCluster starts etcd, kube-apiserver and gpuslice-scheduler, and
// creates gpuslice's DeviceClasses and the namespaces.
func newCluster(t *testing.T, profile string, namespaces ...string) *cluster {
	return newClusterOf(t, apitest.GpusliceSchedulerBinary(t), profile, namespaces...)
}

// newClusterOf is newCluster with the scheduler binary chosen ("": the
// stock kube-scheduler, in its default profile when profile is "-").
func newClusterOf(t *testing.T, bin, profile string, namespaces ...string) *cluster {
	srv := apitest.Start(t)
	cs, err := kubernetes.NewForConfig(srv.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), clusterTimeout)
	t.Cleanup(cancel)
	for _, ns := range namespaces {
		if err := srv.EnsureNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	for _, dc := range dradriver.DeviceClasses() {
		if _, err := cs.ResourceV1().DeviceClasses().Create(ctx, &dc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	switch profile {
	case "":
		profile = Profile
	case "-":
		profile = ""
	}
	c := &cluster{t: t, ctx: ctx, cs: cs, srv: srv, bin: bin, opts: apitest.SchedulerOptions{Binary: bin, Profiles: profile}}
	c.sched = apitest.StartScheduler(t, srv, c.opts)
	return c
}

// restart stops the scheduler and starts a new one.
func (c *cluster) restart() {
	c.sched.Stop()
	c.sched = apitest.StartScheduler(c.t, c.srv, c.opts)
}

// addNode creates a ready Node and publishes its GPUs' slices.
func (c *cluster) addNode(name, model string, gpus int) {
	c.t.Helper()
	n := alloc.Node{Name: name}
	for i := range gpus {
		n.GPUs = append(n.GPUs, alloc.GPU{UUID: fmt.Sprintf("GPU-%s-%d", name, i), Index: i, Model: model, Healthy: true})
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{
		Capacity:    corev1.ResourceList{"cpu": resource.MustParse("64"), "memory": resource.MustParse("512Gi"), "pods": resource.MustParse("110")},
		Allocatable: corev1.ResourceList{"cpu": resource.MustParse("64"), "memory": resource.MustParse("512Gi"), "pods": resource.MustParse("110")}}}
	if _, err := c.srv.CreateReadyNode(c.ctx, node); err != nil {
		c.t.Fatal(err)
	}
	slices, err := dradriver.Slices(n, 1, "580.65.06", nil)
	if err != nil {
		c.t.Fatal(err)
	}
	for i := range slices {
		if _, err := c.cs.ResourceV1().ResourceSlices().Create(c.ctx, &slices[i], metav1.CreateOptions{}); err != nil {
			c.t.Fatalf("slice %s: %v", slices[i].Name, err)
		}
	}
}

// podSpec describes one pod with one claim.
type podSpec struct {
	ns, name, class, selector, memory string
	priority                          string // a PriorityClass name
	scheduler                         string
	isolation                         string // the claim's gpuslice.dev/isolation annotation
}

// create makes the pod's ResourceClaim and the pod.
func (c *cluster) create(p podSpec) {
	c.t.Helper()
	req := resourceapi.ExactDeviceRequest{DeviceClassName: p.class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}
	if p.selector != "" {
		req.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: p.selector}}}
	}
	if p.memory != "" {
		req.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(p.memory)}}
	}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: p.ns},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &req}}}}}
	if p.isolation != "" {
		claim.Annotations = map[string]string{"gpuslice.dev/isolation": p.isolation}
	}
	if _, err := c.cs.ResourceV1().ResourceClaims(p.ns).Create(c.ctx, claim, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	cn := p.name
	sched := p.scheduler
	if sched == "" {
		sched = SchedulerName
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: p.ns}, Spec: corev1.PodSpec{
		SchedulerName:  sched,
		ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &cn}},
		Containers: []corev1.Container{{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}},
			Requests: corev1.ResourceList{"cpu": resource.MustParse("10m")}}}}}}
	pod.Spec.PriorityClassName = p.priority
	if _, err := c.cs.CoreV1().Pods(p.ns).Create(c.ctx, pod, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// priorityClass creates a PriorityClass.
func (c *cluster) priorityClass(name string, value int32) {
	c.t.Helper()
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
	if _, err := c.cs.SchedulingV1().PriorityClasses().Create(c.ctx, pc, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// bound waits for the pod to be bound and returns its node.
func (c *cluster) bound(ns, name string) string {
	c.t.Helper()
	for {
		p, err := c.cs.CoreV1().Pods(ns).Get(c.ctx, name, metav1.GetOptions{})
		if err != nil {
			c.t.Fatal(err)
		}
		if p.Spec.NodeName != "" {
			return p.Spec.NodeName
		}
		select {
		case <-c.ctx.Done():
			c.t.Fatalf("pod %s/%s was never bound: %+v", ns, name, p.Status.Conditions)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// unschedulable waits until the pod's PodScheduled condition says
// Unschedulable and returns its message; it fails if the pod is bound.
func (c *cluster) unschedulable(ns, name string) string {
	c.t.Helper()
	for {
		p, err := c.cs.CoreV1().Pods(ns).Get(c.ctx, name, metav1.GetOptions{})
		if err != nil {
			c.t.Fatal(err)
		}
		if p.Spec.NodeName != "" {
			c.t.Fatalf("pod %s/%s was bound to %s", ns, name, p.Spec.NodeName)
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				return cond.Message
			}
		}
		select {
		case <-c.ctx.Done():
			c.t.Fatalf("pod %s/%s is neither bound nor unschedulable", ns, name)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// claim reads a claim.
func (c *cluster) claim(ns, name string) *resourceapi.ResourceClaim {
	c.t.Helper()
	rc, err := c.cs.ResourceV1().ResourceClaims(ns).Get(c.ctx, name, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	return rc
}

// snapshot reads every slice and claim from the API server.
func (c *cluster) snapshot() (*draalloc.Snapshot, []*resourceapi.ResourceClaim) {
	c.t.Helper()
	sl, err := c.cs.ResourceV1().ResourceSlices().List(c.ctx, metav1.ListOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	cl, err := c.cs.ResourceV1().ResourceClaims("").List(c.ctx, metav1.ListOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	var slices []*resourceapi.ResourceSlice
	for i := range sl.Items {
		slices = append(slices, &sl.Items[i])
	}
	var claims []*resourceapi.ResourceClaim
	for i := range cl.Items {
		claims = append(claims, &cl.Items[i])
	}
	snap, err := draalloc.Read(slices, claims, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	return snap, claims
}

// check runs the allocator's Check over what the API server holds.
func (c *cluster) check() *draalloc.Snapshot {
	c.t.Helper()
	snap, _ := c.snapshot()
	if err := snap.Check(draalloc.Policy("binpack"), nil); err != nil {
		c.t.Fatalf("the API server's allocations break the allocator's rules: %v", err)
	}
	return snap
}

// tenantsPerDevice maps each allocated device (node/device) to the
// namespaces whose claims hold it.
func tenantsPerDevice(claims []*resourceapi.ResourceClaim) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, rc := range claims {
		if rc.Status.Allocation == nil {
			continue
		}
		for _, r := range rc.Status.Allocation.Devices.Results {
			k := r.Pool + "/" + r.Device
			if out[k] == nil {
				out[k] = map[string]bool{}
			}
			out[k][rc.Namespace] = true
		}
	}
	return out
}

func isShared(device string) bool { return strings.HasSuffix(device, "-shared") }
