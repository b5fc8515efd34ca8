package realnode

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fault runs `gpuslice dra simulate-fault ARGS` inside the driver's
// container (ctr task exec on the node: what `kubectl exec` into the driver
// pod does), which writes the request into the driver's fault directory
// (<state-dir>/faults, a root-only hostPath) and waits for its outcome.
func (e *env) fault(t *testing.T, args ...string) {
	t.Helper()
	_, cid := e.driverPod(t)
	if cid == "" {
		t.Fatal("the driver's container is not running")
	}
	argv := append([]string{"task", "exec", "--exec-id", fmt.Sprintf("fault-%d", time.Now().UnixNano()), cid,
		"/gpuslice", "dra", "simulate-fault"}, args...)
	// Not t.Context(): the recoveries run in cleanups, after it ended.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := e.c.Node.Ctr(ctx, argv...)
	if err != nil {
		t.Fatalf("gpuslice dra simulate-fault %s: %v", strings.Join(args, " "), err)
	}
	t.Logf("simulate-fault %s: %s", strings.Join(args, " "), strings.TrimSpace(string(out)))
}

// gpuOf returns the index of the whole GPU a pod's claim was allocated
// (device gpu-<N>) and the claim's name.
func (e *env) gpuOf(t *testing.T, p *corev1.Pod) (int, string) {
	t.Helper()
	var names []string // the claims of templates are in the status, named ones in the spec
	for _, st := range p.Status.ResourceClaimStatuses {
		if st.ResourceClaimName != nil {
			names = append(names, *st.ResourceClaimName)
		}
	}
	for _, rc := range p.Spec.ResourceClaims {
		if rc.ResourceClaimName != nil {
			names = append(names, *rc.ResourceClaimName)
		}
	}
	for _, name := range names {
		rc, err := e.c.Clientset.ResourceV1().ResourceClaims(p.Namespace).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if rc.Status.Allocation != nil && len(rc.Status.Allocation.Devices.Results) == 1 {
			dev := rc.Status.Allocation.Devices.Results[0].Device
			if n, err := strconv.Atoi(strings.TrimPrefix(dev, "gpu-")); err == nil && strings.HasPrefix(dev, "gpu-") {
				return n, rc.Name
			}
			t.Fatalf("claim %s got device %q, want a whole GPU gpu-<N>", rc.Name, dev)
		}
	}
	t.Fatalf("pod %s has no allocated claim: %+v", p.Name, p.Status.ResourceClaimStatuses)
	return 0, ""
}

// testXIDEvictsAndHealth: a fatal XID (79, fallen off the bus) on the GPU
// of a Deployment's pod taints the GPU's devices NoExecute; the stock
// device-taint-eviction controller evicts the pod and its ReplicaSet's
// replacement runs on another GPU of the node. A pod whose claim tolerates
// the taint stays, and the kubelet shows its device Unhealthy in
// allocatedResourcesStatus (KEP-4680, from the driver's health stream).
func (e *env) testXIDEvictsAndHealth(t *testing.T) {
	ctx := t.Context()
	ns := "xid"
	e.namespace(t, ns, nil)
	tmpl := &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu", Namespace: ns},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu.gpuslice.dev"}}}}}},
	}
	if _, err := e.c.Clientset.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "trainer"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "trainer", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr(int64(1)),
					ResourceClaims:                []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr("gpu")}},
					Containers: []corev1.Container{{
						Name: "work", Image: e.imgs.BusyboxTag(), ImagePullPolicy: corev1.PullNever,
						Command:   []string{"sh", "-c", showEnv + "exec sleep 3600"},
						Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}},
					}},
				},
			},
		},
	}
	if _, err := e.c.Clientset.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first := e.waitPodOf(t, ns, "app=trainer", "", 3*time.Minute)
	gpu, _ := e.gpuOf(t, first)

	// The tolerating pod, on a GPU of its own.
	tolerant := claim("steady", "gpu.gpuslice.dev", func(r *resourcev1.DeviceRequest) {
		r.Exactly.Tolerations = []resourcev1.DeviceToleration{{Key: "gpu.gpuslice.dev/unhealthy", Operator: resourcev1.DeviceTolerationOpExists, Effect: resourcev1.DeviceTaintEffectNoExecute}}
	})
	e.start(t, workload{ns: ns, name: "steady", claims: []resourcev1.ResourceClaim{tolerant},
		refs: []corev1.PodResourceClaim{ref("steady")}, script: showEnv + "exec sleep 3600"})
	steady := e.waitRunning(t, ns, "steady", 3*time.Minute)
	steadyGPU, _ := e.gpuOf(t, steady)

	e.fault(t, "--gpu", strconv.Itoa(gpu), "--xid", "79")
	e.fault(t, "--gpu", strconv.Itoa(steadyGPU), "--xid", "79")
	t.Cleanup(func() {
		e.fault(t, "--gpu", strconv.Itoa(gpu), "--recover")
		e.fault(t, "--gpu", strconv.Itoa(steadyGPU), "--recover")
	})

	// Evicted, and replaced on another GPU.
	second := e.waitPodOf(t, ns, "app=trainer", first.Name, 3*time.Minute)
	if g, _ := e.gpuOf(t, second); g == gpu || g == steadyGPU {
		t.Errorf("the replacement got GPU %d, want one without the XID (not %d or %d)", g, gpu, steadyGPU)
	}
	if _, err := e.c.Clientset.CoreV1().Pods(ns).Get(ctx, first.Name, metav1.GetOptions{}); err == nil {
		// Eviction deletes it; gone or going.
		t.Logf("the evicted pod %s is still terminating", first.Name)
	}

	// The tolerating pod stays, its device Unhealthy in its status.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		p, err := e.c.Clientset.CoreV1().Pods(ns).Get(ctx, "steady", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the tolerating pod: %v", err)
		}
		health := ""
		for _, cs := range p.Status.ContainerStatuses {
			for _, rs := range cs.AllocatedResourcesStatus {
				for _, r := range rs.Resources {
					health += fmt.Sprintf("%s=%s ", r.ResourceID, r.Health)
				}
			}
		}
		if p.Status.Phase != corev1.PodRunning {
			t.Fatalf("the tolerating pod is %s, want it still running", p.Status.Phase)
		}
		if strings.Contains(health, "=Unhealthy") {
			t.Logf("allocatedResourcesStatus: %s", health)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tolerating pod's allocatedResourcesStatus is %q after 2m, want its device Unhealthy", health)
		}
		time.Sleep(time.Second)
	}
	if err := e.c.Clientset.AppsV1().Deployments(ns).Delete(ctx, "trainer", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.deleteAll(t, ns)
}

// waitPodOf waits for a running pod matching selector other than skip.
func (e *env) waitPodOf(t *testing.T, ns, selector, skip string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		pods, err := e.c.Clientset.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range pods.Items {
			if p.Name != skip && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				return &pods.Items[i]
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no running pod %s in %s (other than %q) after %v\n%s", selector, ns, skip, timeout, e.podsReport(t))
		}
		time.Sleep(300 * time.Millisecond)
	}
}
