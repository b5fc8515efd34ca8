package schedcore

import (
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuslice/gpuslice/internal/admit"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/k8s/draalloc"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// gpusPod is a pod with one claim of count whole GPUs.
func gpusPod(t *testing.T, l *Ledger, ns, name string, count int64) *Pod {
	t.Helper()
	rc := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "-" + name)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: dranames.ClassGPU, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}}}}}}
	ac, err := draalloc.Translate(rc, 0)
	if err != nil {
		t.Fatal(err)
	}
	p := &Pod{Namespace: ns, Claims: []*resourceapi.ResourceClaim{rc}, ToAlloc: []int{0}, Acs: []*draalloc.Claim{ac}, Classes: map[string]*resourceapi.DeviceClass{}}
	l.Prepare(p)
	return p
}

// The reserve-after rule in the scheduler: a pod not yet due is retried
// when it will be; a due pod holds the node with the fewest claims among
// those that could hold it empty; the hold keeps pods of its priority or
// lower off that node (and only that node), yields to a higher priority,
// and goes when released; a pod that fits no node even empty holds
// nothing.
func TestStarveHoldsTheSoonestFreeNode(t *testing.T) {
	l := NewLedger(draalloc.Policy("binpack"), catalog.Default(), nil)
	publish(t, l, "a", 2)
	publish(t, l, "b", 2)
	publish(t, l, "c", 1)
	if res, out, err := l.Reserve(gpusPod(t, l, "team-a", "small", 1), "a", nil); err != nil || len(res) != 1 {
		t.Fatalf("reserve on a: %v %v", out, err)
	}
	nodes := func() []string { return []string{"a", "b", "c"} }
	big := gpusPod(t, l, "team-a", "big", 2)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w := Waiter{UID: "big", Key: "team-a/big", Created: t0, Priority: 0, Claims: big.Acs}
	var h Holding

	if wait := l.Starve(&h, w, nodes, t0.Add(time.Minute), 5*time.Minute); wait != 4*time.Minute {
		t.Fatalf("not yet due: retry in %s, want 4m", wait)
	}
	if uid, _ := h.Holder(); uid != "" {
		t.Fatalf("held before due for %s", uid)
	}
	if wait := l.Starve(&h, w, nodes, t0.Add(time.Hour), 0); wait != 0 {
		t.Fatalf("rule off: retry in %s", wait)
	}
	if uid, _ := h.Holder(); uid != "" {
		t.Fatal("held with the rule off")
	}

	now := t0.Add(6 * time.Minute)
	l.Starve(&h, w, nodes, now, 5*time.Minute)
	if uid, key := h.Holder(); uid != "big" || key != "team-a/big" {
		t.Fatalf("holder %q %q, want big", uid, key)
	}
	held := h.Held("other", 0, now)
	if held == nil || held.Node != "b" {
		t.Fatalf("held %+v, want node b (a holds a claim, c has one GPU)", held)
	}
	if want := "node b is held for GPU pod team-a/big, pending for 6m0s (reserveAfter)"; held.Reason() != want {
		t.Fatalf("reason %q, want %q", held.Reason(), want)
	}
	if h.Held("big", 0, now) != nil || h.Held("urgent", 1, now) != nil {
		t.Fatal("the holder itself or a higher priority is kept off")
	}

	// A pod of the same priority does not take the hold; a higher one does.
	l.Starve(&h, Waiter{UID: "peer", Key: "team-b/peer", Created: t0, Claims: big.Acs}, nodes, now, 5*time.Minute)
	if uid, _ := h.Holder(); uid != "big" {
		t.Fatalf("a peer took the hold: %s", uid)
	}
	l.Starve(&h, Waiter{UID: "urgent", Key: "team-b/urgent", Created: t0, Priority: 5, Claims: big.Acs}, nodes, now, 5*time.Minute)
	if uid, _ := h.Holder(); uid != "urgent" {
		t.Fatalf("a higher priority did not take the hold: %s", uid)
	}
	if h.Release("big") || !h.Release("urgent") {
		t.Fatal("release: only the holder's releases")
	}
	if h.Held("other", 0, now) != nil {
		t.Fatal("held after release")
	}

	// Three GPUs fit no node, even empty: nothing is held.
	huge := gpusPod(t, l, "team-a", "huge", 3)
	l.Starve(&h, Waiter{UID: "huge", Key: "team-a/huge", Created: t0, Claims: huge.Acs}, nodes, now, 5*time.Minute)
	if uid, _ := h.Holder(); uid != "" {
		t.Fatalf("a pod that never fits holds %s", uid)
	}

	if !h.RetryPending("p") || h.RetryPending("p") {
		t.Fatal("RetryPending: once per pod")
	}
	h.RetryDone("p")
	if !h.RetryPending("p") {
		t.Fatal("RetryPending after RetryDone")
	}
}

// A namespace's quota refuses on what the claims are given, on the kept
// verdict's path and on the allocator's (a preemption simulation), and
// Reserve counts again; a pod asking nothing of a resource already over
// its limit is not refused for it.
func TestFilterQuota(t *testing.T) {
	l := NewLedger(draalloc.Policy("binpack"), catalog.Default(), nil)
	publish(t, l, "a", 4)
	q := &admit.Quota{Scope: admit.NamespaceScope, Name: "team-a", MemMiB: 80 * 1024, Compute: admit.NoLimit}
	withQuota := func(p *Pod) *Pod {
		p.Quota = q
		l.Prepare(p)
		return p
	}
	first := withQuota(gpusPod(t, l, "team-a", "first", 1))
	if _, out, err := l.Filter(first, "a", nil, nil); err != nil || out != (admit.Admit{}) {
		t.Fatalf("first GPU: %v %v", out, err)
	}
	if _, out, err := l.Reserve(first, "a", nil); err != nil || out != (admit.Admit{}) {
		t.Fatalf("reserve the first GPU: %v %v", out, err)
	}
	two := withQuota(gpusPod(t, l, "team-a", "two", 2)) // 40 GiB held, 80 asked: over 80
	_, out, err := l.Filter(two, "a", nil, nil)
	o, ok := out.(*admit.OverQuota)
	if err != nil || !ok || o.Used != 40*1024 || o.Asked != 80*1024 {
		t.Fatalf("kept path: %#v %v", out, err)
	}
	if want := "namespace team-a GPU memory quota 80Gi: 40Gi in use, the pod's claims need 80Gi"; o.Reason() != want {
		t.Fatalf("reason %q, want %q", o.Reason(), want)
	}
	// The same decided on the allocator's path: the first pod left out
	// (preempted), the two GPUs fit the quota.
	if _, out, err := l.Filter(two, "a", nil, map[types.UID]bool{"team-a-first": true}); err != nil || out != (admit.Admit{}) {
		t.Fatalf("first pod preempted: %v %v", out, err)
	}
	if _, out, err := l.Reserve(two, "a", nil); err != nil {
		t.Fatal(err)
	} else if _, ok := out.(*admit.OverQuota); !ok {
		t.Fatalf("Reserve over the quota: %#v", out)
	}
	// Another namespace's quota is its own.
	other := gpusPod(t, l, "team-b", "two", 2)
	other.Quota = &admit.Quota{Scope: admit.NamespaceScope, Name: "team-b", MemMiB: 80 * 1024, Compute: admit.NoLimit}
	l.Prepare(other)
	if _, out, err := l.Filter(other, "a", nil, nil); err != nil || out != (admit.Admit{}) {
		t.Fatalf("team-b: %v %v", out, err)
	}
	// Compute limited below what is held: a whole GPU takes compute, so
	// it is refused; the memory quota is not broken.
	q.Compute = 50
	one := withQuota(gpusPod(t, l, "team-a", "one", 1))
	if _, out, _ := l.Filter(one, "a", nil, nil); out == nil || !strings.Contains(out.Reason(), "GPU compute quota 50%: 100% in use, the pod's claims need 100%") {
		t.Fatalf("compute: %#v", out)
	}
}

// Pods with a quota and a prioritized list are decided on every node (no
// kept verdict: the quota may choose the subrequest); others are keyed.
func TestPrepareKeysByShape(t *testing.T) {
	l := NewLedger(draalloc.Policy("binpack"), catalog.Default(), nil)
	p := gpusPod(t, l, "team-a", "p", 1)
	if p.id == 0 || p.key == "" {
		t.Fatalf("plain pod not keyed: %d %q", p.id, p.key)
	}
	rc := p.Claims[0].DeepCopy()
	rc.Spec.Devices.Requests[0] = resourceapi.DeviceRequest{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{
		{Name: "whole", DeviceClassName: dranames.ClassGPU, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
		{Name: "small", DeviceClassName: dranames.ClassMIG, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}}}
	ac, err := draalloc.Translate(rc, 0)
	if err != nil {
		t.Fatal(err)
	}
	list := &Pod{Namespace: "team-a", Claims: []*resourceapi.ResourceClaim{rc}, ToAlloc: []int{0}, Acs: []*draalloc.Claim{ac}}
	l.Prepare(list)
	if list.id == 0 {
		t.Fatal("a list without a quota is not keyed")
	}
	list.Quota = &admit.Quota{Scope: admit.NamespaceScope, Name: "team-a", MemMiB: 1024, Compute: admit.NoLimit}
	list.id = 0
	l.Prepare(list)
	if list.id != 0 {
		t.Fatal("a list under a quota is keyed")
	}
}
