package consumers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

// NVIDIA's DRA driver module (github.com/NVIDIA/k8s-dra-driver-gpu) is not
// served by the module proxy, so the opaque configs gpuslice renders are
// checked against its rules as published in its source at this version:
// api/nvidia.com/resource/v1beta1 (api.go StrictDecoder, gpuconfig.go,
// migconfig.go, sharing.go, validate.go) and pkg/featuregates. The types
// below restate its JSON schema; nothing is copied.
const draDriverVersion = "v25.12.0"

// featureGateOf is the driver feature gate a sharing strategy needs
// (validate.go: GpuSharingStrategy.Validate); both are Alpha and off by
// default (featuregates.go), and the Helm chart sets featureGates: {}.
var featureGateOf = map[string]string{"TimeSlicing": "TimeSlicingSettings", "MPS": "MPSSupport"}

type draTimeSlicingConfig struct {
	Interval *string `json:"interval,omitempty"`
}

type draMPSConfig struct {
	DefaultActiveThreadPercentage     *int                         `json:"defaultActiveThreadPercentage,omitempty"`
	DefaultPinnedDeviceMemoryLimit    *resource.Quantity           `json:"defaultPinnedDeviceMemoryLimit,omitempty"`
	DefaultPerDevicePinnedMemoryLimit map[string]resource.Quantity `json:"defaultPerDevicePinnedMemoryLimit,omitempty"`
}

// draGPUSharing is GpuSharing; MigDeviceSharing has no timeSlicingConfig.
type draGPUSharing struct {
	Strategy          string                `json:"strategy"`
	TimeSlicingConfig *draTimeSlicingConfig `json:"timeSlicingConfig,omitempty"`
	MpsConfig         *draMPSConfig         `json:"mpsConfig,omitempty"`
}

type draMIGSharing struct {
	Strategy  string        `json:"strategy"`
	MpsConfig *draMPSConfig `json:"mpsConfig,omitempty"`
}

type draTypeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// strictJSON decodes with unknown fields refused, as the driver's
// StrictDecoder does for claim configs.
func strictJSON(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// checkNVIDIAConfig applies the driver's decoding, Normalize and Validate
// rules with both sharing feature gates on, and returns the strategy ("" for
// none).
func checkNVIDIAConfig(raw []byte) (string, error) {
	var tm draTypeMeta
	if err := json.Unmarshal(raw, &tm); err != nil {
		return "", err
	}
	if tm.APIVersion != "resource.nvidia.com/v1beta1" {
		return "", fmt.Errorf("apiVersion %q, want resource.nvidia.com/v1beta1", tm.APIVersion)
	}
	switch tm.Kind {
	case "GpuConfig":
		var c struct {
			draTypeMeta
			Sharing *draGPUSharing `json:"sharing,omitempty"`
		}
		if err := strictJSON(raw, &c); err != nil {
			return "", err
		}
		if c.Sharing == nil {
			return "", nil
		}
		return c.Sharing.Strategy, validateSharing(c.Sharing.Strategy, c.Sharing.TimeSlicingConfig, c.Sharing.MpsConfig)
	case "MigDeviceConfig":
		var c struct {
			draTypeMeta
			Sharing *draMIGSharing `json:"sharing,omitempty"`
		}
		if err := strictJSON(raw, &c); err != nil {
			return "", err
		}
		if c.Sharing == nil {
			return "", nil
		}
		return c.Sharing.Strategy, validateSharing(c.Sharing.Strategy, nil, c.Sharing.MpsConfig)
	}
	return "", fmt.Errorf("kind %q: the driver's claim configs are GpuConfig and MigDeviceConfig (and VfioDeviceConfig, not rendered)", tm.Kind)
}

func validateSharing(strategy string, ts *draTimeSlicingConfig, mps *draMPSConfig) error {
	switch strategy {
	case "TimeSlicing":
		if mps != nil {
			return fmt.Errorf("cannot use MpsConfig with the 'TimeSlicing' strategy")
		}
		if ts != nil {
			// Normalize fills a missing config, not a missing interval:
			// Validate then reads a nil interval.
			if ts.Interval == nil {
				return fmt.Errorf("timeSlicingConfig without interval")
			}
			switch *ts.Interval {
			case "Default", "Short", "Medium", "Long":
			default:
				return fmt.Errorf("unknown time-slice interval: %v", *ts.Interval)
			}
		}
	case "MPS":
		if ts != nil {
			return fmt.Errorf("cannot use TimeSlicingConfig with the 'MPS' strategy")
		}
		if mps == nil {
			return nil
		}
		if p := mps.DefaultActiveThreadPercentage; p != nil && (*p < 0 || *p > 100) {
			return fmt.Errorf("active thread percentage %d: must be 0..100", *p)
		}
		if q := mps.DefaultPinnedDeviceMemoryLimit; q != nil && q.Value()/1024/1024 <= 0 {
			return fmt.Errorf("invalid limit: default value set too low: %v", q)
		}
		for k, q := range mps.DefaultPerDevicePinnedMemoryLimit {
			if q.Value()/1024/1024 <= 0 {
				return fmt.Errorf("invalid limit: value set too low: %v: %v", k, q.String())
			}
		}
	default:
		return fmt.Errorf("unknown GPU sharing strategy: %v", strategy)
	}
	return nil
}

// The rules themselves reject what the driver rejects.
func TestNVIDIAConfigRules(t *testing.T) {
	for raw, ok := range map[string]bool{
		`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Default"}}}`:                                      true,
		`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":50,"defaultPinnedDeviceMemoryLimit":"4Gi"}}}`: true,
		`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"MigDeviceConfig","sharing":{"strategy":"TimeSlicing"}}`:                                                                           true,
		`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"MigDeviceConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Default"}}}`:                                false,
		`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"Timeslicing"}}`:                                                                                 false,
		`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Fast"}}}`:                                         false,
		`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":101}}}`:                                       false,
		`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultPinnedDeviceMemoryLimit":"100Ki"}}}`:                                  false,
		`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","timeSlicingConfig":{"interval":"Default"}}}`:                                              false,
		`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"pinnedMemory":"1Gi"}}}`:                                                      false,
		`{"apiVersion":"resource.nvidia.com/v1","kind":"GpuConfig"}`:                                                                                                                           false,
	} {
		_, err := checkNVIDIAConfig([]byte(raw))
		if (err == nil) != ok {
			t.Errorf("%s: err %v, want ok=%v", raw, err, ok)
		}
	}
}
