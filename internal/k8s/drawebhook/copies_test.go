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
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

func admit(t *testing.T, resource string, obj any, ns *corev1.Namespace, c Copies) *admissionv1.AdmissionResponse {
	t.Helper()
	raw, _ := json.Marshal(obj)
	return AdmitClaim(&admissionv1.AdmissionRequest{UID: "u", Operation: admissionv1.Create, Namespace: ns.Name,
		Resource: metav1.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: resource},
		Object:   runtime.RawExtension{Raw: raw}}, ns, c)
}

// A claim for the shared class in a namespace without tenant copies is
// refused at create, naming the namespace, why and how to give it copies;
// other classes there, and shared claims elsewhere, pass (with their
// tenant's toleration).
func TestAdmitClaimWithoutCopies(t *testing.T) {
	nsOf := func(name string, labels map[string]string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	off := map[string]string{dranames.TenantCopiesKey: "false"}
	on := map[string]string{dranames.TenantCopiesKey: "true"}
	c := Copies{Tenants: []string{"ops"}, NoTenantNamespaces: []string{"gpuslice"}}
	mixed := claim("", "fa", dranames.ClassGPU, "")
	mixed.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "any", FirstAvailable: []resourceapi.DeviceSubRequest{
		{Name: "share", DeviceClassName: dranames.ClassShared}, {Name: "mig", DeviceClassName: dranames.ClassMIG}}}}
	sharedOnly := claim("", "fa", dranames.ClassGPU, "")
	sharedOnly.Spec.Devices.Requests = append(sharedOnly.Spec.Devices.Requests, resourceapi.DeviceRequest{Name: "any",
		FirstAvailable: []resourceapi.DeviceSubRequest{{Name: "a", DeviceClassName: dranames.ClassShared}, {Name: "b", DeviceClassName: dranames.ClassShared}}})
	tmpl := &resourceapi.ResourceClaimTemplate{Spec: resourceapi.ResourceClaimTemplateSpec{Spec: claim("", "", dranames.ClassShared, "").Spec}}
	for _, tc := range []struct {
		name     string
		resource string
		obj      any
		ns       *corev1.Namespace
		deny     []string // substrings of the denial; nil: allowed
	}{
		{"kube-system shared", "resourceclaims", claim("", "c", dranames.ClassShared, ""), nsOf("kube-system", nil),
			[]string{"spec.devices.requests[0].exactly asks for shared.gpuslice.dev", "namespace kube-system is a Kubernetes system namespace",
				`tenant "kube-system"`, "wait forever", "kubectl label namespace kube-system gpuslice.dev/tenant-copies=true --overwrite"}},
		{"labelled false", "resourceclaims", claim("", "c", dranames.ClassShared, ""), nsOf("team-b", off),
			[]string{"namespace team-b is labelled gpuslice.dev/tenant-copies=false"}},
		{"flag", "resourceclaimtemplates", tmpl, nsOf("gpuslice", nil),
			[]string{"spec.spec.devices.requests[0].exactly", "namespace gpuslice is in the driver's --no-tenant-namespaces"}},
		{"firstAvailable all shared", "resourceclaims", sharedOnly, nsOf("kube-public", nil),
			[]string{"spec.devices.requests[1].firstAvailable asks for"}},
		{"firstAvailable with another class", "resourceclaims", mixed, nsOf("kube-public", nil), nil},
		{"whole GPU in kube-system", "resourceclaims", claim("", "c", dranames.ClassGPU, ""), nsOf("kube-system", nil), nil},
		{"MIG labelled false", "resourceclaims", claim("", "c", dranames.ClassMIG, ""), nsOf("team-b", off), nil},
		{"shared in default", "resourceclaims", claim("", "c", dranames.ClassShared, ""), nsOf("default", nil), nil},
		{"kube-system labelled true", "resourceclaims", claim("", "c", dranames.ClassShared, ""), nsOf("kube-system", on), nil},
		{"tenant in --tenants", "resourceclaims", claim("", "c", dranames.ClassShared, ""),
			nsOf("gpuslice", map[string]string{dranames.TenantKey: "ops", dranames.TenantCopiesKey: "false"}), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := admit(t, tc.resource, tc.obj, tc.ns, c)
			if tc.deny == nil {
				if !r.Allowed {
					t.Fatalf("denied: %s", r.Result.Message)
				}
				if len(r.Patch) == 0 {
					t.Fatal("allowed without the tenant's toleration")
				}
				return
			}
			if r.Allowed || r.Result.Code != 403 {
				t.Fatalf("want denied 403, got %+v", r)
			}
			for _, want := range tc.deny {
				if !strings.Contains(r.Result.Message, want) {
					t.Errorf("message %q lacks %q", r.Result.Message, want)
				}
			}
		})
	}
}

// Over HTTP with the namespace read from the API server (a fake one): the
// label decides, relabelling takes effect on the next claim.
func TestClaimPathReadsCopiesLabel(t *testing.T) {
	cs := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-b",
		Labels: map[string]string{dranames.TenantCopiesKey: "false"}}})
	h := Handler(slog.New(slog.NewTextHandler(io.Discard, nil)), "", ReadNamespace(cs), Copies{})
	post := func() *admissionv1.AdmissionResponse {
		raw, _ := json.Marshal(claim("team-b", "c", dranames.ClassShared, ""))
		body, _ := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request: &admissionv1.AdmissionRequest{UID: "u1", Operation: admissionv1.Create, Namespace: "team-b",
				Resource: metav1.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceclaims"},
				Object:   runtime.RawExtension{Raw: raw}}})
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", ClaimPath, bytes.NewReader(body)))
		var out admissionv1.AdmissionReview
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
			t.Fatalf("%d %s: %v", rec.Code, rec.Body, err)
		}
		return out.Response
	}
	if r := post(); r.Allowed || !strings.Contains(r.Result.Message, "labelled gpuslice.dev/tenant-copies=false") {
		t.Fatalf("labelled false: %+v", r)
	}
	ns, _ := cs.CoreV1().Namespaces().Get(t.Context(), "team-b", metav1.GetOptions{})
	delete(ns.Labels, dranames.TenantCopiesKey)
	if _, err := cs.CoreV1().Namespaces().Update(t.Context(), ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if r := post(); !r.Allowed {
		t.Fatalf("label removed: %+v", r.Result)
	}
}
