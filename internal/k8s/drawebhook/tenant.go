package drawebhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
	"github.com/gpuslice/gpuslice/internal/k8s/scalezero"
)

// ClaimPath is where the webhook mutates ResourceClaims and
// ResourceClaimTemplates at CREATE for tenant isolation on the stock
// scheduler: every request (and every firstAvailable subrequest) gets the
// toleration of its namespace's tenant's taint
// (gpuslice.dev/tenant=<tenant>:NoSchedule), so the stock allocator can
// give it that tenant's copies of the shared GPUs and no other tenant's;
// a claim that brings a toleration of another tenant's taint (or of every
// taint) is refused.
const ClaimPath = "/mutate-claims"

// NamespaceFunc reads a namespace: its labels name its tenant
// (gpuslice.dev/tenant) and say whether it has tenant copies
// (gpuslice.dev/tenant-copies).
type NamespaceFunc func(ctx context.Context, namespace string) (*corev1.Namespace, error)

// NamespaceByName is a namespace without the API server: its name only,
// no labels (the tenant is the name; system namespaces and
// --no-tenant-namespaces still have no copies).
func NamespaceByName(_ context.Context, namespace string) (*corev1.Namespace, error) {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, nil
}

// ReadNamespace reads the namespace from the API server.
func ReadNamespace(cs kubernetes.Interface) NamespaceFunc {
	return func(ctx context.Context, namespace string) (*corev1.Namespace, error) {
		ns, err := cs.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("reading namespace %s for its %s and %s labels: %w", namespace, dranames.TenantKey, dranames.TenantCopiesKey, err)
		}
		return ns, nil
	}
}

// KubeconfigNamespace is ReadNamespace over the API server kubeconfig
// names ("in-cluster": the pod's ServiceAccount; a path: that file).
func KubeconfigNamespace(kubeconfig string) (NamespaceFunc, error) {
	path := kubeconfig
	if path == "in-cluster" {
		path = ""
	}
	rest, _, err := scalezero.KubeConfig(path)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(rest)
	if err != nil {
		return nil, err
	}
	return ReadNamespace(cs), nil
}

// Copies is what the driver was told about tenant copies (the chart
// gives both the same values): its --tenants and --no-tenant-namespaces,
// for dradriver.TenantCopies.
type Copies struct {
	Tenants            []string
	NoTenantNamespaces []string
}

// AdmitClaim decides one AdmissionRequest on ClaimPath for a claim or
// template in namespace ns: refused when ns has no tenant copies
// (dradriver.TenantCopies) and a request can only be served by the
// shared class (its claim would find no shared GPU and wait forever),
// else IsolateClaim for ns's tenant. Pure.
func AdmitClaim(req *admissionv1.AdmissionRequest, ns *corev1.Namespace, c Copies) *admissionv1.AdmissionResponse {
	resp := IsolateClaim(req, dradriver.TenantOf(ns))
	ok, why := dradriver.TenantCopies(ns, c.Tenants, c.NoTenantNamespaces)
	if !resp.Allowed || ok {
		return resp
	}
	spec, field, _, err := claimSpec(req)
	if err != nil || spec == nil {
		return resp
	}
	var shared []string
	for i, r := range spec.Devices.Requests {
		f := fmt.Sprintf("%s.devices.requests[%d]", field, i)
		switch {
		case r.Exactly != nil && r.Exactly.DeviceClassName == dranames.ClassShared:
			shared = append(shared, f+".exactly")
		case len(r.FirstAvailable) > 0 && !slices.ContainsFunc(r.FirstAvailable, func(s resourceapi.DeviceSubRequest) bool {
			return s.DeviceClassName != dranames.ClassShared
		}):
			shared = append(shared, f+".firstAvailable")
		}
	}
	if len(shared) == 0 {
		return resp
	}
	return &admissionv1.AdmissionResponse{UID: req.UID, Result: &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusForbidden,
		Reason: metav1.StatusReasonForbidden,
		Message: fmt.Sprintf("%s: %s asks for %s, but %s, so no node publishes shared GPUs for its tenant %q and the claim would wait forever; %s",
			dranames.DriverName, strings.Join(shared, ", "), dranames.ClassShared, why, dradriver.TenantOf(ns), dradriver.HowToEnableCopies(ns.Name))}}
}

// claimSpec decodes the spec of a ResourceClaim or ResourceClaimTemplate
// CREATE (nil for any other request), with its field and JSON-patch
// paths.
func claimSpec(req *admissionv1.AdmissionRequest) (*resourceapi.ResourceClaimSpec, string, string, error) {
	if req.Operation != admissionv1.Create || req.Resource.Group != resourceapi.GroupName || req.SubResource != "" {
		return nil, "", "", nil
	}
	switch req.Resource.Resource {
	case "resourceclaims":
		var c resourceapi.ResourceClaim
		if err := json.Unmarshal(req.Object.Raw, &c); err != nil {
			return nil, "", "", fmt.Errorf("ResourceClaim: %v", err)
		}
		return &c.Spec, "spec", "/spec", nil
	case "resourceclaimtemplates":
		var c resourceapi.ResourceClaimTemplate
		if err := json.Unmarshal(req.Object.Raw, &c); err != nil {
			return nil, "", "", fmt.Errorf("ResourceClaimTemplate: %v", err)
		}
		return &c.Spec.Spec, "spec.spec", "/spec/spec", nil
	}
	return nil, "", "", nil
}

// IsolateClaim decides one AdmissionRequest on ClaimPath for a claim or
// template of tenant: allowed with a JSON patch adding the tenant's
// toleration where a request lacks it, or denied naming every toleration
// that would reach another tenant's GPUs. Only CREATE is changed (a
// claim's spec is immutable afterwards). Pure.
func IsolateClaim(req *admissionv1.AdmissionRequest, tenant string) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	deny := func(code int32, msg string) *admissionv1.AdmissionResponse {
		resp.Allowed = false
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: code, Reason: metav1.StatusReasonInvalid, Message: msg}
		return resp
	}
	if req.Operation != admissionv1.Create || req.Resource.Group != resourceapi.GroupName || req.SubResource != "" {
		return resp
	}
	switch req.Resource.Resource {
	case "resourceclaims", "resourceclaimtemplates":
		// Decoded as v1 only: another version's object would decode to
		// nothing and pass unpatched (see unservedVersion).
		if why := unservedVersion(req); why != "" {
			return deny(http.StatusBadRequest, why)
		}
	default:
		return resp
	}
	spec, field, path, err := claimSpec(req)
	if err != nil {
		return deny(http.StatusBadRequest, err.Error())
	}
	if spec == nil {
		return resp
	}
	if err := dradriver.CheckTenant(tenant); err != nil {
		return deny(http.StatusUnprocessableEntity, fmt.Sprintf("%s: namespace %s: %v", dranames.DriverName, req.Namespace, err))
	}
	patch, probs := tenantPatch(spec, tenant, field, path)
	if len(probs) > 0 {
		return deny(http.StatusForbidden, dranames.DriverName+": "+strings.Join(probs, "; "))
	}
	if len(patch) > 0 {
		raw, err := json.Marshal(patch)
		if err != nil {
			return deny(http.StatusInternalServerError, err.Error())
		}
		pt := admissionv1.PatchTypeJSONPatch
		resp.Patch, resp.PatchType = raw, &pt
	}
	return resp
}

type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// tenantPatch is the JSON patch adding tenant's toleration to every
// request and subrequest of spec that lacks it, and the problems (a
// toleration reaching another tenant's copies), each with its field path.
func tenantPatch(spec *resourceapi.ResourceClaimSpec, tenant, field, path string) ([]patchOp, []string) {
	var ops []patchOp
	var probs []string
	want := dradriver.TenantToleration(tenant)
	one := func(tols []resourceapi.DeviceToleration, f, p string) {
		has := false
		for k, t := range tols {
			if why := foreignToleration(t, tenant); why != "" {
				probs = append(probs, fmt.Sprintf("%s.tolerations[%d]: %s; a claim of namespace tenant %q may only tolerate %s=%s",
					f, k, why, tenant, dranames.TenantKey, tenant))
			}
			has = has || (t.Key == want.Key && t.Operator != resourceapi.DeviceTolerationOpExists && t.Value == tenant &&
				(t.Effect == "" || t.Effect == want.Effect))
		}
		switch {
		case has:
		case len(tols) == 0:
			ops = append(ops, patchOp{Op: "add", Path: p + "/tolerations", Value: []resourceapi.DeviceToleration{want}})
		default:
			ops = append(ops, patchOp{Op: "add", Path: p + "/tolerations/-", Value: want})
		}
	}
	for i, r := range spec.Devices.Requests {
		f, p := fmt.Sprintf("%s.devices.requests[%d]", field, i), fmt.Sprintf("%s/devices/requests/%d", path, i)
		if r.Exactly != nil {
			one(r.Exactly.Tolerations, f+".exactly", p+"/exactly")
		}
		for j, s := range r.FirstAvailable {
			one(s.Tolerations, fmt.Sprintf("%s.firstAvailable[%d]", f, j), fmt.Sprintf("%s/firstAvailable/%d", p, j))
		}
	}
	return ops, probs
}

// foreignToleration says why t would tolerate another tenant's taint
// ("" when it does not).
func foreignToleration(t resourceapi.DeviceToleration, tenant string) string {
	exists := t.Operator == resourceapi.DeviceTolerationOpExists
	switch {
	case t.Key == "" && exists:
		return "operator Exists without a key tolerates every taint, other tenants' included"
	case t.Key != dranames.TenantKey:
		return ""
	case exists:
		return fmt.Sprintf("key %s with operator Exists tolerates every tenant", dranames.TenantKey)
	case t.Value != tenant:
		return fmt.Sprintf("tolerates tenant %q", t.Value)
	}
	return ""
}
