package draconfig

import (
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

const f = "spec.devices.config[0].opaque.parameters"

func TestDecodeAccepts(t *testing.T) {
	cases := []struct {
		name, in string
		want     Sharing
	}{
		{"nvidia time-slicing", `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Long"}}}`,
			Sharing{Kind: "GpuConfig", Mode: alloc.TimeSlice, Interval: "Long"}},
		{"nvidia MPS with limits", `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":50,"defaultPinnedDeviceMemoryLimit":"10Gi"}}}`,
			Sharing{Kind: "GpuConfig", Mode: alloc.MPS, ThreadPercent: 50, PinnedMemoryMiB: 10240}},
		{"nvidia no sharing", `{"apiVersion":"gpu.nvidia.com/v1alpha1","kind":"GpuConfig"}`, Sharing{Kind: "GpuConfig"}},
		{"nvidia MIG MPS", `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"MigDeviceConfig","sharing":{"strategy":"MPS"}}`,
			Sharing{Kind: "MigDeviceConfig", Mode: alloc.MPS}},
		{"slice mps", `{"apiVersion":"gpu.gpuslice.dev/v1alpha1","kind":"SliceConfig","mode":"mps","memory":"8Gi","compute":30,"memoryPolicy":"kill","isolation":"tenant"}`,
			Sharing{Kind: "SliceConfig", Mode: alloc.MPS, MemoryMiB: 8192, ComputePercent: 30, ThreadPercent: 30, MemoryPolicy: "kill", Isolation: "tenant"}},
		{"slice timeslice", `{"apiVersion":"gpu.gpuslice.dev/v1alpha1","kind":"SliceConfig","mode":"timeslice","replicas":4,"interval":"Short"}`,
			Sharing{Kind: "SliceConfig", Mode: alloc.TimeSlice, Replicas: 4, Interval: "Short"}},
		{"slice hardware", `{"apiVersion":"gpu.gpuslice.dev/v1alpha1","kind":"SliceConfig","isolation":"hardware"}`,
			Sharing{Kind: "SliceConfig", Isolation: "hardware"}},
	}
	for _, c := range cases {
		got, err := Decode(f, []byte(c.in))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got != c.want {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
}

// Every refusal names the field's full path and what would be valid.
func TestDecodeRefusesWithPathAndValid(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"unknown strategy", `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"Fair"}}`,
			f + `.sharing.strategy "Fair": valid are TimeSlicing, MPS`},
		{"unknown nested field", `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"threads":5}}}`,
			f + `.sharing.mpsConfig.threads: unknown field; valid fields here are defaultActiveThreadPercentage, defaultPinnedDeviceMemoryLimit, defaultPerDevicePinnedMemoryLimit`},
		{"unknown top field", `{"apiVersion":"gpu.gpuslice.dev/v1alpha1","kind":"SliceConfig","memry":"1Gi"}`,
			f + `.memry: unknown field; valid fields here are apiVersion, kind, mode, memory, compute, isolation, memoryPolicy, threadPercent, pinnedMemory, replicas, interval`},
		{"duplicate", `{"apiVersion":"gpu.gpuslice.dev/v1alpha1","kind":"SliceConfig","mode":"mps","mode":"timeslice"}`,
			f + `.mode: given twice`},
		{"wrong type", `{"apiVersion":"gpu.gpuslice.dev/v1alpha1","kind":"SliceConfig","compute":"half"}`,
			f + `.compute: a string where a whole number is wanted`},
		{"bad kind", `{"apiVersion":"gpu.gpuslice.dev/v1alpha1","kind":"GpuConfig"}`,
			`apiVersion "gpu.gpuslice.dev/v1alpha1" kind "GpuConfig": valid are gpu.gpuslice.dev/v1alpha1 SliceConfig, or GpuConfig / MigDeviceConfig of resource.nvidia.com/v1beta1 or gpu.nvidia.com/v1alpha1`},
		{"no kind", `{"mode":"mps"}`, "apiVersion and kind are required"},
		{"not an object", `[1,2]`, "not a JSON object"},
		{"mps settings with time-slicing", `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","mpsConfig":{}}}`,
			f + `.sharing.mpsConfig: only with strategy MPS`},
		{"interval on MIG", `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"MigDeviceConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Long"}}}`,
			f + `.sharing.timeSlicingConfig: a MIG device has no time-slice interval`},
		{"bad interval", `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing","timeSlicingConfig":{"interval":"Forever"}}}`,
			`interval "Forever": valid are Default, Short, Medium, Long`},
		{"thread percent range", `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":150}}}`,
			`defaultActiveThreadPercentage 150: valid is 1..100`},
		{"bad quantity", `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultPinnedDeviceMemoryLimit":"ten gigs"}}}`,
			`defaultPinnedDeviceMemoryLimit: "ten gigs" is not a quantity`},
		{"per-device limits", `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultPerDevicePinnedMemoryLimit":{"0":"1Gi"}}}}`,
			`defaultPerDevicePinnedMemoryLimit: not supported`},
		{"slice mode", `{"apiVersion":"gpu.gpuslice.dev/v1alpha1","kind":"SliceConfig","mode":"shared"}`,
			f + `.mode "shared": valid are exclusive, timeslice, mps`},
		{"mps limits without mps", `{"apiVersion":"gpu.gpuslice.dev/v1alpha1","kind":"SliceConfig","mode":"timeslice","threadPercent":20}`,
			`threadPercent and pinnedMemory are MPS limits: they need mode mps`},
		{"replicas without timeslice", `{"apiVersion":"gpu.gpuslice.dev/v1alpha1","kind":"SliceConfig","mode":"mps","replicas":2}`,
			`replicas and interval are time-slicing settings`},
		{"pinned over memory", `{"apiVersion":"gpu.gpuslice.dev/v1alpha1","kind":"SliceConfig","mode":"mps","memory":"4Gi","pinnedMemory":"8Gi"}`,
			f + `.pinnedMemory: 8192 MiB is more than memory (4096 MiB)`},
		{"compute range", `{"apiVersion":"gpu.gpuslice.dev/v1alpha1","kind":"SliceConfig","compute":0}`,
			f + `.compute 0: valid is 1..100`},
		{"isolation", `{"apiVersion":"gpu.gpuslice.dev/v1alpha1","kind":"SliceConfig","isolation":"strict"}`,
			f + `.isolation "strict": valid are none, tenant, hardware`},
		{"hardware shared", `{"apiVersion":"gpu.gpuslice.dev/v1alpha1","kind":"SliceConfig","isolation":"hardware","mode":"mps"}`,
			`isolation hardware needs a device alone`},
		{"policy", `{"apiVersion":"gpu.gpuslice.dev/v1alpha1","kind":"SliceConfig","memoryPolicy":"oom"}`,
			f + `.memoryPolicy "oom": valid are warn, kill`},
		{"zero memory", `{"apiVersion":"gpu.gpuslice.dev/v1alpha1","kind":"SliceConfig","memory":"0"}`,
			f + `.memory: "0": want at least 1Mi`},
	}
	for _, c := range cases {
		_, err := Decode(f, []byte(c.in))
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), f) {
			t.Errorf("%s: error %q, want it to start with the path and contain %q", c.name, err, c.want)
		}
	}
}

func raw(s string) runtime.RawExtension { return runtime.RawExtension{Raw: []byte(s)} }

func opaque(driver, params string, requests ...string) resourceapi.DeviceAllocationConfiguration {
	return resourceapi.DeviceAllocationConfiguration{Source: resourceapi.AllocationConfigSourceClaim,
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: driver, Parameters: raw(params)}},
		Requests:            requests}
}

// The last config of this driver naming the request (or none) wins; other
// drivers' configs and configs for other requests are ignored.
func TestForRequestOrder(t *testing.T) {
	ts := `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"TimeSlicing"}}`
	mps := `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS"}}`
	configs := []resourceapi.DeviceAllocationConfiguration{
		opaque(dranames.DriverName, ts),         // class-wide, first
		opaque(dranames.DriverName, mps, "gpu"), // the claim's, for request gpu
		opaque("gpu.nvidia.com", `{"anything":1}`),
		opaque(dranames.DriverName, `not json`, "other"),
	}
	sh, err := ForRequest(configs, "gpu", "status.allocation.devices.config")
	if err != nil || sh.Mode != alloc.MPS {
		t.Fatalf("request gpu: %+v, %v; want MPS", sh, err)
	}
	sh, err = ForRequest(configs, "gpu/small", "status.allocation.devices.config")
	if err != nil || sh.Mode != alloc.MPS {
		t.Fatalf("subrequest gpu/small: %+v, %v; want MPS (configured by its request)", sh, err)
	}
	sh, err = ForRequest(configs[:3], "x", "status.allocation.devices.config")
	if err != nil || sh.Mode != alloc.TimeSlice {
		t.Fatalf("request x: %+v, %v; want the class-wide time-slicing", sh, err)
	}
	_, err = ForRequest(configs, "other", "status.allocation.devices.config")
	if err == nil || !strings.HasPrefix(err.Error(), "status.allocation.devices.config[3].opaque.parameters: ") {
		t.Fatalf("request other: %v; want the bad config named by index", err)
	}
	if sh, err := ForRequest(nil, "gpu", "x"); err != nil || sh != (Sharing{}) {
		t.Fatalf("no configs: %+v, %v", sh, err)
	}
}

func classOf(name string) string {
	return map[string]string{"gpu.gpuslice.dev": "gpu", "shared.gpuslice.dev": "shared", "mig.gpuslice.dev": "mig"}[name]
}

func TestCheckClaimSpec(t *testing.T) {
	spec := resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
		Requests: []resourceapi.DeviceRequest{
			{Name: "share", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "shared.gpuslice.dev"}},
			{Name: "mig", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "mig.gpuslice.dev"}},
		},
		Config: []resourceapi.DeviceClaimConfiguration{
			{Requests: []string{"share"}, DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: dranames.DriverName,
				Parameters: raw(`{"apiVersion":"gpu.gpuslice.dev/v1alpha1","kind":"SliceConfig","mode":"exclusive"}`)}}},
			{Requests: []string{"nope"}, DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: dranames.DriverName,
				Parameters: raw(`{"apiVersion":"gpu.gpuslice.dev/v1alpha1","kind":"SliceConfig"}`)}}},
			{DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: dranames.DriverName,
				Parameters: raw(`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"Fair"}}`)}}},
			{DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: "other.example.com",
				Parameters: raw(`garbage`)}}},
		},
	}}
	probs := CheckClaimSpec(&spec, "spec", classOf)
	var got []string
	for _, p := range probs {
		got = append(got, p.Error())
	}
	want := []string{
		`spec.devices.config[0].opaque.parameters: request "share": mode exclusive on a shared GPU: use device class gpu.gpuslice.dev for a GPU alone`,
		`spec.devices.config[1].requests[0]: "nope": the claim has no such request (requests: mig, share)`,
		`spec.devices.config[2].opaque.parameters.sharing.strategy "Fair": valid are TimeSlicing, MPS`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","sharing":{"strategy":"MPS","mpsConfig":{"defaultActiveThreadPercentage":50,"defaultPinnedDeviceMemoryLimit":"10Gi"}}}`,
		`{"apiVersion":"gpu.gpuslice.dev/v1alpha1","kind":"SliceConfig","mode":"timeslice","replicas":4,"interval":"Short"}`,
		`{"apiVersion":"gpu.gpuslice.dev/v1alpha1","kind":"SliceConfig","mode":"mps","memory":"8Gi","compute":30}`,
		`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"MigDeviceConfig","sharing":{"strategy":"TimeSlicing"}}`,
		`{}`, `[]`, `null`, `{"apiVersion":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sh, err := Decode("p", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "p") {
				t.Fatalf("error without the field's path: %v", err)
			}
			return
		}
		if sh.ThreadPercent < 0 || sh.ThreadPercent > 100 || sh.PinnedMemoryMiB < 0 || sh.MemoryMiB < 0 || sh.Replicas < 0 {
			t.Fatalf("accepted out-of-range values: %+v from %q", sh, data)
		}
		switch sh.Mode {
		case "", alloc.Exclusive, alloc.TimeSlice, alloc.MPS:
		default:
			t.Fatalf("accepted mode %q", sh.Mode)
		}
	})
}
