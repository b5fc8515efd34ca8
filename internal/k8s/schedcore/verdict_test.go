package schedcore

import (
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/k8s/draalloc"
	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// publish gives the ledger a node of n A100-40GB, as the driver publishes.
func publish(t *testing.T, l *Ledger, node string, n int) {
	t.Helper()
	an := alloc.Node{Name: node}
	for i := range n {
		an.GPUs = append(an.GPUs, alloc.GPU{UUID: fmt.Sprintf("GPU-%s-%d", node, i), Index: i, Model: "A100-40GB", Healthy: true})
	}
	sl, err := dradriver.Slices(an, 1, "580.65.06", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range sl {
		l.SetSlice(sl[i].Name, node, &sl[i])
	}
}

// wholeGPU is a pod with one claim of a whole GPU in namespace ns.
func wholeGPU(t *testing.T, l *Ledger, ns, name string) *Pod {
	t.Helper()
	rc := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "-" + name)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: dranames.ClassGPU, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}}}}}}
	ac, err := draalloc.Translate(rc, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := &Pod{Namespace: ns, Claims: []*resourceapi.ResourceClaim{rc}, ToAlloc: []int{0}, Acs: []*draalloc.Claim{ac}, Classes: map[string]*resourceapi.DeviceClass{}}
	l.Prepare(c)
	return c
}

// Filter's verdicts: one decision serves every empty node of a shape and
// every pod of a claim shape, and a node's verdicts are forgotten the
// moment its State changes (an allocation reserved or taken back), so a
// full node is never reported as fitting.
func TestVerdictsFollowTheNode(t *testing.T) {
	l := NewLedger(draalloc.Policy("binpack"), catalog.Default(), nil)
	p := l
	publish(t, l, "a", 2)
	publish(t, l, "b", 2)

	c := wholeGPU(t, l, "team-a", "p-0")
	if !c.shareable || c.key == "" {
		t.Fatalf("a whole-GPU claim is shareable with a key: %v %q", c.shareable, c.key)
	}
	if k2, _ := shapeKey(wholeGPU(t, l, "team-a", "other-name").Acs); k2 != c.key {
		t.Fatalf("claims differing only in name have different shapes:\n%s\n%s", c.key, k2)
	}
	if k3, _ := shapeKey(wholeGPU(t, l, "team-b", "p-0").Acs); k3 == c.key {
		t.Fatal("claims of two tenants have one shape (tenant isolation depends on the tenant)")
	}
	va, err := p.verdict(c, "a", nil)
	if err != nil || va.reason != "" {
		t.Fatalf("empty node a: %+v %v", va, err)
	}
	vb, err := p.verdict(c, "b", nil)
	if err != nil || vb != va {
		t.Fatalf("empty node b of a's shape did not reuse a's verdict: %+v %v", vb, err)
	}
	if len(l.shared) != 1 {
		t.Fatalf("%d shared verdicts, want 1", len(l.shared))
	}

	// Fill node a: both GPUs reserved by two pods, a verdict kept on a
	// between them.
	for i := range 2 {
		ci := wholeGPU(t, l, "team-a", fmt.Sprintf("fill-%d", i))
		if res, out, err := p.Reserve(ci, "a", nil); err != nil || len(res) != 1 {
			t.Fatalf("reserve %d on a: %q %v", i, out.Reason(), err)
		}
		if i == 0 {
			if v, err := p.verdict(c, "a", nil); err != nil || v.reason != "" || l.nodes["a"].verdicts[c.id] != v {
				t.Fatalf("node a with one GPU free: %+v %v (kept: %v)", v, err, l.nodes["a"].verdicts)
			}
		}
	}
	if v, err := p.verdict(c, "a", nil); err != nil || v.reason == "" {
		t.Fatalf("full node a still fits by a kept verdict: %+v %v", v, err)
	}
	if v, err := p.verdict(c, "b", nil); err != nil || v.reason != "" {
		t.Fatalf("empty node b: %+v %v", v, err)
	}
	// One pod's allocation taken back: a fits again.
	l.Unreserve(types.UID("team-a-fill-0"))
	if v, err := p.verdict(c, "a", nil); err != nil || v.reason != "" {
		t.Fatalf("node a with a GPU free again: %+v %v", v, err)
	}
	// A selector naming a GPU's uuid is per node: never shared.
	rc := c.Claims[0].DeepCopy()
	rc.Spec.Devices.Requests[0].Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
		Expression: `device.attributes["gpu.nvidia.com"].uuid == "GPU-b-0"`}}}
	ac, err := draalloc.Translate(rc, 0)
	if err != nil {
		t.Fatal(err)
	}
	c.Claims[0], c.Acs[0] = rc, ac
	l.Prepare(c)
	if c.shareable {
		t.Fatal("a selector on uuid is shareable")
	}
	if v, err := p.verdict(c, "a", nil); err != nil || v.reason == "" {
		t.Fatalf("node a for GPU-b-0: %+v %v", v, err)
	}
	if v, err := p.verdict(c, "b", nil); err != nil || v.reason != "" {
		t.Fatalf("node b for GPU-b-0: %+v %v", v, err)
	}
}
