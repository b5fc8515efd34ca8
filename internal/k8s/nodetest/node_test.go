package nodetest_test

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/internal/k8s/nodetest"
)

// TestNodeRunsAPod starts the real node and runs a busybox pod on it: the
// pod gets an address in the node's pod range, reaches the API server
// through the "kubernetes" Service's address, and its log is what it
// printed.
func TestNodeRunsAPod(t *testing.T) {
	nodetest.SkipUnlessSupported(t)
	imgs := nodetest.Images(t)
	c := nodetest.StartCluster(t, nodetest.Options{Images: []string{imgs.Pause(), imgs.Busybox()}, SandboxImage: imgs.PauseTag()})
	ctx := t.Context()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "default"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "hello", Image: imgs.BusyboxTag(), ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", `echo hello from $(busybox hostname); busybox nc -w 5 $KUBERNETES_SERVICE_HOST $KUBERNETES_SERVICE_PORT </dev/null && echo api reachable`},
			}},
		},
	}
	if _, err := c.Clientset.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := waitPod(t, ctx, c, "default", "hello", 2*time.Minute)
	logs, err := c.Clientset.CoreV1().Pods("default").GetLogs("hello", &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("kubectl logs through the API server and the kubelet: %v", err)
	}
	if got.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("pod phase %s, log %q", got.Status.Phase, logs)
	}
	if !c.Node.PodCIDR().Contains(parseIP(got.Status.PodIP)) {
		t.Errorf("pod IP %s not in the node's pod range %s", got.Status.PodIP, c.Node.PodCIDR())
	}
	if !strings.Contains(string(logs), "hello from hello") || !strings.Contains(string(logs), "api reachable") {
		t.Errorf("pod log = %q, want its greeting and the API server reachable", logs)
	}
}

func waitPod(t *testing.T, ctx context.Context, c *nodetest.Cluster, ns, name string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		p, err := c.Clientset.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && (p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed) {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s/%s not finished after %v: %+v (%v)\n%s", ns, name, timeout, p.Status, err, c.Node.Logs(6000))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func parseIP(s string) []byte { return net.ParseIP(s) }

// TestMissingNamesWhatIsMissing: a directory without the binaries is named
// with the script that builds them; where the node is required, nothing is
// missing (the capability and namespace probe passes).
func TestMissingNamesWhatIsMissing(t *testing.T) {
	why := nodetest.Missing(t.TempDir())
	for _, want := range []string{"lacks kubelet (run scripts/realnode.sh)", "lacks containerd", "lacks ctr"} {
		if !strings.Contains(why, want) {
			t.Errorf("Missing(empty dir) = %q, want it to say %q", why, want)
		}
	}
	if os.Getenv(nodetest.EnvRequire) == "1" {
		if why := nodetest.Missing(nodetest.BinDir()); why != "" {
			t.Errorf("the node is required here, but: %s", why)
		}
	}
}
