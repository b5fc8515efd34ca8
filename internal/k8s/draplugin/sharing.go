package draplugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpuslice/gpuslice/internal/alloc"
)

// ClaimSharing is the decoded sharing settings of one request of a claim:
// what the opaque parameters for driver gpu.gpuslice.dev asked for. The
// zero value asks for nothing: the device type's default (a whole GPU or
// a MIG instance alone, a shared GPU time-sliced).
//
// It is the seam between this package and the strict decoders of
// internal/k8s/draconfig: anything that turns opaque parameters into a
// ClaimSharing (SharingDecoder) can replace MinimalSharingDecoder.
type ClaimSharing struct {
	// Mode is alloc.TimeSlice, alloc.MPS, alloc.Exclusive or "" (the
	// device type's default).
	Mode alloc.Mode `json:"mode,omitempty"`
	// ThreadPercent is an MPS client's active thread percentage, 1..100
	// (0: the claim's consumed compute share, else no limit).
	ThreadPercent int `json:"threadPercent,omitempty"`
	// PinnedMemoryMiB is an MPS client's pinned device memory limit (0:
	// the claim's consumed memory on a shared GPU, else no limit).
	PinnedMemoryMiB int64 `json:"pinnedMemoryMiB,omitempty"`
	// Replicas is the most claims a time-sliced GPU takes (0: as many as
	// its consumable memory holds). Recorded, not enforced: the scheduler
	// counts memory, not replicas.
	Replicas int `json:"replicas,omitempty"`
	// Interval is the time-slice length asked for (Default, Short,
	// Medium, Long; "" = Default). Recorded: gpu.Device cannot set it.
	Interval string `json:"interval,omitempty"`
	// MemoryPolicy is what the watchdog does when the claim's processes
	// use more memory than it was given: warn (default) or kill.
	MemoryPolicy string `json:"memoryPolicy,omitempty"`
}

// SharingDecoder decodes the opaque parameters (driver gpu.gpuslice.dev)
// that apply to a request. field is the parameters' path in the claim, for
// errors ("status.allocation.devices.config[0].opaque.parameters").
type SharingDecoder interface {
	DecodeSharing(field string, parameters []byte) (ClaimSharing, error)
}

// SharingDecoderFunc adapts a function to SharingDecoder.
type SharingDecoderFunc func(field string, parameters []byte) (ClaimSharing, error)

// DecodeSharing calls f.
func (f SharingDecoderFunc) DecodeSharing(field string, parameters []byte) (ClaimSharing, error) {
	return f(field, parameters)
}

// Opaque parameter kinds MinimalSharingDecoder accepts.
const (
	// SliceConfigAPIVersion and SliceConfigKind name gpuslice's own
	// placeholder config: {mode, threadPercent, pinnedMemory, replicas,
	// interval, memoryPolicy}.
	SliceConfigAPIVersion = "gpu.gpuslice.dev/v1alpha1"
	SliceConfigKind       = "SliceConfig"
)

// nvidiaVersions are the apiVersions of NVIDIA's GpuConfig and
// MigDeviceConfig that MinimalSharingDecoder accepts.
var nvidiaVersions = []string{"resource.nvidia.com/v1beta1", "gpu.nvidia.com/v1alpha1"}

// MinimalSharingDecoder is a minimal strict decoder, in place until the
// decoders of internal/k8s/draconfig are wired in. It accepts
//
//   - NVIDIA's GpuConfig / MigDeviceConfig (resource.nvidia.com/v1beta1
//     or gpu.nvidia.com/v1alpha1): sharing.strategy TimeSlicing (with
//     timeSlicingConfig.interval) or MPS (with mpsConfig's
//     defaultActiveThreadPercentage and defaultPinnedDeviceMemoryLimit);
//   - gpuslice's SliceConfig (gpu.gpuslice.dev/v1alpha1): mode
//     (exclusive|timeslice|mps), threadPercent, pinnedMemory (a
//     quantity), replicas, interval, memoryPolicy (warn|kill).
//
// Unknown fields, kinds and values are errors naming the field and what
// would be valid.
var MinimalSharingDecoder SharingDecoder = SharingDecoderFunc(decodeMinimal)

type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

type nvidiaConfig struct {
	typeMeta
	Sharing *struct {
		Strategy          string `json:"strategy"`
		TimeSlicingConfig *struct {
			Interval string `json:"interval"`
		} `json:"timeSlicingConfig"`
		MPSConfig *struct {
			DefaultActiveThreadPercentage     *int              `json:"defaultActiveThreadPercentage"`
			DefaultPinnedDeviceMemoryLimit    *string           `json:"defaultPinnedDeviceMemoryLimit"`
			DefaultPerDevicePinnedMemoryLimit map[string]string `json:"defaultPerDevicePinnedMemoryLimit"`
			MultiUser                         bool              `json:"multiUser"`
		} `json:"mpsConfig"`
	} `json:"sharing"`
}

type sliceConfig struct {
	typeMeta
	Mode          string  `json:"mode"`
	ThreadPercent int     `json:"threadPercent"`
	PinnedMemory  *string `json:"pinnedMemory"`
	Replicas      int     `json:"replicas"`
	Interval      string  `json:"interval"`
	MemoryPolicy  string  `json:"memoryPolicy"`
}

var intervals = []string{"Default", "Short", "Medium", "Long"}

func decodeMinimal(field string, parameters []byte) (ClaimSharing, error) {
	var tm typeMeta
	if err := json.Unmarshal(parameters, &tm); err != nil {
		return ClaimSharing{}, fmt.Errorf("%s: not a JSON object: %w", field, err)
	}
	switch {
	case tm.APIVersion == SliceConfigAPIVersion && tm.Kind == SliceConfigKind:
		var c sliceConfig
		if err := strict(parameters, &c); err != nil {
			return ClaimSharing{}, fmt.Errorf("%s: %w (valid fields: apiVersion, kind, mode, threadPercent, pinnedMemory, replicas, interval, memoryPolicy)", field, err)
		}
		return c.sharing(field)
	case contains(nvidiaVersions, tm.APIVersion) && (tm.Kind == "GpuConfig" || tm.Kind == "MigDeviceConfig"):
		var c nvidiaConfig
		if err := strict(parameters, &c); err != nil {
			return ClaimSharing{}, fmt.Errorf("%s: %w (valid fields: apiVersion, kind, sharing.strategy, sharing.timeSlicingConfig.interval, sharing.mpsConfig)", field, err)
		}
		return c.sharing(field)
	}
	return ClaimSharing{}, fmt.Errorf("%s: apiVersion %q kind %q: valid are %s %s, or GpuConfig / MigDeviceConfig of %s",
		field, tm.APIVersion, tm.Kind, SliceConfigAPIVersion, SliceConfigKind, strings.Join(nvidiaVersions, " or "))
}

func (c nvidiaConfig) sharing(field string) (ClaimSharing, error) {
	var out ClaimSharing
	if c.Sharing == nil {
		return out, nil // the device alone, as NVIDIA's driver does
	}
	s := c.Sharing
	f := field + ".sharing"
	switch s.Strategy {
	case "TimeSlicing":
		out.Mode = alloc.TimeSlice
		if s.MPSConfig != nil {
			return out, fmt.Errorf("%s.mpsConfig: only with strategy MPS", f)
		}
		if s.TimeSlicingConfig != nil {
			if c.Kind == "MigDeviceConfig" {
				return out, fmt.Errorf("%s.timeSlicingConfig: the interval cannot be set on a MIG device", f)
			}
			if s.TimeSlicingConfig.Interval != "" && !contains(intervals, s.TimeSlicingConfig.Interval) {
				return out, fmt.Errorf("%s.timeSlicingConfig.interval %q: valid are %s", f, s.TimeSlicingConfig.Interval, strings.Join(intervals, ", "))
			}
			out.Interval = s.TimeSlicingConfig.Interval
		}
	case "MPS":
		out.Mode = alloc.MPS
		if s.TimeSlicingConfig != nil {
			return out, fmt.Errorf("%s.timeSlicingConfig: only with strategy TimeSlicing", f)
		}
		if m := s.MPSConfig; m != nil {
			if p := m.DefaultActiveThreadPercentage; p != nil {
				if *p < 0 || *p > 100 {
					return out, fmt.Errorf("%s.mpsConfig.defaultActiveThreadPercentage %d: valid is 0..100", f, *p)
				}
				out.ThreadPercent = *p
			}
			if q := m.DefaultPinnedDeviceMemoryLimit; q != nil {
				v, err := positiveMiB(*q)
				if err != nil {
					return out, fmt.Errorf("%s.mpsConfig.defaultPinnedDeviceMemoryLimit: %w", f, err)
				}
				out.PinnedMemoryMiB = v
			}
			if len(m.DefaultPerDevicePinnedMemoryLimit) > 0 {
				return out, fmt.Errorf("%s.mpsConfig.defaultPerDevicePinnedMemoryLimit: not supported by gpuslice (one limit per claim: use defaultPinnedDeviceMemoryLimit)", f)
			}
		}
	case "":
		return out, fmt.Errorf("%s.strategy: missing; valid are TimeSlicing, MPS", f)
	default:
		return out, fmt.Errorf("%s.strategy %q: valid are TimeSlicing, MPS", f, s.Strategy)
	}
	return out, nil
}

func (c sliceConfig) sharing(field string) (ClaimSharing, error) {
	out := ClaimSharing{Replicas: c.Replicas, Interval: c.Interval, ThreadPercent: c.ThreadPercent}
	switch alloc.Mode(c.Mode) {
	case "", alloc.Exclusive, alloc.TimeSlice, alloc.MPS:
		out.Mode = alloc.Mode(c.Mode)
	default:
		return out, fmt.Errorf("%s.mode %q: valid are exclusive, timeslice, mps", field, c.Mode)
	}
	if c.ThreadPercent < 0 || c.ThreadPercent > 100 {
		return out, fmt.Errorf("%s.threadPercent %d: valid is 0..100", field, c.ThreadPercent)
	}
	if (c.ThreadPercent > 0 || c.PinnedMemory != nil) && out.Mode != alloc.MPS {
		return out, fmt.Errorf("%s: threadPercent and pinnedMemory need mode mps", field)
	}
	if c.PinnedMemory != nil {
		v, err := positiveMiB(*c.PinnedMemory)
		if err != nil {
			return out, fmt.Errorf("%s.pinnedMemory: %w", field, err)
		}
		out.PinnedMemoryMiB = v
	}
	if c.Replicas < 0 {
		return out, fmt.Errorf("%s.replicas %d: valid is 0 or more", field, c.Replicas)
	}
	if c.Interval != "" && !contains(intervals, c.Interval) {
		return out, fmt.Errorf("%s.interval %q: valid are %s", field, c.Interval, strings.Join(intervals, ", "))
	}
	if (c.Replicas > 0 || c.Interval != "") && out.Mode != alloc.TimeSlice {
		return out, fmt.Errorf("%s: replicas and interval need mode timeslice", field)
	}
	switch c.MemoryPolicy {
	case "", "warn", "kill":
		out.MemoryPolicy = c.MemoryPolicy
	default:
		return out, fmt.Errorf("%s.memoryPolicy %q: valid are warn, kill", field, c.MemoryPolicy)
	}
	return out, nil
}

// positiveMiB parses a quantity ("10Gi") into MiB, rounded down; it must
// come to at least 1 MiB.
func positiveMiB(s string) (int64, error) {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a quantity (e.g. 10Gi, 512Mi)", s)
	}
	v := q.Value() >> 20
	if q.Sign() <= 0 || v < 1 {
		return 0, fmt.Errorf("%q: want at least 1Mi", s)
	}
	return v, nil
}

// strict decodes JSON refusing unknown fields and trailing data.
func strict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the object")
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
