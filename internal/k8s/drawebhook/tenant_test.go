package drawebhook

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// applyPatch applies the JSON patch IsolateClaim makes (add of a new
// array, or append with "/-") to raw, as the API server would.
func applyPatch(t testing.TB, raw, patch []byte) []byte {
	t.Helper()
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var ops []patchOp
	if err := json.Unmarshal(patch, &ops); err != nil {
		t.Fatalf("patch %s: %v", patch, err)
	}
	for _, op := range ops {
		if op.Op != "add" {
			t.Fatalf("op %q", op.Op)
		}
		parts := strings.Split(strings.TrimPrefix(op.Path, "/"), "/")
		appendTo := parts[len(parts)-1] == "-"
		if appendTo {
			parts = parts[:len(parts)-1]
		}
		cur := doc
		for _, p := range parts[:len(parts)-1] {
			switch c := cur.(type) {
			case map[string]any:
				cur = c[p]
			case []any:
				i, err := strconv.Atoi(p)
				if err != nil || i >= len(c) {
					t.Fatalf("path %s: %q", op.Path, p)
				}
				cur = c[i]
			default:
				t.Fatalf("path %s: %q in %T", op.Path, p, cur)
			}
		}
		m, ok := cur.(map[string]any)
		if !ok {
			t.Fatalf("path %s: parent is %T", op.Path, cur)
		}
		last := parts[len(parts)-1]
		v, _ := json.Marshal(op.Value)
		var val any
		_ = json.Unmarshal(v, &val)
		if appendTo {
			arr, ok := m[last].([]any)
			if !ok {
				t.Fatalf("path %s: append to %T", op.Path, m[last])
			}
			m[last] = append(arr, val)
		} else {
			if _, exists := m[last]; exists {
				t.Fatalf("path %s: add over an existing value", op.Path)
			}
			m[last] = val
		}
	}
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func isolate(t testing.TB, resource string, obj any, tenant string) (*admissionv1.AdmissionResponse, []byte) {
	t.Helper()
	raw, _ := json.Marshal(obj)
	r := IsolateClaim(&admissionv1.AdmissionRequest{UID: "u", Operation: admissionv1.Create, Namespace: "ns",
		Resource: metav1.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: resource},
		Object:   runtime.RawExtension{Raw: raw}}, tenant)
	if r.Allowed && len(r.Patch) > 0 {
		if r.PatchType == nil || *r.PatchType != admissionv1.PatchTypeJSONPatch {
			t.Fatalf("patch type %v", r.PatchType)
		}
		return r, applyPatch(t, raw, r.Patch)
	}
	return r, raw
}

// everyRequestTolerates reports whether every request and subrequest of
// spec tolerates tenant's taint (and says which does not).
func everyRequestTolerates(spec resourceapi.ResourceClaimSpec, tenant string) error {
	want := dradriver.TenantToleration(tenant)
	for i, r := range spec.Devices.Requests {
		var lists [][]resourceapi.DeviceToleration
		if r.Exactly != nil {
			lists = append(lists, r.Exactly.Tolerations)
		}
		for _, s := range r.FirstAvailable {
			lists = append(lists, s.Tolerations)
		}
		for _, l := range lists {
			if !slices.ContainsFunc(l, func(t resourceapi.DeviceToleration) bool {
				return t.Key == want.Key && t.Operator == want.Operator && t.Value == want.Value && (t.Effect == "" || t.Effect == want.Effect)
			}) {
				return fmt.Errorf("request %d: tolerations %+v lack %+v", i, l, want)
			}
		}
	}
	return nil
}

func tol(key, op, value string) resourceapi.DeviceToleration {
	return resourceapi.DeviceToleration{Key: key, Operator: resourceapi.DeviceTolerationOperator(op), Value: value, Effect: resourceapi.DeviceTaintEffectNoSchedule}
}

func TestIsolateClaim(t *testing.T) {
	shared := func(tols ...resourceapi.DeviceToleration) *resourceapi.ResourceClaim {
		c := claim("ns", "c", dranames.ClassShared, "")
		c.Spec.Devices.Requests[0].Exactly.Tolerations = tols
		return c
	}
	firstAvailable := claim("ns", "fa", dranames.ClassShared, "")
	firstAvailable.Spec.Devices.Requests = append(firstAvailable.Spec.Devices.Requests, resourceapi.DeviceRequest{Name: "auto",
		FirstAvailable: []resourceapi.DeviceSubRequest{{Name: "mig", DeviceClassName: dranames.ClassMIG},
			{Name: "share", DeviceClassName: dranames.ClassShared, Tolerations: []resourceapi.DeviceToleration{tol("example.com/flaky", "Exists", "")}}}})
	own := dradriver.TenantToleration("team-a")
	cases := []struct {
		name     string
		resource string
		obj      any
		deny     string // substring of the denial; "" = allowed
		patches  int
	}{
		{"no tolerations", "resourceclaims", shared(), "", 1},
		{"another taint's toleration kept, own appended", "resourceclaims", shared(tol("example.com/flaky", "Exists", "")), "", 1},
		{"own toleration already there", "resourceclaims", shared(own), "", 0},
		{"own toleration without effect", "resourceclaims", shared(tol(dranames.TenantKey, "Equal", "team-a")), "", 0},
		{"requests and subrequests", "resourceclaims", firstAvailable, "", 3},
		{"template", "resourceclaimtemplates", &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "t"},
			Spec: resourceapi.ResourceClaimTemplateSpec{Spec: firstAvailable.Spec}}, "", 3},
		{"another tenant", "resourceclaims", shared(tol(dranames.TenantKey, "Equal", "team-b")),
			`spec.devices.requests[0].exactly.tolerations[0]: tolerates tenant "team-b"; a claim of namespace tenant "team-a" may only tolerate gpuslice.dev/tenant=team-a`, 0},
		{"every tenant", "resourceclaims", shared(tol(dranames.TenantKey, "Exists", "")),
			"tolerations[0]: key gpuslice.dev/tenant with operator Exists tolerates every tenant", 0},
		{"every taint", "resourceclaims", shared(own, tol("", "Exists", "")),
			"spec.devices.requests[0].exactly.tolerations[1]: operator Exists without a key tolerates every taint", 0},
		{"template with another tenant in a subrequest", "resourceclaimtemplates", &resourceapi.ResourceClaimTemplate{
			Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "r",
				FirstAvailable: []resourceapi.DeviceSubRequest{{Name: "s", DeviceClassName: dranames.ClassShared, Tolerations: []resourceapi.DeviceToleration{tol(dranames.TenantKey, "Equal", "x")}}}}}}}}},
			`spec.spec.devices.requests[0].firstAvailable[0].tolerations[0]: tolerates tenant "x"`, 0},
		{"not a claim", "deviceclasses", map[string]any{"spec": 1}, "", 0},
		{"garbage", "resourceclaims", map[string]any{"spec": 1}, "ResourceClaim: json", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, out := isolate(t, c.resource, c.obj, "team-a")
			if c.deny != "" {
				if r.Allowed || !strings.Contains(r.Result.Message, c.deny) {
					t.Fatalf("want denied with %q, got %+v", c.deny, r.Result)
				}
				return
			}
			if !r.Allowed {
				t.Fatalf("denied: %+v", r.Result)
			}
			var ops []patchOp
			if len(r.Patch) > 0 {
				_ = json.Unmarshal(r.Patch, &ops)
			}
			if len(ops) != c.patches {
				t.Fatalf("patch %s: %d ops, want %d", r.Patch, len(ops), c.patches)
			}
			var spec resourceapi.ResourceClaimSpec
			switch c.resource {
			case "resourceclaims":
				var cl resourceapi.ResourceClaim
				if err := json.Unmarshal(out, &cl); err != nil {
					t.Fatal(err)
				}
				spec = cl.Spec
			case "resourceclaimtemplates":
				var tm resourceapi.ResourceClaimTemplate
				if err := json.Unmarshal(out, &tm); err != nil {
					t.Fatal(err)
				}
				spec = tm.Spec.Spec
			default:
				return
			}
			if err := everyRequestTolerates(spec, "team-a"); err != nil {
				t.Fatal(err)
			}
		})
	}
	// Updates, deletes and status pass untouched; a bad tenant is refused.
	raw, _ := json.Marshal(shared(tol(dranames.TenantKey, "Equal", "team-b")))
	for _, op := range []admissionv1.Operation{admissionv1.Update, admissionv1.Delete} {
		r := IsolateClaim(&admissionv1.AdmissionRequest{Operation: op, Resource: metav1.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceclaims"},
			Object: runtime.RawExtension{Raw: raw}}, "team-a")
		if !r.Allowed || r.Patch != nil {
			t.Fatalf("%s: %+v", op, r)
		}
	}
	if r, _ := isolate(t, "resourceclaims", shared(), "-bad-"); r.Allowed || !strings.Contains(r.Result.Message, `tenant "-bad-"`) {
		t.Fatalf("bad tenant: %+v", r)
	}
}

// Whatever claim arrives, IsolateClaim never panics, and what it admits
// has, once patched, its tenant's toleration on every request and no
// toleration of another tenant's taint.
func FuzzIsolateClaim(f *testing.F) {
	for _, c := range []any{
		claim("ns", "c", dranames.ClassShared, goodMPS),
		&resourceapi.ResourceClaimTemplate{Spec: resourceapi.ResourceClaimTemplateSpec{Spec: claim("", "", dranames.ClassGPU, "").Spec}},
	} {
		raw, _ := json.Marshal(c)
		f.Add(raw, true)
	}
	f.Add([]byte(`{"spec":{"devices":{"requests":[{"name":"a","exactly":{"deviceClassName":"x","tolerations":[{"key":"gpuslice.dev/tenant","operator":"Equal","value":"t"}]}},{"name":"b","firstAvailable":[{"name":"c","deviceClassName":"y","tolerations":[]}]}]}}}`), false)
	f.Add([]byte(`{"spec":{"devices":{"requests":[{"name":"a","exactly":{"tolerations":[{"operator":"Exists"}]}}]}}}`), true)
	f.Add([]byte(`{"spec":{"spec":{"devices":{"requests":[null]}}}}`), false)
	f.Fuzz(func(t *testing.T, raw []byte, template bool) {
		res := "resourceclaims"
		if template {
			res = "resourceclaimtemplates"
		}
		req := func(raw []byte) *admissionv1.AdmissionResponse {
			return IsolateClaim(&admissionv1.AdmissionRequest{Operation: admissionv1.Create, Namespace: "ns",
				Resource: metav1.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: res}, Object: runtime.RawExtension{Raw: raw}}, "t")
		}
		if r := req(raw); !r.Allowed && (r.Result == nil || r.Result.Message == "") {
			t.Fatal("denied without a reason")
		}
		// The API server sends the object as it serializes it: check the
		// property on that form.
		var obj any = &resourceapi.ResourceClaim{}
		if template {
			obj = &resourceapi.ResourceClaimTemplate{}
		}
		if json.Unmarshal(raw, obj) != nil {
			return
		}
		raw, _ = json.Marshal(obj)
		r := req(raw)
		if !r.Allowed {
			if r.Result == nil || r.Result.Message == "" {
				t.Fatal("denied without a reason")
			}
			return
		}
		out := raw
		if len(r.Patch) > 0 {
			out = applyPatch(t, raw, r.Patch)
		}
		var spec resourceapi.ResourceClaimSpec
		if template {
			var tm resourceapi.ResourceClaimTemplate
			if err := json.Unmarshal(out, &tm); err != nil {
				t.Fatalf("patched template does not decode: %v", err)
			}
			spec = tm.Spec.Spec
		} else {
			var cl resourceapi.ResourceClaim
			if err := json.Unmarshal(out, &cl); err != nil {
				t.Fatalf("patched claim does not decode: %v", err)
			}
			spec = cl.Spec
		}
		if err := everyRequestTolerates(spec, "t"); err != nil {
			t.Fatal(err)
		}
		if _, probs := tenantPatch(&spec, "t", "spec", "/spec"); len(probs) > 0 {
			t.Fatalf("admitted %v", probs)
		}
	})
}
