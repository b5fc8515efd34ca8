package drawebhook

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// v1beta1Claim is a ResourceClaim as resource.k8s.io/v1beta1 writes it:
// the request's class and tolerations sit on the request itself, where
// v1 has them under exactly, so decoded as v1 the request asks for
// nothing and tolerates nothing. It tolerates team-b's taint.
const v1beta1Claim = `{"apiVersion":"resource.k8s.io/v1beta1","kind":"ResourceClaim","metadata":{"namespace":"team-a","name":"sneaky"},
"spec":{"devices":{"requests":[{"name":"gpu","deviceClassName":"shared.gpuslice.dev",
"tolerations":[{"key":"` + dranames.TenantKey + `","operator":"Equal","value":"team-b","effect":"NoSchedule"}]}]}}}`

const v1beta1Template = `{"apiVersion":"resource.k8s.io/v1beta1","kind":"ResourceClaimTemplate","metadata":{"namespace":"team-a","name":"sneaky"},
"spec":{"spec":{"devices":{"requests":[{"name":"gpu","deviceClassName":"shared.gpuslice.dev",
"tolerations":[{"key":"` + dranames.TenantKey + `","operator":"Exists"}]}]}}}}`

// The webhook decodes claims and templates as resource.k8s.io/v1 only: a
// request of any other version (its resource or its kind) is refused,
// naming the version received, never decoded as v1 and admitted with
// another tenant's toleration. Registered with matchPolicy: Equivalent,
// the API server converts to v1 first.
func TestWebhookRefusesVersionsOtherThanV1(t *testing.T) {
	h := Handler(slog.New(slog.NewTextHandler(io.Discard, nil)), "gpuslice-scheduler", nil, Copies{})
	send := func(path string, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		t.Helper()
		body, _ := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Request: req})
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", path, bytes.NewReader(body)))
		var out admissionv1.AdmissionReview
		if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &out) != nil || out.Response == nil {
			t.Fatalf("%s: %d %s", path, rec.Code, rec.Body)
		}
		return out.Response
	}
	for _, tc := range []struct {
		name, resource, kind, obj string
		res, knd                  string // versions of Resource and Kind
	}{
		{"v1beta1 claim", "resourceclaims", "ResourceClaim", v1beta1Claim, "v1beta1", "v1beta1"},
		{"v1beta2 claim", "resourceclaims", "ResourceClaim", v1beta1Claim, "v1beta2", "v1beta2"},
		{"v1beta1 template", "resourceclaimtemplates", "ResourceClaimTemplate", v1beta1Template, "v1beta1", "v1beta1"},
		{"v1 resource, v1beta1 kind", "resourceclaims", "ResourceClaim", v1beta1Claim, "v1", "v1beta1"},
		{"no version", "resourceclaims", "ResourceClaim", v1beta1Claim, "", ""},
	} {
		for _, path := range []string{ClaimPath, Path} {
			req := &admissionv1.AdmissionRequest{UID: "u", Operation: admissionv1.Create, Namespace: "team-a",
				Kind:     metav1.GroupVersionKind{Group: "resource.k8s.io", Version: tc.knd, Kind: tc.kind},
				Resource: metav1.GroupVersionResource{Group: "resource.k8s.io", Version: tc.res, Resource: tc.resource},
				Object:   runtime.RawExtension{Raw: []byte(tc.obj)}}
			r := send(path, req)
			if r.Allowed || r.Patch != nil || r.Result == nil {
				t.Errorf("%s on %s: allowed (patch %s), want refused", tc.name, path, r.Patch)
				continue
			}
			got := tc.res
			if got == "v1" {
				got = tc.knd
			}
			if m := r.Result.Message; !strings.Contains(m, "only resource.k8s.io/v1 is served") || !strings.Contains(m, "matchPolicy: Equivalent") ||
				(got != "" && !strings.Contains(m, "resource.k8s.io/"+got+" ")) {
				t.Errorf("%s on %s: %q, want the version received and that only resource.k8s.io/v1 is served", tc.name, path, m)
			}
		}
	}
	// The same claim converted to v1 (as matchPolicy: Equivalent has the
	// API server send it) is denied for the toleration itself.
	v1 := strings.NewReplacer(`"apiVersion":"resource.k8s.io/v1beta1"`, `"apiVersion":"resource.k8s.io/v1"`,
		`{"name":"gpu","deviceClassName"`, `{"name":"gpu","exactly":{"deviceClassName"`, `"NoSchedule"}]}]`, `"NoSchedule"}]}}]`).Replace(v1beta1Claim)
	r := send(ClaimPath, &admissionv1.AdmissionRequest{UID: "u", Operation: admissionv1.Create, Namespace: "team-a",
		Kind:     metav1.GroupVersionKind{Group: "resource.k8s.io", Version: "v1", Kind: "ResourceClaim"},
		Resource: metav1.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceclaims"},
		Object:   runtime.RawExtension{Raw: []byte(v1)}})
	if r.Allowed || !strings.Contains(r.Result.Message, "team-b") {
		t.Fatalf("the v1 form of the claim: allowed %v %+v, want denied for team-b's toleration", r.Allowed, r.Result)
	}
	// Pods are core v1 and pass as before.
	pod := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"x"}]}}`
	r = send(PodPath, &admissionv1.AdmissionRequest{UID: "u", Operation: admissionv1.Create, Namespace: "team-a",
		Kind:     metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, Object: runtime.RawExtension{Raw: []byte(pod)}})
	if !r.Allowed {
		t.Fatalf("a pod: %+v", r.Result)
	}
}
