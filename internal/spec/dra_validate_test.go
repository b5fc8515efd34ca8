package spec

import (
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/alloc"
)

// draClaim is a v1 claim whose requests and config are given.
func draClaim(devices string) string {
	return "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata:\n  name: c\nspec:\n  devices:\n" + devices
}

// draShare is a v1 claim of one request with the given config kind and
// sharing; the sharing body starts at line 19, indented by 14.
func draShare(kind, class, sharing string) string {
	return draClaim(`    requests:
      - name: g
        exactly:
          deviceClassName: ` + class + `
    config:
      - requests: [g]
        opaque:
          driver: gpu.nvidia.com
          parameters:
            apiVersion: resource.nvidia.com/v1beta1
            kind: ` + kind + `
            sharing:
` + sharing)
}

func TestDRAValidation(t *testing.T) {
	cases := []struct {
		name  string
		yaml  string
		diags []draWant
	}{
		{"unknown apiVersion", "apiVersion: resource.k8s.io/v1beta\nkind: ResourceClaim\n", []draWant{
			draE("1:13", "apiVersion", `apiVersion "resource.k8s.io/v1beta" is not a DRA version gpuslice reads (did you mean "resource.k8s.io/v1beta1" or "resource.k8s.io/v1beta2"? valid: resource.k8s.io/v1alpha3, resource.k8s.io/v1beta1, resource.k8s.io/v1beta2, resource.k8s.io/v1)`)}},
		{"classic DRA", "apiVersion: resource.k8s.io/v1alpha2\nkind: ResourceClaim\n", []draWant{draE("1:13", "apiVersion", "classic DRA")}},
		{"unknown kind", "apiVersion: resource.k8s.io/v1\nkind: ResourceClaims\n", []draWant{
			draE("2:7", "kind", `unknown kind "ResourceClaims" (did you mean "ResourceClaim"? valid: ResourceClaim, ResourceClaimTemplate, DeviceClass)`)}},
		{"wrong group", "apiVersion: v1\nkind: ResourceClaim\n", []draWant{draE("1:13", "apiVersion", `ResourceClaim is in API group resource.k8s.io, not "v1"`)}},
		{"no kind", "apiVersion: resource.k8s.io/v1\n", []draWant{draE("1:1", "", "object has no kind")}},
		{"not an object", "- a\n", []draWant{draE("1:1", "", "want an object")}},
		{"yaml syntax", "a: [\n", []draWant{draE("1:0", "", "YAML syntax")}},
		{"other kinds skipped", "apiVersion: apps/v1\nkind: Deployment\n---\napiVersion: resource.k8s.io/v1\nkind: ResourceSlice\n", []draWant{
			draW("2:7", "kind", "Deployment (apps/v1) is not a DRA object: skipped"), draW("5:7", "kind", "ResourceSlice is not read")}},
		{"no name", "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata:\n  generateName: x-\nspec:\n  devices:\n    requests: []\n", []draWant{
			draE("4:3", "metadata.name", "ResourceClaim has no metadata.name (generateName is not enough")}},
		{"duplicate request names", draClaim("    requests:\n      - name: g\n        exactly: {deviceClassName: gpu.nvidia.com}\n      - name: g\n        exactly: {deviceClassName: gpu.nvidia.com}\n"), []draWant{
			draE("10:15", "spec.devices.requests[1].name", `request name "g" is used twice (first at line 8)`)}},
		{"bad request name", draClaim("    requests:\n      - name: My_GPU\n        exactly: {deviceClassName: gpu.nvidia.com}\n"), []draWant{
			draE("8:15", "spec.devices.requests[0].name", `request name "My_GPU" is not a DNS label`)}},
		{"constraint names unknown request", draClaim("    requests:\n      - name: gpu0\n        exactly: {deviceClassName: gpu.nvidia.com}\n    constraints:\n      - requests: [gpu1]\n        matchAttribute: gpu.nvidia.com/parentUUID\n"), []draWant{
			draE("11:20", "spec.devices.constraints[0].requests[0]", `names request "gpu1", which this claim does not have (did you mean "gpu0"?`)}},
		{"count", draClaim("    requests:\n      - name: a\n        exactly: {deviceClassName: gpu.nvidia.com, count: 0}\n      - name: b\n        exactly: {deviceClassName: gpu.nvidia.com, count: -2}\n      - name: c\n        exactly: {deviceClassName: gpu.nvidia.com, count: two}\n      - name: d\n        exactly: {deviceClassName: gpu.nvidia.com, count: 65}\n"), []draWant{
			draE("9:59", "spec.devices.requests[0].exactly.count", "count 0: a request needs at least one device"),
			draE("11:59", "spec.devices.requests[1].exactly.count", "count -2"),
			draE("13:59", "spec.devices.requests[2].exactly.count", `count "two" is not a whole number`),
			draE("15:59", "spec.devices.requests[3].exactly.count", "count 65 is more than a claim can take (at most 64"),
		}},
		{"unknown field", draClaim("    requests:\n      - name: g\n        exactly:\n          deviceClasName: gpu.nvidia.com\n"), []draWant{
			draE("10:11", "spec.devices.requests[0].exactly.deviceClasName", `unknown field "deviceClasName" (did you mean "deviceClassName"?`),
			draE("10:11", "spec.devices.requests[0].exactly.deviceClassName", `request "g" has no deviceClassName`),
		}},
		{"CEL syntax", draClaim("    requests:\n      - name: g\n        exactly:\n          deviceClassName: mig.nvidia.com\n          selectors:\n            - cel:\n                expression: \"device.attributes['gpu.nvidia.com'].profile == \"\n"), []draWant{
			draE("13:29", "spec.devices.requests[0].exactly.selectors[0].cel.expression", `CEL: selector "device.attributes['gpu.nvidia.com'].profile == "`)}},
		{"interval", draShare("GpuConfig", "gpu.nvidia.com", "              strategy: TimeSlicing\n              timeSlicingConfig: {interval: short}\n"), []draWant{
			draE("20:45", "spec.devices.config[0].opaque.parameters.sharing.timeSlicingConfig.interval", `unknown time-slice interval "short" (did you mean "Short"? valid: Default, Short, Medium, Long)`)}},
		{"strategy", draShare("GpuConfig", "gpu.nvidia.com", "              strategy: mps\n"), []draWant{
			draE("19:25", "spec.devices.config[0].opaque.parameters.sharing.strategy", `unknown sharing strategy "mps" (did you mean "MPS"?`)}},
		{"thread percent", draShare("GpuConfig", "gpu.nvidia.com", "              strategy: MPS\n              mpsConfig: {defaultActiveThreadPercentage: 150}\n"), []draWant{
			draE("20:58", "spec.devices.config[0].opaque.parameters.sharing.mpsConfig.defaultActiveThreadPercentage", "active thread percentage 150 is out of range (want 0..100)")}},
		{"quantities", draShare("GpuConfig", "gpu.nvidia.com", "              strategy: MPS\n              mpsConfig:\n                defaultPinnedDeviceMemoryLimit: 0\n                defaultPerDevicePinnedMemoryLimit: {\"0\": -1Gi, \"GPU-x\": 500k, first: 1Gi}\n"), []draWant{
			draE("21:49", "spec.devices.config[0].opaque.parameters.sharing.mpsConfig.defaultPinnedDeviceMemoryLimit", "memory limit 0 is not positive"),
			draW("22:52", "spec.devices.config[0].opaque.parameters.sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit", "not carried"),
			draE("22:58", "spec.devices.config[0].opaque.parameters.sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit.0", "memory limit -1Gi is not positive"),
			draE("22:73", "spec.devices.config[0].opaque.parameters.sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit.GPU-x", "memory limit 500k rounds down to 0 MiB"),
			draE("22:79", "spec.devices.config[0].opaque.parameters.sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit.first", `"first" is not a device index or UUID`),
		}},
		{"mps with time-slicing", draShare("GpuConfig", "gpu.nvidia.com", "              strategy: TimeSlicing\n              mpsConfig: {defaultActiveThreadPercentage: 10}\n"), []draWant{
			draE("20:15", "spec.devices.config[0].opaque.parameters.sharing.mpsConfig", "mpsConfig cannot be used with strategy TimeSlicing")}},
		{"time-slicing config with mps", draShare("GpuConfig", "gpu.nvidia.com", "              strategy: MPS\n              timeSlicingConfig: {interval: Long}\n"), []draWant{
			draE("20:15", "spec.devices.config[0].opaque.parameters.sharing.timeSlicingConfig", "timeSlicingConfig cannot be used with strategy MPS")}},
		{"mig cannot set interval", draShare("MigDeviceConfig", "mig.nvidia.com", "              strategy: TimeSlicing\n              timeSlicingConfig: {interval: Long}\n"), []draWant{
			draE("20:15", "spec.devices.config[0].opaque.parameters.sharing.timeSlicingConfig", "MigDeviceConfig has no timeSlicingConfig: the time-slice interval cannot be set on MIG devices")}},
		{"MigDeviceConfig on a whole GPU", draShare("MigDeviceConfig", "gpu.nvidia.com", "              strategy: MPS\n"), []draWant{
			draE("17:19", "spec.devices.config[0].opaque.parameters.kind", `MigDeviceConfig cannot apply to request "g" of gpu devices (gpu.nvidia.com)`)}},
		{"no strategy", draShare("GpuConfig", "gpu.nvidia.com", "              timeSlicingConfig: {interval: Long}\n"), []draWant{
			draE("19:15", "spec.devices.config[0].opaque.parameters.sharing.strategy", "sharing has no strategy")}},
		{"v1 fields need exactly", draClaim("    requests:\n      - name: g\n        deviceClassName: gpu.nvidia.com\n"), []draWant{
			draE("9:9", "spec.devices.requests[0].deviceClassName", "resource.k8s.io/v1 puts a request's device fields under `exactly:`")}},
		{"v1beta1 has no exactly", strings.Replace(draClaim("    requests:\n      - name: g\n        exactly: {deviceClassName: gpu.nvidia.com}\n"), "/v1\n", "/v1beta1\n", 1), []draWant{
			draE("9:9", "spec.devices.requests[0].exactly", "`exactly` is resource.k8s.io/v1beta2 and v1; in v1beta1")}},
		{"allocation mode", draClaim("    requests:\n      - name: a\n        exactly: {deviceClassName: gpu.nvidia.com, allocationMode: All}\n      - name: b\n        exactly: {deviceClassName: gpu.nvidia.com, allocationMode: All, count: 2}\n      - name: c\n        exactly: {deviceClassName: gpu.nvidia.com, allocationMode: Exact}\n"), []draWant{
			draW("9:68", "spec.devices.requests[0].exactly.allocationMode", "allocationMode All takes every matching device on the node"),
			draW("11:68", "spec.devices.requests[1].exactly.allocationMode", "allocationMode All"),
			draE("11:80", "spec.devices.requests[1].exactly.count", "count is only for allocationMode ExactCount"),
			draE("13:68", "spec.devices.requests[2].exactly.allocationMode", `unknown allocationMode "Exact" (did you mean "ExactCount"?`),
		}},
		{"driver typo", draClaim("    requests:\n      - name: g\n        exactly: {deviceClassName: gpu.nvidia.com}\n    config:\n      - opaque: {driver: gpu.nvidia.co, parameters: {}}\n"), []draWant{
			draW("11:26", "spec.devices.config[0].opaque.driver", `config for driver "gpu.nvidia.co" is not read (gpuslice reads gpu.nvidia.com's): not applied (did you mean "gpu.nvidia.com"?`)}},
		{"match attributes", draClaim("    requests:\n      - name: a\n        exactly: {deviceClassName: gpu.nvidia.com}\n      - name: b\n        exactly: {deviceClassName: gpu.nvidia.com}\n    constraints:\n      - matchAttribute: parentUUID\n      - matchAttribute: resource.kubernetes.io/pcieRoot\n"), []draWant{
			draE("13:25", "spec.devices.constraints[0].matchAttribute", `matchAttribute "parentUUID" is not a fully qualified attribute`),
			draW("14:25", "spec.devices.constraints[1].matchAttribute", `matchAttribute "resource.kubernetes.io/pcieRoot" cannot be expressed in gpuslice`),
		}},
		{"profile conflict", draClaim("    requests:\n      - name: g\n        exactly:\n          deviceClassName: mig.nvidia.com\n          selectors:\n            - cel: {expression: \"device.attributes['gpu.nvidia.com'].profile == '1g.5gb'\"}\n            - cel: {expression: \"device.attributes['gpu.nvidia.com'].profile == '2g.10gb'\"}\n"), []draWant{
			draE("8:9", "", `request "g" selects profiles 1g.5gb and 2g.10gb at once: no device matches`)}},
		{"two MPS devices", strings.Replace(draShare("GpuConfig", "gpu.nvidia.com", "              strategy: MPS\n"),
			"deviceClassName: gpu.nvidia.com\n", "deviceClassName: gpu.nvidia.com\n          count: 2\n", 1), []draWant{
			draE("20:25", "", "the claim would take 2 MPS devices; gpuslice gives a claim at most one")}},
		{"duplicate claims", draClaim("    requests: []\n") + "---\n" + draClaim("    requests: []\n"), []draWant{
			draE("12:9", "metadata.name", `workload "c" (namespace default) is defined twice: ResourceClaim at line 1 and ResourceClaim at line 9`)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, ds := ReadDRA("t.yaml", []byte(c.yaml))
			if s == nil {
				t.Fatal("nil spec")
			}
			draCheck(t, ds, c.diags)
		})
	}
}

// TestDRAAllAtOnce: one object with many problems reports every one.
func TestDRAAllAtOnce(t *testing.T) {
	y := draClaim(`    requests:
      - name: a
        exactly: {deviceClassName: migu.nvidia.com, count: 0}
      - name: a
        exactly: {deviceClassName: gpu.nvidia.com, colour: red}
    constraints:
      - requests: [z]
        matchAttribute: gpu.nvidia.com/parentUUID
`)
	_, ds := ReadDRA("t.yaml", []byte(y))
	if n := len(ds.Errors()); n != 5 {
		t.Errorf("want 5 errors, got %d:\n%v", n, ds)
	}
	if ds.Err() == nil || !strings.Contains(ds.Error(), "t.yaml:9:36: error") {
		t.Errorf("Error() = %v", ds.Error())
	}
}

func TestDRAMapping(t *testing.T) {
	cases := []struct {
		name, devices string
		want          []alloc.Request
		cons          []alloc.Constraint
	}{
		{"profile inside || is not taken", "    requests:\n      - name: g\n        exactly:\n          deviceClassName: mig.nvidia.com\n          selectors:\n            - cel: {expression: \"device.attributes['gpu.nvidia.com'].profile == '1g.5gb' || device.attributes['gpu.nvidia.com'].profile == '2g.10gb'\"}\n",
			[]alloc.Request{{Name: "g", Count: 1, Mode: alloc.MIG, Selector: "device.attributes['gpu.nvidia.com'].profile == '1g.5gb' || device.attributes['gpu.nvidia.com'].profile == '2g.10gb'"}}, nil},
		{"profile in a parenthesised conjunct, reversed", "    requests:\n      - name: g\n        exactly:\n          deviceClassName: mig.nvidia.com\n          selectors:\n            - cel: {expression: \"(\\\"3g.20gb\\\" == device.attributes[\\\"gpu.nvidia.com\\\"].profile && device.driver == 'gpu.nvidia.com')\"}\n            - cel: {expression: \"device.capacity['gpu.nvidia.com'].memory >= 1\"}\n",
			[]alloc.Request{{Name: "g", Count: 1, Mode: alloc.MIG, Profile: "3g.20gb", Selector: "(\"3g.20gb\" == device.attributes[\"gpu.nvidia.com\"].profile && device.driver == 'gpu.nvidia.com') && (device.capacity['gpu.nvidia.com'].memory >= 1)"}}, nil},
		{"GpuConfig without sharing stays exclusive; two devices share a node", "    requests:\n      - name: g\n        exactly: {deviceClassName: gpu.nvidia.com, count: 2}\n    config:\n      - opaque: {driver: gpu.nvidia.com, parameters: {apiVersion: resource.nvidia.com/v1beta1, kind: GpuConfig}}\n",
			[]alloc.Request{{Name: "g", Count: 2, Mode: alloc.Exclusive}}, []alloc.Constraint{{Match: "node"}}},
		{"last config wins; requests: [] is all; driverVersion is node", "    requests:\n      - name: a\n        exactly: {deviceClassName: gpu.nvidia.com}\n      - name: b\n        exactly: {deviceClassName: mig.nvidia.com}\n    constraints:\n      - requests: [a, b]\n        matchAttribute: gpu.nvidia.com/driverVersion\n    config:\n      - opaque: {driver: gpu.nvidia.com, parameters: {apiVersion: resource.nvidia.com/v1beta1, kind: GpuConfig, sharing: {strategy: MPS}}}\n        requests: [a]\n      - opaque: {driver: gpu.nvidia.com, parameters: {apiVersion: resource.nvidia.com/v1beta1, kind: MigDeviceConfig, sharing: {strategy: TimeSlicing}}}\n        requests: [b]\n",
			[]alloc.Request{{Name: "a", Count: 1, Mode: alloc.MPS, Selector: draTypeGPU}, {Name: "b", Count: 1, Mode: alloc.TimeSlice, Selector: "device.attributes['gpu.nvidia.com'].type == 'mig'"}},
			[]alloc.Constraint{{Requests: []string{"a", "b"}, Match: "node"}, {Match: "node"}}},
		{"admin access is left out", "    requests:\n      - name: g\n        exactly: {deviceClassName: gpu.nvidia.com}\n      - name: watch\n        exactly: {deviceClassName: gpu.nvidia.com, adminAccess: true}\n",
			[]alloc.Request{{Name: "g", Count: 1, Mode: alloc.Exclusive}}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, ds := ReadDRA("t.yaml", []byte(draClaim(c.devices)))
			if len(ds.Errors()) > 0 {
				t.Fatalf("errors: %v", ds)
			}
			draSame(t, s.Workloads, []Workload{{Name: "c", Tenant: "default", Replicas: 1, Requests: c.want, Constraints: c.cons}})
		})
	}
}
