package spec

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/gpuslice/gpuslice/internal/alloc"
)

func nvTS(n int) alloc.Sharing { return alloc.Sharing{Mode: alloc.TimeSlice, Replicas: n} }

var nvExcl = alloc.Sharing{Mode: alloc.Exclusive}

// tsConfig is a valid time-slicing config whose resources list follows.
const tsHead = "version: v1\nsharing:\n  timeSlicing:\n    failRequestsGreaterThanOne: true\n    resources:\n"

func TestDevicePluginConfigDiagnostics(t *testing.T) {
	for _, tc := range []struct {
		name  string
		in    string
		wants []string
		check func(t *testing.T, s *Spec)
	}{
		{name: "valid time-slicing", in: tsHead + "    - name: nvidia.com/gpu\n      replicas: 4\n",
			check: func(t *testing.T, s *Spec) {
				nvImported(t, s, ImportedSharing{Source: SourceDevicePlugin, Name: "default", Sharing: nvTS(4)})
			}},
		{name: "prefix is added", in: tsHead + "    - name: gpu\n      replicas: 2\n",
			check: func(t *testing.T, s *Spec) {
				nvImported(t, s, ImportedSharing{Source: SourceDevicePlugin, Name: "default", Sharing: nvTS(2)})
			}},
		{name: "replicas 1", in: tsHead + "    - name: nvidia.com/gpu\n      replicas: 1\n",
			wants: []string{"E 7:17 replicas 1 is rejected by the device plugin"}},
		{name: "replicas quoted", in: tsHead + "    - name: nvidia.com/gpu\n      replicas: \"4\"\n",
			wants: []string{"E 7:17 rejects a quoted number"}},
		{name: "replicas missing and misspelt", in: tsHead + "    - name: nvidia.com/gpu\n      replica: 4\n",
			wants: []string{`E 7:7 did you mean "replicas"`, "E 6:7 replicas is required"}},
		{name: "unknown field says the plugin would drop it", in: "version: v1\nsharing:\n  timeslicing:\n    resources: []\n",
			wants: []string{`E 3:3 did you mean "timeSlicing"`}},
		{name: "version", in: "version: v2\n",
			wants: []string{"E 1:10 the device plugin reads only v1"}},
		{name: "empty resources", in: "version: v1\nsharing:\n  mps:\n    resources: []\n",
			wants: []string{"E 4:16 no resources specified"}},
		{name: "missing resources", in: "sharing:\n  timeSlicing:\n    renameByDefault: true\n",
			wants: []string{"E 3:5 no resources specified"}},
		{name: "failRequestsGreaterThanOne false", in: "sharing:\n  timeSlicing:\n    failRequestsGreaterThanOne: false\n    resources:\n    - {name: nvidia.com/gpu, replicas: 2}\n",
			wants: []string{"W 3:33 set failRequestsGreaterThanOne: true"}},
		{name: "failRequestsGreaterThanOne unset", in: "sharing:\n  timeSlicing:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 2}\n",
			wants: []string{"W 3:5 defaults to false"}},
		{name: "rename and devices are ignored", in: tsHead + "    - name: nvidia.com/gpu\n      replicas: 2\n      rename: shared-gpu\n      devices: [0, \"1:0\", GPU-b1028956-cfa2-0990-bf4a-5da9abb51763]\n",
			wants: []string{"W 8:7 rename nvidia.com/shared-gpu is parsed but ignored", "W 9:7 devices is parsed but ignored"}},
		{name: "devices all is not a warning", in: tsHead + "    - name: nvidia.com/gpu\n      replicas: 2\n      devices: all\n"},
		{name: "bad devices", in: tsHead + "    - name: nvidia.com/gpu\n      replicas: 2\n      devices: some\n    - name: nvidia.com/mig-1g.5gb\n      replicas: 2\n      devices: [GPU-1, -1]\n",
			wants: []string{"E 8:16 only string the device plugin accepts is all", "E 11:17 not a device", "E 11:24 not a device",
				"W 9:13 exists only with migStrategy mixed"}},
		{name: "resource names", in: tsHead + "    - name: nvidia.com/GPU\n      replicas: 2\n    - name: nvidia.com/" + string(make([]byte, 0)) + "a-very-long-resource-name-that-goes-past-the-limit-of-63\n      replicas: 2\n    - name: nvidia.com/gpu\n      replicas: 2\n    - name: nvidia.com/gpu\n      replicas: 3\n    - name: example.com/gpu\n      replicas: 2\n",
			wants: []string{"E 6:13 must be a DNS subdomain", "E 8:13 at most 63", "E 12:13 listed twice", "E 14:13 must be a DNS subdomain"}},
		{name: "unknown resource", in: tsHead + "    - name: nvidia.com/a100\n      replicas: 2\n",
			wants: []string{"W 6:13 advertises only nvidia.com/gpu and nvidia.com/mig-<profile>"}},
		{name: "time-slicing and MPS", in: "sharing:\n  timeSlicing:\n    failRequestsGreaterThanOne: true\n    resources: [{name: nvidia.com/gpu, replicas: 2}]\n  mps:\n    resources: [{name: nvidia.com/gpu, replicas: 4}]\n",
			wants: []string{"E 5:3 timeSlicing and mps cannot both be set"},
			check: func(t *testing.T, s *Spec) {
				// The device plugin would use MPS.
				nvImported(t, s, ImportedSharing{Source: SourceDevicePlugin, Name: "default",
					Sharing: alloc.Sharing{Mode: alloc.MPS, MaxClients: 4, DefaultThreadPercent: 25}})
			}},
		{name: "MPS limit", in: "sharing:\n  mps:\n    resources: [{name: nvidia.com/gpu, replicas: 49}]\n",
			wants: []string{"E 3:50 exceed the 48 clients"}},
		{name: "MPS failRequestsGreaterThanOne false", in: "sharing:\n  mps:\n    failRequestsGreaterThanOne: false\n    resources: [{name: nvidia.com/gpu, replicas: 4}]\n",
			wants: []string{"W 3:33 is ignored for MPS"}},
		{name: "MPS with migStrategy mixed", in: "flags:\n  migStrategy: mixed\nsharing:\n  mps:\n    resources: [{name: nvidia.com/gpu, replicas: 4}]\n",
			wants: []string{`E 2:16 "using --mig-strategy=mixed is not supported with MPS"`}},
		{name: "MPS with migStrategy single", in: "flags:\n  migStrategy: single\nsharing:\n  mps:\n    resources: [{name: nvidia.com/gpu, replicas: 4}]\n",
			wants: []string{"E 2:16 does not support MPS on MIG devices"}},
		{name: "MPS on a MIG resource", in: "sharing:\n  mps:\n    resources: [{name: nvidia.com/mig-1g.5gb, replicas: 4}]\n",
			wants: []string{"E 3:24 MPS on MIG devices is not supported"}},
		{name: "MIG resources with mixed", in: "flags: {migStrategy: mixed}\n" + tsHead[len("version: v1\n"):] +
			"    - {name: nvidia.com/mig-1g.5gb, replicas: 4}\n    - {name: nvidia.com/mig-1g.5gb.me, replicas: 2}\n    - {name: nvidia.com/gpu, replicas: 3}\n",
			check: func(t *testing.T, s *Spec) {
				nvImported(t, s, ImportedSharing{Source: SourceDevicePlugin, Name: "default", MIGStrategy: "mixed",
					Sharing: nvTS(3), MIGSharing: nvTS(4),
					Devices: []ImportedDevices{{All: true, MIGEnabled: true, MIGDevices: map[string]int{"1g.5gb": 0, "1g.5gb+me": 0}}}})
			}},
		{name: "MIG resources need mixed", in: "flags: {migStrategy: none}\n" + tsHead[len("version: v1\n"):] + "    - {name: nvidia.com/mig-1g.5gb, replicas: 4}\n",
			wants: []string{"W 6:14 exists only with migStrategy mixed; with migStrategy none"}},
		{name: "MIG resources without a strategy", in: tsHead + "    - {name: nvidia.com/mig-1g.5gb, replicas: 4}\n",
			wants: []string{"W 6:14 which this config does not set"}},
		{name: "compute-instance profiles are not advertised", in: "flags: {migStrategy: mixed}\n" + tsHead[len("version: v1\n"):] + "    - {name: nvidia.com/mig-1c.2g.10gb, replicas: 4}\n    - {name: nvidia.com/mig-big, replicas: 4}\n",
			wants: []string{"W 6:14 compute instance spans the GPU instance", "W 7:14 matches no MIG device"}},
		{name: "single shares MIG devices as nvidia.com/gpu", in: "flags: {migStrategy: single}\n" + tsHead[len("version: v1\n"):] + "    - {name: nvidia.com/gpu, replicas: 2}\n",
			check: func(t *testing.T, s *Spec) {
				nvImported(t, s, ImportedSharing{Source: SourceDevicePlugin, Name: "default", MIGStrategy: "single", Sharing: nvTS(2), MIGSharing: nvTS(2)})
			}},
		{name: "flags", in: "flags:\n  migStrategy: mixd\n  failOnInitError: \"true\"\n  mpsRoot: run/mps\n  deviceDiscoveryStrategy: nvml\n  plugin:\n    deviceListStrategy: [envvar, cdi]\n    deviceIDStrategy: index\n    sharedDevicesAllocationPolicy: spread\n  gfd:\n    sleepInterval: 60x\n    oneshot: yes\n",
			wants: []string{"E 2:16 want none, single or mixed", "E 3:20 rejects a quoted boolean", "E 4:12 absolute path",
				"E 7:34 want envvar, volume-mounts, cdi-annotations or cdi-cri", "E 9:36 want distributed or packed", "E 11:20 is not a duration"}},
		{name: "resources and imex", in: "resources:\n  gpus:\n  - pattern: \"*A100*\"\n    name: a100\n  mig:\n  - name: mig-small\nimex:\n  channelIDs: [1]\n  required: true\n",
			wants: []string{"W 1:1 resources is ignored", "E 6:5 pattern is required", "E 8:15 channelIDs [] or [0]"}},
		{name: "not a device-plugin config", in: "apiVersion: apps/v1\nkind: Deployment\n",
			wants: []string{`E 1:1 it has kind "Deployment"`}},
		{name: "two documents", in: "version: v1\n---\nversion: v1\n",
			wants: []string{"E 3:1 reads only the first YAML document"}},
		{name: "two documents in a ConfigMap value", in: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: dp}\ndata:\n  a: |\n    version: v1\n    ---\n    version: v1\n",
			wants: []string{"E 8:5 the device plugin reads only the first YAML document of a config"}},
		{name: "empty", in: "# nothing\n", wants: []string{"E 0:0 the file is empty"}},
		{name: "syntax", in: "sharing:\n  timeSlicing: [\n", wants: []string{"E 2:0 YAML syntax"}},
		{name: "JSON with tabs", in: "{\n\t\"version\": \"v1\",\n\t\"sharing\": {\"timeSlicing\": {\n\t\t\"failRequestsGreaterThanOne\": true,\n\t\t\"resources\": [{\"name\": \"nvidia.com/gpu\", \"replicas\": 1}]}}\n}\n",
			wants: []string{"E 5:56 replicas 1 is rejected"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, diags := ReadDevicePluginConfig("dp.yaml", []byte(tc.in))
			nvExpect(t, diags, tc.wants)
			if tc.check != nil {
				tc.check(t, s)
			}
		})
	}
}

func nvImported(t *testing.T, s *Spec, want ...ImportedSharing) {
	t.Helper()
	got := append([]ImportedSharing(nil), s.Imported...)
	for i := range got {
		// Positions, the text and the naming settings are checked in
		// imported_test.go.
		got[i].Where, got[i].SharingWhere, got[i].Text, got[i].Key, got[i].DevicePlugin, got[i].File = Pos{}, Pos{}, "", "", nil, ""
		got[i].Devices = append([]ImportedDevices(nil), got[i].Devices...)
		for j := range got[i].Devices {
			got[i].Devices[j].Where, got[i].Devices[j].DevicesWhere = Pos{}, Pos{}
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("imported\n got %+v\nwant %+v", got, want)
	}
}

// TestDevicePluginConfigMap checks that problems inside configs embedded in
// a ConfigMap are reported at their line and column in the ConfigMap.
func TestDevicePluginConfigMap(t *testing.T) {
	in := `apiVersion: v1
kind: ConfigMap
metadata:
  name: device-plugin-configs
data:
  literal: |
    version: v1
    sharing:
      timeSlicing:
        failRequestsGreaterThanOne: true
        resources:
        - name: nvidia.com/gpu
          replicas: 1
  oneline: '{"sharing": {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 64}]}}}'
  folded: >
    {"version": "v9"}
  "bad key": "{}"
  notastring:
    version: v1
  broken: |
    sharing: [
`
	s, diags := ReadDevicePluginConfig("cm.yaml", []byte(in))
	nvExpect(t, diags, []string{
		"E 13:21 data[literal].sharing.timeSlicing.resources[0].replicas",
		"E 14:87 exceed the 48 clients",
		"E 15:11 line 1, column 13 of the embedded config",
		"E 17:3 is not a valid ConfigMap key",
		"E 19:5 a ConfigMap's data values are strings",
		"E 21:0 YAML syntax",
	})
	var names []string
	for _, imp := range s.Imported {
		names = append(names, imp.Name)
	}
	if want := []string{"literal", "oneline", "folded", "bad key"}; !reflect.DeepEqual(names, want) {
		t.Errorf("configs %v, want %v", names, want)
	}
	if w := s.Imported[0].Where; w.Line != 6 || w.Column != 3 {
		t.Errorf("literal is at %+v, want its key at 6:3", w)
	}
}

// TestDevicePluginTestdata reads the files under testdata/nvidia, among them
// the ConfigMap of the seed (config.json with time-slicing, 3 replicas).
func TestDevicePluginTestdata(t *testing.T) {
	for _, tc := range []struct {
		file  string
		wants []string
		imps  []ImportedSharing
	}{
		{file: "seed-configmap.yaml",
			wants: []string{"W 10:24 failRequestsGreaterThanOne is not set and defaults to false"},
			imps:  []ImportedSharing{{Source: SourceDevicePlugin, Name: "config.json", Sharing: nvTS(3), Single: true}}},
		{file: "seed-eks-configmap.yaml",
			wants: []string{"W 13:9 failRequestsGreaterThanOne is not set"},
			imps:  []ImportedSharing{{Source: SourceDevicePlugin, Name: "any", MIGStrategy: "none", Sharing: nvTS(10), Single: true}}},
		{file: "seed-configmap-as-printed.yaml",
			wants: []string{"E 8:0 must be indented more than its key"}},
		{file: "dp-timeslicing.yaml",
			imps: []ImportedSharing{{Source: SourceDevicePlugin, Name: "default", MIGStrategy: "none", Sharing: nvTS(4)}}},
		{file: "dp-mps.json",
			imps: []ImportedSharing{{Source: SourceDevicePlugin, Name: "default", MIGStrategy: "none",
				Sharing: alloc.Sharing{Mode: alloc.MPS, MaxClients: 10, DefaultThreadPercent: 10}}}},
		{file: "dp-operator-configmap.yaml",
			imps: []ImportedSharing{
				{Source: SourceDevicePlugin, Name: "a100-mig", MIGStrategy: "mixed", Sharing: nvExcl, MIGSharing: nvTS(2),
					Devices: []ImportedDevices{{All: true, MIGEnabled: true, MIGDevices: map[string]int{"1g.5gb": 0, "2g.10gb": 0}}}},
				{Source: SourceDevicePlugin, Name: "t4-timesliced", Sharing: nvTS(8)},
				{Source: SourceDevicePlugin, Name: "l4-mps", Sharing: alloc.Sharing{Mode: alloc.MPS, MaxClients: 4, DefaultThreadPercent: 25}},
				{Source: SourceDevicePlugin, Name: "exclusive", MIGStrategy: "none", Sharing: nvExcl},
			}},
		{file: "dp-invalid.yaml",
			wants: []string{
				"E 1:10 reads only v1",
				`E 3:16 "mixd" is not valid`,
				`E 6:23 "serial" is not valid`,
				"E 12:19 replicas 1 is rejected by the device plugin",
				"E 14:19 rejects a quoted number",
				"W 15:9 rename nvidia.com/mig-small is parsed but ignored",
				"W 16:9 devices is parsed but ignored",
				`E 20:9 did you mean "replicas"`,
				"E 19:9 replicas is required",
				"E 22:15 channelIDs [] or [0]",
			},
			imps: []ImportedSharing{{Source: SourceDevicePlugin, Name: "default", Sharing: nvExcl}}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join("testdata", "nvidia", tc.file)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			s, diags := ReadDevicePluginConfig(path, data)
			nvExpect(t, diags, tc.wants)
			nvImported(t, s, tc.imps...)
			for _, d := range diags {
				if d.Pos.File != path {
					t.Errorf("%s: file %q", d, d.Pos.File)
				}
			}
		})
	}
}
