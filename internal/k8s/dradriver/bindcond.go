package dradriver

import (
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// Binding conditions of MIG devices (KEP-5007): a pod whose claim was
// allocated a MIG device is bound to the node only once the driver's
// node side has created the instance at the allocated placement and set
// dranames.ConditionMIGReady True in the claim's status.devices; it sets
// dranames.ConditionMIGFailed True when the instance cannot be created,
// and the scheduler then frees the allocation and schedules the pod again.

// WithMIGBindingConditions returns a copy of slices (Slices) whose MIG
// devices carry bindingConditions [ConditionMIGReady],
// bindingFailureConditions [ConditionMIGFailed] and bindsToNode: the
// stock scheduler (DRADeviceBindingConditions, beta and on by default in
// Kubernetes 1.36) waits in PreBind until the condition is True before
// binding the pod. Whole and shared GPUs are left as they are: they need
// nothing made before the pod runs.
func WithMIGBindingConditions(slices []resourceapi.ResourceSlice) []resourceapi.ResourceSlice {
	out := make([]resourceapi.ResourceSlice, len(slices))
	for i := range slices {
		out[i] = *slices[i].DeepCopy()
		for j := range out[i].Spec.Devices {
			dev := &out[i].Spec.Devices[j]
			if t := dev.Attributes[dranames.AttrType].StringValue; t == nil || *t != dranames.TypeMIG {
				continue
			}
			yes := true
			dev.BindsToNode = &yes
			dev.BindingConditions = []string{dranames.ConditionMIGReady}
			dev.BindingFailureConditions = []string{dranames.ConditionMIGFailed}
		}
	}
	return out
}
