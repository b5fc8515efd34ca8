package schedtest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
)

// setQuota sets (or, with "", removes) a namespace's GPU memory quota
// annotation.
func (c *cluster) setQuota(ns, memory string) {
	c.t.Helper()
	n, err := c.cs.CoreV1().Namespaces().Get(c.ctx, ns, metav1.GetOptions{})
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
	if _, err := c.cs.CoreV1().Namespaces().Update(c.ctx, n, metav1.UpdateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// settle waits until every named pod of ns is bound or Unschedulable with
// the scheduler's latest word, and then for quiet: it returns the bound
// ones and the messages of the others.
func (c *cluster) settle(ns string, names []string) (bound []string, pending map[string]string) {
	c.t.Helper()
	for {
		bound, pending = nil, map[string]string{}
		undecided := 0
		for _, name := range names {
			p, err := c.cs.CoreV1().Pods(ns).Get(c.ctx, name, metav1.GetOptions{})
			if err != nil {
				c.t.Fatal(err)
			}
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
		if undecided == 0 {
			return bound, pending
		}
		select {
		case <-c.ctx.Done():
			c.t.Fatalf("pods of %s never settled: %d bound, %v", ns, len(bound), pending)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// A namespace's GPU memory quota (annotation gpuslice.dev/gpu-memory-quota)
// holds under pods created all at once, across a scheduler restart, and
// when raised lets waiting pods in; a namespace without a quota is not
// limited; the pods kept out say why.
func TestNamespaceQuota(t *testing.T) {
	c := newCluster(t, "", "team-a", "team-b")
	c.addNode("node-0", "A100-40GB", 2)
	c.addNode("node-1", "A100-40GB", 2)
	c.setQuota("team-a", "20Gi")
	var names []string
	for i := range 8 {
		names = append(names, fmt.Sprintf("share-%d", i))
	}
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Go(func() { c.create(podSpec{ns: "team-a", name: name, class: dradriver.ClassShared, memory: "4Gi"}) })
	}
	for i := range 8 {
		wg.Go(func() {
			c.create(podSpec{ns: "team-b", name: fmt.Sprintf("free-%d", i), class: dradriver.ClassShared, memory: "4Gi"})
		})
	}
	wg.Wait()
	bound, pending := c.settle("team-a", names)
	if len(bound) != 5 {
		t.Fatalf("quota 20Gi, shares of 4Gi: %d bound (%v), want 5; pending %v", len(bound), bound, pending)
	}
	for name, msg := range pending {
		if !strings.Contains(msg, "namespace team-a GPU memory quota 20Gi: 20Gi in use, the pod's claims need 4Gi") {
			t.Errorf("pod %s kept out with %q, want the quota named", name, msg)
		}
	}
	for i := range 8 {
		c.bound("team-b", fmt.Sprintf("free-%d", i))
	}

	// A restarted scheduler counts what the API server holds.
	c.restart()
	time.Sleep(3 * time.Second)
	if b, p := c.settle("team-a", names); len(b) != 5 {
		t.Fatalf("after a restart %d bound, want still 5; pending %v", len(b), p)
	}

	// Raised to 28Gi: two more fit, one still waits, and says so.
	c.setQuota("team-a", "28Gi")
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		b, p := c.settle("team-a", names)
		if len(b) > 7 {
			t.Fatalf("quota 28Gi: %d bound", len(b))
		}
		msg := ""
		for _, m := range p {
			msg = m
		}
		if len(b) == 7 && strings.Contains(msg, "quota 28Gi: 28Gi in use") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("quota raised to 28Gi: %d bound, pending %v; want 7 and the last one kept out by the new quota", len(b), p)
		}
	}
	snap := c.check()
	if snap.Claims != 15 {
		t.Errorf("%d claims allocated, want 15", snap.Claims)
	}
}
