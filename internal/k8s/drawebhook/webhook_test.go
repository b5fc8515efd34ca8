package drawebhook

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuslice/gpuslice/internal/k8s/apitest"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// TestMain runs the tests on the package's one control plane and stops
// it (and its scheduler) when they end.
func TestMain(m *testing.M) { os.Exit(apitest.Main(m)) }

// deleteOnCleanup deletes a test's webhook configuration when it ends,
// before its webhook server closes, and the pods and claims of its
// namespaces: the test can run again on the shared API server (go test
// -count=2).
func deleteOnCleanup(t *testing.T, ctx context.Context, cs kubernetes.Interface, hook any, namespaces ...string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		var err error
		switch h := hook.(type) {
		case *admissionregv1.MutatingWebhookConfiguration:
			err = cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, h.Name, metav1.DeleteOptions{})
		case *admissionregv1.ValidatingWebhookConfiguration:
			err = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, h.Name, metav1.DeleteOptions{})
		default:
			err = fmt.Errorf("not a webhook configuration: %T", hook)
		}
		if err != nil {
			t.Errorf("deleting the webhook configuration: %v", err)
		}
		zero := int64(0)
		for _, ns := range namespaces {
			if err := cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
				t.Errorf("deleting the pods of %s: %v", ns, err)
			}
			if err := cs.ResourceV1().ResourceClaims(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
				t.Errorf("deleting the claims of %s: %v", ns, err)
			}
		}
	})
}

// onlyNamespaces selects the named namespaces, for a webhook of one test
// on the shared API server.
func onlyNamespaces(names ...string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: names}}}
}

func claim(ns, name, class, params string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}}},
		}}}
	if params != "" {
		c.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
			Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: "gpu.gpuslice.dev", Parameters: runtime.RawExtension{Raw: []byte(params)}}}}}
	}
	return c
}

const (
	goodMPS  = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":50}}}`
	badFair  = `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"Fair"}}`
	badField = `{"apiVersion":"gpu.gpuslice.dev/v1alpha1","kind":"SliceConfig","mode":"mps","treads":20}`
)

func review(t *testing.T, h http.Handler, resource string, obj any, op admissionv1.Operation) *admissionv1.AdmissionResponse {
	t.Helper()
	raw, _ := json.Marshal(obj)
	in := admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "u1", Operation: op,
			Resource: metav1.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: resource},
			Object:   runtime.RawExtension{Raw: raw}}}
	body, _ := json.Marshal(in)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", Path, bytes.NewReader(body)))
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil || out.Response.UID != "u1" {
		t.Fatalf("response %s: %v", rec.Body, err)
	}
	return out.Response
}

func TestHandler(t *testing.T) {
	h := Handler(slog.New(slog.NewTextHandler(io.Discard, nil)), "gpuslice-scheduler", nil, Copies{})
	if r := review(t, h, "resourceclaims", claim("a", "ok", "shared.gpuslice.dev", goodMPS), admissionv1.Create); !r.Allowed {
		t.Fatalf("good claim denied: %+v", r.Result)
	}
	r := review(t, h, "resourceclaims", claim("a", "bad", "shared.gpuslice.dev", badFair), admissionv1.Create)
	if r.Allowed || !strings.Contains(r.Result.Message, `spec.devices.config[0].opaque.parameters.sharing.strategy "Fair": valid are TimeSlicing, MPS`) {
		t.Fatalf("bad claim: %+v", r.Result)
	}
	tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "t"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: claim("", "", "shared.gpuslice.dev", badField).Spec}}
	r = review(t, h, "resourceclaimtemplates", tmpl, admissionv1.Update)
	if r.Allowed || !strings.Contains(r.Result.Message, "spec.spec.devices.config[0].opaque.parameters.treads: unknown field; valid fields here are") {
		t.Fatalf("bad template: %+v", r.Result)
	}
	// Deletes, other resources and other drivers' configs pass.
	if r := review(t, h, "resourceclaims", claim("a", "bad", "shared.gpuslice.dev", badFair), admissionv1.Delete); !r.Allowed {
		t.Fatal("delete denied")
	}
	if r := review(t, h, "deviceclasses", map[string]any{"spec": 1}, admissionv1.Create); !r.Allowed {
		t.Fatal("other resource denied")
	}
	// Garbage is a 400, not a panic.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", Path, strings.NewReader("{")))
	if rec.Code != http.StatusBadRequest {
		t.Fatalf("garbage: %d", rec.Code)
	}
}

// startWebhook joins the package's real kube-apiserver, starts the webhook
// over TLS, and returns the webhook's URL base (ts.URL), its CA bundle, a
// clientset and a context bounding the test.
func startWebhook(t *testing.T) (*apitest.Server, *httptest.Server, []byte, *kubernetes.Clientset, context.Context) {
	srv := apitest.Shared(t)
	ts := httptest.NewTLSServer(Handler(slog.New(slog.NewTextHandler(io.Discard, nil)), "gpuslice-scheduler", nil, Copies{}))
	t.Cleanup(ts.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
	cs, err := kubernetes.NewForConfig(srv.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return srv, ts, ca, cs, ctx
}

// On a real kube-apiserver v1.36.3: with the webhook registered, a claim
// (and a template) whose config the kubelet plugin would refuse is denied
// at create with the field's path; a good claim is created.
func TestWebhookOnAPIServer(t *testing.T) {
	t.Parallel()
	srv, ts, ca, cs, ctx := startWebhook(t)
	fail := admissionregv1.Fail
	none := admissionregv1.SideEffectClassNone
	url := ts.URL + Path
	const ns = "webhook-a"
	hook := &admissionregv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "gpuslice"},
		Webhooks: []admissionregv1.ValidatingWebhook{{
			Name:         "claims.gpu.gpuslice.dev",
			ClientConfig: admissionregv1.WebhookClientConfig{URL: &url, CABundle: ca},
			Rules:        []admissionregv1.RuleWithOperations{{Operations: []admissionregv1.OperationType{admissionregv1.Create, admissionregv1.Update}, Rule: admissionregv1.Rule{APIGroups: []string{"resource.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"resourceclaims", "resourceclaimtemplates"}}}},
			// The test's namespace only: the other tests on the shared
			// API server make claims while this one's server may be gone.
			NamespaceSelector:       onlyNamespaces(ns),
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
		}}}
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, hook, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deleteOnCleanup(t, ctx, cs, hook, ns)
	if err := srv.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	claims := cs.ResourceV1().ResourceClaims(ns)
	// The API server picks the configuration up within a second or so.
	var last error
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_ = testkit.Wait(wctx, func() (bool, string) {
		_, last = claims.Create(ctx, claim(ns, "probe", "shared.gpuslice.dev", badFair), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return last != nil, "the bad claim is admitted"
	})
	if last == nil || !apierrors.IsInvalid(last) && !strings.Contains(last.Error(), "denied the request") {
		t.Fatalf("bad claim not denied by the webhook: %v", last)
	}
	if !strings.Contains(last.Error(), `spec.devices.config[0].opaque.parameters.sharing.strategy "Fair": valid are TimeSlicing, MPS`) {
		t.Fatalf("denial does not name the field: %v", last)
	}
	if _, err := claims.Create(ctx, claim(ns, "good", "shared.gpuslice.dev", goodMPS), metav1.CreateOptions{}); err != nil {
		t.Fatalf("good claim refused: %v", err)
	}
	if _, err := claims.Create(ctx, claim(ns, "plain", "gpu.gpuslice.dev", ""), metav1.CreateOptions{}); err != nil {
		t.Fatalf("claim without config refused: %v", err)
	}
	_, err := claims.Create(ctx, claim(ns, "excl", "shared.gpuslice.dev", `{"apiVersion":"gpu.gpuslice.dev/v1alpha1","kind":"SliceConfig","mode":"exclusive"}`), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), `request "gpu": mode exclusive on a shared GPU: use device class gpu.gpuslice.dev`) {
		t.Fatalf("exclusive on the shared class: %v", err)
	}
	tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "t"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: claim("", "", "shared.gpuslice.dev", badField).Spec}}
	_, err = cs.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "spec.spec.devices.config[0].opaque.parameters.treads: unknown field") {
		t.Fatalf("bad template: %v", err)
	}
	// A claim's spec is immutable; a metadata update of an admitted claim
	// passes the webhook.
	got, err := claims.Get(ctx, "good", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got.Labels = map[string]string{"x": "y"}
	if _, err := claims.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("label update refused: %v", err)
	}
}

func pod(ns, name, scheduler string, claims bool, gpus bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{SchedulerName: scheduler, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	if claims {
		tmpl := "gpu"
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: &tmpl}}
	}
	if gpus {
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{dranames.LegacyGPUResource: resource.MustParse("1")}
	}
	return p
}

func TestSchedulePod(t *testing.T) {
	cases := []struct {
		name  string
		pod   *corev1.Pod
		patch string
	}{
		{"claims, no scheduler", pod("a", "p", "", true, false), `[{"op":"add","path":"/spec/schedulerName","value":"gpuslice-scheduler"}]`},
		{"nvidia.com/gpu, default scheduler", pod("a", "p", "default-scheduler", false, true), `[{"op":"replace","path":"/spec/schedulerName","value":"gpuslice-scheduler"}]`},
		{"no GPUs", pod("a", "p", "", false, false), ""},
		{"a scheduler of the user's", pod("a", "p", "volcano", true, false), ""},
		{"already ours", pod("a", "p", "gpuslice-scheduler", true, false), ""},
	}
	for _, c := range cases {
		raw, _ := json.Marshal(c.pod)
		r := SchedulePod(&admissionv1.AdmissionRequest{UID: "u", Operation: admissionv1.Create,
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, Object: runtime.RawExtension{Raw: raw}}, "gpuslice-scheduler")
		if !r.Allowed || string(r.Patch) != c.patch {
			t.Errorf("%s: allowed %v patch %s, want %s", c.name, r.Allowed, r.Patch, c.patch)
		}
	}
}

// On a real kube-apiserver: pods asking for GPUs in a namespace labelled
// for gpuslice-scheduler get its schedulerName; other namespaces' pods and
// pods that chose a scheduler keep theirs.
func TestSchedulerNameOnAPIServer(t *testing.T) {
	t.Parallel()
	srv, ts, ca, cs, ctx := startWebhook(t)
	fail := admissionregv1.Fail
	none := admissionregv1.SideEffectClassNone
	url := ts.URL + PodPath
	hook := &admissionregv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "gpuslice-scheduler"},
		Webhooks: []admissionregv1.MutatingWebhook{{
			Name:                    "pods.gpu.gpuslice.dev",
			ClientConfig:            admissionregv1.WebhookClientConfig{URL: &url, CABundle: ca},
			Rules:                   []admissionregv1.RuleWithOperations{{Operations: []admissionregv1.OperationType{admissionregv1.Create}, Rule: admissionregv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"gpuslice.dev/scheduler": "gpuslice-scheduler"}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
		}}}
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, hook, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deleteOnCleanup(t, ctx, cs, hook, "ml", "web")
	for _, ns := range []string{"ml", "web"} {
		if err := srv.EnsureNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	nsObj, err := cs.CoreV1().Namespaces().Get(ctx, "ml", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nsObj.Labels["gpuslice.dev/scheduler"] = "gpuslice-scheduler"
	if _, err := cs.CoreV1().Namespaces().Update(ctx, nsObj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The API server picks the configuration up within a second or so.
	i := 0
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_ = testkit.Wait(wctx, func() (bool, string) {
		got, err := cs.CoreV1().Pods("ml").Create(ctx, pod("ml", fmt.Sprintf("probe-%d", i), "", true, false), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			t.Fatal(err)
		}
		i++
		return got.Spec.SchedulerName == "gpuslice-scheduler", "not mutated yet"
	})
	want := map[string]string{"ml/claims": "gpuslice-scheduler", "ml/gpus": "gpuslice-scheduler", "ml/cpu": "default-scheduler",
		"ml/own": "volcano", "web/claims": "default-scheduler"}
	pods := []*corev1.Pod{pod("ml", "claims", "", true, false), pod("ml", "gpus", "", false, true), pod("ml", "cpu", "", false, false),
		pod("ml", "own", "volcano", true, false), pod("web", "claims", "", true, false)}
	for _, p := range pods {
		got, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s/%s: %v", p.Namespace, p.Name, err)
		}
		if w := want[p.Namespace+"/"+p.Name]; got.Spec.SchedulerName != w {
			t.Errorf("%s/%s: schedulerName %q, want %q", p.Namespace, p.Name, got.Spec.SchedulerName, w)
		}
	}
}
