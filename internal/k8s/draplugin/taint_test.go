package draplugin_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuslice/gpuslice/internal/gpu/fake"
	"github.com/gpuslice/gpuslice/internal/k8s/apitest"
	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
	"github.com/gpuslice/gpuslice/internal/k8s/draplugin"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// taintNode is one node of the taint test: its fake GPUs, its driver and
// the kubelet-side peer that prepares and unprepares on it.
type taintNode struct {
	name string
	m    *fake.Machine
	d    *draplugin.Driver
	kl   *kubelet
}

// An XID on a GPU becomes a device taint on the ResourceSlices the driver
// publishes, and the stock control plane acts on it: two nodes (A with
// two L4s, B with one), each with the driver over real gRPC; a ReplicaSet
// whose pod takes a whole GPU through a ResourceClaimTemplate and prefers
// node A. A non-fatal XID (92, NoSchedule by default) on the pod's GPU
// taints its devices NoSchedule: a new pod that prefers node A gets A's
// other GPU, and the running pod stays. A fatal XID (79) turns the taint
// NoExecute: the stock kube-controller-manager's device-taint-eviction
// controller deletes the pod (the test finishes the deletion as the
// kubelet would, unpreparing its claim first), the ReplicaSet's
// replacement gets a new claim from the template and the stock scheduler
// allocates it on node B's GPU; the pod on A's healthy GPU is not touched.
// When the GPU recovers its taints are gone.
//
// It keeps a control plane of its own: kube-controller-manager's
// controllers (device-taint eviction, resource claims, garbage collection)
// act on every namespace's pods and claims, and would act on the other
// tests' objects on the shared one.
func TestXIDTaintsDeviceAndItsPodIsRescheduled(t *testing.T) {
	t.Parallel()
	srv := apitest.Start(t)
	apitest.StartScheduler(t, srv, apitest.SchedulerOptions{})
	apitest.StartControllerManager(t, srv, apitest.ControllerManagerOptions{})
	cs, err := kubernetes.NewForConfig(srv.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	t.Cleanup(cancel)
	const ns = "team-a"
	if err := srv.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	for _, dc := range dradriver.DeviceClasses() {
		if _, err := cs.ResourceV1().DeviceClasses().Create(ctx, &dc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	nodes := map[string]*taintNode{}
	for i, spec := range []struct {
		name string
		gpus int
	}{{"node-a", 2}, {"node-b", 1}} {
		all := corev1.ResourceList{"cpu": resource.MustParse("64"), "memory": resource.MustParse("512Gi"), "pods": resource.MustParse("110")}
		if _, err := srv.CreateReadyNode(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: spec.name},
			Status: corev1.NodeStatus{Capacity: all, Allocatable: all}}); err != nil {
			t.Fatal(err)
		}
		ms := fake.MachineSpec{}
		for range spec.gpus {
			ms.GPUs = append(ms.GPUs, fake.GPUSpec{Model: "L4"})
		}
		m, err := fake.New(ms, fake.WithSeed(int64(11+i)))
		if err != nil {
			t.Fatal(err)
		}
		dir := shortDir(t)
		regDir := filepath.Join(dir, "reg")
		d, err := draplugin.New(ctx, draplugin.Config{Node: spec.name, Device: m, Kube: cs, CDIDir: filepath.Join(dir, "cdi"),
			StateDir: filepath.Join(dir, "state"), RegistrarDir: regDir, MPSRoot: filepath.Join(dir, "mps"), Log: quietLog()})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Stop)
		nodes[spec.name] = &taintNode{name: spec.name, m: m, d: d, kl: registerKubelet(t, ctx, regDir)}
		if m.Subscribers() != 1 {
			t.Fatalf("%s: the driver watches %d health event streams, want 1", spec.name, m.Subscribers())
		}
	}
	a, b := nodes["node-a"], nodes["node-b"]
	for _, n := range nodes {
		testkit.EventuallyCtx(t, ctx, n.name+"'s ResourceSlices", func() (bool, string) {
			devs := nodeDevices(t, ctx, cs, n.name)
			return len(devs) == 2*len(gpusOf(t, n.m)), fmt.Sprintf("%d devices", len(devs))
		})
	}

	tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "whole-gpu", Namespace: ns},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: dranames.ClassGPU}}}}}}}
	if _, err := cs.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	one := int32(1)
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: ns}, Spec: appsv1.ReplicaSetSpec{
		Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "train"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "train"}}, Spec: gpuPodSpec("whole-gpu")}}}
	if _, err := cs.AppsV1().ReplicaSets(ns).Create(ctx, rs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first, firstClaim := boundPod(t, ctx, cs, ns, "app=train", "")
	if first.Spec.NodeName != a.name {
		t.Fatalf("the first pod went to %s, want %s (it prefers it)", first.Spec.NodeName, a.name)
	}
	a.kl.mustPrepare(t, ctx, firstClaim)
	dev := allocatedDevice(firstClaim) // gpu-N
	var idx int
	if _, err := fmt.Sscanf(dev, "gpu-%d", &idx); err != nil {
		t.Fatalf("the pod's claim got device %s, want a whole GPU", dev)
	}

	// A non-fatal XID in the NoSchedule list: NoSchedule on the GPU's
	// devices, the running pod stays, a new pod avoids the GPU.
	if err := a.m.InjectXID(idx, 92); err != nil {
		t.Fatal(err)
	}
	waitTaint(t, ctx, cs, a.name, idx, "92", resourceapi.DeviceTaintEffectNoSchedule)
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "newcomer", Namespace: ns,
		Labels: map[string]string{"app": "newcomer"}}, Spec: gpuPodSpec("whole-gpu")}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	newcomer, newcomerClaim := boundPod(t, ctx, cs, ns, "app=newcomer", "")
	if newcomer.Spec.NodeName != a.name || allocatedDevice(newcomerClaim) == dev {
		t.Fatalf("the new pod got %s on %s: want node A's other GPU, not the NoSchedule-tainted %s", allocatedDevice(newcomerClaim), newcomer.Spec.NodeName, dev)
	}
	a.kl.mustPrepare(t, ctx, newcomerClaim)
	if p, err := cs.CoreV1().Pods(ns).Get(ctx, first.Name, metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil || p.UID != first.UID {
		t.Fatalf("the pod on the NoSchedule GPU did not stay: %v %+v", err, p.ObjectMeta)
	}

	// A fatal XID: NoExecute, the pod is evicted by the stock
	// controller and its replacement lands on node B.
	if err := a.m.InjectXID(idx, 79); err != nil {
		t.Fatal(err)
	}
	waitTaint(t, ctx, cs, a.name, idx, "79", resourceapi.DeviceTaintEffectNoExecute)
	var evicted *corev1.Pod
	testkit.EventuallyCtx(t, ctx, "the device-taint-eviction controller deleting "+first.Name, func() (bool, string) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, first.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		evicted = p
		return p.DeletionTimestamp != nil, fmt.Sprintf("conditions %+v", p.Status.Conditions)
	})
	reason := ""
	for _, c := range evicted.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			reason = c.Reason
		}
	}
	if reason != "DeletionByDeviceTaintManager" {
		t.Fatalf("evicted pod's DisruptionTarget reason %q, want DeletionByDeviceTaintManager", reason)
	}
	// The kubelet's part: the containers stop, the claim is unprepared,
	// the pod object goes.
	if r := a.kl.unprepare(ctx, firstClaim)[string(firstClaim.UID)]; r == nil || r.Error != "" {
		t.Fatalf("unprepare of the evicted pod's claim: %+v", r)
	}
	zero := int64(0)
	if err := cs.CoreV1().Pods(ns).Delete(ctx, first.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero,
		Preconditions: &metav1.Preconditions{UID: &first.UID}}); err != nil {
		t.Fatal(err)
	}
	repl, replClaim := boundPod(t, ctx, cs, ns, "app=train", first.UID)
	if repl.Spec.NodeName != b.name || replClaim.Status.Allocation.Devices.Results[0].Pool != b.name {
		t.Fatalf("the replacement pod went to %s (device %s/%s), want %s: the only healthy free GPU", repl.Spec.NodeName,
			replClaim.Status.Allocation.Devices.Results[0].Pool, allocatedDevice(replClaim), b.name)
	}
	if replClaim.UID == firstClaim.UID {
		t.Fatal("the replacement reuses the evicted pod's claim")
	}
	b.kl.mustPrepare(t, ctx, replClaim)
	if p, err := cs.CoreV1().Pods(ns).Get(ctx, newcomer.Name, metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Fatalf("the pod on node A's healthy GPU was evicted too: %v %+v", err, p.ObjectMeta)
	}
	for _, f := range a.d.Faults() {
		if f.Value != "79" {
			t.Fatalf("node A faults %+v, want only XID 79", a.d.Faults())
		}
	}

	// The GPU recovers: its taints go.
	if err := a.m.Recover(idx); err != nil {
		t.Fatal(err)
	}
	testkit.EventuallyCtx(t, ctx, "node A's taints removed after recovery", func() (bool, string) {
		n := 0
		for _, d := range nodeDevices(t, ctx, cs, a.name) {
			n += len(d.Taints)
		}
		return n == 0, fmt.Sprintf("%d taints", n)
	})
}

// gpuPodSpec is a pod taking one claim from a template and preferring
// node A.
func gpuPodSpec(template string) corev1.PodSpec {
	return corev1.PodSpec{
		ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: &template}},
		Containers:     []corev1.Container{{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
		Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
			Weight: 100, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{"node-a"}}}}}}}},
	}
}

// boundPod waits for the one pod matching selector (other than the pod
// uid not) that is bound with its claim allocated, and returns both.
func boundPod(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, selector string, not types.UID) (*corev1.Pod, *resourceapi.ResourceClaim) {
	t.Helper()
	var pod *corev1.Pod
	var claim *resourceapi.ResourceClaim
	testkit.EventuallyCtx(t, ctx, "a bound pod "+selector, func() (bool, string) {
		list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			t.Fatal(err)
		}
		var seen []string
		for i := range list.Items {
			p := &list.Items[i]
			seen = append(seen, fmt.Sprintf("%s node=%q deleting=%v", p.Name, p.Spec.NodeName, p.DeletionTimestamp != nil))
			if p.UID == not || p.DeletionTimestamp != nil || p.Spec.NodeName == "" || len(p.Status.ResourceClaimStatuses) != 1 ||
				p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
				continue
			}
			c, err := cs.ResourceV1().ResourceClaims(ns).Get(ctx, *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
			if err != nil || c.Status.Allocation == nil {
				continue
			}
			pod, claim = p, c
			return true, ""
		}
		return false, strings.Join(seen, "; ")
	})
	return pod, claim
}

// waitTaint waits until every device of GPU idx on node carries exactly
// the taint key=value:effect.
func waitTaint(t *testing.T, ctx context.Context, cs kubernetes.Interface, node string, idx int, value string, effect resourceapi.DeviceTaintEffect) {
	t.Helper()
	prefix := fmt.Sprintf("gpu-%d", idx)
	testkit.EventuallyCtx(t, ctx, fmt.Sprintf("%s GPU %d tainted %s=%s:%s", node, idx, dranames.TaintKey, value, effect), func() (bool, string) {
		var got []string
		ok, n := true, 0
		for _, d := range nodeDevices(t, ctx, cs, node) {
			mine := d.Name == prefix || strings.HasPrefix(d.Name, prefix+"-")
			tainted := len(d.Taints) == 1 && d.Taints[0].Key == dranames.TaintKey && d.Taints[0].Value == value &&
				d.Taints[0].Effect == effect && d.Taints[0].TimeAdded != nil
			if mine {
				n++
			}
			if mine != tainted {
				ok = false
			}
			got = append(got, fmt.Sprintf("%s:%v", d.Name, d.Taints))
		}
		return ok && n > 0, strings.Join(got, " ")
	})
}

func nodeDevices(t *testing.T, ctx context.Context, cs kubernetes.Interface, node string) []resourceapi.Device {
	t.Helper()
	list, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	var out []resourceapi.Device
	for _, s := range list.Items {
		out = append(out, s.Spec.Devices...)
	}
	return out
}

func gpusOf(t *testing.T, m *fake.Machine) []string {
	t.Helper()
	gs, err := m.GPUs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, g := range gs {
		out = append(out, g.UUID)
	}
	return out
}

func (k *kubelet) mustPrepare(t *testing.T, ctx context.Context, claims ...*resourceapi.ResourceClaim) {
	t.Helper()
	resp, err := k.prepare(ctx, claims...)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range claims {
		if r := resp[string(c.UID)]; r == nil || r.Error != "" || len(r.Devices) != 1 {
			t.Fatalf("prepare %s: %+v", c.Name, r)
		}
	}
}
