package dradriver

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
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
				Expression: fmt.Sprintf(`device.driver == %q && device.attributes[%q].%s == %q`, dranames.DriverName, dranames.DriverName, dranames.AttrType, typ)}}}},
		}
	}
	gpu := class(dranames.ClassGPU, dranames.TypeGPU)
	legacy := dranames.LegacyGPUResource
	gpu.Spec.ExtendedResourceName = &legacy
	return []resourceapi.DeviceClass{gpu, class(dranames.ClassShared, dranames.TypeShared), class(dranames.ClassMIG, dranames.TypeMIG)}
}
