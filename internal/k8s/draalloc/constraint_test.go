package draalloc

import (
	"fmt"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// multi is a claim of several one-device requests (name → class,
// selector) with constraints.
func multi(name string, reqs [][3]string, cons ...resourceapi.DeviceConstraint) *resourceapi.ResourceClaim {
	rc := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a", UID: types.UID("uid-" + name)}}
	for _, r := range reqs {
		e := &resourceapi.ExactDeviceRequest{DeviceClassName: r[1], AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}
		if r[2] != "" {
			e.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: r[2]}}}
		}
		rc.Spec.Devices.Requests = append(rc.Spec.Devices.Requests, resourceapi.DeviceRequest{Name: r[0], Exactly: e})
	}
	rc.Spec.Devices.Constraints = cons
	return rc
}

func attr(name string) *resourceapi.FullyQualifiedName {
	n := resourceapi.FullyQualifiedName(name)
	return &n
}

func profile(p string) string {
	return fmt.Sprintf("device.attributes[%q].profile == %q", dranames.DriverName, p)
}

// NVIDIA's quickstart gpu-test4: four MIG requests, smallest first, that
// must share one physical GPU (matchAttribute parentUUID, requests
// empty). Placed greedily in the order written, the two 1g.5gb take the
// slots the 3g.20gb needs; the allocator must undo and retry. Four
// replicas fill four A100s.
func TestMatchAttributeParentUUIDAcrossFourMIGRequests(t *testing.T) {
	nd, _ := nodeDevices(t, "n1", "A100-40GB", 4)
	s, failed, err := NewState([]*NodeDevices{nd}, nil, Policy("binpack"), nil)
	if err != nil || len(failed) > 0 {
		t.Fatal(err, failed)
	}
	used := map[string]bool{}
	for i := range 4 {
		rc := multi(fmt.Sprintf("mig-devices-%d", i), [][3]string{
			{"mig-1g-5gb-0", dranames.ClassMIG, profile("1g.5gb")},
			{"mig-1g-5gb-1", dranames.ClassMIG, profile("1g.5gb")},
			{"mig-2g-10gb", dranames.ClassMIG, profile("2g.10gb")},
			{"mig-3g-20gb", dranames.ClassMIG, profile("3g.20gb")},
		}, resourceapi.DeviceConstraint{MatchAttribute: attr(dranames.DriverName + "/parentUUID")})
		c, err := ToClaim(rc, 0)
		if err != nil {
			t.Fatal(err)
		}
		a, err := s.Allocate(&c)
		if err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
		if len(a.Devices) != 4 {
			t.Fatalf("replica %d: %d devices", i, len(a.Devices))
		}
		for _, d := range a.Devices[1:] {
			if d.GPU != a.Devices[0].GPU {
				t.Fatalf("replica %d: devices on GPUs %s and %s", i, a.Devices[0].GPU, d.GPU)
			}
		}
		if used[a.Devices[0].GPU] {
			t.Fatalf("replica %d: GPU %s used twice", i, a.Devices[0].GPU)
		}
		used[a.Devices[0].GPU] = true
		if err := s.Apply(a); err != nil {
			t.Fatal(err)
		}
	}
}

// distinctAttribute across two whole-GPU requests: two different GPUs
// (uuid), and with productName all GPUs of one model share, no fit.
func TestDistinctAttributeAcrossTwoGPURequests(t *testing.T) {
	nd, _ := nodeDevices(t, "n1", "A100-40GB", 2)
	s, failed, err := NewState([]*NodeDevices{nd}, nil, Policy("binpack"), nil)
	if err != nil || len(failed) > 0 {
		t.Fatal(err, failed)
	}
	reqs := [][3]string{{"a", dranames.ClassGPU, ""}, {"b", dranames.ClassGPU, ""}}
	c, err := ToClaim(multi("two", reqs, resourceapi.DeviceConstraint{DistinctAttribute: attr(dranames.DriverName + "/index")}), 0)
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Allocate(&c)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Devices) != 2 || a.Devices[0].GPU == a.Devices[1].GPU {
		t.Fatalf("devices %+v", a.Devices)
	}
	// Impossible: two devices whose product names differ on a node of one model.
	c, err = ToClaim(multi("impossible", reqs, resourceapi.DeviceConstraint{DistinctAttribute: attr(dranames.DriverName + "/productName")}), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Allocate(&c); err == nil || !strings.Contains(err.Error(), "attribute constraint not met") || !strings.Contains(err.Error(), "distinct productName") {
		t.Fatalf("distinct productName on one model: %v, want the attribute constraint named", err)
	}
}

// matchAttribute on another attribute (model) and on an unknown or
// foreign attribute.
func TestMatchAttributeOtherAttributes(t *testing.T) {
	reqs := [][3]string{{"a", dranames.ClassMIG, profile("1g.5gb")}, {"b", dranames.ClassMIG, profile("2g.10gb")}}
	c, err := ToClaim(multi("m", reqs, resourceapi.DeviceConstraint{Requests: []string{"a", "b"}, MatchAttribute: attr(dranames.DriverName + "/model")}), 0)
	if err != nil {
		t.Fatal(err)
	}
	nd, _ := nodeDevices(t, "n1", "A100-40GB", 1)
	s, _, _ := NewState([]*NodeDevices{nd}, nil, Policy("binpack"), nil)
	if _, err := s.Allocate(&c); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"gpu.nvidia.com/parentUUID", dranames.DriverName + "/noSuch"} {
		if _, err := ToClaim(multi("m", reqs, resourceapi.DeviceConstraint{MatchAttribute: attr(a)}), 0); err == nil || !strings.Contains(err.Error(), a) {
			t.Errorf("matchAttribute %s: %v, want refused naming it", a, err)
		}
	}
}
