package dradriver

import (
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// ReadDevice is what a device of gpuslice's slices says it is:
// dranames.ReadDevice over its attributes and capacities (the name taken
// apart and checked against them). The kubelet plugin and the scheduler
// both read devices through it.
func ReadDevice(d *resourceapi.Device) (dranames.Device, error) {
	return dranames.ReadDevice(d.Name, published{d})
}

// published is a device's maps as dranames.Attrs.
type published struct{ d *resourceapi.Device }

func (p published) String(name string) (string, bool) {
	v := p.d.Attributes[resourceapi.QualifiedName(name)].StringValue
	if v == nil {
		return "", false
	}
	return *v, true
}

func (p published) Int(name string) (int64, bool) {
	v := p.d.Attributes[resourceapi.QualifiedName(name)].IntValue
	if v == nil {
		return 0, false
	}
	return *v, true
}

func (p published) Capacity(name string) (int64, bool) {
	c, ok := p.d.Capacity[resourceapi.QualifiedName(name)]
	return c.Value.Value(), ok
}
