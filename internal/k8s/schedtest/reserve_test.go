package schedtest

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
)

// reserveProfile is Profile with reserveAfter short enough for a test.
const reserveProfile = Profile + `  pluginConfig:
  - name: GpusliceDynamicResources
    args: {reserveAfter: 2s}
`

// A whole-GPU pod waiting behind a share on the only GPU is not starved
// by shares that keep arriving: once it has waited reserveAfter, the node
// is held for it, a new share is kept off with the reason, and when the
// first share goes the big pod gets the GPU.
func TestReserveAfterHoldsANodeForAStarvingPod(t *testing.T) {
	c := newCluster(t, reserveProfile, "team-a")
	c.addNode("one", "A100-40GB", 1)
	c.create(podSpec{ns: "team-a", name: "small-0", class: dradriver.ClassShared, memory: "4Gi"})
	c.bound("team-a", "small-0")
	c.create(podSpec{ns: "team-a", name: "big", class: dradriver.ClassGPU})
	c.unschedulable("team-a", "big")
	// Before reserveAfter a share may still join the shared GPU.
	c.create(podSpec{ns: "team-a", name: "small-1", class: dradriver.ClassShared, memory: "4Gi"})
	c.bound("team-a", "small-1")
	time.Sleep(3 * time.Second)
	// Past it, the big pod's next attempt holds the node.
	c.create(podSpec{ns: "team-a", name: "small-2", class: dradriver.ClassShared, memory: "4Gi"})
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		msg := c.unschedulable("team-a", "small-2")
		if strings.Contains(msg, "node one is held for GPU pod team-a/big") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("small-2 kept out with %q, want the hold named", msg)
		}
	}
	// The shares on the GPU finish (the test plays the resourceclaim
	// controller: pods deleted, claims deallocated): the big pod is bound.
	for _, name := range []string{"small-0", "small-1"} {
		if err := c.cs.CoreV1().Pods("team-a").Delete(c.ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		rc := c.claim("team-a", name)
		rc.Status.ReservedFor, rc.Status.Allocation = nil, nil
		if _, err := c.cs.ResourceV1().ResourceClaims("team-a").UpdateStatus(c.ctx, rc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.bound("team-a", "big"); n != "one" {
		t.Fatalf("big bound to %s", n)
	}
	// The hold is gone with the pod placed: the waiting share goes on
	// the next free room (none here: the GPU is whole), and says why.
	if msg := c.unschedulable("team-a", "small-2"); strings.Contains(msg, "held for") && !strings.Contains(msg, "team-a/big") {
		t.Fatalf("small-2: %q", msg)
	}
	c.check()
}
