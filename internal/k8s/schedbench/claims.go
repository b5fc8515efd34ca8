package schedbench

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// Workload is what each pod's claim asks for.
type Workload string

// The workloads.
const (
	// Share is a 4 GiB share of a GPU by memory (ten fit on an A100-40GB).
	Share Workload = "share"
	// Whole is one whole GPU.
	Whole Workload = "whole"
)

// ShareMemory is what a Share claim asks for.
const ShareMemory = "4Gi"

// Claim is pod name's own ResourceClaim in namespace ns for shape and
// workload; tenant (non-empty with gpuslice's tenant copies) adds the
// toleration of that tenant's copies, as gpuslice's webhook would.
func Claim(shape Shape, w Workload, ns, name, tenant string) (*resourceapi.ResourceClaim, error) {
	req := resourceapi.ExactDeviceRequest{AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}
	switch {
	case shape == Gpuslice && w == Share:
		req.DeviceClassName = dranames.ClassShared
	case shape == Gpuslice && w == Whole:
		req.DeviceClassName = dranames.ClassGPU
	case shape == NVIDIAShares && w == Share, shape != Gpuslice && shape != NVIDIAShares && w == Whole:
		req.DeviceClassName = NVIDIAClass
	default:
		return nil, fmt.Errorf("workload %q on shape %s: want %s", w, shape, map[bool]string{true: "share or whole", false: "whole"}[shape == Gpuslice])
	}
	if w == Share {
		req.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(ShareMemory)}}
		if tenant != "" && shape == Gpuslice {
			req.Tolerations = []resourceapi.DeviceToleration{dradriver.TenantToleration(tenant)}
		}
	}
	return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &req}}}}}, nil
}

// Pod is the pod that uses claim name.
func Pod(ns, name string) *corev1.Pod {
	cn := name
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.PodSpec{
		ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &cn}},
		Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
			Claims: []corev1.ResourceClaim{{Name: "gpu"}}, Requests: corev1.ResourceList{"cpu": resource.MustParse("10m")}}}}}}
}
