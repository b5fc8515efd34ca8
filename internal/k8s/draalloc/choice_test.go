package draalloc

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// sub is a subrequest: name, class, selector ("" none), count (0: one).
type sub struct {
	name, class, sel string
	count            int64
	all              bool
	memory           string
}

func (s sub) device() resourceapi.DeviceSubRequest {
	d := resourceapi.DeviceSubRequest{Name: s.name, DeviceClassName: s.class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: max(s.count, 1)}
	if s.all {
		d.AllocationMode, d.Count = resourceapi.DeviceAllocationModeAll, 0
	}
	if s.sel != "" {
		d.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: s.sel}}}
	}
	if s.memory != "" {
		d.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(s.memory)}}
	}
	return d
}

func (s sub) exactly() *resourceapi.ExactDeviceRequest {
	d := s.device()
	return &resourceapi.ExactDeviceRequest{DeviceClassName: d.DeviceClassName, Selectors: d.Selectors, AllocationMode: d.AllocationMode, Count: d.Count, Capacity: d.Capacity}
}

// rcOf is a claim in ns of requests: a request of one sub is exactly
// (its name the request's), of several a prioritized list named by the
// first element's name with the rest as subrequests.
func rcOf(ns, name string, reqs [][]sub, cons ...resourceapi.DeviceConstraint) *resourceapi.ResourceClaim {
	rc := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + ns + "-" + name)}}
	for _, r := range reqs {
		if len(r) == 1 {
			rc.Spec.Devices.Requests = append(rc.Spec.Devices.Requests, resourceapi.DeviceRequest{Name: r[0].name, Exactly: r[0].exactly()})
			continue
		}
		q := resourceapi.DeviceRequest{Name: r[0].name}
		for _, s := range r[1:] {
			q.FirstAvailable = append(q.FirstAvailable, s.device())
		}
		rc.Spec.Devices.Requests = append(rc.Spec.Devices.Requests, q)
	}
	rc.Spec.Devices.Constraints = cons
	return rc
}

func attrSel(name, op, value string) string {
	return fmt.Sprintf("device.attributes[%q].%s %s %s", dranames.DriverName, name, op, value)
}

// decideOn translates rc and allocates it on nd's State s, applying it.
func decideOn(t *testing.T, s *alloc.State, nd *NodeDevices, rc *resourceapi.ResourceClaim, accept func(*alloc.Allocation) string) (*alloc.Allocation, error) {
	t.Helper()
	c, err := Translate(rc, 0)
	if err != nil {
		t.Fatalf("%s: %v", rc.Name, err)
	}
	a, err := c.Allocate(s, nd, accept)
	if err == nil {
		if err := s.Apply(a); err != nil {
			t.Fatal(err)
		}
	}
	return a, err
}

func requestsOf(a *alloc.Allocation) []string {
	var out []string
	for _, d := range a.Devices {
		out = append(out, d.Request)
	}
	return out
}

// The Kubernetes documentation's prioritized list, on gpuslice's classes:
// a big device first, two small ones if there is none. On A100-40GB nodes
// there is no 80GB GPU: two 1g.5gb MIG devices, named gpu/small as the
// stock allocator names them in the result, configured from the claim's
// config naming the subrequest. On a node with an A100-80GB the first
// subrequest wins.
func TestPrioritizedListTakesTheFirstSubrequestThatFits(t *testing.T) {
	rc := rcOf("team-a", "docs", [][]sub{{
		{name: "gpu"},
		{name: "large", class: dranames.ClassGPU, sel: attrSel("productName", "==", `"NVIDIA A100-SXM4-80GB"`)},
		{name: "small", class: dranames.ClassMIG, sel: attrSel("profile", "==", `"1g.5gb"`), count: 2},
	}})
	rc.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{Requests: []string{"gpu/small"},
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: dranames.DriverName, Parameters: runtime.RawExtension{Raw: []byte(`{"kind":"small"}`)}}}}}
	if _, err := ToClaim(rc, 0); err == nil || !strings.Contains(err.Error(), "requests[0].firstAvailable") {
		t.Fatalf("ToClaim of a prioritized list: %v, want it refused naming the field", err)
	}

	nd, _ := nodeDevices(t, "n1", "A100-40GB", 2)
	s, _, _ := NewState([]*NodeDevices{nd}, nil, Policy("binpack"), nil)
	a, err := decideOn(t, s, nd, rc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := requestsOf(a); !slices.Equal(got, []string{"gpu/small", "gpu/small"}) || a.Devices[0].Profile != "1g.5gb" {
		t.Fatalf("devices %+v, want two 1g.5gb for gpu/small", a.Devices)
	}
	res, err := ToResult(a, nd, rc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Devices.Results[0].Request != "gpu/small" || len(res.Devices.Config) != 1 || res.Devices.Config[0].Requests != nil {
		t.Fatalf("result %+v, want gpu/small and the claim's config (for every request: its Requests cleared)", res.Devices)
	}

	nd80, _ := nodeDevices(t, "n2", "A100-80GB", 1)
	s80, _, _ := NewState([]*NodeDevices{nd80}, nil, Policy("binpack"), nil)
	a, err = decideOn(t, s80, nd80, rc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := requestsOf(a); !slices.Equal(got, []string{"gpu/large"}) || a.Devices[0].Mode != alloc.Exclusive {
		t.Fatalf("devices %+v, want the whole A100-80GB for gpu/large", a.Devices)
	}
	if sc := SubrequestScore(rc, a); sc != 8 {
		t.Errorf("score of the first subrequest %d, want 8 (as the stock scheduler scores it)", sc)
	}
	res, _ = ToResult(a, nd80, rc, nil)
	if len(res.Devices.Config) != 0 {
		t.Errorf("config %+v: the claim's config names gpu/small, which was not chosen", res.Devices.Config)
	}
}

// A subrequest that fits alone but breaks a constraint gives way to the
// next (the stock allocator backtracks into the list): request b's 4g
// cannot share a's A100 with a's 4g, its 3g can. A constraint naming a
// subrequest (b/b1) binds it only when it is chosen.
func TestPrioritizedListBacktracksOverConstraints(t *testing.T) {
	nd, _ := nodeDevices(t, "n1", "A100-40GB", 2)
	mig := func(name, p string) sub {
		return sub{name: name, class: dranames.ClassMIG, sel: attrSel("profile", "==", `"`+p+`"`)}
	}
	same := resourceapi.DeviceConstraint{MatchAttribute: attr(dranames.DriverName + "/parentUUID")}

	s, _, _ := NewState([]*NodeDevices{nd}, nil, Policy("binpack"), nil)
	a, err := decideOn(t, s, nd, rcOf("team-a", "c1", [][]sub{{mig("a", "4g.20gb")}, {{name: "b"}, mig("b1", "4g.20gb"), mig("b2", "3g.20gb")}}, same), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := requestsOf(a); !slices.Equal(got, []string{"a", "b/b2"}) || a.Devices[0].GPU != a.Devices[1].GPU {
		t.Fatalf("devices %+v, want a and b/b2 on one GPU", a.Devices)
	}

	s, _, _ = NewState([]*NodeDevices{nd}, nil, Policy("binpack"), nil)
	sameSub := resourceapi.DeviceConstraint{Requests: []string{"a", "b/b1"}, MatchAttribute: attr(dranames.DriverName + "/parentUUID")}
	a, err = decideOn(t, s, nd, rcOf("team-a", "c2", [][]sub{{mig("a", "4g.20gb")}, {{name: "b"}, mig("b1", "4g.20gb"), {name: "b2", class: dranames.ClassGPU}}}, sameSub), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := requestsOf(a); !slices.Equal(got, []string{"a", "b/b2"}) || a.Devices[0].GPU == a.Devices[1].GPU {
		t.Fatalf("devices %+v, want a and the other whole GPU for b/b2 (the constraint names b/b1 only)", a.Devices)
	}

	if _, err := Translate(rcOf("team-a", "c3", [][]sub{{mig("a", "4g.20gb")}}, resourceapi.DeviceConstraint{Requests: []string{"a/x"}, MatchAttribute: attr(dranames.DriverName + "/parentUUID")}), 0); err == nil ||
		!strings.Contains(err.Error(), `"a/x"`) || !strings.Contains(err.Error(), "constraints[0].requests") {
		t.Errorf("a constraint naming no subrequest: %v", err)
	}
}

// Tenant isolation applies to whichever subrequest is tried: team-a's
// shared subrequest on team-b's shared GPU 0 fails and its MIG one takes
// GPU 1. When none fits the error names each subrequest, its selector as
// written and the allocator's reason; a quota (accept) refusing the first
// subrequest gives way to the second.
func TestPrioritizedListKeepsTenantIsolationAndQuota(t *testing.T) {
	nd, _ := nodeDevices(t, "n1", "A100-40GB", 2)
	s, _, _ := NewState([]*NodeDevices{nd}, nil, Policy("binpack"), nil)
	if _, err := decideOn(t, s, nd, claim("team-b", "theirs", dranames.ClassShared, attrSel("index", "==", "0"), "4Gi"), nil); err != nil {
		t.Fatal(err)
	}
	shared0 := sub{name: "share", class: dranames.ClassShared, sel: attrSel("index", "==", "0")}
	mig1g := sub{name: "mig", class: dranames.ClassMIG, sel: attrSel("profile", "==", `"1g.5gb"`)}
	a, err := decideOn(t, s, nd, rcOf("team-a", "mine", [][]sub{{{name: "gpu"}, shared0, mig1g}}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.Devices[0].Request != "gpu/mig" || a.Devices[0].GPU != nd.Node.GPUs[1].UUID {
		t.Fatalf("devices %+v, want gpu/mig on GPU 1", a.Devices)
	}

	whole0 := sub{name: "whole", class: dranames.ClassGPU, sel: attrSel("index", "==", "0")}
	c, err := Translate(rcOf("team-a", "none", [][]sub{{{name: "gpu"}, shared0, whole0}}), 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Allocate(s, nd, nil)
	var ce *ChoiceError
	if !errorsAs(err, &ce) || len(ce.Tries) != 2 {
		t.Fatalf("nothing fits: %v, want a ChoiceError of two tries", err)
	}
	msg := ce.Reason("n1")
	for _, want := range []string{"gpu/share", "gpu/whole", `selector "device.attributes[\"gpu.gpuslice.dev\"].index == 0"`, "GPU held by other claims"} {
		if !strings.Contains(msg, want) {
			t.Errorf("reason %q does not say %s", msg, want)
		}
	}

	quota := func(a *alloc.Allocation) string {
		if a.Devices[0].Mode == alloc.Exclusive {
			return "namespace team-a GPU memory quota 10Gi"
		}
		return ""
	}
	a, err = decideOn(t, s, nd, rcOf("team-a", "quota", [][]sub{{{name: "gpu"}, {name: "whole", class: dranames.ClassGPU}, mig1g}}), quota)
	if err != nil {
		t.Fatal(err)
	}
	if a.Devices[0].Request != "gpu/mig" {
		t.Fatalf("devices %+v: the quota refuses the whole GPU; want gpu/mig", a.Devices)
	}
}

func errorsAs(err error, ce **ChoiceError) bool {
	e, ok := err.(*ChoiceError)
	*ce = e
	return ok
}

// allocationMode All over each class on an A100 node, as the stock
// allocator reads it on gpuslice's slices: every whole GPU (all idle),
// every GPU the selector names, every 1g.5gb placement of one GPU (seven
// fit), a share of every GPU; MIG placements that overlap (no selector)
// and a GPU already in use fail, naming the request and its selector.
func TestAllocationModeAll(t *testing.T) {
	nd, _ := nodeDevices(t, "n1", "A100-40GB", 4)
	fresh := func() *alloc.State {
		s, _, _ := NewState([]*NodeDevices{nd}, nil, Policy("binpack"), nil)
		return s
	}
	all := func(name, class, sel string) [][]sub {
		return [][]sub{{{name: name, class: class, sel: sel, all: true}}}
	}
	if _, err := ToClaim(rcOf("team-a", "x", all("gpus", dranames.ClassGPU, "")), 0); err == nil || !strings.Contains(err.Error(), "allocationMode") {
		t.Fatalf("ToClaim of All: %v, want refused naming the field", err)
	}
	for _, tc := range []struct {
		name, class, sel string
		want             int    // devices; 0: fails
		wantErr          string // in the error
	}{
		{"every whole GPU", dranames.ClassGPU, "", 4, ""},
		{"whole GPUs of index < 2", dranames.ClassGPU, attrSel("index", "<", "2"), 2, ""},
		{"1g.5gb of GPU 3", dranames.ClassMIG, attrSel("profile", "==", `"1g.5gb"`) + " && " + attrSel("index", "==", "3"), 7, ""},
		{"every MIG placement", dranames.ClassMIG, "", 0, "32"},
		{"3g and 4g of GPU 0 overlap", dranames.ClassMIG, attrSel("index", "==", "0") + ` && device.attributes["gpu.gpuslice.dev"].profile in ["3g.20gb", "4g.20gb"]`, 0,
			`gpus (allocationMode All) selector "device.attributes[\"gpu.gpuslice.dev\"].index == 0 && device.attributes[\"gpu.gpuslice.dev\"].profile in [\"3g.20gb\", \"4g.20gb\"]" matches 3 devices (2 × 3g.20gb, 1 × 4g.20gb) on node n1: they cannot all be allocated`},
		{"a share of every GPU", dranames.ClassShared, "", 4, ""},
		{"no such GPU", dranames.ClassGPU, attrSel("index", "==", "9"), 0, "no device of class gpu.gpuslice.dev on node n1 matches"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := decideOn(t, fresh(), nd, rcOf("team-a", "all", all("gpus", tc.class, tc.sel)), nil)
			if tc.want == 0 {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(a.Devices) != tc.want {
				t.Fatalf("%d devices, want %d", len(a.Devices), tc.want)
			}
			seen := map[string]bool{}
			for _, d := range a.Devices {
				if d.Request != "gpus" || seen[d.Device] {
					t.Fatalf("devices %+v: want each once, for request gpus", a.Devices)
				}
				seen[d.Device] = true
			}
			res, err := ToResult(a, nd, rcOf("team-a", "all", all("gpus", tc.class, tc.sel)), nil)
			if err != nil || len(res.Devices.Results) != tc.want {
				t.Fatalf("result %+v: %v", res, err)
			}
		})
	}

	// A GPU in use: every whole GPU fails; a share of every GPU joins
	// the tenant's own share, and fails beside another tenant's.
	s := fresh()
	if _, err := decideOn(t, s, nd, claim("team-a", "one", dranames.ClassShared, attrSel("index", "==", "1"), "4Gi"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := decideOn(t, s, nd, rcOf("team-a", "whole", all("gpus", dranames.ClassGPU, "")), nil); err == nil || !strings.Contains(err.Error(), "gpus") {
		t.Fatalf("All whole GPUs with one shared: %v, want a failure naming the request", err)
	}
	a, err := decideOn(t, s, nd, rcOf("team-a", "shares", all("gpus", dranames.ClassShared, "")), nil)
	if err != nil || len(a.Devices) != 4 {
		t.Fatalf("All shares beside the tenant's own: %v %+v", err, a)
	}
	if _, err := decideOn(t, s, nd, rcOf("team-b", "shares", all("gpus", dranames.ClassShared, "")), nil); err == nil || !strings.Contains(err.Error(), "cannot all be allocated") || strings.Contains(err.Error(), "#") {
		t.Fatalf("All shares beside another tenant's: %v, want them refused (tenant isolation), naming the request as written", err)
	}
}

// A prioritized list whose first subrequest is All: all the node's GPUs
// if they are all free, else the second subrequest.
func TestPrioritizedListOfAll(t *testing.T) {
	nd, _ := nodeDevices(t, "n1", "A100-40GB", 2)
	s, _, _ := NewState([]*NodeDevices{nd}, nil, Policy("binpack"), nil)
	rc := rcOf("team-a", "c", [][]sub{{{name: "gpu"}, {name: "every", class: dranames.ClassGPU, all: true}, {name: "one", class: dranames.ClassGPU}}})
	c, err := Translate(rc, 0)
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.Allocate(s, nd, nil)
	if err != nil || !slices.Equal(requestsOf(a), []string{"gpu/every", "gpu/every"}) {
		t.Fatalf("idle node: %v %+v", err, a)
	}
	if _, err := decideOn(t, s, nd, claim("team-b", "busy", dranames.ClassGPU, "", ""), nil); err != nil {
		t.Fatal(err)
	}
	a, err = c.Allocate(s, nd, nil)
	if err != nil || !slices.Equal(requestsOf(a), []string{"gpu/one"}) {
		t.Fatalf("one GPU busy: %v %+v", err, a)
	}
	if sc := SubrequestScore(rc, a); sc != 7 {
		t.Errorf("score of the second subrequest %d, want 7", sc)
	}
}

// Bad prioritized lists are refused naming the field.
func TestPrioritizedListRefusals(t *testing.T) {
	for _, tc := range []struct {
		rc   *resourceapi.ResourceClaim
		want string
	}{
		{rcOf("ns", "c", [][]sub{{{name: "gpu"}, {name: "a", class: dranames.ClassGPU}, {name: "a", class: dranames.ClassMIG}}}), "firstAvailable[1].name"},
		{rcOf("ns", "c", [][]sub{{{name: "gpu"}, {name: "a", class: dranames.ClassGPU}, {name: "b", class: "gpu.nvidia.com"}}}), "firstAvailable[1].deviceClassName"},
		{rcOf("ns", "c", [][]sub{{{name: "gpu"}, {name: "a", class: dranames.ClassGPU}, {name: "b", class: dranames.ClassMIG, sel: attrSel("start", "==", "0")}}}), "firstAvailable[1].selectors[0]"},
		{rcOf("ns", "c", [][]sub{{{name: "gpu"}, {name: "a", class: dranames.ClassGPU, memory: "1Gi"}, {name: "b", class: dranames.ClassMIG}}}), ""},
	} {
		_, err := Translate(tc.rc, 0)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", tc.rc.Spec.Devices.Requests, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want the error to name %s", err, tc.want)
		}
	}
}

// Translate and Allocate never panic on what a user may write: names,
// selectors, counts and modes of a prioritized list, constraints naming
// anything.
func FuzzTranslatePrioritizedList(f *testing.F) {
	f.Add("gpu", "a", "b", attrSel("profile", "==", `"1g.5gb"`), int64(2), false, "gpu/a")
	f.Add("", "a", "a", "device.attributes[", int64(-1), true, "x")
	f.Add("r", "s", "t", attrSel("index", "<", "2"), int64(40), true, "r")
	nd, err := nodeDevicesF("n1", "A100-40GB", 2)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, req, s1, s2, sel string, count int64, all bool, con string) {
		classes := []string{dranames.ClassGPU, dranames.ClassShared, dranames.ClassMIG}
		rc := rcOf("ns", "c", [][]sub{{{name: req}, {name: s1, class: classes[uint64(count)%3], sel: sel, count: count, all: all}, {name: s2, class: dranames.ClassMIG, sel: sel}}},
			resourceapi.DeviceConstraint{Requests: []string{con}, MatchAttribute: attr(dranames.DriverName + "/parentUUID")})
		c, err := Translate(rc, 0)
		if err != nil {
			return
		}
		s, _, err := NewState([]*NodeDevices{nd}, nil, Policy("binpack"), nil)
		if err != nil {
			t.Fatal(err)
		}
		if a, err := c.Allocate(s, nd, nil); err == nil {
			if _, err := ToResult(a, nd, rc, nil); err != nil {
				t.Fatalf("an allocation with no result: %v", err)
			}
		}
	})
}

// nodeDevicesF is nodeDevices for a fuzz target's setup.
func nodeDevicesF(name, model string, gpus int) (*NodeDevices, error) {
	n := alloc.Node{Name: name}
	for i := range gpus {
		n.GPUs = append(n.GPUs, alloc.GPU{UUID: fmt.Sprintf("GPU-%s-%d", name, i), Index: i, Model: model, Healthy: true})
	}
	sl, err := dradriver.Slices(n, 1, "580.65.06", nil)
	if err != nil {
		return nil, err
	}
	var ps []*resourceapi.ResourceSlice
	for i := range sl {
		ps = append(ps, &sl[i])
	}
	return NodeFromSlices(name, nil, ps, nil)
}
