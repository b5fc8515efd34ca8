package schedtest

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/internal/k8s/apitest"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// Shares of GPU memory from three namespaces are bound by
// gpuslice-scheduler: each namespace's shares go together on one shared
// GPU (binpack: a join newly holds nothing), no shared GPU serves two
// namespaces (tenant isolation), and what the API server then holds
// passes the allocator's Check.
func TestFractionalPodsOfSeveralNamespaces(t *testing.T) {
	t.Parallel()
	nss := []string{"fractional-a", "fractional-b", "fractional-c"}
	c := sharedCluster(t, "fractional", nss...)
	for i := range 3 {
		c.AddNode(fmt.Sprintf("fractional-%d", i), "A100-40GB", 2)
	}
	for _, ns := range nss {
		for i := range 4 {
			c.create(podSpec{ns: ns, name: fmt.Sprintf("share-%d", i), class: dranames.ClassShared, memory: "4Gi"})
		}
	}
	for _, ns := range nss {
		for i := range 4 {
			c.bound(ns, fmt.Sprintf("share-%d", i))
		}
	}
	snap := c.check()
	if snap.Claims != 12 {
		t.Fatalf("%d claims allocated, want 12", snap.Claims)
	}
	_, claims := c.snapshot()
	devices := tenantsPerDevice(claims)
	for dev, tenants := range devices {
		if !isShared(dev) {
			t.Errorf("a 4Gi share got %s, not a shared GPU", dev)
		}
		if len(tenants) != 1 {
			t.Errorf("shared GPU %s serves %d namespaces: %v", dev, len(tenants), tenants)
		}
	}
	if len(devices) != 3 {
		t.Errorf("12 shares of 4Gi from 3 namespaces hold %d shared GPUs, want 3 (one per namespace): %v", len(devices), devices)
	}
	for _, rc := range claims {
		r := rc.Status.Allocation.Devices.Results[0]
		if m := r.ConsumedCapacity["memory"]; m.String() != "4Gi" || r.ShareID == nil || !strings.HasPrefix(r.Device, "gpu-") {
			t.Errorf("claim %s/%s: result %+v", rc.Namespace, rc.Name, r)
		}
		if len(rc.Status.ReservedFor) != 1 || rc.Status.ReservedFor[0].Name != rc.Name {
			t.Errorf("claim %s/%s reserved for %+v", rc.Namespace, rc.Name, rc.Status.ReservedFor)
		}
	}
}

// A pod whose claim fits nowhere stays Pending, and its PodScheduled
// condition and FailedScheduling event carry the allocator's reason per
// node, aggregated: here one node's GPUs are too small and the other's
// only GPU is shared by another namespace. The message counts the nodes
// the scheduler sees, so the test has a control plane of its own.
func TestImpossiblePodIsExplained(t *testing.T) {
	t.Parallel()
	c := ownControlPlane(t, apitest.GpusliceSchedulerBinary(t), "", "team-a", "team-b")
	c.AddNode("small", "T4", 1)
	c.AddNode("big", "A100-40GB", 1)
	c.create(podSpec{ns: "team-a", name: "holder", class: dranames.ClassShared, memory: "20Gi"})
	if n := c.bound("team-a", "holder"); n != "big" {
		t.Fatalf("20Gi share on %s, want big (a T4 has 15Gi)", n)
	}
	c.create(podSpec{ns: "team-b", name: "too-big", class: dranames.ClassShared, memory: "18Gi"})
	msg := c.unschedulable("team-b", "too-big")
	// The A100's only GPU is shared by team-a: the allocator's reason for
	// that node is that its GPU is held by other claims (tenant
	// isolation keeps team-b off the shared device).
	for _, want := range []string{"0/2 nodes are available", "1 insufficient GPU memory", "1 GPU held by other claims"} {
		if !strings.Contains(msg, want) {
			t.Errorf("PodScheduled message %q lacks %q", msg, want)
		}
	}
	evs, err := c.CS.CoreV1().Events("team-b").List(c.Ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=too-big"})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range evs.Items {
		found = found || (e.Reason == "FailedScheduling" && strings.Contains(e.Message, "1 insufficient GPU memory"))
	}
	if !found {
		t.Errorf("no FailedScheduling event with the allocator's reasons: %+v", evs.Items)
	}
	c.check()
}

// A MIG claim that needs an instance made in the idle part of a GPU
// already partly in MIG use goes there (binpack), at the start that
// keeps the GPU's capacity: a 3g.20gb in use at slice 4 leaves slices
// 0-3 idle, and a 4g.20gb then takes start 0 on the same GPU, not the
// idle second GPU.
func TestMIGClaimUsesIdleRegion(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t, "mig", "mig-a", "mig-b")
	c.AddNode("mig-a100", "A100-40GB", 2)
	prof := func(p string) string { return `device.attributes["gpu.gpuslice.dev"].profile == "` + p + `"` }
	c.create(podSpec{ns: "mig-a", name: "three", class: dranames.ClassMIG, selector: prof("3g.20gb")})
	c.bound("mig-a", "three")
	first := c.claim("mig-a", "three").Status.Allocation.Devices.Results[0].Device
	c.create(podSpec{ns: "mig-b", name: "four", class: dranames.ClassMIG, selector: prof("4g.20gb")})
	c.bound("mig-b", "four")
	second := c.claim("mig-b", "four").Status.Allocation.Devices.Results[0].Device
	gpu := strings.SplitN(first, "-mig-", 2)[0]
	if !strings.HasSuffix(first, "-mig-3g-20gb-at-4") || second != gpu+"-mig-4g-20gb-at-0" {
		t.Fatalf("3g.20gb got %s and 4g.20gb got %s; want the 3g at slice 4 and the 4g at slice 0 of the same GPU", first, second)
	}
	c.check()
}

// A high-priority GPU pod that fits nowhere preempts a lower-priority
// one: the victim is deleted, its claim freed (here by the test, in the
// resourceclaim controller's place), and the preemptor is bound to the
// GPU the victim held. It keeps a control plane of its own: on the
// shared one (even under a scheduler of its own), with other tests'
// objects changing meanwhile, the preemptor was at times never retried
// after the test deallocated the victim's claim (in 2 of 8 runs; alone it
// passed 13 of 13).
func TestPreemptionOfALowerPriorityGPUPod(t *testing.T) {
	t.Parallel()
	const ns = "preempt-a"
	c := ownControlPlane(t, apitest.GpusliceSchedulerBinary(t), "", ns)
	c.priorityClass("preempt-low", 1)
	c.priorityClass("preempt-high", 1000)
	c.AddNode("preempt-one", "L4", 1)
	c.create(podSpec{ns: ns, name: "low", class: dranames.ClassGPU, priority: "preempt-low"})
	c.bound(ns, "low")
	c.create(podSpec{ns: ns, name: "high", class: dranames.ClassGPU, priority: "preempt-high"})
	// The victim goes; play the resourceclaim controller: a claim
	// reserved for a deleted pod is deallocated.
	c.Eventually("the low-priority pod to be preempted", func() (bool, string) {
		p, err := c.CS.CoreV1().Pods(ns).Get(c.Ctx, "low", metav1.GetOptions{})
		return err != nil || p.DeletionTimestamp != nil, "pod low is still there"
	})
	rc := c.claim(ns, "low")
	rc.Status.ReservedFor, rc.Status.Allocation = nil, nil
	if _, err := c.CS.ResourceV1().ResourceClaims(ns).UpdateStatus(c.Ctx, rc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := c.bound(ns, "high"); n != "preempt-one" {
		t.Fatalf("high bound to %s", n)
	}
	c.check()
}

// The scheduler is stopped and started again while pods keep coming:
// every pod is bound once, and the allocations the API server holds pass
// the allocator's Check (nothing lost, nothing given twice).
func TestRestartMidStream(t *testing.T) {
	t.Parallel()
	nss := []string{"restart-a", "restart-b"}
	c := ownScheduler(t, "restart", "", nss...)
	// 8 shares of 6Gi (4 per namespace: one GPU each), 8 2g.10gb (three
	// to a GPU), 8 whole GPUs: 13 of the 16 GPUs.
	for i := range 8 {
		c.AddNode(fmt.Sprintf("restart-%d", i), "A100-40GB", 2)
	}
	classes := []string{dranames.ClassShared, dranames.ClassMIG, dranames.ClassGPU}
	make := func(from, to int) {
		for i := from; i < to; i++ {
			ns := nss[i%2]
			p := podSpec{ns: ns, name: fmt.Sprintf("p-%d", i), class: classes[i%3]}
			switch p.class {
			case dranames.ClassShared:
				p.memory = "6Gi"
			case dranames.ClassMIG:
				p.selector = `device.attributes["gpu.gpuslice.dev"].profile == "2g.10gb"`
			}
			c.create(p)
		}
	}
	make(0, 12)
	c.bound(nss[11%2], "p-11")
	c.restart()
	make(12, 24)
	for i := range 24 {
		c.bound(nss[i%2], fmt.Sprintf("p-%d", i))
	}
	_, all := c.snapshot()
	for _, rc := range all {
		if a := rc.Status.Allocation; a != nil {
			t.Logf("%s/%s: %s %s", rc.Namespace, rc.Name, a.Devices.Results[0].Pool, a.Devices.Results[0].Device)
		}
	}
	snap := c.check()
	if snap.Claims != 24 {
		t.Fatalf("%d claims allocated, want 24", snap.Claims)
	}
}
