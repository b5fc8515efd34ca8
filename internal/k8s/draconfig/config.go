package draconfig

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	sigsjson "sigs.k8s.io/json"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// The kinds Decode accepts beside gpuslice's own (dranames.SliceAPIVersion,
// dranames.SliceKind).
const (
	// GpuConfigKind and MigDeviceConfigKind are NVIDIA's, under either
	// of NVIDIAAPIVersions.
	GpuConfigKind       = "GpuConfig"
	MigDeviceConfigKind = "MigDeviceConfig"
)

// NVIDIAAPIVersions are the apiVersions of NVIDIA's DRA driver configs
// Decode accepts.
var NVIDIAAPIVersions = []string{"resource.nvidia.com/v1beta1", "gpu.nvidia.com/v1alpha1"}

// Intervals are the time-slice lengths a config may ask for.
var Intervals = []string{"Default", "Short", "Medium", "Long"}

// Isolation levels a SliceConfig may ask for (see alloc.Isolation).
var Isolations = []string{"none", "tenant", "hardware"}

// MemoryPolicies are what the memory watchdog may do when a claim's
// processes use more memory than it was given.
var MemoryPolicies = []string{"warn", "kill"}

// Sharing is what a request's config asks for. The zero value asks for
// nothing: the device type's default (a whole GPU or a MIG instance
// alone, a shared GPU time-sliced), the watchdog warning.
type Sharing struct {
	// Mode is alloc.TimeSlice, alloc.MPS, alloc.Exclusive or "" (the
	// device type's default).
	Mode alloc.Mode `json:"mode,omitempty"`
	// ThreadPercent is an MPS client's active thread percentage, 1..100
	// (0: the claim's consumed compute share, else no limit).
	ThreadPercent int `json:"threadPercent,omitempty"`
	// PinnedMemoryMiB is an MPS client's pinned device memory limit (0:
	// the claim's consumed memory on a shared GPU, else no limit).
	PinnedMemoryMiB int64 `json:"pinnedMemoryMiB,omitempty"`
	// MemoryMiB is the memory the claim's processes may use before the
	// watchdog acts (0: what the claim consumed, else the device's).
	MemoryMiB int64 `json:"memoryMiB,omitempty"`
	// ComputePercent is the compute share asked for, 1..100 (0: none
	// stated). Under MPS it is the default thread percentage.
	ComputePercent int `json:"computePercent,omitempty"`
	// Isolation is none, tenant or hardware ("" = tenant).
	Isolation string `json:"isolation,omitempty"`
	// Replicas is the most claims a time-sliced GPU takes (0: as many as
	// its consumable memory holds). Recorded, not enforced: the scheduler
	// counts memory, not replicas.
	Replicas int `json:"replicas,omitempty"`
	// Interval is the time-slice length asked for (Intervals; "" =
	// Default).
	Interval string `json:"interval,omitempty"`
	// MemoryPolicy is warn (default) or kill.
	MemoryPolicy string `json:"memoryPolicy,omitempty"`
	// Kind is the config's kind ("" when no config applied).
	Kind string `json:"kind,omitempty"`
}

type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// nvidiaConfig is NVIDIA's GpuConfig and MigDeviceConfig (the fields
// both share; MigDeviceConfig has no timeSlicingConfig interval).
type nvidiaConfig struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Sharing    *nvidiaSharing `json:"sharing"`
}

type nvidiaSharing struct {
	Strategy          string             `json:"strategy"`
	TimeSlicingConfig *timeSlicingConfig `json:"timeSlicingConfig"`
	MPSConfig         *mpsConfig         `json:"mpsConfig"`
}

type timeSlicingConfig struct {
	Interval string `json:"interval"`
}

type mpsConfig struct {
	DefaultActiveThreadPercentage     *int              `json:"defaultActiveThreadPercentage"`
	DefaultPinnedDeviceMemoryLimit    *string           `json:"defaultPinnedDeviceMemoryLimit"`
	DefaultPerDevicePinnedMemoryLimit map[string]string `json:"defaultPerDevicePinnedMemoryLimit"`
}

// sliceConfig is gpuslice's SliceConfig.
type sliceConfig struct {
	APIVersion    string  `json:"apiVersion"`
	Kind          string  `json:"kind"`
	Mode          string  `json:"mode"`
	Memory        *string `json:"memory"`
	Compute       *int    `json:"compute"`
	Isolation     string  `json:"isolation"`
	MemoryPolicy  string  `json:"memoryPolicy"`
	ThreadPercent *int    `json:"threadPercent"`
	PinnedMemory  *string `json:"pinnedMemory"`
	Replicas      *int    `json:"replicas"`
	Interval      string  `json:"interval"`
}

// Decode decodes one opaque config for driver gpu.gpuslice.dev. field is
// the parameters' path in the object ("spec.devices.config[0].opaque.parameters"),
// used in every error.
func Decode(field string, parameters []byte) (Sharing, error) {
	var tm typeMeta
	if err := json.Unmarshal(parameters, &tm); err != nil {
		return Sharing{}, fmt.Errorf("%s: not a JSON object with apiVersion and kind: %v", field, err)
	}
	switch {
	case tm.APIVersion == dranames.SliceAPIVersion && tm.Kind == dranames.SliceKind:
		var c sliceConfig
		if err := strict(field, parameters, &c); err != nil {
			return Sharing{}, err
		}
		return c.sharing(field)
	case slices.Contains(NVIDIAAPIVersions, tm.APIVersion) && (tm.Kind == GpuConfigKind || tm.Kind == MigDeviceConfigKind):
		var c nvidiaConfig
		if err := strict(field, parameters, &c); err != nil {
			return Sharing{}, err
		}
		return c.sharing(field)
	case tm.APIVersion == "" || tm.Kind == "":
		return Sharing{}, fmt.Errorf("%s: apiVersion and kind are required: valid are %s %s, or %s / %s of %s",
			field, dranames.SliceAPIVersion, dranames.SliceKind, GpuConfigKind, MigDeviceConfigKind, strings.Join(NVIDIAAPIVersions, " or "))
	}
	return Sharing{}, fmt.Errorf("%s: apiVersion %q kind %q: valid are %s %s, or %s / %s of %s",
		field, tm.APIVersion, tm.Kind, dranames.SliceAPIVersion, dranames.SliceKind, GpuConfigKind, MigDeviceConfigKind, strings.Join(NVIDIAAPIVersions, " or "))
}

func (c nvidiaConfig) sharing(field string) (Sharing, error) {
	out := Sharing{Kind: c.Kind}
	if c.Sharing == nil {
		return out, nil // the device alone, as NVIDIA's driver does
	}
	s := c.Sharing
	f := field + ".sharing"
	switch s.Strategy {
	case "TimeSlicing":
		out.Mode = alloc.TimeSlice
		if s.MPSConfig != nil {
			return out, fmt.Errorf("%s.mpsConfig: only with strategy MPS (strategy is TimeSlicing)", f)
		}
		if t := s.TimeSlicingConfig; t != nil {
			if c.Kind == MigDeviceConfigKind {
				return out, fmt.Errorf("%s.timeSlicingConfig: a MIG device has no time-slice interval: leave timeSlicingConfig out", f)
			}
			if t.Interval != "" && !slices.Contains(Intervals, t.Interval) {
				return out, fmt.Errorf("%s.timeSlicingConfig.interval %q: valid are %s", f, t.Interval, strings.Join(Intervals, ", "))
			}
			out.Interval = t.Interval
		}
	case "MPS":
		out.Mode = alloc.MPS
		if s.TimeSlicingConfig != nil {
			return out, fmt.Errorf("%s.timeSlicingConfig: only with strategy TimeSlicing (strategy is MPS)", f)
		}
		if m := s.MPSConfig; m != nil {
			if p := m.DefaultActiveThreadPercentage; p != nil {
				if *p < 1 || *p > 100 {
					return out, fmt.Errorf("%s.mpsConfig.defaultActiveThreadPercentage %d: valid is 1..100", f, *p)
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
				return out, fmt.Errorf("%s.mpsConfig.defaultPerDevicePinnedMemoryLimit: not supported by gpuslice (a claim has one limit: use defaultPinnedDeviceMemoryLimit)", f)
			}
		}
	case "":
		return out, fmt.Errorf("%s.strategy: missing; valid are TimeSlicing, MPS", f)
	default:
		return out, fmt.Errorf("%s.strategy %q: valid are TimeSlicing, MPS", f, s.Strategy)
	}
	return out, nil
}

func (c sliceConfig) sharing(field string) (Sharing, error) {
	out := Sharing{Kind: c.Kind, Interval: c.Interval, Isolation: c.Isolation, MemoryPolicy: c.MemoryPolicy}
	switch alloc.Mode(c.Mode) {
	case "", alloc.Exclusive, alloc.TimeSlice, alloc.MPS:
		out.Mode = alloc.Mode(c.Mode)
	default:
		return out, fmt.Errorf("%s.mode %q: valid are exclusive, timeslice, mps", field, c.Mode)
	}
	if c.Memory != nil {
		v, err := positiveMiB(*c.Memory)
		if err != nil {
			return out, fmt.Errorf("%s.memory: %w", field, err)
		}
		out.MemoryMiB = v
	}
	if c.Compute != nil {
		if *c.Compute < 1 || *c.Compute > 100 {
			return out, fmt.Errorf("%s.compute %d: valid is 1..100 (percent of a GPU's compute)", field, *c.Compute)
		}
		out.ComputePercent = *c.Compute
	}
	if c.Isolation != "" && !slices.Contains(Isolations, c.Isolation) {
		return out, fmt.Errorf("%s.isolation %q: valid are %s", field, c.Isolation, strings.Join(Isolations, ", "))
	}
	if c.MemoryPolicy != "" && !slices.Contains(MemoryPolicies, c.MemoryPolicy) {
		return out, fmt.Errorf("%s.memoryPolicy %q: valid are %s", field, c.MemoryPolicy, strings.Join(MemoryPolicies, ", "))
	}
	if c.ThreadPercent != nil {
		if *c.ThreadPercent < 1 || *c.ThreadPercent > 100 {
			return out, fmt.Errorf("%s.threadPercent %d: valid is 1..100", field, *c.ThreadPercent)
		}
		out.ThreadPercent = *c.ThreadPercent
	}
	if c.PinnedMemory != nil {
		v, err := positiveMiB(*c.PinnedMemory)
		if err != nil {
			return out, fmt.Errorf("%s.pinnedMemory: %w", field, err)
		}
		out.PinnedMemoryMiB = v
	}
	if (c.ThreadPercent != nil || c.PinnedMemory != nil) && out.Mode != alloc.MPS {
		return out, fmt.Errorf("%s: threadPercent and pinnedMemory are MPS limits: they need mode mps (mode is %q)", field, c.Mode)
	}
	if out.Mode == alloc.MPS && out.ThreadPercent == 0 {
		out.ThreadPercent = out.ComputePercent
	}
	if out.PinnedMemoryMiB > 0 && out.MemoryMiB > 0 && out.PinnedMemoryMiB > out.MemoryMiB {
		return out, fmt.Errorf("%s.pinnedMemory: %d MiB is more than memory (%d MiB)", field, out.PinnedMemoryMiB, out.MemoryMiB)
	}
	if c.Replicas != nil {
		if *c.Replicas < 1 {
			return out, fmt.Errorf("%s.replicas %d: valid is 1 or more", field, *c.Replicas)
		}
		out.Replicas = *c.Replicas
	}
	if c.Interval != "" && !slices.Contains(Intervals, c.Interval) {
		return out, fmt.Errorf("%s.interval %q: valid are %s", field, c.Interval, strings.Join(Intervals, ", "))
	}
	if (c.Replicas != nil || c.Interval != "") && out.Mode != alloc.TimeSlice {
		return out, fmt.Errorf("%s: replicas and interval are time-slicing settings: they need mode timeslice (mode is %q)", field, c.Mode)
	}
	if c.Isolation == "hardware" && out.Mode != "" && out.Mode != alloc.Exclusive {
		return out, fmt.Errorf("%s: isolation hardware needs a device alone (a whole GPU or a MIG instance), not mode %s", field, out.Mode)
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
	if q.Sign() <= 0 || q.Value()>>20 < 1 {
		return 0, fmt.Errorf("%q: want at least 1Mi", s)
	}
	return q.Value() >> 20, nil
}

// strict decodes data into v, refusing unknown and duplicate fields, with
// each problem named by its path under field and, for an unknown field,
// the fields valid there.
func strict(field string, data []byte, v any) error {
	strictErrs, err := sigsjson.UnmarshalStrict(data, v, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		// sigs.k8s.io/json reports types with its own error type: decode
		// again with encoding/json for the field's path.
		var te *json.UnmarshalTypeError
		if ok := asTypeError(json.Unmarshal(data, reflect.New(reflect.TypeOf(v).Elem()).Interface()), &te); ok {
			path := field
			if te.Field != "" {
				path += "." + te.Field
			}
			return fmt.Errorf("%s: a %s where a %s is wanted", path, te.Value, kindName(te.Type))
		}
		return fmt.Errorf("%s: %v", field, err)
	}
	var msgs []string
	for _, e := range strictErrs {
		msgs = append(msgs, describeStrict(field, e.Error(), reflect.TypeOf(v).Elem()))
	}
	if len(msgs) > 0 {
		sort.Strings(msgs)
		return fmt.Errorf("%s", strings.Join(msgs, "; "))
	}
	return nil
}

func asTypeError(err error, te **json.UnmarshalTypeError) bool {
	for e := err; e != nil; {
		if t, ok := e.(*json.UnmarshalTypeError); ok {
			*te = t
			return true
		}
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		e = u.Unwrap()
	}
	return false
}

func kindName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "whole number"
	case reflect.Map, reflect.Struct:
		return "object"
	case reflect.Slice:
		return "list"
	}
	return t.Kind().String()
}

// describeStrict turns sigs.k8s.io/json's strict error (`unknown field
// "a.b"`, `duplicate field "a"`) into "FIELD.a.b: unknown field; valid
// fields here are …".
func describeStrict(field, msg string, root reflect.Type) string {
	for _, p := range []struct{ prefix, what string }{{"unknown field ", "unknown field"}, {"duplicate field ", "given twice"}} {
		rest, ok := strings.CutPrefix(msg, p.prefix)
		if !ok {
			continue
		}
		name := strings.Trim(rest, `"`)
		out := field + "." + name + ": " + p.what
		if p.what == "unknown field" {
			parent := ""
			if i := strings.LastIndex(name, "."); i >= 0 {
				parent = name[:i]
			}
			if valid := fieldsAt(root, parent); len(valid) > 0 {
				out += "; valid fields here are " + strings.Join(valid, ", ")
			}
		}
		return out
	}
	return field + ": " + msg
}

// fieldsAt lists the JSON fields of the struct reached from t by the
// dotted path (map keys and list indexes skipped).
func fieldsAt(t reflect.Type, path string) []string {
	for _, part := range strings.Split(path, ".") {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if part == "" {
			break
		}
		if t.Kind() != reflect.Struct {
			return nil
		}
		if i := strings.Index(part, "["); i >= 0 {
			part = part[:i]
		}
		f, ok := fieldByJSON(t, part)
		if !ok {
			return nil
		}
		t = f.Type
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var out []string
	for i := range t.NumField() {
		if name := jsonName(t.Field(i)); name != "" {
			out = append(out, name)
		}
	}
	return out
}

func fieldByJSON(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if jsonName(t.Field(i)) == name {
			return t.Field(i), true
		}
	}
	return reflect.StructField{}, false
}

func jsonName(f reflect.StructField) string {
	tag := f.Tag.Get("json")
	name, _, _ := strings.Cut(tag, ",")
	if name == "-" {
		return ""
	}
	return name
}
