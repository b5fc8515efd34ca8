package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"github.com/gpuslice/gpuslice/internal/k8s/nodetest"
)

const chartYAML = "../../../../deploy/helm/gpuslice/Chart.yaml"

func testImages(t *testing.T) nodetest.ImageSet {
	t.Helper()
	data, err := os.ReadFile(chartYAML)
	if err != nil {
		t.Fatal(err)
	}
	v, err := chartVersion(data)
	if err != nil {
		t.Fatal(err)
	}
	return nodetest.ImageSet{Dir: "/cache/sandbox/images", Version: v}
}

// TestChartVersion: the tag is the chart's appVersion, as scripts/images.sh
// reads it.
func TestChartVersion(t *testing.T) {
	if v := testImages(t).Version; !regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`).MatchString(v) {
		t.Errorf("appVersion %q cannot be a tag", v)
	}
	if v, err := chartVersion([]byte("name: x\nappVersion: \"1.2.3\"\n")); v != "1.2.3" || err != nil {
		t.Errorf("chartVersion = %q, %v; want 1.2.3", v, err)
	}
	if _, err := chartVersion([]byte("name: x\n")); err == nil {
		t.Error("chartVersion of a Chart.yaml without appVersion succeeded")
	}
}

// TestExampleDecodesStrictly: every document of the example is a
// resource.k8s.io/v1 ResourceClaim or a v1 Pod with no unknown field, the
// pod uses the claim, and it runs the imported busybox without pulling.
func TestExampleDecodesStrictly(t *testing.T) {
	imgs := testImages(t)
	docs := strings.Split(exampleYAML(imgs.BusyboxTag()), "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("%d documents, want a claim and a pod", len(docs))
	}
	var claim resourcev1.ResourceClaim
	if err := yaml.UnmarshalStrict([]byte(docs[0]), &claim); err != nil {
		t.Fatalf("the claim: %v", err)
	}
	if claim.APIVersion != "resource.k8s.io/v1" || claim.Kind != "ResourceClaim" {
		t.Errorf("first document is %s %s, want resource.k8s.io/v1 ResourceClaim", claim.APIVersion, claim.Kind)
	}
	reqs := claim.Spec.Devices.Requests
	if len(reqs) != 1 || reqs[0].Exactly == nil || reqs[0].Exactly.DeviceClassName != "shared.gpuslice.dev" {
		t.Fatalf("claim requests %+v, want one exactly-request of shared.gpuslice.dev", reqs)
	}
	if c := reqs[0].Exactly.Capacity; c == nil {
		t.Error("claim has no capacity request, want memory 8Gi")
	} else if m := c.Requests["memory"]; m.Cmp(resource.MustParse("8Gi")) != 0 {
		t.Errorf("claim requests memory %s, want 8Gi", m.String())
	}

	var pod corev1.Pod
	if err := yaml.UnmarshalStrict([]byte(docs[1]), &pod); err != nil {
		t.Fatalf("the pod: %v", err)
	}
	if pod.APIVersion != "v1" || pod.Kind != "Pod" {
		t.Errorf("second document is %s %s, want v1 Pod", pod.APIVersion, pod.Kind)
	}
	if len(pod.Spec.ResourceClaims) != 1 || pod.Spec.ResourceClaims[0].ResourceClaimName == nil ||
		*pod.Spec.ResourceClaims[0].ResourceClaimName != claim.Name {
		t.Fatalf("pod resourceClaims %+v, want one naming the claim %q", pod.Spec.ResourceClaims, claim.Name)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	if c.Image != imgs.BusyboxTag() || c.ImagePullPolicy != corev1.PullNever {
		t.Errorf("container image %q pull %q, want %q Never", c.Image, c.ImagePullPolicy, imgs.BusyboxTag())
	}
	if len(c.Resources.Claims) != 1 || c.Resources.Claims[0].Name != pod.Spec.ResourceClaims[0].Name {
		t.Errorf("container claims %+v, want the pod's claim %q", c.Resources.Claims, pod.Spec.ResourceClaims[0].Name)
	}
	if got := strings.Join(c.Command, " "); !strings.Contains(got, "env | grep -E 'CUDA|GPUSLICE'") {
		t.Errorf("command %q does not print the CUDA and GPUSLICE variables", got)
	}
	if pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restartPolicy %q, want Never (the pod runs once and its log stays)", pod.Spec.RestartPolicy)
	}
}

// TestUsage: the usage text names the files and binaries a user needs,
// by their full paths.
func TestUsage(t *testing.T) {
	p := newPaths("/cache")
	kubectl := "/cache/node/v1.36.3-containerd-v2.4.2/kubectl"
	u := usageText(p, kubectl, testImages(t), "gpu-node-1")
	for _, want := range []string{
		"export KUBECONFIG=/cache/sandbox/kubeconfig\n",
		"KUBECTL=" + kubectl + "\n",
		"$KUBECTL apply -f /cache/sandbox/example.yaml\n",
		"$KUBECTL logs " + examplePod,
		testImages(t).BusyboxTag(),
		"v1.36.3",
		"/cache/sandbox/run/node/",
		"scripts/sandbox.sh down",
	} {
		if !strings.Contains(u, want) {
			t.Errorf("usage lacks %q:\n%s", want, u)
		}
	}
	if p.Dir != filepath.Join("/cache", "sandbox") || p.Log != "/cache/sandbox/sandbox.log" {
		t.Errorf("paths %+v, want under /cache/sandbox", p)
	}
}

// TestFixFor: each reason nodetest.Missing gives maps to a command.
func TestFixFor(t *testing.T) {
	for why, want := range map[string]string{
		"/c/node/x lacks kubelet (run scripts/realnode.sh)":                                             "scripts/realnode.sh",
		"/c/k8s/v1.36.3 lacks etcd (run scripts/controlplane.sh)":                                       "scripts/realnode.sh",
		"/usr/sbin/runc is missing (scripts/realnode.sh installs runc and containernetworking-plugins)": "scripts/realnode.sh",
		"ip is not on PATH":                    "iproute2",
		"nsenter is not on PATH":               "util-linux",
		"sysctl is not on PATH":                "procps",
		"not root":                             "as root",
		"missing CAP_SYS_ADMIN, CAP_NET_ADMIN": "privileged",
		"missing a readable /proc/self/status": "privileged",
	} {
		fixes := fixFor([]string{why})
		if len(fixes) != 1 || !strings.Contains(fixes[0], want) {
			t.Errorf("fixFor(%q) = %q, want one fix naming %q", why, fixes, want)
		}
	}
	if n := len(fixFor([]string{"a lacks kubelet (run scripts/realnode.sh)", "a lacks ctr (run scripts/realnode.sh)"})); n != 1 {
		t.Errorf("two missing binaries gave %d fixes, want 1", n)
	}
}
