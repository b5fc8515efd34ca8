package apitest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// GroupLabel is the Node label a Cluster with a Group puts on its nodes
// and the nodeSelector of the pods it creates: tests that share one
// control plane and one scheduler keep their pods on their own nodes.
const GroupLabel = "apitest.gpuslice.dev/group"

// ClusterOptions configure NewCluster.
type ClusterOptions struct {
	// Namespaces are created (with their default ServiceAccount) unless
	// they exist.
	Namespaces []string
	// Group, when set, labels the cluster's nodes GroupLabel=Group and
	// gives its pods that nodeSelector. Tests on a shared control plane
	// each take a group of their own (e.g. their name); a test whose
	// scheduler must see only its own nodes starts its own control plane
	// instead. When the test ends, a group's pods and claims (in
	// Namespaces), slices and nodes are deleted, so that it can run
	// again on the same control plane (go test -count=2).
	Group string
	// SchedulerName is the spec.schedulerName of the pods CreateClaimPod
	// makes when ClaimPod.Scheduler is empty (default: default-scheduler).
	SchedulerName string
	// Timeout bounds Ctx, and with it every wait (default 2 minutes).
	Timeout time.Duration
}

// Cluster is one test's part of a Server: a typed client, a context
// bounded by the test, gpuslice's DeviceClasses, its namespaces, and its
// nodes with the ResourceSlices internal/k8s/dradriver publishes. Its
// helpers fail the test on error, so call them from the test's goroutine
// (TryCreateClaimPod is for other goroutines).
type Cluster struct {
	T   testing.TB
	Ctx context.Context
	Srv *Server
	CS  *kubernetes.Clientset
	// Options are what NewCluster was given, defaults filled in.
	Options ClusterOptions

	mu     sync.Mutex
	nodes  []string
	slices []string
}

// NewCluster makes a Cluster of srv (from Start or Shared; the scheduler
// is the caller's): it creates the namespaces and gpuslice's DeviceClasses
// (dradriver.DeviceClasses; ones that exist are kept, so tests sharing a
// Server may each ask for them).
func NewCluster(t testing.TB, srv *Server, opts ClusterOptions) *Cluster {
	t.Helper()
	if opts.Timeout <= 0 {
		opts.Timeout = 2 * time.Minute
	}
	if opts.SchedulerName == "" {
		opts.SchedulerName = corev1.DefaultSchedulerName
	}
	cs, err := kubernetes.NewForConfig(srv.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), opts.Timeout)
	t.Cleanup(cancel)
	c := &Cluster{T: t, Ctx: ctx, Srv: srv, CS: cs, Options: opts}
	if opts.Group != "" {
		t.Cleanup(c.remove)
	}
	for _, ns := range opts.Namespaces {
		if err := srv.EnsureNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	for _, dc := range dradriver.DeviceClasses() {
		if _, err := cs.ResourceV1().DeviceClasses().Create(ctx, &dc, metav1.CreateOptions{FieldManager: FieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating DeviceClass %s: %v", dc.Name, err)
		}
	}
	return c
}

// remove deletes what the cluster made on a shared control plane: its
// namespaces' pods and claims, its slices and its nodes.
func (c *Cluster) remove() {
	if len(c.Options.Namespaces) > 0 {
		c.Clear(c.Options.Namespaces...)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Ctx), time.Minute)
	defer cancel()
	for _, name := range c.slices {
		if err := c.CS.ResourceV1().ResourceSlices().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			c.T.Errorf("deleting ResourceSlice %s: %v", name, err)
		}
	}
	for _, name := range c.nodes {
		if err := c.CS.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			c.T.Errorf("deleting Node %s: %v", name, err)
		}
	}
}

// Nodes are the names of the nodes AddNode and AddReadyNode created.
func (c *Cluster) Nodes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.nodes)
}

// AddReadyNode creates a ready Node (64 CPUs, 512Gi, 110 pods; labelled
// with the group) without ResourceSlices: a test whose driver publishes
// them, or that publishes its own with CreateSlices.
func (c *Cluster) AddReadyNode(name string) {
	c.T.Helper()
	all := corev1.ResourceList{"cpu": resource.MustParse("64"), "memory": resource.MustParse("512Gi"), "pods": resource.MustParse("110")}
	c.AddNodeObject(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Capacity: all, Allocatable: all}})
}

// AddNodeObject creates node ready (Server.CreateReadyNode), with the
// group's label added.
func (c *Cluster) AddNodeObject(node *corev1.Node) {
	c.T.Helper()
	n := node.DeepCopy()
	if c.Options.Group != "" {
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels[GroupLabel] = c.Options.Group
	}
	if _, err := c.Srv.CreateReadyNode(c.Ctx, n); err != nil {
		c.T.Fatal(err)
	}
	c.mu.Lock()
	c.nodes = append(c.nodes, n.Name)
	c.mu.Unlock()
}

// AddNode creates a ready Node of gpus GPUs of the catalog model
// (UUIDs GPU-<name>-<index>) and publishes the ResourceSlices
// dradriver.Slices makes for it (driver version 580.65.06).
func (c *Cluster) AddNode(name, model string, gpus int) {
	c.T.Helper()
	c.AddReadyNode(name)
	n := alloc.Node{Name: name}
	for i := range gpus {
		n.GPUs = append(n.GPUs, alloc.GPU{UUID: fmt.Sprintf("GPU-%s-%d", name, i), Index: i, Model: model, Healthy: true})
	}
	sl, err := dradriver.Slices(n, 1, "580.65.06", nil)
	if err != nil {
		c.T.Fatal(err)
	}
	c.CreateSlices(sl)
}

// CreateSlices creates the ResourceSlices; the test fails naming the
// slice the API server refuses.
func (c *Cluster) CreateSlices(sl []resourceapi.ResourceSlice) {
	c.T.Helper()
	for i := range sl {
		if _, err := c.CS.ResourceV1().ResourceSlices().Create(c.Ctx, &sl[i], metav1.CreateOptions{FieldManager: FieldManager}); err != nil {
			c.T.Fatalf("the API server refuses slice %s: %v", sl[i].Name, err)
		}
		c.mu.Lock()
		c.slices = append(c.slices, sl[i].Name)
		c.mu.Unlock()
	}
}

// ClaimPod is a pod with one ResourceClaim of its own (of the same name,
// in the same namespace) asking for one device of a class, and its one
// container using it.
type ClaimPod struct {
	Namespace, Name string
	// Class is the request's DeviceClass; Selector a CEL selector;
	// Memory a capacity request ("4Gi", for shared GPUs).
	Class, Selector, Memory string
	// Params are opaque parameters for gpuslice's driver (JSON-encoded
	// into the claim's config for the request).
	Params any
	// Tolerations are the request's device tolerations.
	Tolerations []resourceapi.DeviceToleration
	// Annotations go on the claim (e.g. gpuslice.dev/isolation).
	Annotations map[string]string
	// Priority is the pod's priorityClassName.
	Priority string
	// Scheduler is the pod's schedulerName (default:
	// ClusterOptions.SchedulerName).
	Scheduler string
	// CPU is the container's cpu request (none when empty).
	CPU string
}

// Objects returns the claim and the pod p describes, for the cluster's
// group and scheduler.
func (c *Cluster) Objects(p ClaimPod) (*resourceapi.ResourceClaim, *corev1.Pod, error) {
	req := resourceapi.ExactDeviceRequest{DeviceClassName: p.Class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
		Tolerations: p.Tolerations}
	if p.Selector != "" {
		req.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: p.Selector}}}
	}
	if p.Memory != "" {
		q, err := resource.ParseQuantity(p.Memory)
		if err != nil {
			return nil, nil, fmt.Errorf("ClaimPod.Memory: %q: %w", p.Memory, err)
		}
		req.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": q}}
	}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Annotations: p.Annotations},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &req}}}}}
	if p.Params != nil {
		raw, err := json.Marshal(p.Params)
		if err != nil {
			return nil, nil, fmt.Errorf("ClaimPod.Params: %w", err)
		}
		claim.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{Requests: []string{"gpu"},
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver: dranames.DriverName, Parameters: runtime.RawExtension{Raw: raw}}}}}
	}
	cn := p.Name
	ctr := corev1.Container{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}
	if p.CPU != "" {
		q, err := resource.ParseQuantity(p.CPU)
		if err != nil {
			return nil, nil, fmt.Errorf("ClaimPod.CPU: %q: %w", p.CPU, err)
		}
		ctr.Resources.Requests = corev1.ResourceList{"cpu": q}
	}
	sched := p.Scheduler
	if sched == "" {
		sched = c.Options.SchedulerName
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}, Spec: corev1.PodSpec{
		SchedulerName:     sched,
		PriorityClassName: p.Priority,
		ResourceClaims:    []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &cn}},
		Containers:        []corev1.Container{ctr}}}
	c.SelectGroup(&pod.Spec)
	return claim, pod, nil
}

// SelectGroup adds the group's nodeSelector to a pod spec (nothing without
// a group), for pods a test makes itself.
func (c *Cluster) SelectGroup(spec *corev1.PodSpec) {
	if c.Options.Group == "" {
		return
	}
	if spec.NodeSelector == nil {
		spec.NodeSelector = map[string]string{}
	}
	spec.NodeSelector[GroupLabel] = c.Options.Group
}

// TryCreateClaimPod creates p's claim and pod and returns the first error;
// it does not touch the test, so other goroutines may call it.
func (c *Cluster) TryCreateClaimPod(p ClaimPod) error {
	claim, pod, err := c.Objects(p)
	if err != nil {
		return err
	}
	if _, err := c.CS.ResourceV1().ResourceClaims(p.Namespace).Create(c.Ctx, claim, metav1.CreateOptions{FieldManager: FieldManager}); err != nil {
		return fmt.Errorf("claim %s/%s: %w", p.Namespace, p.Name, err)
	}
	if _, err := c.CS.CoreV1().Pods(p.Namespace).Create(c.Ctx, pod, metav1.CreateOptions{FieldManager: FieldManager}); err != nil {
		return fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return nil
}

// CreateClaimPod creates p's claim and pod.
func (c *Cluster) CreateClaimPod(p ClaimPod) {
	c.T.Helper()
	if err := c.TryCreateClaimPod(p); err != nil {
		c.T.Fatal(err)
	}
}

// Claim reads a ResourceClaim.
func (c *Cluster) Claim(ns, name string) *resourceapi.ResourceClaim {
	c.T.Helper()
	rc, err := c.CS.ResourceV1().ResourceClaims(ns).Get(c.Ctx, name, metav1.GetOptions{})
	if err != nil {
		c.T.Fatal(err)
	}
	return rc
}

// Pod reads a Pod.
func (c *Cluster) Pod(ns, name string) *corev1.Pod {
	c.T.Helper()
	p, err := c.CS.CoreV1().Pods(ns).Get(c.Ctx, name, metav1.GetOptions{})
	if err != nil {
		c.T.Fatal(err)
	}
	return p
}

// Unschedulable returns the message of the pod's PodScheduled condition
// when it says Unschedulable, else "".
func Unschedulable(p *corev1.Pod) string {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
			return cond.Message
		}
	}
	return ""
}

// Scheduled waits until the pod is bound or its PodScheduled condition
// says Unschedulable; it returns the pod and, when not bound, the
// scheduler's message.
func (c *Cluster) Scheduled(ns, name string) (*corev1.Pod, string) {
	c.T.Helper()
	var pod *corev1.Pod
	var msg string
	c.Eventually(fmt.Sprintf("pod %s/%s to be bound or unschedulable", ns, name), func() (bool, string) {
		pod = c.Pod(ns, name)
		msg = Unschedulable(pod)
		return pod.Spec.NodeName != "" || msg != "", fmt.Sprintf("conditions %+v", pod.Status.Conditions)
	})
	return pod, msg
}

// WaitBound waits until the pod is bound and returns its node.
func (c *Cluster) WaitBound(ns, name string) string {
	c.T.Helper()
	var node string
	c.Eventually(fmt.Sprintf("pod %s/%s to be bound", ns, name), func() (bool, string) {
		p := c.Pod(ns, name)
		node = p.Spec.NodeName
		return node != "", fmt.Sprintf("conditions %+v", p.Status.Conditions)
	})
	return node
}

// WaitUnschedulable waits until the pod's PodScheduled condition says
// Unschedulable and returns its message; a pod bound meanwhile fails the
// test.
func (c *Cluster) WaitUnschedulable(ns, name string) string {
	c.T.Helper()
	p, msg := c.Scheduled(ns, name)
	if msg == "" {
		c.T.Fatalf("pod %s/%s was bound to %s", ns, name, p.Spec.NodeName)
	}
	return msg
}

// Clear deletes every Pod (grace period 0, as a kubelet confirming it
// stopped) and every ResourceClaim of the namespaces, taking the claims'
// allocations and finalizers off first (no controller runs to), and
// waits until they are gone: the namespaces' names are free again for the
// test's next run, and the devices free on its nodes. It may run in a
// Cleanup (Ctx is done by then; it takes a minute of its own).
func (c *Cluster) Clear(namespaces ...string) {
	c.T.Helper()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Ctx), time.Minute)
	defer cancel()
	c = &Cluster{T: c.T, Ctx: ctx, Srv: c.Srv, CS: c.CS, Options: c.Options}
	zero := int64(0)
	for _, ns := range namespaces {
		pods, err := c.CS.CoreV1().Pods(ns).List(c.Ctx, metav1.ListOptions{})
		if err != nil {
			c.T.Fatal(err)
		}
		for _, p := range pods.Items {
			if err := c.CS.CoreV1().Pods(ns).Delete(c.Ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
				c.T.Fatal(err)
			}
		}
		claims, err := c.CS.ResourceV1().ResourceClaims(ns).List(c.Ctx, metav1.ListOptions{})
		if err != nil {
			c.T.Fatal(err)
		}
		for i := range claims.Items {
			rc := &claims.Items[i]
			rc.Status = resourceapi.ResourceClaimStatus{}
			rc, err := c.CS.ResourceV1().ResourceClaims(ns).UpdateStatus(c.Ctx, rc, metav1.UpdateOptions{})
			if err == nil {
				rc.Finalizers = nil
				_, err = c.CS.ResourceV1().ResourceClaims(ns).Update(c.Ctx, rc, metav1.UpdateOptions{})
			}
			if err == nil {
				err = c.CS.ResourceV1().ResourceClaims(ns).Delete(c.Ctx, rc.Name, metav1.DeleteOptions{})
			}
			if err != nil && !apierrors.IsNotFound(err) {
				c.T.Fatalf("deleting claim %s/%s: %v", ns, claims.Items[i].Name, err)
			}
		}
	}
	c.Eventually(fmt.Sprintf("the pods and claims of %v to be gone", namespaces), func() (bool, string) {
		left := 0
		for _, ns := range namespaces {
			pods, err := c.CS.CoreV1().Pods(ns).List(c.Ctx, metav1.ListOptions{})
			if err != nil {
				c.T.Fatal(err)
			}
			claims, err := c.CS.ResourceV1().ResourceClaims(ns).List(c.Ctx, metav1.ListOptions{})
			if err != nil {
				c.T.Fatal(err)
			}
			left += len(pods.Items) + len(claims.Items)
		}
		return left == 0, fmt.Sprintf("%d pods and claims left", left)
	})
}

// Eventually polls cond until it holds, failing the test with what cond
// last said once Ctx ends. It backs off as testkit.Eventually does
// (apitest is linked into the gpuslice binary, which must not carry
// testkit's -update flag).
func (c *Cluster) Eventually(what string, cond func() (bool, string)) {
	c.T.Helper()
	if err := Poll(c.Ctx, cond); err != nil {
		c.T.Fatalf("still waiting for %s: %v", what, err)
	}
}

// Poll calls cond until it reports true or ctx ends: testkit.Wait, for
// harness code that returns errors.
func Poll(ctx context.Context, cond func() (bool, string)) error {
	return testkit.Wait(ctx, cond)
}
