// Package realnode installs the Helm chart deploy/helm/gpuslice on a real
// one-node Kubernetes cluster (internal/k8s/nodetest: kubelet v1.36.3 and
// containerd v2 in their own namespaces, the images built by
// scripts/images.sh imported into containerd) and runs GPU workloads on
// it, checking from inside each container what it was given.
//
// The chart is installed with Helm's own Go packages (action.Install, as
// `helm install --wait` does) with simulated GPUs (driver.simulate
// dgx-a100); its pods then talk to the API server with their own
// ServiceAccounts, so the chart's ClusterRoles are what is tested, not an
// admin's credentials.
package realnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/kube"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/internal/k8s/nodetest"
)

const (
	chartDir  = "../../../deploy/helm/gpuslice"
	release   = "gpuslice"
	releaseNS = "gpuslice-system"
)

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

	t.Run("WholeGPU", e.testWholeGPU)
}

// install is `helm install gpuslice deploy/helm/gpuslice -n gpuslice-system
// --create-namespace --wait --set driver.simulate=dgx-a100`, with the
// images present on the node (pullPolicy Never).
func (e *env) install(t *testing.T) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("loading %s: %v", chartDir, err)
	}
	cfg := new(action.Configuration)
	if err := cfg.Init(kube.GetConfig(e.c.Kubeconfig, "", releaseNS), releaseNS, "secret", t.Logf); err != nil {
		t.Fatalf("helm: %v", err)
	}
	in := action.NewInstall(cfg)
	in.ReleaseName, in.Namespace, in.CreateNamespace = release, releaseNS, true
	in.Wait, in.Timeout = true, 4*time.Minute
	vals := map[string]any{
		"image":  map[string]any{"pullPolicy": "Never"},
		"driver": map[string]any{"simulate": "dgx-a100"},
	}
	if _, err := in.Run(ch, vals); err != nil {
		t.Fatalf("helm install: %v\n%s", err, e.podsReport(t))
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
		if p.Namespace == releaseNS {
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
	return e.waitDone(t, w.ns, w.name, 3*time.Minute)
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
	_ = appsv1.SchemeGroupVersion
	_ = filepath.Join
	_ = os.Getenv
}
