package draalloc

import (
	"fmt"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

func nodeDevices(t *testing.T, name, model string, gpus int) (*NodeDevices, []*resourceapi.ResourceSlice) {
	t.Helper()
	n := alloc.Node{Name: name}
	for i := range gpus {
		n.GPUs = append(n.GPUs, alloc.GPU{UUID: fmt.Sprintf("GPU-%s-%d", name, i), Index: i, Model: model, Healthy: true})
	}
	slices, err := dradriver.Slices(n, 1, "580.65.06", nil)
	if err != nil {
		t.Fatal(err)
	}
	var ps []*resourceapi.ResourceSlice
	for i := range slices {
		ps = append(ps, &slices[i])
	}
	nd, err := NodeFromSlices(name, nil, ps, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(nd.Node.GPUs) != gpus {
		t.Fatalf("read %d GPUs from the slices of %s, want %d", len(nd.Node.GPUs), name, gpus)
	}
	return nd, ps
}

func claim(ns, name, class, selector, memory string) *resourceapi.ResourceClaim {
	req := resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}
	if selector != "" {
		req.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: selector}}}
	}
	if memory != "" {
		req.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(memory)}}
	}
	return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + ns + "-" + name)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &req}}}}}
}

// Claims decided by the allocator on a node read from dradriver's slices
// come back as results naming the slices' devices; read back, they
// restore into a State that passes Check; a result moved onto another
// tenant's shared device does not.
func TestRoundTripThroughAllocationResults(t *testing.T) {
	nd, _ := nodeDevices(t, "n1", "A100-40GB", 3)
	s, failed, err := NewState([]*NodeDevices{nd}, nil, Policy("binpack"), nil)
	if err != nil || len(failed) > 0 {
		t.Fatal(err, failed)
	}
	claims := []*resourceapi.ResourceClaim{
		claim("team-a", "share", dranames.ClassShared, "", "4000Mi"),
		claim("team-b", "share", dranames.ClassShared, "", "4Gi"),
		claim("team-a", "mig", dranames.ClassMIG, `device.attributes["gpu.gpuslice.dev"].profile == "1g.5gb"`, ""),
	}
	results := map[string]*resourceapi.AllocationResult{}
	for _, rc := range claims {
		c, err := ToClaim(rc, 0)
		if err != nil {
			t.Fatal(err)
		}
		a, err := s.Allocate(&c)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if err := s.Apply(a); err != nil {
			t.Fatal(err)
		}
		res, err := ToResult(a, nd, rc, nil)
		if err != nil {
			t.Fatal(err)
		}
		results[ClaimName(rc)] = res
	}
	shareA, shareB := results["team-a/share"].Devices.Results[0], results["team-b/share"].Devices.Results[0]
	if !strings.HasSuffix(shareA.Device, "-shared") || !strings.HasSuffix(shareB.Device, "-shared") || shareA.Device == shareB.Device {
		t.Fatalf("two tenants' shares got %s and %s; want two different shared GPUs", shareA.Device, shareB.Device)
	}
	if m := shareA.ConsumedCapacity["memory"]; m.Value() != 4096<<20 || shareA.ShareID == nil {
		t.Fatalf("4000Mi share consumed %v (share id %v); want 4Gi (rounded up to the 256Mi step) and an id", m.String(), shareA.ShareID)
	}
	if d := results["team-a/mig"].Devices.Results[0].Device; !strings.Contains(d, "-mig-1g-5gb-at-") {
		t.Fatalf("1g.5gb claim got %s", d)
	}
	if AllocatedNode(results["team-a/mig"]) != "n1" {
		t.Fatalf("node selector %+v", results["team-a/mig"].NodeSelector)
	}

	snap := &Snapshot{Nodes: []*NodeDevices{nd}}
	for _, rc := range claims {
		a, ok, err := FromResult(rc, results[ClaimName(rc)], nd, nil)
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		snap.Allocs = append(snap.Allocs, a)
	}
	if err := snap.Check(Policy("binpack"), nil); err != nil {
		t.Fatalf("allocations read back do not check: %v", err)
	}
	// Put team-b's share on team-a's shared device: tenant isolation.
	bad := *results["team-b/share"]
	bad.Devices.Results = []resourceapi.DeviceRequestAllocationResult{shareB}
	bad.Devices.Results[0].Device = shareA.Device
	a, _, err := FromResult(claims[1], &bad, nd, nil)
	if err != nil {
		t.Fatal(err)
	}
	snap.Allocs[1] = a
	if err := snap.Check(Policy("binpack"), nil); err == nil {
		t.Fatal("two tenants on one shared device passed Check")
	}
}

// What the allocator cannot do yet is refused with the field named.
func TestToClaimRefusesWhatItCannotDo(t *testing.T) {
	start := claim("ns", "c", dranames.ClassMIG, `device.attributes["gpu.gpuslice.dev"].start == 0`, "")
	if _, err := ToClaim(start, 0); err == nil || !strings.Contains(err.Error(), `attribute "start"`) || !strings.Contains(err.Error(), "selectors[0]") {
		t.Fatalf("selector on start: %v", err)
	}
	mixed := claim("ns", "c", "gpu.nvidia.com", "", "")
	if _, err := ToClaim(mixed, 0); err == nil || !strings.Contains(err.Error(), "deviceClassName") {
		t.Fatalf("another driver's class: %v", err)
	}
	iso := claim("ns", "c", dranames.ClassGPU, "", "")
	iso.Annotations = map[string]string{AnnotationIsolation: "tenants"}
	if _, err := ToClaim(iso, 0); err == nil || !strings.Contains(err.Error(), AnnotationIsolation) {
		t.Fatalf("bad isolation: %v", err)
	}
	ok := claim("ns", "c", dranames.ClassShared, `device.attributes["gpu.gpuslice.dev"].model == "L4"`, "")
	c, err := ToClaim(ok, 3)
	if err != nil {
		t.Fatal(err)
	}
	if c.Tenant != "ns" || c.Priority != 3 || c.Requests[0].Mode != alloc.TimeSlice || !strings.Contains(c.Requests[0].Selector, `"gpu.nvidia.com"].model == "L4"`) {
		t.Fatalf("translated %+v", c)
	}
}

// gpuslice-scheduler reads nodes whose driver publishes per-tenant copies
// of the shared GPUs (dra-driver's tenant isolation): the copies are one
// GPU, a share is recorded on the claim's tenant's copy and reads back; a
// tenant without copies on the node is an error naming it.
func TestTenantCopiesOfSharedGPUs(t *testing.T) {
	n := alloc.Node{Name: "n1", GPUs: []alloc.GPU{{UUID: "GPU-n1-0", Index: 0, Model: "L4", Healthy: true}, {UUID: "GPU-n1-1", Index: 1, Model: "L4", Healthy: true},
		{UUID: "GPU-n1-2", Index: 2, Model: "L4", Healthy: true}}}
	sl, err := dradriver.SlicesFor(n, 1, "580.65.06", nil, dradriver.Options{TenantIsolation: true, Tenants: []string{"team-a", "team-b"}})
	if err != nil {
		t.Fatal(err)
	}
	var ps []*resourceapi.ResourceSlice
	for i := range sl {
		ps = append(ps, &sl[i])
	}
	nd, err := NodeFromSlices("n1", nil, ps, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(nd.Node.GPUs) != 3 {
		t.Fatalf("%d GPUs", len(nd.Node.GPUs))
	}
	s, failed, err := NewState([]*NodeDevices{nd}, nil, Policy("binpack"), nil)
	if err != nil || len(failed) > 0 {
		t.Fatal(err, failed)
	}
	snap := &Snapshot{Nodes: []*NodeDevices{nd}}
	for _, ns := range []string{"team-a", "team-b", "team-a"} {
		rc := claim(ns, fmt.Sprintf("share-%d", len(snap.Allocs)), dranames.ClassShared, "", "4Gi")
		c, err := ToClaim(rc, 0)
		if err != nil {
			t.Fatal(err)
		}
		a, err := s.Allocate(&c)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Apply(a); err != nil {
			t.Fatal(err)
		}
		res, err := ToResult(a, nd, rc, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := res.Devices.Results[0].Device
		if want := dranames.SharedDeviceName(nd.Devices[got].Index, ns); got != want {
			t.Fatalf("%s's share on %s, want its copy %s", ns, got, want)
		}
		back, ok, err := FromResult(rc, res, nd, nil)
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		snap.Allocs = append(snap.Allocs, back)
	}
	if err := snap.Check(Policy("binpack"), nil); err != nil {
		t.Fatal(err)
	}
	rc := claim("team-c", "share", dranames.ClassShared, "", "4Gi")
	c, _ := ToClaim(rc, 0)
	a, err := s.Allocate(&c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ToResult(a, nd, rc, nil); err == nil || !strings.Contains(err.Error(), `of tenant "team-c"`) {
		t.Fatalf("a tenant without copies: %v", err)
	}
}
