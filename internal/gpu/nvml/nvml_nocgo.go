//go:build !cgo

package nvml

import (
	"context"
	"fmt"
	"time"

	"github.com/gpuslice/gpuslice/internal/gpu"
)

// config is what the options set; without cgo nothing reads it.
type config struct {
	path string
	now  func() time.Time
	poll time.Duration
	run  Runner
	smi  string
}

// errNoCgo is what every call fails with in a build without cgo.
var errNoCgo = fmt.Errorf("%w (gpuslice was built without cgo, so libnvidia-ml.so.1 cannot be loaded): use --simulate", gpu.ErrNoDriver)

// Device is the NVML device layer. This build has no cgo, so Open always
// fails and a Device is never usable.
type Device struct{}

var _ gpu.Device = (*Device)(nil)

// Open fails with an error wrapping gpu.ErrNoDriver: go-nvml needs cgo.
func Open(opts ...Option) (*Device, error) { return nil, errNoCgo }

// Close does nothing.
func (d *Device) Close() error { return nil }

// Info reports the NVML backend.
func (d *Device) Info() gpu.BackendInfo { return gpu.BackendInfo{Backend: Backend} }

// GPUs fails with gpu.ErrNoDriver.
func (d *Device) GPUs(context.Context) ([]gpu.GPU, error) { return nil, errNoCgo }

// SetMIGMode fails with gpu.ErrNoDriver.
func (d *Device) SetMIGMode(context.Context, int, bool) error { return errNoCgo }

// CreateInstance fails with gpu.ErrNoDriver.
func (d *Device) CreateInstance(context.Context, int, string, int) (gpu.Instance, error) {
	return gpu.Instance{}, errNoCgo
}

// DestroyInstance fails with gpu.ErrNoDriver.
func (d *Device) DestroyInstance(context.Context, int, string) error { return errNoCgo }

// SetComputeMode fails with gpu.ErrNoDriver.
func (d *Device) SetComputeMode(context.Context, int, gpu.ComputeMode) error { return errNoCgo }

// SetTimeSlice fails with gpu.ErrNoDriver.
func (d *Device) SetTimeSlice(context.Context, int, gpu.TimeSlice) error { return errNoCgo }

// Processes fails with gpu.ErrNoDriver.
func (d *Device) Processes(context.Context, string) ([]gpu.Process, error) { return nil, errNoCgo }

// Utilization fails with gpu.ErrNoDriver.
func (d *Device) Utilization(context.Context, string) (gpu.Utilization, error) {
	return gpu.Utilization{}, errNoCgo
}

// Events fails with gpu.ErrNoDriver.
func (d *Device) Events(context.Context) (<-chan gpu.Event, error) { return nil, errNoCgo }
