package realnode

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/internal/k8s/nodetest"
)

const chartDir = "../../../deploy/helm/gpuslice"

// env is the cluster with the chart installed, shared by the subtests.
type env struct {
	c    *nodetest.Cluster
	imgs nodetest.ImageSet
}

// TestRealNode installs the chart on a real node and runs every workload
// as a subtest.
func TestRealNode(t *testing.T) {
	nodetest.SkipUnlessSupported(t)
	imgs := nodetest.Images(t)
	c := nodetest.StartCluster(t, nodetest.Options{Images: imgs.All(), SandboxImage: imgs.PauseTag()})
	e := &env{c: c, imgs: imgs}
	start := time.Now()
	e.install(t)
	t.Logf("chart installed and every pod Ready in %s", time.Since(start).Round(time.Second))

	t.Run("ChartRBACHoldsBack", e.testChartRBACHoldsBack)
	t.Run("WholeGPU", e.testWholeGPU)
	t.Run("TwoPodsShareOneClaim", e.testTwoPodsShareOneClaim)
	t.Run("MemorySharesByCapacity", e.testMemoryShares)
	t.Run("MPSThroughGpuConfig", e.testMPSThroughGpuConfig)
	t.Run("MIGThroughBindingConditions", e.testMIG)
	t.Run("ExtendedResource", e.testExtendedResource)
	t.Run("TwoTenants", e.testTwoTenants)
	t.Run("GpusliceSchedulerWithQuota", e.testSchedulerQuota)
	t.Run("DeleteUnprepares", e.testDeleteUnprepares)
	t.Run("DriverKilledMidPrepare", e.testDriverKilledMidPrepare)
	t.Run("XIDEvictsAndHealth", e.testXIDEvictsAndHealth)
}

// install is `helm install gpuslice deploy/helm/gpuslice -n gpuslice-system
// --create-namespace --wait --set driver.simulate=dgx-a100`, with the
// images present on the node (pullPolicy Never).
func (e *env) install(t *testing.T) {
	t.Helper()
	if err := Install(e.c.Kubeconfig, chartDir, SandboxValues(), t.Logf); err != nil {
		t.Fatalf("%v\n%s", err, e.podsReport(t))
	}
}

// podsReport describes every pod of the release namespace with the end of
// its logs, for a failure message.
func (e *env) podsReport(t *testing.T) string {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var b strings.Builder
	pods, err := e.c.Clientset.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "pod %s/%s on %q: %s %s\n", p.Namespace, p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Message)
		for _, cs := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, "  %s ready=%v restarts=%d state=%+v last=%+v\n", cs.Name, cs.Ready, cs.RestartCount, cs.State, cs.LastTerminationState)
		}
		for _, cond := range p.Status.Conditions {
			if cond.Status != corev1.ConditionTrue {
				fmt.Fprintf(&b, "  %s=%s %s %s\n", cond.Type, cond.Status, cond.Reason, cond.Message)
			}
		}
		if p.Namespace == ReleaseNS {
			for _, ctr := range p.Spec.Containers {
				logs, _ := e.c.Clientset.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: ctr.Name, TailLines: ptr(int64(30))}).DoRaw(ctx)
				fmt.Fprintf(&b, "  --- %s log:\n%s\n", ctr.Name, indent(string(logs)))
			}
		}
	}
	events, _ := e.c.Clientset.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	if events != nil {
		for _, ev := range events.Items {
			if ev.Type != corev1.EventTypeNormal {
				fmt.Fprintf(&b, "event %s/%s %s: %s\n", ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Reason, ev.Message)
			}
		}
	}
	return b.String()
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}

func ptr[T any](v T) *T { return &v }

// workload is one pod of a test: its claims and the shell script its
// busybox container runs (it prints what the test checks).
type workload struct {
	ns, name string
	claims   []resourcev1.ResourceClaim // created in ns before the pod
	refs     []corev1.PodResourceClaim  // the pod's claims (by name)
	script   string
	limits   corev1.ResourceList // extended resources (nvidia.com/gpu)
	tolerate []corev1.Toleration
	sched    string // spec.schedulerName (empty: the default scheduler)
}

// run creates the workload's claims and pod, waits for the pod to finish
// and returns its log; the pod must succeed.
func (e *env) run(t *testing.T, w workload) string {
	t.Helper()
	e.start(t, w)
	return e.waitDone(t, w.ns, w.name, 3*time.Minute)
}

// start creates the workload's claims and pod.
func (e *env) start(t *testing.T, w workload) {
	t.Helper()
	ctx := t.Context()
	e.namespace(t, w.ns, nil)
	for i := range w.claims {
		w.claims[i].Namespace = w.ns
		if _, err := e.c.Clientset.ResourceV1().ResourceClaims(w.ns).Create(ctx, &w.claims[i], metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating claim %s: %v", w.claims[i].Name, err)
		}
	}
	var claimNames []corev1.ResourceClaim
	for _, r := range w.refs {
		claimNames = append(claimNames, corev1.ResourceClaim{Name: r.Name})
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: w.name, Namespace: w.ns},
		Spec: corev1.PodSpec{
			RestartPolicy:  corev1.RestartPolicyNever,
			SchedulerName:  w.sched,
			ResourceClaims: w.refs,
			Tolerations:    w.tolerate,
			Containers: []corev1.Container{{
				Name: "work", Image: e.imgs.BusyboxTag(), ImagePullPolicy: corev1.PullNever,
				Command:   []string{"sh", "-c", w.script},
				Resources: corev1.ResourceRequirements{Claims: claimNames, Limits: w.limits},
			}},
		},
	}
	if _, err := e.c.Clientset.CoreV1().Pods(w.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", w.name, err)
	}
}

// waitDone waits for a pod to succeed and returns its log.
func (e *env) waitDone(t *testing.T, ns, name string, timeout time.Duration) string {
	t.Helper()
	ctx := t.Context()
	deadline := time.Now().Add(timeout)
	for {
		p, err := e.c.Clientset.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && (p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed) {
			logs, lerr := e.c.Clientset.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
			if lerr != nil {
				t.Fatalf("logs of %s/%s: %v", ns, name, lerr)
			}
			if p.Status.Phase != corev1.PodSucceeded {
				t.Fatalf("pod %s/%s failed; log:\n%s", ns, name, logs)
			}
			return string(logs)
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s/%s not done after %v\n%s\n%s", ns, name, timeout, e.podsReport(t), e.c.Node.Logs(3000))
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// namespace creates ns (with labels) if it does not exist yet.
func (e *env) namespace(t *testing.T, ns string, labels map[string]string) {
	t.Helper()
	_, err := e.c.Clientset.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{})
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("namespace %s: %v", ns, err)
	}
}

// claim is a ResourceClaim with one request of class.
func claim(name, class string, mutate ...func(*resourcev1.DeviceRequest)) resourcev1.ResourceClaim {
	req := resourcev1.DeviceRequest{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class}}
	for _, m := range mutate {
		m(&req)
	}
	return resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{req}}},
	}
}

func ref(name string) corev1.PodResourceClaim {
	return corev1.PodResourceClaim{Name: name, ResourceClaimName: ptr(name)}
}

// envOf parses the `env` lines of a log into a map.
func envOf(log string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(log, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok && !strings.ContainsAny(k, " \t") {
			m[k] = v
		}
	}
	return m
}

// showEnv is the script part that prints what a GPU container was given.
const showEnv = `env | grep -E '^(CUDA|NVIDIA|GPUSLICE)_' | sort; ls /dev | grep nvidia | sed 's/^/dev:/'; `

func (e *env) testWholeGPU(t *testing.T) {
	log := e.run(t, workload{
		ns: "whole", name: "whole",
		claims: []resourcev1.ResourceClaim{claim("gpu", "gpu.gpuslice.dev")},
		refs:   []corev1.PodResourceClaim{ref("gpu")},
		script: showEnv,
	})
	env := envOf(log)
	uuid := env["CUDA_VISIBLE_DEVICES"]
	if !strings.HasPrefix(uuid, "GPU-") || env["NVIDIA_VISIBLE_DEVICES"] != uuid {
		t.Errorf("CUDA_VISIBLE_DEVICES=%q NVIDIA_VISIBLE_DEVICES=%q, want one GPU uuid in both; log:\n%s", uuid, env["NVIDIA_VISIBLE_DEVICES"], log)
	}
	for _, dev := range []string{"dev:nvidiactl", "dev:nvidia-uvm"} {
		if !strings.Contains(log, dev+"\n") {
			t.Errorf("the container has no /dev/%s; log:\n%s", strings.TrimPrefix(dev, "dev:"), log)
		}
	}
}

// testTwoPodsShareOneClaim: one ResourceClaim named by two pods, both
// running at the same time on the same GPU.
func (e *env) testTwoPodsShareOneClaim(t *testing.T) {
	ctx := t.Context()
	w := workload{ns: "share", name: "a", claims: []resourcev1.ResourceClaim{claim("gpu", "gpu.gpuslice.dev")},
		refs: []corev1.PodResourceClaim{ref("gpu")}, script: showEnv + "exec sleep 600"}
	e.start(t, w)
	w.name, w.claims = "b", nil
	e.start(t, w)
	e.waitRunning(t, "share", "a", 3*time.Minute)
	e.waitRunning(t, "share", "b", 3*time.Minute)
	// Both hold the claim at once.
	rc, err := e.c.Clientset.ResourceV1().ResourceClaims("share").Get(ctx, "gpu", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rc.Status.ReservedFor) != 2 {
		t.Errorf("the claim is reserved for %d consumers, want both pods: %+v", len(rc.Status.ReservedFor), rc.Status.ReservedFor)
	}
	gpus := map[string]string{}
	for _, name := range []string{"a", "b"} {
		var log []byte
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
			log, err = e.c.Clientset.CoreV1().Pods("share").GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
			if err == nil && strings.Contains(string(log), "CUDA_VISIBLE_DEVICES=") || time.Now().After(deadline) {
				break
			}
		}
		gpus[name] = envOf(string(log))["CUDA_VISIBLE_DEVICES"]
	}
	if gpus["a"] == "" || gpus["a"] != gpus["b"] {
		t.Errorf("pods of one claim got GPUs %q and %q, want the same one", gpus["a"], gpus["b"])
	}
	e.deleteAll(t, "share")
}

// testMemoryShares: claims on shared.gpuslice.dev asking for memory as
// consumable capacity get that memory as their limit, and the stock
// scheduler puts both on one GPU's shared device.
func (e *env) testMemoryShares(t *testing.T) {
	mem := func(q string) func(*resourcev1.DeviceRequest) {
		return func(r *resourcev1.DeviceRequest) {
			r.Exactly.Capacity = &resourcev1.CapacityRequirements{Requests: map[resourcev1.QualifiedName]resource.Quantity{"memory": resource.MustParse(q)}}
		}
	}
	e.start(t, workload{ns: "shares", name: "small", claims: []resourcev1.ResourceClaim{claim("small", "shared.gpuslice.dev", mem("8Gi"))},
		refs: []corev1.PodResourceClaim{ref("small")}, script: showEnv})
	e.start(t, workload{ns: "shares", name: "big", claims: []resourcev1.ResourceClaim{claim("big", "shared.gpuslice.dev", mem("16Gi"))},
		refs: []corev1.PodResourceClaim{ref("big")}, script: showEnv})
	small, big := envOf(e.waitDone(t, "shares", "small", 3*time.Minute)), envOf(e.waitDone(t, "shares", "big", 3*time.Minute))
	if small["GPUSLICE_MEMORY_LIMIT_MIB"] != "8192" || big["GPUSLICE_MEMORY_LIMIT_MIB"] != "16384" {
		t.Errorf("GPUSLICE_MEMORY_LIMIT_MIB = %q and %q, want 8192 and 16384", small["GPUSLICE_MEMORY_LIMIT_MIB"], big["GPUSLICE_MEMORY_LIMIT_MIB"])
	}
	if small["CUDA_VISIBLE_DEVICES"] == "" || !strings.HasPrefix(small["CUDA_VISIBLE_DEVICES"], "GPU-") {
		t.Errorf("a share got CUDA_VISIBLE_DEVICES=%q, want its GPU's uuid", small["CUDA_VISIBLE_DEVICES"])
	}
}

// testMIG: a claim for a 1g.5gb instance is allocated by the stock
// scheduler, which binds the pod only once the driver made the instance
// (binding conditions); the container sees the MIG device.
func (e *env) testMIG(t *testing.T) {
	e.start(t, workload{ns: "mig", name: "mig",
		claims: []resourcev1.ResourceClaim{claim("mig", "mig.gpuslice.dev", func(r *resourcev1.DeviceRequest) {
			r.Exactly.Selectors = []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
				Expression: `device.attributes["gpu.gpuslice.dev"].profile == "1g.5gb"`}}}
		})},
		refs: []corev1.PodResourceClaim{ref("mig")}, script: showEnv + "sleep 5"})
	// While the pod holds the claim, its device carries the driver's
	// mig-ready condition: the scheduler bound the pod after it.
	deadline := time.Now().Add(3 * time.Minute)
	for ready := false; !ready; {
		rc, err := e.c.Clientset.ResourceV1().ResourceClaims("mig").Get(t.Context(), "mig", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range rc.Status.Devices {
			for _, c := range d.Conditions {
				ready = ready || c.Type == "gpuslice.dev/mig-ready" && c.Status == metav1.ConditionTrue
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("claim status.devices has no gpuslice.dev/mig-ready=True after 3m: %+v", rc.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}
	log := e.waitDone(t, "mig", "mig", 3*time.Minute)
	if v := envOf(log)["CUDA_VISIBLE_DEVICES"]; !strings.HasPrefix(v, "MIG-") {
		t.Errorf("CUDA_VISIBLE_DEVICES=%q, want a MIG instance's uuid; log:\n%s", v, log)
	}
}

// testExtendedResource: a pod written for NVIDIA's device plugin
// (nvidia.com/gpu: 1, no claim) gets a whole GPU through the DeviceClass's
// extended resource name.
func (e *env) testExtendedResource(t *testing.T) {
	log := e.run(t, workload{ns: "extended", name: "legacy", script: showEnv,
		limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}})
	if v := envOf(log)["CUDA_VISIBLE_DEVICES"]; !strings.HasPrefix(v, "GPU-") {
		t.Errorf("nvidia.com/gpu: 1 gave CUDA_VISIBLE_DEVICES=%q, want a GPU uuid; log:\n%s", v, log)
	}
}

// testTwoTenants: the webhook gives each namespace's claims its tenant's
// toleration, so two tenants' shares land on different GPUs, and a claim
// tolerating another tenant is refused when it is created.
func (e *env) testTwoTenants(t *testing.T) {
	ctx := t.Context()
	mem := func(r *resourcev1.DeviceRequest) {
		r.Exactly.Capacity = &resourcev1.CapacityRequirements{Requests: map[resourcev1.QualifiedName]resource.Quantity{"memory": resource.MustParse("4Gi")}}
	}
	e.start(t, workload{ns: "team-a", name: "a", claims: []resourcev1.ResourceClaim{claim("share", "shared.gpuslice.dev", mem)},
		refs: []corev1.PodResourceClaim{ref("share")}, script: showEnv})
	e.start(t, workload{ns: "team-b", name: "b", claims: []resourcev1.ResourceClaim{claim("share", "shared.gpuslice.dev", mem)},
		refs: []corev1.PodResourceClaim{ref("share")}, script: showEnv})
	a, b := envOf(e.waitDone(t, "team-a", "a", 3*time.Minute)), envOf(e.waitDone(t, "team-b", "b", 3*time.Minute))
	if a["CUDA_VISIBLE_DEVICES"] == "" || a["CUDA_VISIBLE_DEVICES"] == b["CUDA_VISIBLE_DEVICES"] {
		t.Errorf("tenants team-a and team-b got GPUs %q and %q, want different ones", a["CUDA_VISIBLE_DEVICES"], b["CUDA_VISIBLE_DEVICES"])
	}
	rc, err := e.c.Clientset.ResourceV1().ResourceClaims("team-a").Get(ctx, "share", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if tol := rc.Spec.Devices.Requests[0].Exactly.Tolerations; len(tol) != 1 || tol[0].Key != "gpuslice.dev/tenant" || tol[0].Value != "team-a" {
		t.Errorf("team-a's claim tolerations = %+v, want the webhook's gpuslice.dev/tenant=team-a", tol)
	}
	foreign := claim("sneaky", "shared.gpuslice.dev", mem, func(r *resourcev1.DeviceRequest) {
		r.Exactly.Tolerations = []resourcev1.DeviceToleration{{Key: "gpuslice.dev/tenant", Operator: resourcev1.DeviceTolerationOpEqual, Value: "team-b", Effect: resourcev1.DeviceTaintEffectNoSchedule}}
	})
	foreign.Namespace = "team-a"
	_, err = e.c.Clientset.ResourceV1().ResourceClaims("team-a").Create(ctx, &foreign, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), `tolerates tenant "team-b"`) {
		t.Errorf("a team-a claim tolerating team-b: err = %v, want the webhook's refusal naming the tenant", err)
	}
}

// testSchedulerQuota: in a namespace labelled for gpuslice-scheduler the
// webhook sets the pods' schedulerName; gpuslice-scheduler places them and
// keeps the namespace's memory quota: two 8Gi shares run, a third waits
// with the quota named.
func (e *env) testSchedulerQuota(t *testing.T) {
	ctx := t.Context()
	ns := "quota"
	e.namespace(t, ns, map[string]string{"gpuslice.dev/scheduler": "gpuslice-scheduler"})
	nsObj, err := e.c.Clientset.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if nsObj.Annotations == nil {
		nsObj.Annotations = map[string]string{}
	}
	nsObj.Annotations["gpuslice.dev/gpu-memory-quota"] = "16Gi"
	if _, err := e.c.Clientset.CoreV1().Namespaces().Update(ctx, nsObj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	mem := func(r *resourcev1.DeviceRequest) {
		r.Exactly.Capacity = &resourcev1.CapacityRequirements{Requests: map[resourcev1.QualifiedName]resource.Quantity{"memory": resource.MustParse("8Gi")}}
	}
	for _, name := range []string{"one", "two", "three"} {
		e.start(t, workload{ns: ns, name: name, claims: []resourcev1.ResourceClaim{claim(name, "shared.gpuslice.dev", mem)},
			refs: []corev1.PodResourceClaim{ref(name)}, script: showEnv + "sleep 600"})
	}
	running := map[string]bool{}
	deadline := time.Now().Add(3 * time.Minute)
	var third *corev1.Pod
	for len(running) < 2 || third == nil {
		pods, err := e.c.Clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		third = nil
		for i, p := range pods.Items {
			if p.Spec.SchedulerName != "gpuslice-scheduler" {
				t.Fatalf("pod %s has schedulerName %q, want the webhook's gpuslice-scheduler", p.Name, p.Spec.SchedulerName)
			}
			if p.Status.Phase == corev1.PodRunning {
				running[p.Name] = true
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "quota") {
					third = &pods.Items[i]
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 3m: running %v, a pod waiting on the quota: %v\n%s", running, third != nil, e.podsReport(t))
		}
		time.Sleep(500 * time.Millisecond)
	}
	msg := ""
	for _, c := range third.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			msg = c.Message
		}
	}
	if !strings.Contains(msg, "16Gi") {
		t.Errorf("the third pod waits with %q, want the namespace's 16Gi quota named", msg)
	}
	// Free the namespace for the node's later tests.
	if err := e.c.Clientset.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
}
