package drawebhook

import (
	"encoding/json"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// PodPath is where the webhook answers AdmissionReviews for pods: it sets
// spec.schedulerName to gpuslice-scheduler's for GPU pods. Which
// namespaces opt in is the MutatingWebhookConfiguration's
// namespaceSelector (e.g. gpuslice.dev/scheduler: gpuslice-scheduler):
// the AdmissionRequest does not carry the namespace's labels.
const PodPath = "/mutate-pods"

// SchedulePod decides one pod CREATE: a pod that asks for GPUs (resource
// claims, or nvidia.com/gpu) and names no scheduler of its own (empty or
// default-scheduler) is patched to schedulerName. Anything else passes
// unchanged. Pure.
func SchedulePod(req *admissionv1.AdmissionRequest, schedulerName string) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	if req.Operation != admissionv1.Create || req.Resource.Group != "" || req.Resource.Resource != "pods" || req.SubResource != "" {
		return resp
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		resp.Allowed = false
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusBadRequest, Message: fmt.Sprintf("Pod: %v", err)}
		return resp
	}
	if pod.Spec.SchedulerName != "" && pod.Spec.SchedulerName != corev1.DefaultSchedulerName {
		return resp // the user chose a scheduler
	}
	if !asksForGPUs(&pod) || pod.Spec.SchedulerName == schedulerName {
		return resp
	}
	op := "add"
	if pod.Spec.SchedulerName != "" {
		op = "replace"
	}
	patch, _ := json.Marshal([]map[string]string{{"op": op, "path": "/spec/schedulerName", "value": schedulerName}})
	pt := admissionv1.PatchTypeJSONPatch
	resp.Patch, resp.PatchType = patch, &pt
	return resp
}

func asksForGPUs(pod *corev1.Pod) bool {
	if len(pod.Spec.ResourceClaims) > 0 {
		return true
	}
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			if _, ok := c.Resources.Limits[dranames.LegacyGPUResource]; ok {
				return true
			}
			if _, ok := c.Resources.Requests[dranames.LegacyGPUResource]; ok {
				return true
			}
		}
	}
	return false
}
