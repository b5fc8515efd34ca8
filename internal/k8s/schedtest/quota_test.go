package schedtest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// setQuota sets (or, with "", removes) a namespace's GPU memory quota
// annotation.
func (c *cluster) setQuota(ns, memory string) {
	c.t.Helper()
	n, err := c.CS.CoreV1().Namespaces().Get(c.Ctx, ns, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	if memory == "" {
		delete(n.Annotations, "gpuslice.dev/gpu-memory-quota")
	} else {
		n.Annotations["gpuslice.dev/gpu-memory-quota"] = memory
	}
	if _, err := c.CS.CoreV1().Namespaces().Update(c.Ctx, n, metav1.UpdateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// settle waits until every named pod of ns is bound or Unschedulable with
// the scheduler's latest word, and then for quiet: it returns the bound
// ones and the messages of the others.
func (c *cluster) settle(ns string, names []string) (bound []string, pending map[string]string) {
	c.t.Helper()
	c.Eventually("pods of "+ns+" to settle", func() (bool, string) {
		bound, pending = nil, map[string]string{}
		undecided := 0
		for _, name := range names {
			p := c.Pod(ns, name)
			if p.Spec.NodeName != "" {
				bound = append(bound, name)
				continue
			}
			msg := ""
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodScheduled && cond.Reason == corev1.PodReasonUnschedulable {
					msg = cond.Message
				}
			}
			if msg == "" {
				undecided++
			}
			pending[name] = msg
		}
		return undecided == 0, fmt.Sprintf("%d bound, %v", len(bound), pending)
	})
	return bound, pending
}

// A namespace's GPU memory quota (annotation gpuslice.dev/gpu-memory-quota)
// holds under pods created all at once, across a scheduler restart, and
// when raised lets waiting pods in; a namespace without a quota is not
// limited; the pods kept out say why.
func TestNamespaceQuota(t *testing.T) {
	t.Parallel()
	c := ownScheduler(t, "quota", "", "quota-a", "quota-b")
	c.AddNode("quota-0", "A100-40GB", 2)
	c.AddNode("quota-1", "A100-40GB", 2)
	c.setQuota("quota-a", "20Gi")
	var names []string
	for i := range 8 {
		names = append(names, fmt.Sprintf("share-%d", i))
	}
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Go(func() {
			if err := c.TryCreateClaimPod(podSpec{ns: "quota-a", name: name, class: dranames.ClassShared, memory: "4Gi"}.claimPod()); err != nil {
				t.Error(err)
			}
		})
	}
	for i := range 8 {
		wg.Go(func() {
			if err := c.TryCreateClaimPod(podSpec{ns: "quota-b", name: fmt.Sprintf("free-%d", i), class: dranames.ClassShared, memory: "4Gi"}.claimPod()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	bound, pending := c.settle("quota-a", names)
	if len(bound) != 5 {
		t.Fatalf("quota 20Gi, shares of 4Gi: %d bound (%v), want 5; pending %v", len(bound), bound, pending)
	}
	for name, msg := range pending {
		if !strings.Contains(msg, "namespace quota-a GPU memory quota 20Gi: 20Gi in use, the pod's claims need 4Gi") {
			t.Errorf("pod %s kept out with %q, want the quota named", name, msg)
		}
	}
	for i := range 8 {
		c.bound("quota-b", fmt.Sprintf("free-%d", i))
	}

	// A restarted scheduler counts what the API server holds.
	c.restart()
	time.Sleep(3 * time.Second)
	if b, p := c.settle("quota-a", names); len(b) != 5 {
		t.Fatalf("after a restart %d bound, want still 5; pending %v", len(b), p)
	}

	// Raised to 28Gi: two more fit, one still waits, and says so.
	c.setQuota("quota-a", "28Gi")
	testkit.Eventually(t, time.Minute, "quota raised to 28Gi: 7 bound and the last one kept out by the new quota", func() (bool, string) {
		b, p := c.settle("quota-a", names)
		if len(b) > 7 {
			t.Fatalf("quota 28Gi: %d bound", len(b))
		}
		msg := ""
		for _, m := range p {
			msg = m
		}
		return len(b) == 7 && strings.Contains(msg, "quota 28Gi: 28Gi in use"), fmt.Sprintf("%d bound, pending %v", len(b), p)
	})
	snap := c.check()
	if snap.Claims != 15 {
		t.Errorf("%d claims allocated, want 15", snap.Claims)
	}
}
