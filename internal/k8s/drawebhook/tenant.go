package drawebhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
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

// TenantFunc names the tenant of a namespace.
type TenantFunc func(ctx context.Context, namespace string) (string, error)

// NamespaceTenant is the tenant without the API server: the namespace's
// name.
func NamespaceTenant(_ context.Context, namespace string) (string, error) { return namespace, nil }

// LabelTenant reads the namespace from the API server: its
// gpuslice.dev/tenant label, else its name (dradriver.TenantOf).
func LabelTenant(cs kubernetes.Interface) TenantFunc {
	return func(ctx context.Context, namespace string) (string, error) {
		ns, err := cs.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("reading namespace %s for its %s label: %w", namespace, dradriver.TenantKey, err)
		}
		return dradriver.TenantOf(ns), nil
	}
}

// KubeconfigTenant is LabelTenant over the API server kubeconfig names
// ("in-cluster": the pod's ServiceAccount; a path: that file).
func KubeconfigTenant(kubeconfig string) (TenantFunc, error) {
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
	return LabelTenant(cs), nil
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
	var spec *resourceapi.ResourceClaimSpec
	field, path := "spec", "/spec"
	switch req.Resource.Resource {
	case "resourceclaims":
		var c resourceapi.ResourceClaim
		if err := json.Unmarshal(req.Object.Raw, &c); err != nil {
			return deny(http.StatusBadRequest, fmt.Sprintf("ResourceClaim: %v", err))
		}
		spec = &c.Spec
	case "resourceclaimtemplates":
		var c resourceapi.ResourceClaimTemplate
		if err := json.Unmarshal(req.Object.Raw, &c); err != nil {
			return deny(http.StatusBadRequest, fmt.Sprintf("ResourceClaimTemplate: %v", err))
		}
		spec, field, path = &c.Spec.Spec, "spec.spec", "/spec/spec"
	default:
		return resp
	}
	if err := dradriver.CheckTenant(tenant); err != nil {
		return deny(http.StatusUnprocessableEntity, fmt.Sprintf("%s: namespace %s: %v", dradriver.DriverName, req.Namespace, err))
	}
	patch, probs := tenantPatch(spec, tenant, field, path)
	if len(probs) > 0 {
		return deny(http.StatusForbidden, dradriver.DriverName+": "+strings.Join(probs, "; "))
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
					f, k, why, tenant, dradriver.TenantKey, tenant))
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
	case t.Key != dradriver.TenantKey:
		return ""
	case exists:
		return fmt.Sprintf("key %s with operator Exists tolerates every tenant", dradriver.TenantKey)
	case t.Value != tenant:
		return fmt.Sprintf("tolerates tenant %q", t.Value)
	}
	return ""
}
