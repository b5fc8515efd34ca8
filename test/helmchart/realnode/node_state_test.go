package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// nodeState is what the driver left on the node, read from the host
// directories the node's /var/lib/kubelet and /var/run/cdi are.
type nodeState struct {
	cdiSpecs   []string        // CDI spec files of prepared claims
	checkpoint map[string]bool // claim uids in the driver's checkpoint
	instances  int             // MIG instances on the simulated GPUs
	raw        string          // for failure messages
}

func (e *env) pluginDir() string {
	return filepath.Join(e.c.Node.KubeletDir, "plugins", "gpu.gpuslice.dev")
}

func (e *env) nodeState(t *testing.T) nodeState {
	t.Helper()
	var s nodeState
	specs, _ := filepath.Glob(filepath.Join(e.c.Node.CDIDir, "gpuslice-dra-*"))
	for _, f := range specs {
		s.cdiSpecs = append(s.cdiSpecs, filepath.Base(f))
	}
	var cp struct {
		Claims map[string]json.RawMessage `json:"claims"`
	}
	data, err := os.ReadFile(filepath.Join(e.pluginDir(), "checkpoint.json"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if len(data) > 0 {
		if err := json.Unmarshal(data, &cp); err != nil {
			t.Fatalf("the driver's checkpoint: %v", err)
		}
	}
	s.checkpoint = map[string]bool{}
	for uid := range cp.Claims {
		s.checkpoint[uid] = true
	}
	var sim struct {
		GPUs []struct {
			Instances []json.RawMessage `json:"instances"`
		} `json:"gpus"`
	}
	// The simulated GPUs' state is written at their first change.
	simData, err := os.ReadFile(filepath.Join(e.pluginDir(), "simulated-gpus.json"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatalf("the simulated GPUs' state: %v", err)
	}
	if err := json.Unmarshal(simData, &sim); len(simData) > 0 && err != nil {
		t.Fatalf("the simulated GPUs' state: %v", err)
	}
	for _, g := range sim.GPUs {
		s.instances += len(g.Instances)
	}
	s.raw = fmt.Sprintf("CDI specs %v\ncheckpoint %s\nsimulated GPUs %s", s.cdiSpecs, data, simData)
	return s
}

// waitState polls the node's state until ok accepts it.
func (e *env) waitState(t *testing.T, what string, timeout time.Duration, ok func(nodeState) bool) nodeState {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s := e.nodeState(t)
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v; node state:\n%s\n%s", what, timeout, s.raw, e.podsReport(t))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (e *env) claimUID(t *testing.T, ns, name string) string {
	t.Helper()
	rc, err := e.c.Clientset.ResourceV1().ResourceClaims(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(rc.UID)
}

// deleteAll deletes a namespace's pods (at once) and claims.
func (e *env) deleteAll(t *testing.T, ns string) {
	t.Helper()
	ctx := t.Context()
	if err := e.c.Clientset.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Clientset.ResourceV1().ResourceClaims(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
}

func migClaim(name, profile string) resourcev1.ResourceClaim {
	return claim(name, "mig.gpuslice.dev", func(r *resourcev1.DeviceRequest) {
		r.Exactly.Selectors = []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
			Expression: `device.attributes["gpu.gpuslice.dev"].profile == "` + profile + `"`}}}
	})
}

// testDeleteUnprepares: while a pod holds a MIG claim, its CDI spec, its
// checkpoint entry and its instance exist on the node; deleting the pod
// and the claim has the kubelet unprepare it, and all three go.
func (e *env) testDeleteUnprepares(t *testing.T) {
	ns := "unprepare"
	before := e.nodeState(t)
	e.start(t, workload{ns: ns, name: "holder", claims: []resourcev1.ResourceClaim{migClaim("held", "2g.10gb")},
		refs: []corev1.PodResourceClaim{ref("held")}, script: showEnv + "sleep 600"})
	e.waitRunning(t, ns, "holder", 3*time.Minute)
	uid := e.claimUID(t, ns, "held")
	spec := "gpuslice-dra-" + uid + ".yaml"
	e.waitState(t, "prepared", time.Minute, func(s nodeState) bool {
		return s.checkpoint[uid] && contains(s.cdiSpecs, spec) && s.instances == before.instances+1
	})
	e.deleteAll(t, ns)
	e.waitState(t, "unprepared", 2*time.Minute, func(s nodeState) bool {
		return !s.checkpoint[uid] && !contains(s.cdiSpecs, spec) && s.instances == before.instances
	})
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// waitRunning waits until a pod's containers run.
func (e *env) waitRunning(t *testing.T, ns, name string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		p, err := e.c.Clientset.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err == nil && p.Status.Phase == corev1.PodRunning {
			return p
		}
		if err == nil && (p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded) {
			t.Fatalf("pod %s/%s ended (%s) before the test looked at it", ns, name, p.Status.Phase)
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s/%s not running after %v\n%s", ns, name, timeout, e.podsReport(t))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// driverPod returns the driver DaemonSet's pod and its container's id.
func (e *env) driverPod(t *testing.T) (*corev1.Pod, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // also from cleanups
	defer cancel()
	pods, err := e.c.Clientset.CoreV1().Pods(ReleaseNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=driver"})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("the driver pod: %v (%d pods)", err, len(pods.Items))
	}
	p := &pods.Items[0]
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running != nil {
			return p, strings.TrimPrefix(cs.ContainerID, "containerd://")
		}
	}
	return p, ""
}

// testDriverKilledMidPrepare: SIGKILL the driver's process (ctr task kill
// on the node, as the OOM killer or a crash would) the moment its
// checkpoint records the first of four MIG claims; the kubelet restarts
// the container, every pod still starts with its own instance, and once
// they are deleted nothing is left: no CDI spec, no checkpoint entry, no
// instance.
func (e *env) testDriverKilledMidPrepare(t *testing.T) {
	ctx := t.Context()
	ns := "killed"
	before := e.nodeState(t)
	drv, cid := e.driverPod(t)
	if cid == "" {
		t.Fatalf("the driver's container is not running: %+v", drv.Status)
	}
	restarts := drv.Status.ContainerStatuses[0].RestartCount
	profiles := []string{"1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"}
	for i, p := range profiles {
		name := fmt.Sprintf("p%d", i)
		e.start(t, workload{ns: ns, name: name, claims: []resourcev1.ResourceClaim{migClaim(name, p)},
			refs: []corev1.PodResourceClaim{ref(name)}, script: showEnv})
	}
	e.waitState(t, "a claim in the checkpoint", 2*time.Minute, func(s nodeState) bool { return len(s.checkpoint) > len(before.checkpoint) })
	if out, err := e.c.Node.Ctr(ctx, "task", "kill", "--signal", "SIGKILL", cid); err != nil {
		t.Fatalf("killing the driver: %v: %s", err, out)
	}
	seen := map[string]bool{}
	for i := range profiles {
		log := e.waitDone(t, ns, fmt.Sprintf("p%d", i), 4*time.Minute)
		uuid := envOf(log)["CUDA_VISIBLE_DEVICES"]
		if !strings.HasPrefix(uuid, "MIG-") || seen[uuid] {
			t.Errorf("pod p%d got CUDA_VISIBLE_DEVICES=%q, want a MIG instance of its own", i, uuid)
		}
		seen[uuid] = true
	}
	drv, _ = e.driverPod(t)
	if got := drv.Status.ContainerStatuses[0].RestartCount; got <= restarts {
		t.Errorf("the driver's restart count is %d, want more than %d: was it killed?", got, restarts)
	}
	e.deleteAll(t, ns)
	e.waitState(t, "nothing left of the killed prepares", 2*time.Minute, func(s nodeState) bool {
		return len(s.cdiSpecs) == len(before.cdiSpecs) && len(s.checkpoint) == len(before.checkpoint) && s.instances == before.instances
	})
}
