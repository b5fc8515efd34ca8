package render

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/k8s/draconfig"
	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// decodeSliceConfig is the driver's own decoder of opaque parameters: a
// config the dra target writes for gpuslice's driver must pass it.
var decodeSliceConfig = draconfig.Decode

// gpusliceClaims renders the dra target for gpuslice's driver and returns
// every claim spec in it, strictly decoded, by "Kind namespace/name".
func gpusliceClaims(t *testing.T, out []byte) map[string]resourcev1.DeviceClaim {
	t.Helper()
	claims := map[string]resourcev1.DeviceClaim{}
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var tm struct {
			Kind     string `json:"kind"`
			Metadata struct{ Name, Namespace string }
		}
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("%v\n%s", err, doc)
		}
		key := tm.Kind + " " + tm.Metadata.Namespace + "/" + tm.Metadata.Name
		switch tm.Kind {
		case "ResourceClaim":
			var c resourcev1.ResourceClaim
			if err := yaml.UnmarshalStrict([]byte(doc), &c); err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			claims[key] = c.Spec.Devices
		case "ResourceClaimTemplate":
			var c resourcev1.ResourceClaimTemplate
			if err := yaml.UnmarshalStrict([]byte(doc), &c); err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			claims[key] = c.Spec.Spec.Devices
		}
	}
	return claims
}

// The dra target for gpuslice's driver: claims name gpuslice's classes
// only, a share of a whole GPU consumes its planned memory from
// shared.gpuslice.dev, every opaque config is a SliceConfig the driver's
// decoder accepts with the planned mode, and no selector or constraint
// names NVIDIA's driver.
func TestDRAForGpuslice(t *testing.T) {
	classes := map[string]bool{dranames.ClassGPU: true, dranames.ClassShared: true, dranames.ClassMIG: true}
	for name, in := range goldenInputs {
		s, p := planFor(t, in)
		out, err := RenderWith("dra", s, p, Options{DRADriver: DRADriverGpuslice})
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(out), "gpu.nvidia.com") || strings.Contains(string(out), "resource.nvidia.com") {
			t.Errorf("%s: the render for gpuslice's driver names NVIDIA's:\n%s", name, out)
		}
		shares := 0
		for key, d := range gpusliceClaims(t, out) {
			for _, r := range d.Requests {
				e := r.Exactly
				if e == nil || !classes[e.DeviceClassName] {
					t.Errorf("%s %s request %s: class %+v, want one of gpuslice's", name, key, r.Name, e)
					continue
				}
				if e.DeviceClassName == dranames.ClassShared {
					shares++
					if q, ok := e.Capacity.Requests["memory"]; e.Capacity == nil || !ok || q.Sign() <= 0 {
						t.Errorf("%s %s request %s: a share of a GPU without a memory capacity request", name, key, r.Name)
					}
				}
			}
			for i, c := range d.Config {
				if c.Opaque == nil || c.Opaque.Driver != dranames.DriverName {
					t.Errorf("%s %s config %d: %+v, want opaque for %s", name, key, i, c, dranames.DriverName)
					continue
				}
				var tm struct{ APIVersion, Kind string }
				_ = json.Unmarshal(c.Opaque.Parameters.Raw, &tm)
				if tm.APIVersion != dranames.SliceAPIVersion || tm.Kind != dranames.SliceKind {
					t.Errorf("%s %s config %d: %s %s, want SliceConfig", name, key, i, tm.APIVersion, tm.Kind)
				}
				sh, err := decodeSliceConfig("spec.devices.config", c.Opaque.Parameters.Raw)
				if err != nil {
					t.Errorf("%s %s: the driver refuses %s: %v", name, key, c.Opaque.Parameters.Raw, err)
				} else if sh.Mode != alloc.TimeSlice && sh.Mode != alloc.MPS {
					t.Errorf("%s %s: config %s has mode %q", name, key, c.Opaque.Parameters.Raw, sh.Mode)
				}
			}
			for _, c := range d.Constraints {
				if c.MatchAttribute == nil || *c.MatchAttribute != dranames.DriverName+"/index" {
					t.Errorf("%s %s: constraint on %v, want %s/index", name, key, c.MatchAttribute, dranames.DriverName)
				}
			}
		}
		t.Logf("%s: %d shares of whole GPUs", name, shares)
	}
}

// The DeviceClasses written with --dra-device-classes are the driver's own.
func TestDRAGpusliceDeviceClasses(t *testing.T) {
	s, p := planFor(t, "../../examples/gpuslice.yaml")
	out, err := RenderWith("dra", s, p, Options{DRADriver: DRADriverGpuslice, DRADeviceClasses: true})
	if err != nil {
		t.Fatal(err)
	}
	var got []resourcev1.DeviceClass
	for _, doc := range strings.Split(string(out), "\n---\n") {
		if strings.Contains(doc, "kind: DeviceClass") {
			var dc resourcev1.DeviceClass
			if err := yaml.UnmarshalStrict([]byte(doc), &dc); err != nil {
				t.Fatal(err)
			}
			got = append(got, dc)
		}
	}
	want := dradriver.DeviceClasses()
	if len(got) != len(want) {
		t.Fatalf("%d DeviceClasses, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Name != want[i].Name || !reflect.DeepEqual(got[i].Spec, want[i].Spec) {
			t.Errorf("DeviceClass %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if _, err := RenderWith("dra", s, p, Options{DRADriver: "amd"}); err == nil || !strings.Contains(err.Error(), `"amd": valid are nvidia, gpuslice`) {
		t.Errorf("an unknown driver: %v", err)
	}
}
