package draplugin_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"sigs.k8s.io/yaml"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuslice/gpuslice/internal/k8s/apitest"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// kubelet is a kubelet-side test peer: it finds the driver through the
// plugin registration socket, as the kubelet's plugin watcher does
// (GetInfo, then NotifyRegistrationStatus), and calls the v1 DRA gRPC
// service on the endpoint the driver named, over real unix sockets.
type kubelet struct {
	t      *testing.T
	conn   *grpc.ClientConn
	client drapb.DRAPluginClient
	// endpoint and versions are what GetInfo answered.
	endpoint string
	versions []string
}

// registerKubelet waits for the driver's registration socket in regDir and
// registers it.
func registerKubelet(t *testing.T, ctx context.Context, regDir string) *kubelet {
	t.Helper()
	sock := filepath.Join(regDir, dranames.DriverName+"-reg.sock")
	testkit.EventuallyCtx(t, ctx, "the registration socket "+sock, func() (bool, string) {
		_, err := os.Stat(sock)
		return err == nil, fmt.Sprint(err)
	})
	reg, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	rc := registerapi.NewRegistrationClient(reg)
	info, err := rc.GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatalf("GetInfo: %v", err)
	}
	if info.Type != registerapi.DRAPlugin || info.Name != dranames.DriverName || !slices.Contains(info.SupportedVersions, drapb.DRAPluginService) {
		t.Fatalf("GetInfo = %+v: want a %s named %s serving %s", info, registerapi.DRAPlugin, dranames.DriverName, drapb.DRAPluginService)
	}
	if _, err := rc.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("unix://"+info.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &kubelet{t: t, conn: conn, client: drapb.NewDRAPluginClient(conn), endpoint: info.Endpoint, versions: info.SupportedVersions}
}

// prepare asks the driver to prepare claims, as the kubelet does for a
// pod bound to its node, and returns each claim's answer.
func (k *kubelet) prepare(ctx context.Context, claims ...*resourceapi.ResourceClaim) (map[string]*drapb.NodePrepareResourceResponse, error) {
	req := &drapb.NodePrepareResourcesRequest{}
	for _, c := range claims {
		req.Claims = append(req.Claims, &drapb.Claim{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)})
	}
	resp, err := k.client.NodePrepareResources(ctx, req)
	if err != nil {
		return nil, err
	}
	return resp.Claims, nil
}

func (k *kubelet) unprepare(ctx context.Context, claims ...*resourceapi.ResourceClaim) map[string]*drapb.NodeUnprepareResourceResponse {
	k.t.Helper()
	req := &drapb.NodeUnprepareResourcesRequest{}
	for _, c := range claims {
		req.Claims = append(req.Claims, &drapb.Claim{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)})
	}
	resp, err := k.client.NodeUnprepareResources(ctx, req)
	if err != nil {
		k.t.Fatalf("NodeUnprepareResources: %v", err)
	}
	return resp.Claims
}

// cluster is one test's part of the package's control plane (a real
// kube-apiserver and the stock kube-scheduler, shared by the tests, with
// gpuslice's DeviceClasses): a ready Node of its own and a namespace of
// its own, which is also its group. Its pods select its node, so tests
// sharing the scheduler run in parallel without taking each other's
// devices (their fake GPUs are seeded alike: the same device names and
// UUIDs on every node).
type cluster struct {
	*apitest.Cluster
	t    *testing.T
	ctx  context.Context
	cs   *kubernetes.Clientset
	srv  *apitest.Server
	node string
	ns   string
}

// newCluster joins the shared control plane with a ready Node named node
// and the namespace ns, both the test's own.
func newCluster(t *testing.T, node, ns string) *cluster {
	srv := apitest.Shared(t)
	sched := apitest.SharedScheduler(t, srv, apitest.SchedulerOptions{})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kube-scheduler log, the lines naming %s/:\n%s", ns, schedulerLines(sched.LogFile, ns+"/", 80))
		}
	})
	ac := apitest.NewCluster(t, srv, apitest.ClusterOptions{Namespaces: []string{ns}, Group: ns, Timeout: 3 * time.Minute})
	ac.AddReadyNode(node)
	return &cluster{Cluster: ac, t: t, ctx: ac.Ctx, cs: ac.CS, srv: srv, node: node, ns: ns}
}

// schedulerLines is the last n lines of the shared scheduler's log that
// contain s (the lines of one test's namespace).
func schedulerLines(path, s string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out[max(0, len(out)-n):], "\n")
}

// waitSlices waits until n ResourceSlices of the driver exist for the node.
func (c *cluster) waitSlices(n int) {
	c.t.Helper()
	testkit.EventuallyCtx(c.t, c.ctx, fmt.Sprintf("%d ResourceSlices for %s", n, c.node), func() (bool, string) {
		list, err := c.cs.ResourceV1().ResourceSlices().List(c.ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + c.node})
		if err != nil {
			c.t.Fatal(err)
		}
		return len(list.Items) == n, fmt.Sprintf("%d published", len(list.Items))
	})
}

// claimSpec is one claim of a test: a device class, a selector, a memory
// request (shared GPUs) and the opaque parameters for gpu.gpuslice.dev.
type claimSpec struct {
	name, class, selector, memory string
	params                        map[string]any
	tolerations                   []resourceapi.DeviceToleration
}

// claimPod creates the claim and a pod using it, and returns the claim once
// the stock scheduler allocated it and bound the pod to the node.
func (c *cluster) claimPod(s claimSpec) *resourceapi.ResourceClaim {
	c.t.Helper()
	c.createClaimPod(s)
	return c.waitBound(s.name)
}

// createClaimPod creates the claim and a pod of the same name using it.
func (c *cluster) createClaimPod(s claimSpec) {
	c.t.Helper()
	p := apitest.ClaimPod{Namespace: c.ns, Name: s.name, Class: s.class, Selector: s.selector, Memory: s.memory, Tolerations: s.tolerations}
	if s.params != nil {
		p.Params = s.params
	}
	c.CreateClaimPod(p)
}

// waitBound waits until the pod name is bound to the node and returns its
// claim (of the same name), allocated.
func (c *cluster) waitBound(name string) *resourceapi.ResourceClaim {
	c.t.Helper()
	var cl *resourceapi.ResourceClaim
	testkit.EventuallyCtx(c.t, c.ctx, "pod "+name+" bound", func() (bool, string) {
		p, err := c.cs.CoreV1().Pods(c.ns).Get(c.ctx, name, metav1.GetOptions{})
		if err != nil {
			c.t.Fatal(err)
		}
		if p.Spec.NodeName == "" {
			return false, fmt.Sprintf("%+v", p.Status)
		}
		if p.Spec.NodeName != c.node {
			c.t.Fatalf("pod %s bound to %s", name, p.Spec.NodeName)
		}
		cl, err = c.cs.ResourceV1().ResourceClaims(c.ns).Get(c.ctx, name, metav1.GetOptions{})
		if err != nil {
			c.t.Fatal(err)
		}
		if cl.Status.Allocation == nil {
			c.t.Fatalf("pod %s bound but claim not allocated", name)
		}
		return true, ""
	})
	return cl
}

func allocatedDevice(cl *resourceapi.ResourceClaim) string {
	return cl.Status.Allocation.Devices.Results[0].Device
}

// gpuConfig is NVIDIA's GpuConfig as the seed's claims write it.
func gpuConfig(kind string, sharing map[string]any) map[string]any {
	return map[string]any{"apiVersion": "resource.nvidia.com/v1beta1", "kind": kind, "sharing": sharing}
}

// readSpec reads a claim's CDI spec and returns its devices by name.
func readSpec(t *testing.T, cdiDir, uid string) map[string]specs.Device {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cdiDir, "gpuslice-dra-"+uid+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var s specs.Spec
	if err := yaml.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	if s.Kind != "gpuslice.dev/claim" {
		t.Fatalf("spec kind %q", s.Kind)
	}
	out := map[string]specs.Device{}
	for _, d := range s.Devices {
		out[d.Name] = d
	}
	return out
}

func envOf(d specs.Device) map[string]string {
	out := map[string]string{}
	for _, kv := range d.ContainerEdits.Env {
		k, v, _ := strings.Cut(kv, "=")
		out[k] = v
	}
	return out
}

func nodesOf(d specs.Device) []string {
	var out []string
	for _, n := range d.ContainerEdits.DeviceNodes {
		out = append(out, n.Path)
	}
	return out
}

// fakeMPSScript stands in for nvidia-cuda-mps-control: `-d` logs the
// start, runs a long sleep as the daemon and writes its pid file in
// $CUDA_MPS_PIPE_DIRECTORY; without arguments it reads commands (quit,
// get_server_list, set_*) and logs each with the device it was for.
const fakeMPSScript = `#!/bin/sh
log=@LOG@
pidf="$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid"
alive() { [ -f "$pidf" ] && kill -0 "$(cat "$pidf")" 2>/dev/null; }
if [ "$#" -gt 0 ]; then
	echo "start $CUDA_VISIBLE_DEVICES $CUDA_MPS_PIPE_DIRECTORY" >>"$log"
	alive && { echo "already running" >&2; exit 1; }
	sleep 300 </dev/null >/dev/null 2>&1 &
	echo $! >"$pidf"
	echo $! >>@PIDS@
	exit 0
fi
while IFS= read -r cmd || [ -n "$cmd" ]; do
	echo "$cmd $CUDA_VISIBLE_DEVICES" >>"$log"
	alive || { echo "Cannot find MPS control daemon process" >&2; exit 1; }
	case "$cmd" in
	quit) kill "$(cat "$pidf")"; rm -f "$pidf" ;;
	get_server_list) ;;
	set_*) ;;
	*) exit 1 ;;
	esac
done
`

// fakeMPS writes the stand-in control binary and returns its path and
// log; the daemons it started are killed when the test ends.
func fakeMPS(t *testing.T, dir string) (bin, log string) {
	t.Helper()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	bin, log = filepath.Join(dir, "nvidia-cuda-mps-control"), filepath.Join(dir, "mps.log")
	pids := filepath.Join(dir, "mps.pids")
	script := strings.NewReplacer("@LOG@", strconv.Quote(log), "@PIDS@", strconv.Quote(pids)).Replace(fakeMPSScript)
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b, _ := os.ReadFile(pids)
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	return bin, log
}

// mpsLog returns the stand-in's log lines.
func mpsLog(t *testing.T, log string) []string {
	b, err := os.ReadFile(log)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func countPrefix(lines []string, prefix string) int {
	n := 0
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// shortDir is a temporary directory with a short path: unix socket paths
// are limited to 108 bytes.
func shortDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "dra")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
