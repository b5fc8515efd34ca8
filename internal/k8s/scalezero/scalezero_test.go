package scalezero_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appsv1client "k8s.io/client-go/kubernetes/typed/apps/v1"
	discoveryv1client "k8s.io/client-go/kubernetes/typed/discovery/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpuslice/gpuslice/internal/cli"
	"github.com/gpuslice/gpuslice/internal/k8s/apitest"
	"github.com/gpuslice/gpuslice/internal/plan"
	"github.com/gpuslice/gpuslice/internal/render"
	"github.com/gpuslice/gpuslice/internal/spec"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// The compose example's serverlessConfiguration on a real kube-apiserver:
// the kubernetes and serverless renders are applied for real, the
// workload's Deployment is at zero, and `gpuslice proxy` runs with the
// arguments the render gave its Deployment, as the proxy's ServiceAccount
// (kubeconfig impersonation: the rendered Role is all it may use). A
// request scales the Deployment to 1 through the scale subresource; a
// stand-in for the kubelet and the EndpointSlice controller (neither runs
// here) then publishes a ready endpoint it controls, and the request is
// served. Without requests for the idle period the proxy scales the
// Deployment back to 0.
func TestProxyWakesAndStopsADeployment(t *testing.T) {
	srv := apitest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	in := "../../../examples/compose-timeslicing.yaml"
	data, err := os.ReadFile(in)
	if err != nil {
		t.Fatal(err)
	}
	s, diags := spec.Read(filepath.Base(in), data, "")
	if err := diags.Err(); err != nil {
		t.Fatal(err)
	}
	p, err := plan.Make(s, plan.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	var ns, deployment string
	for _, target := range []string{"kubernetes", "serverless"} {
		out, err := render.Render(target, s, p)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range srv.Apply(ctx, out) {
			t.Fatalf("applying --target %s: %v", target, e)
		}
		if target == "serverless" {
			args, ns = proxyArgs(t, out)
		}
	}
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--deployment="); ok {
			deployment = v
		}
	}
	if deployment == "" || ns == "" || !contains(args, "--port=5000") || !contains(args, "--service="+deployment+"-backend") {
		t.Fatalf("rendered proxy args %q (namespace %q)", args, ns)
	}
	apps, err := appsv1client.NewForConfig(srv.Config)
	if err != nil {
		t.Fatal(err)
	}
	disc, err := discoveryv1client.NewForConfig(srv.Config)
	if err != nil {
		t.Fatal(err)
	}
	scale := func() int32 {
		sc, err := apps.Deployments(ns).GetScale(ctx, deployment, metav1.GetOptions{})
		if err != nil {
			t.Errorf("get scale: %v", err)
			return -1
		}
		return sc.Spec.Replicas
	}
	// Idle: at zero.
	sc, err := apps.Deployments(ns).GetScale(ctx, deployment, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sc.Spec.Replicas = 0
	if _, err := apps.Deployments(ns).UpdateScale(ctx, deployment, sc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The pod: a server the test controls, on an address an EndpointSlice
	// may carry (the API refuses loopback ones): this machine's first
	// global unicast IPv4 address, else the name localhost (FQDN slice).
	podIP, addrType := hostIP(), discoveryv1.AddressTypeIPv4
	listenOn := podIP
	if podIP == "" {
		podIP, addrType, listenOn = "localhost", discoveryv1.AddressTypeFQDN, "127.0.0.1"
	}
	podLn, err := net.Listen("tcp", net.JoinHostPort(listenOn, "0"))
	if err != nil {
		t.Fatal(err)
	}
	pod := &httptest.Server{Listener: podLn, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "served by the pod")
	})}}
	pod.Start()
	defer pod.Close()
	podPort := podLn.Addr().(*net.TCPAddr).Port

	// The stand-in: while the Deployment wants replicas, one ready
	// endpoint (the test's server) in an EndpointSlice of the backend
	// Service; at zero, none.
	standIn, stopStandIn := context.WithCancel(ctx)
	defer stopStandIn()
	var mu sync.Mutex
	var woken []time.Time
	published := false
	isPublished := func() bool { mu.Lock(); defer mu.Unlock(); return published }
	go func() {
		for standIn.Err() == nil {
			n := scale()
			switch {
			case n > 0 && !isPublished():
				mu.Lock()
				woken = append(woken, time.Now()) // before the slice: a request may be served as soon as it exists
				mu.Unlock()
				ready := true
				port := int32(podPort)
				_, err := disc.EndpointSlices(ns).Create(standIn, &discoveryv1.EndpointSlice{
					ObjectMeta:  metav1.ObjectMeta{Name: deployment + "-backend-pod", Labels: map[string]string{discoveryv1.LabelServiceName: deployment + "-backend"}},
					AddressType: addrType,
					Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{podIP}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
					Ports:       []discoveryv1.EndpointPort{{Port: &port}},
				}, metav1.CreateOptions{})
				if err != nil {
					if standIn.Err() == nil {
						t.Errorf("stand-in: %v", err)
					}
					return
				}
				mu.Lock()
				published = true
				mu.Unlock()
			case n == 0 && isPublished():
				err := disc.EndpointSlices(ns).Delete(standIn, deployment+"-backend-pod", metav1.DeleteOptions{})
				if err != nil && !apierrors.IsNotFound(err) {
					if standIn.Err() == nil {
						t.Errorf("stand-in: %v", err)
					}
					return
				}
				mu.Lock()
				published = false
				mu.Unlock()
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()

	// gpuslice proxy with the rendered arguments, as the ServiceAccount;
	// the test's own: where to listen, the pod's port, a short idle.
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	writeKubeconfig(t, kubeconfig, srv, "system:serviceaccount:"+ns+":"+deployment+"-gpuslice-proxy")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	front := ln.Addr().String()
	ln.Close()
	args = append(args[1:], "--kubeconfig="+kubeconfig, "--listen="+front, "--port="+strconv.Itoa(podPort), "--idle=1500ms", "--interval=100ms", "--wake-timeout=20s")
	logs := &syncWriter{}
	proxyCtx, stopProxy := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		cmd := cli.New(io.Discard, logs)
		cmd.SetArgs(append([]string{"proxy"}, args...))
		done <- cmd.ExecuteContext(proxyCtx)
	}()
	defer func() {
		stopProxy()
		if err := <-done; err != nil {
			t.Errorf("gpuslice proxy: %v", err)
		}
		if t.Failed() {
			t.Logf("proxy log:\n%s", logs.String())
		}
	}()
	for i := 0; ; i++ {
		c, err := net.Dial("tcp", front)
		if err == nil {
			c.Close()
			break
		}
		if i > 500 {
			t.Fatalf("the proxy never listened on %s", front)
		}
		time.Sleep(10 * time.Millisecond)
	}

	start := time.Now()
	resp, err := http.Get("http://" + front + "/hello")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "served by the pod" {
		t.Fatalf("request at zero: %d %q", resp.StatusCode, body)
	}
	t.Logf("request at zero answered in %s (scale 0→1, stand-in endpoint, watch, forward)", time.Since(start).Round(time.Millisecond))
	if n := scale(); n != 1 {
		t.Fatalf("woken to %d replicas, want 1", n)
	}
	// Idle: back to zero within a few idle periods.
	testkit.Eventually(t, 15*time.Second, "back to zero replicas after the last request (idle 1.5s)", func() (bool, string) {
		n := scale()
		return n == 0, fmt.Sprintf("still at %d replicas", n)
	})
	// Once the pod is gone (its endpoint with it), a second request wakes
	// it again.
	for isPublished() {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // the watch delivers the deletion
	resp, err = http.Get("http://" + front + "/again")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	mu.Lock()
	n := len(woken)
	mu.Unlock()
	if resp.StatusCode != 200 || n != 2 {
		t.Fatalf("second wake: %d, woken %d times", resp.StatusCode, n)
	}
	stopStandIn()
	if !strings.Contains(logs.String(), "stop 1→0: no request for") {
		t.Errorf("the stop is not logged with its reason:\n%s", logs.String())
	}
}

// proxyArgs finds the rendered proxy Deployment's container args and namespace.
func proxyArgs(t *testing.T, out []byte) ([]string, string) {
	t.Helper()
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var d struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Namespace string `json:"namespace"`
			} `json:"metadata"`
			Spec struct {
				Template struct {
					Spec struct {
						Containers []struct {
							Args []string `json:"args"`
						} `json:"containers"`
					} `json:"spec"`
				} `json:"template"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &d); err != nil || d.Kind != "Deployment" {
			continue
		}
		return d.Spec.Template.Spec.Containers[0].Args, d.Metadata.Namespace
	}
	t.Fatalf("no proxy Deployment in the serverless render:\n%s", out)
	return nil, ""
}

// writeKubeconfig writes a kubeconfig for srv's admin certificate that
// acts as user (impersonation).
func writeKubeconfig(t *testing.T, path string, srv *apitest.Server, user string) {
	b64 := base64.StdEncoding.EncodeToString
	tc := srv.Config.TLSClientConfig
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
current-context: t
clusters: [{name: t, cluster: {server: %q, certificate-authority-data: %s}}]
users: [{name: t, user: {client-certificate-data: %s, client-key-data: %s, as: %q}}]
contexts: [{name: t, context: {cluster: t, user: t}}]
`, srv.URL, b64(tc.CAData), b64(tc.CertData), b64(tc.KeyData), user)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
}

// hostIP is this machine's first global unicast IPv4 address ("" if none).
func hostIP() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
			return n.IP.String()
		}
	}
	return ""
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// syncWriter is a log buffer safe to read while the proxy writes.
type syncWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
