package fake

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/mig"
)

// MaxGPUs bounds the GPUs one machine holds.
const MaxGPUs = 64

// DefaultDriverVersion is the driver version a machine reports when its
// spec names none.
const DefaultDriverVersion = "580.00-sim"

// MachineSpec describes a simulated machine.
type MachineSpec struct {
	// GPUs in index order.
	GPUs []GPUSpec
	// DriverVersion is what Info reports; "" means DefaultDriverVersion.
	DriverVersion string
}

// GPUSpec describes one simulated GPU.
type GPUSpec struct {
	// Model is a catalog id ("A100-40GB") or a name NVML reports ("NVIDIA
	// A100-SXM4-40GB"); the GPU's Name is that product name, or the
	// model's first product name when Model is a catalog id.
	Model string
	// MIGEnabled turns MIG on; the model must support it.
	MIGEnabled bool
	// Instances are created in order at start, each "PROFILE@START"
	// ("3g.20gb@4"); an item without "@START" goes where mig.Place puts
	// it. They need MIGEnabled.
	Instances []string
	// Healthy is nil for a healthy GPU; new(false) starts it unhealthy.
	Healthy *bool
}

// presets are the machines Preset knows, by name.
var presets = map[string]func() MachineSpec{
	"dgx-a100":    func() MachineSpec { return uniform("A100-40GB", 8) },
	"dgx-a100-80": func() MachineSpec { return uniform("A100-80GB", 8) },
	"dgx-h100":    func() MachineSpec { return uniform("H100-80GB-SXM", 8) },
	"dgx-h200":    func() MachineSpec { return uniform("H200-141GB", 8) },
	"l4x4":        func() MachineSpec { return uniform("L4", 4) },
	"t4":          func() MachineSpec { return uniform("T4", 1) },
	"mixed": func() MachineSpec {
		return MachineSpec{GPUs: []GPUSpec{
			{Model: "A100-40GB", MIGEnabled: true},
			{Model: "A100-40GB", MIGEnabled: true},
			{Model: "L4"},
			{Model: "L4"},
		}}
	},
}

func uniform(model string, n int) MachineSpec {
	s := MachineSpec{GPUs: make([]GPUSpec, n)}
	for i := range s.GPUs {
		s.GPUs[i] = GPUSpec{Model: model}
	}
	return s
}

// Presets lists the preset names, sorted.
func Presets() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Preset returns a named machine (case-insensitive):
//
//	dgx-a100     8× A100-SXM4-40GB, MIG off
//	dgx-a100-80  8× A100-SXM4-80GB, MIG off
//	dgx-h100     8× H100 80GB HBM3, MIG off
//	dgx-h200     8× H200 141GB, MIG off
//	l4x4         4× L4
//	t4           1× T4
//	mixed        2× A100-40GB with MIG on (no instances), 2× L4
//
// An unknown name returns a *catalog.NotFoundError listing the presets.
func Preset(name string) (MachineSpec, error) {
	if f, ok := presets[strings.ToLower(strings.TrimSpace(name))]; ok {
		return f(), nil
	}
	names := Presets()
	return MachineSpec{}, &catalog.NotFoundError{Kind: "machine preset", Name: name,
		Valid: names, Suggestion: catalog.Suggest(name, names)}
}

// resolveModel looks a GPU model up in the catalog and returns it with the
// product name the GPU reports.
func resolveModel(name string) (*catalog.GPU, string, error) {
	m, err := catalog.Default().GPU(name)
	if err != nil {
		return nil, "", err
	}
	product := m.Name
	if len(m.ProductNames) > 0 {
		product = m.ProductNames[0]
	}
	for _, p := range m.ProductNames {
		if strings.EqualFold(strings.TrimSpace(name), p) {
			product = p
		}
	}
	return m, product, nil
}

// itemError is a problem with one item of GPUSpec.Instances.
type itemError struct {
	item int
	err  error
}

func (e *itemError) Error() string { return e.err.Error() }
func (e *itemError) Unwrap() error { return e.err }

// layoutOf turns instance items into explicit placements, checking each
// against the ones before it. Items without "@START" are placed where
// mig.Place puts them.
func layoutOf(geo *mig.Geometry, items []string) (mig.Layout, error) {
	var l mig.Layout
	for i, item := range items {
		var in mig.Instance
		if strings.Contains(item, "@") {
			parsed, err := mig.ParseLayout(item)
			if err != nil {
				return nil, &itemError{i, err}
			}
			if len(parsed) != 1 {
				return nil, &itemError{i, fmt.Errorf("instance %q: want one PROFILE@START", item)}
			}
			in = parsed[0]
		} else {
			pl, err := geo.Place(l, strings.TrimSpace(item))
			if err != nil {
				return nil, &itemError{i, err}
			}
			in = pl.Instance
		}
		next := append(slices.Clip(l), in)
		if err := geo.Validate(next); err != nil {
			return nil, &itemError{i, err}
		}
		l = next
	}
	return l, nil
}

// checkGPUSpec checks everything New needs of one GPU spec and returns the
// resolved model, product name, geometry (nil without MIG) and layout.
func checkGPUSpec(s GPUSpec) (*catalog.GPU, string, *mig.Geometry, mig.Layout, error) {
	model, product, err := resolveModel(s.Model)
	if err != nil {
		return nil, "", nil, nil, err
	}
	var geo *mig.Geometry
	if model.MIG != nil {
		if geo, err = mig.New(model); err != nil {
			return nil, "", nil, nil, err
		}
	}
	if s.MIGEnabled && geo == nil {
		return nil, "", nil, nil, fmt.Errorf("%s: %w", model.ID, gpu.ErrNoMIG)
	}
	if len(s.Instances) > 0 && !s.MIGEnabled {
		return nil, "", nil, nil, fmt.Errorf("%s: instances need MIG enabled", model.ID)
	}
	var l mig.Layout
	if len(s.Instances) > 0 {
		if l, err = layoutOf(geo, s.Instances); err != nil {
			return nil, "", nil, nil, err
		}
	}
	return model, product, geo, l, nil
}
