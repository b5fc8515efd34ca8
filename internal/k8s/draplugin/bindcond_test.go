package draplugin

import (
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// planBinding: a MIG device of this node waiting for mig-ready is
// pending until either condition is True; records made before bind are
// released when their claim goes, is being deleted, is another claim of
// the same name, or lost the device.
func TestPlanBinding(t *testing.T) {
	migRes := func(pool, dev string, cond bool) resourceapi.DeviceRequestAllocationResult {
		r := resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: dranames.DriverName, Pool: pool, Device: dev}
		if cond {
			r.BindingConditions = []string{dranames.ConditionMIGReady}
			r.BindingFailureConditions = []string{dranames.ConditionMIGFailed}
		}
		return r
	}
	claim := func(uid string, res ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: types.UID(uid)}}
		if res != nil {
			c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: res}}
		}
		return c
	}
	withCond := func(c *resourceapi.ResourceClaim, dev, typ string, status metav1.ConditionStatus) *resourceapi.ResourceClaim {
		c.Status.Devices = append(c.Status.Devices, resourceapi.AllocatedDeviceStatus{Driver: dranames.DriverName, Pool: "n1", Device: dev,
			Conditions: []metav1.Condition{{Type: typ, Status: status, Reason: "R"}}})
		return c
	}
	rec := func(uid, state, dev string) *claimRecord {
		return &claimRecord{UID: uid, Namespace: "ns", Name: "c", State: state,
			Devices: []preparedDevice{{Pool: "n1", Device: dev, deviceInfo: deviceInfo{Type: dranames.TypeMIG}}}}
	}
	const a, b = "gpu-0-mig-1g-5gb-at-6", "gpu-0-mig-1g-5gb-at-5"
	deleting := claim("u1", migRes("n1", a, true))
	deleting.DeletionTimestamp = &metav1.Time{}
	for _, tc := range []struct {
		name    string
		claim   *resourceapi.ResourceClaim
		records []*claimRecord
		pending []string
		release []string
	}{
		{"waiting", claim("u1", migRes("n1", a, true)), nil, []string{a}, nil},
		{"other node", claim("u1", migRes("n2", a, true)), nil, nil, nil},
		{"no binding conditions", claim("u1", migRes("n1", a, false)), nil, nil, nil},
		{"not allocated", claim("u1"), nil, nil, nil},
		{"ready", withCond(claim("u1", migRes("n1", a, true)), a, dranames.ConditionMIGReady, metav1.ConditionTrue), []*claimRecord{rec("u1", stateBinding, a)}, nil, nil},
		{"ready false is pending", withCond(claim("u1", migRes("n1", a, true)), a, dranames.ConditionMIGReady, metav1.ConditionFalse), nil, []string{a}, nil},
		{"failed", withCond(claim("u1", migRes("n1", a, true)), a, dranames.ConditionMIGFailed, metav1.ConditionTrue), nil, nil, nil},
		{"made, condition not yet written (restart)", claim("u1", migRes("n1", a, true)), []*claimRecord{rec("u1", stateBinding, a)}, []string{a}, nil},
		{"deleted", nil, []*claimRecord{rec("u1", stateBinding, a)}, nil, []string{"u1"}},
		{"being deleted", deleting, []*claimRecord{rec("u1", stateBinding, a)}, nil, []string{"u1"}},
		{"deallocated", claim("u1"), []*claimRecord{rec("u1", stateBinding, a)}, nil, []string{"u1"}},
		{"reallocated elsewhere", claim("u1", migRes("n1", b, true)), []*claimRecord{rec("u1", stateBinding, a)}, []string{b}, []string{"u1"}},
		{"recreated under the name", claim("u2", migRes("n1", a, true)), []*claimRecord{rec("u1", stateBinding, a)}, []string{a}, []string{"u1"}},
		{"prepared records are the kubelet's", nil, []*claimRecord{rec("u1", statePrepared, a), rec("u3", statePreparing, a)}, nil, nil},
	} {
		p := planBinding(tc.claim, "n1", tc.records)
		var pending []string
		for _, r := range p.Pending {
			pending = append(pending, r.Device)
		}
		if !slices.Equal(pending, tc.pending) || !slices.Equal(p.Release, tc.release) {
			t.Errorf("%s: pending %v release %v, want %v %v", tc.name, pending, p.Release, tc.pending, tc.release)
		}
	}
}
