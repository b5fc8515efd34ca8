package schedtest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// reserveProfile is Profile with reserveAfter short enough for a test.
const reserveProfile = Profile + `  pluginConfig:
  - name: GpusliceDynamicResources
    args: {reserveAfter: 2s}
`

// A whole-GPU pod waiting behind a share on the only GPU it may use is
// not starved by shares that keep arriving: once it has waited
// reserveAfter, that node is held for it, a new share is kept off with
// the reason, and when the first share goes the big pod gets the GPU. It
// runs on the shared control plane beside an empty node the pod does not
// select (reserve-decoy, outside the test's group): the hold goes only to
// a node the pod could use (before, the plugin held the emptiest node the
// scheduler saw, the decoy, and small-2 was bound).
func TestReserveAfterHoldsANodeForAStarvingPod(t *testing.T) {
	t.Parallel()
	const ns = "reserve-a"
	c := ownScheduler(t, "reserve", reserveProfile, ns)
	decoy := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "reserve-decoy"}}
	if _, err := c.Srv.CreateReadyNode(c.Ctx, decoy); err != nil {
		t.Fatal(err)
	}
	sl, err := dradriver.Slices(alloc.Node{Name: decoy.Name, GPUs: []alloc.GPU{{UUID: "GPU-reserve-decoy-0", Model: "A100-40GB", Healthy: true}}}, 1, "580.65.06", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		for i := range sl {
			_ = c.CS.ResourceV1().ResourceSlices().Delete(ctx, sl[i].Name, metav1.DeleteOptions{})
		}
		_ = c.CS.CoreV1().Nodes().Delete(ctx, decoy.Name, metav1.DeleteOptions{})
	})
	for i := range sl {
		if _, err := c.CS.ResourceV1().ResourceSlices().Create(c.Ctx, &sl[i], metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c.AddNode("reserve-one", "A100-40GB", 1)
	c.create(podSpec{ns: ns, name: "small-0", class: dranames.ClassShared, memory: "4Gi"})
	c.bound(ns, "small-0")
	c.create(podSpec{ns: ns, name: "big", class: dranames.ClassGPU})
	c.unschedulable(ns, "big")
	// Before reserveAfter a share may still join the shared GPU.
	c.create(podSpec{ns: ns, name: "small-1", class: dranames.ClassShared, memory: "4Gi"})
	c.bound(ns, "small-1")
	time.Sleep(3 * time.Second)
	// Past it, the big pod's next attempt holds the node.
	c.create(podSpec{ns: ns, name: "small-2", class: dranames.ClassShared, memory: "4Gi"})
	testkit.Eventually(t, time.Minute, "small-2 kept out by the hold", func() (bool, string) {
		msg := c.unschedulable(ns, "small-2")
		return strings.Contains(msg, "node reserve-one is held for GPU pod reserve-a/big"), fmt.Sprintf("small-2 kept out with %q, want the hold named", msg)
	})
	// The shares on the GPU finish (the test plays the resourceclaim
	// controller: pods deleted, claims deallocated): the big pod is bound.
	for _, name := range []string{"small-0", "small-1"} {
		if err := c.CS.CoreV1().Pods(ns).Delete(c.Ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		rc := c.claim(ns, name)
		rc.Status.ReservedFor, rc.Status.Allocation = nil, nil
		if _, err := c.CS.ResourceV1().ResourceClaims(ns).UpdateStatus(c.Ctx, rc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.bound(ns, "big"); n != "reserve-one" {
		t.Fatalf("big bound to %s", n)
	}
	// The hold is gone with the pod placed: the waiting share goes on
	// the next free room (none here: the GPU is whole), and says why.
	if msg := c.unschedulable(ns, "small-2"); strings.Contains(msg, "held for") && !strings.Contains(msg, "reserve-a/big") {
		t.Fatalf("small-2: %q", msg)
	}
	c.check()
}
