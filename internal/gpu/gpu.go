package gpu

import (
	"context"
	"errors"
	"time"
)

// Device is the hardware the agent needs and nothing more. Every method is
// safe for concurrent use. Indexes are NVML device indexes.
type Device interface {
	// Info says what backs this device layer.
	Info() BackendInfo
	// GPUs lists every GPU with its MIG instances.
	GPUs(ctx context.Context) ([]GPU, error)
	// SetMIGMode turns MIG on or off on an idle GPU.
	SetMIGMode(ctx context.Context, index int, enabled bool) error
	// CreateInstance creates a GPU instance of a profile at an explicit
	// start slice, with one compute instance spanning it.
	CreateInstance(ctx context.Context, index int, profile string, start int) (Instance, error)
	// DestroyInstance destroys an idle GPU instance (and its compute
	// instances) by its MIG uuid.
	DestroyInstance(ctx context.Context, index int, uuid string) error
	// SetComputeMode sets a whole GPU's compute mode (MPS needs
	// ExclusiveProcess).
	SetComputeMode(ctx context.Context, index int, mode ComputeMode) error
	// Processes lists the processes using a GPU or a MIG instance (uuid)
	// with their GPU memory and, where the driver samples it, their SM
	// utilization since the previous call on that device.
	Processes(ctx context.Context, uuid string) ([]Process, error)
	// Utilization samples a device's SM and memory utilization.
	Utilization(ctx context.Context, uuid string) (Utilization, error)
	// Events delivers health events (XIDs, a GPU falling off the bus)
	// until ctx ends.
	Events(ctx context.Context) (<-chan Event, error)
}

// BackendInfo describes the device layer.
type BackendInfo struct {
	// Backend is "nvml" or "fake".
	Backend       string `json:"backend"`
	DriverVersion string `json:"driverVersion"`
	Simulated     bool   `json:"simulated"`
}

// GPU is one physical GPU.
type GPU struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	// Name is the product name NVML reports ("NVIDIA A100-SXM4-40GB");
	// Model is the catalog id it resolves to ("" when unknown).
	Name        string      `json:"name"`
	Model       string      `json:"model"`
	MemoryMiB   int64       `json:"memoryMiB"`
	MIGEnabled  bool        `json:"migEnabled"`
	MIGCapable  bool        `json:"migCapable"`
	ComputeMode ComputeMode `json:"computeMode"`
	Healthy     bool        `json:"healthy"`
	Instances   []Instance  `json:"instances,omitempty"`
}

// Instance is a MIG GPU instance with one full compute instance.
type Instance struct {
	UUID      string `json:"uuid"`
	Profile   string `json:"profile"`
	Start     int    `json:"start"`
	Size      int    `json:"size"`
	GIID      int    `json:"giID"`
	CIID      int    `json:"ciID"`
	MemoryMiB int64  `json:"memoryMiB"`
}

// ComputeMode is NVML's compute mode.
type ComputeMode int

// Compute modes (NVML COMPUTEMODE_* values).
const (
	ComputeDefault          ComputeMode = 0
	ComputeExclusiveProcess ComputeMode = 3
	ComputeProhibited       ComputeMode = 2
)

// Process is a process using GPU memory.
type Process struct {
	PID       int   `json:"pid"`
	MemoryMiB int64 `json:"memoryMiB"`
	// SMPercent is the process's SM utilization, in percent of the whole
	// GPU, averaged since the previous Processes call on the same device
	// (NVML's per-process samples). NVML keeps no per-process samples for
	// MIG instances: on Hopper and newer it is the instance's utilization
	// (GPM) split equally among its processes, nil on the first read of
	// an instance; nil on older GPUs in MIG mode.
	SMPercent *int `json:"smPercent,omitempty"`
}

// Utilization is a sample of a device's activity.
type Utilization struct {
	SMPercent     int       `json:"smPercent"`
	MemoryPercent int       `json:"memoryPercent"`
	Time          time.Time `json:"time"`
}

// EventKind names a health event.
type EventKind string

// Health events.
const (
	EventXID  EventKind = "xid"
	EventLost EventKind = "lost" // fell off the bus / unreachable
	// EventRecovered: the GPU is healthy again (the fake's Recover, as
	// after a GPU reset). NVML never reports it: a real GPU is healthy
	// again when the process that saw the fatal XID restarts.
	EventRecovered EventKind = "recovered"
)

// Event is a health event on a GPU (or one of its instances).
type Event struct {
	Kind  EventKind `json:"kind"`
	Index int       `json:"index"`
	UUID  string    `json:"uuid"`
	XID   int       `json:"xid,omitempty"`
	Time  time.Time `json:"time"`
	// Fatal events make the GPU unhealthy (FatalXID: XID 79 fell off the
	// bus, 48 double-bit ECC, 94/95 contained/uncontained ECC, 119/120 GSP).
	Fatal   bool   `json:"fatal"`
	Message string `json:"message"`
}

// Errors a Device returns, to be tested with errors.Is.
var (
	ErrNoDriver  = errors.New("no NVIDIA driver found")
	ErrNotFound  = errors.New("no such GPU or instance")
	ErrInUse     = errors.New("in use")
	ErrNoMIG     = errors.New("MIG is not supported or not enabled")
	ErrPlacement = errors.New("placement not allowed")
	ErrFault     = errors.New("injected fault")
)
