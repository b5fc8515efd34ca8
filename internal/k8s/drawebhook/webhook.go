package drawebhook

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/internal/k8s/draconfig"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// Path is where the webhook answers AdmissionReviews.
const Path = "/validate"

// maxBody bounds an AdmissionReview (the API server's own request limit
// for an object is 3 MiB).
const maxBody = 6 << 20

// ClassType says which of gpuslice's device classes a DeviceClass name is
// ("gpu", "shared", "mig"; "" for another driver's).
func ClassType(name string) string {
	switch name {
	case dranames.ClassGPU:
		return dranames.TypeGPU
	case dranames.ClassShared:
		return dranames.TypeShared
	case dranames.ClassMIG:
		return dranames.TypeMIG
	}
	return ""
}

// Review decides one AdmissionRequest: allowed, or denied with every
// problem found (pure: no I/O).
func Review(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	deny := func(code int32, msg string) *admissionv1.AdmissionResponse {
		resp.Allowed = false
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: code, Reason: metav1.StatusReasonInvalid, Message: msg}
		return resp
	}
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return resp
	}
	if req.Resource.Group != resourceapi.GroupName {
		return resp
	}
	switch req.Resource.Resource {
	case "resourceclaims", "resourceclaimtemplates":
		if req.Resource.Resource == "resourceclaims" && req.SubResource != "" {
			return resp // status updates are the scheduler's and drivers'
		}
		if why := unservedVersion(req); why != "" {
			return deny(http.StatusBadRequest, why)
		}
	default:
		return resp
	}
	var spec *resourceapi.ResourceClaimSpec
	field := "spec"
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
		spec, field = &c.Spec.Spec, "spec.spec"
	default:
		return resp
	}
	probs := draconfig.CheckClaimSpec(spec, field, ClassType)
	if len(probs) == 0 {
		return resp
	}
	msgs := make([]string, len(probs))
	for i, p := range probs {
		msgs[i] = p.Error()
	}
	return deny(http.StatusUnprocessableEntity, dranames.DriverName+": "+strings.Join(msgs, "; "))
}

// unservedVersion says why a request for a ResourceClaim or
// ResourceClaimTemplate is not one this webhook decodes, or "" when its
// resource and kind are resource.k8s.io/v1. The webhook decodes objects
// as resource.k8s.io/v1 only: another version's object (v1beta1's
// requests are not v1's exactly/firstAvailable) would decode to an empty
// spec and pass unchecked, so it is refused; registered with
// matchPolicy: Equivalent (as the chart does), the API server converts
// every version to v1 before calling.
func unservedVersion(req *admissionv1.AdmissionRequest) string {
	v1 := resourceapi.SchemeGroupVersion
	got := ""
	switch {
	case req.Resource.Group != v1.Group || req.Resource.Version != v1.Version:
		got = fmt.Sprintf("resource %s/%s %s", req.Resource.Group, req.Resource.Version, req.Resource.Resource)
	case req.Kind.Kind != "" && (req.Kind.Group != v1.Group || req.Kind.Version != v1.Version):
		got = fmt.Sprintf("kind %s/%s %s", req.Kind.Group, req.Kind.Version, req.Kind.Kind)
	default:
		return ""
	}
	return fmt.Sprintf("%s: received %s; only %s is served: register the webhook with matchPolicy: Equivalent so the API server sends every version as %s",
		dranames.DriverName, got, v1, v1)
}

// Handler serves AdmissionReviews (admission.k8s.io/v1): claims on Path
// (validating), claims on ClaimPath (mutating: AdmitClaim, the namespace
// read by namespace (nil: NamespaceByName), copies as the drivers were
// told), and pods on PodPath (mutating: schedulerName set to
// schedulerName; "" leaves PodPath unserved).
func Handler(log *slog.Logger, schedulerName string, namespace NamespaceFunc, copies Copies) http.Handler {
	if namespace == nil {
		namespace = NamespaceByName
	}
	mux := http.NewServeMux()
	mux.Handle("POST "+Path, serve(log, Review))
	mux.HandleFunc("POST "+ClaimPath, func(w http.ResponseWriter, r *http.Request) {
		serve(log, func(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			if req.Operation != admissionv1.Create || req.Resource.Group != resourceapi.GroupName || req.SubResource != "" {
				return &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
			}
			ns, err := namespace(r.Context(), req.Namespace)
			if err != nil {
				return &admissionv1.AdmissionResponse{UID: req.UID, Result: &metav1.Status{Status: metav1.StatusFailure,
					Code: http.StatusServiceUnavailable, Message: dranames.DriverName + ": " + err.Error()}}
			}
			return AdmitClaim(req, ns, copies)
		})(w, r)
	})
	if schedulerName != "" {
		mux.Handle("POST "+PodPath, serve(log, func(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			return SchedulePod(req, schedulerName)
		}))
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	return mux
}

// serve answers AdmissionReviews with decide.
func serve(log *slog.Logger, decide func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		if err != nil || len(body) > maxBody {
			http.Error(w, "AdmissionReview: unreadable or over 6 MiB", http.StatusRequestEntityTooLarge)
			return
		}
		var review admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
			http.Error(w, fmt.Sprintf("want an admission.k8s.io/v1 AdmissionReview with a request (%v)", err), http.StatusBadRequest)
			return
		}
		resp := decide(review.Request)
		if !resp.Allowed {
			log.Info("denied", "kind", review.Request.Kind.Kind, "namespace", review.Request.Namespace, "name", review.Request.Name, "why", resp.Result.Message)
		}
		out := admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Response: resp}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&out)
	}
}
