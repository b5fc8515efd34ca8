package dradriver

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LegacyGPUResource is the extended resource a pod written for NVIDIA's
// device plugin asks for; the whole-GPU class serves it (KEP-5004), so
// `nvidia.com/gpu: 1` pods run on gpuslice's devices unchanged.
const LegacyGPUResource = "nvidia.com/gpu"

// Class names, one per device type.
const (
	ClassGPU    = "gpu.gpuslice.dev"
	ClassShared = "shared.gpuslice.dev"
	ClassMIG    = "mig.gpuslice.dev"
)

// DeviceClasses are the classes claims name: a whole GPU (also serving
// nvidia.com/gpu for legacy pods), a share of a GPU by memory, and a MIG
// instance (select the profile with a selector on the profile attribute).
func DeviceClasses() []resourceapi.DeviceClass {
	class := func(name, typ string) resourceapi.DeviceClass {
		return resourceapi.DeviceClass{
			TypeMeta:   metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "DeviceClass"},
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: fmt.Sprintf(`device.driver == %q && device.attributes[%q].type == %q`, DriverName, DriverName, typ)}}}},
		}
	}
	gpu := class(ClassGPU, TypeGPU)
	legacy := LegacyGPUResource
	gpu.Spec.ExtendedResourceName = &legacy
	return []resourceapi.DeviceClass{gpu, class(ClassShared, TypeShared), class(ClassMIG, TypeMIG)}
}
