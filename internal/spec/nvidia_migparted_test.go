package spec

import (
	"os"
	"path/filepath"
	"testing"
)

func TestMIGPartedConfigDiagnostics(t *testing.T) {
	for _, tc := range []struct {
		name  string
		model string // ReadMIGPartedConfigFor when set
		in    string
		wants []string
		check func(t *testing.T, s *Spec)
	}{
		{name: "valid", in: "version: v1\nmig-configs:\n  all-balanced:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {\"1g.5gb\": 2, \"2g.10gb\": 1, \"3g.20gb\": 1}\n  off:\n  - devices: [0, 1]\n    mig-enabled: false\n",
			check: func(t *testing.T, s *Spec) {
				nvImported(t, s,
					ImportedSharing{Source: SourceMIGParted, Name: "all-balanced", Devices: []ImportedDevices{{All: true, MIGEnabled: true, MIGDevices: map[string]int{"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}}}},
					ImportedSharing{Source: SourceMIGParted, Name: "off", Devices: []ImportedDevices{{Indexes: []int{0, 1}}}})
			}},
		{name: "all-enabled with no instances is valid", in: "version: v1\nmig-configs:\n  all-enabled:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {}\n"},
		{name: "version", in: "version: v2\nmig-configs:\n  a: [{devices: all, mig-enabled: false}]\n",
			wants: []string{"E 1:10 mig-parted reads only v1"}},
		{name: "apiVersion instead of version", in: "apiVersion: v1\nmig-configs:\n  a: [{devices: all, mig-enabled: false}]\n",
			wants: []string{"E 1:1 mig-parted wants version: v1, not apiVersion: v1", "E 1:1 version is missing"}},
		{name: "extensions are rejected", in: "version: v1\nx-note: hi\nmig-configs:\n  a: [{devices: all, mig-enabled: false, x-why: test}]\n",
			wants: []string{`E 2:1 unknown field "x-note"; mig-parted rejects it`, `E 4:42 unknown field "x-why"`}},
		{name: "empty mig-configs", in: "version: v1\nmig-configs: {}\n",
			wants: []string{"E 2:14 mig-configs is empty"}},
		{name: "missing mig-configs", in: "version: v1\n",
			wants: []string{"E 1:1 mig-configs is missing"}},
		{name: "empty config", in: "version: v1\nmig-configs:\n  a: []\n",
			wants: []string{`E 3:6 config "a" is empty`}},
		{name: "required fields", in: "version: v1\nmig-configs:\n  a:\n  - mig-devices: {\"1g.5gb\": 1}\n",
			wants: []string{"E 4:5 devices is required", "E 4:5 mig-enabled is required"}},
		{name: "mig-devices required when enabled", in: "version: v1\nmig-configs:\n  a:\n  - devices: all\n    mig-enabled: true\n",
			wants: []string{"E 4:5 mig-devices is required when mig-enabled is true"}},
		{name: "mig-devices forbidden when disabled", in: "version: v1\nmig-configs:\n  a:\n  - devices: all\n    mig-enabled: false\n    mig-devices: {\"1g.5gb\": 7}\n",
			wants: []string{"E 6:5 not allowed when mig-enabled is false"}},
		{name: "profiles and counts", in: "version: v1\nmig-configs:\n  a:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {\"1g.5g\": 1, \"2g.10gb\": -1, \"3g.20gb\": \"1\"}\n",
			wants: []string{`E 6:19 profile "1g.5g"`, "E 6:42 count -1 is negative", "E 6:57 rejects a quoted number"}},
		{name: "all counts zero", in: "version: v1\nmig-configs:\n  a:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {\"1g.5gb\": 0}\n",
			wants: []string{"E 6:18 all counts are 0"}},
		{name: "devices", in: "version: v1\nmig-configs:\n  a:\n  - devices: some\n    mig-enabled: false\n  - devices: [0, 0, -1, x]\n    mig-enabled: false\n  - devices: []\n    mig-enabled: no\n",
			wants: []string{"E 4:14 the only string mig-parted accepts is all", "W 6:18 GPU 0 is listed twice", "W 6:21 GPU index -1 matches no GPU",
				"E 6:25 not a whole number", "W 8:14 devices is empty"}},
		{name: "overlapping entries", in: "version: v1\nmig-configs:\n  a:\n  - devices: [0, 1]\n    mig-enabled: false\n  - devices: [1, 2]\n    mig-enabled: false\n  - devices: all\n    mig-enabled: false\n",
			wants: []string{"W 6:5 GPUs 1 also matched by mig-configs.a[0]", "W 8:5 GPUs 0, 1 also matched by mig-configs.a[0]"}},
		{name: "device-filter", in: "version: v1\nmig-configs:\n  a:\n  - device-filter: [\"0x20B010DE\", 0x20B110DE, \"A100\"]\n    devices: all\n    mig-enabled: false\n",
			wants: []string{`E 4:35 quote it: "0x20B110DE"`, `W 4:47 device-filter "A100" is not a PCI device id`}},
		{name: "fit from the device-filter", in: "version: v1\nmig-configs:\n  a:\n  - device-filter: \"0x20B010DE\"\n    devices: all\n    mig-enabled: true\n    mig-devices: {\"3g.20gb\": 2, \"1g.5gb\": 1}\n",
			wants: []string{"E 7:18 2× 3g.20gb + 1× 1g.5gb do not fit on A100-40GB: needs 9 memory slices, the GPU has 8"}},
		{name: "profile of another model", in: "version: v1\nmig-configs:\n  a:\n  - device-filter: \"0x233010DE\"\n    devices: all\n    mig-enabled: true\n    mig-devices: {\"1g.5gb\": 1}\n",
			wants: []string{`E 7:19 H100-80GB-SXM has no MIG profile 1g.5gb`}},
		{name: "filter of an unknown GPU skips the fit", in: "version: v1\nmig-configs:\n  a:\n  - device-filter: \"0x999910DE\"\n    devices: all\n    mig-enabled: true\n    mig-devices: {\"1g.5gb\": 70}\n"},
		{name: "model hint", model: "A30", in: "version: v1\nmig-configs:\n  a:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {\"1g.6gb\": 5}\n  b:\n  - device-filter: \"0x20B010DE\"\n    devices: all\n    mig-enabled: true\n    mig-devices: {\"1g.5gb\": 7}\n",
			wants: []string{"E 6:18 5× 1g.6gb do not fit on A30: 5× 1g.6gb but at most 4 fit; needs 5 memory slices, the GPU has 4; needs 5 compute slices, the GPU has 4; 5 instances, the GPU holds at most 4"}},
		{name: "compute-instance profiles use their GPU instance", model: "A100-40GB", in: "version: v1\nmig-configs:\n  a:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {\"1c.2g.10gb\": 3, \"1c.3g.20gb\": 1}\n",
			wants: []string{"E 6:18 needs 10 memory slices"}},
		{name: "too many instances", model: "A100-40GB", in: "version: v1\nmig-configs:\n  a:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {\"1g.5gb\": 1000000}\n",
			wants: []string{"E 6:18 1000000× 1g.5gb do not fit on A100-40GB: 1000000 instances, the GPU holds at most 7"}},
		{name: "unknown model", model: "A200", in: "version: v1\n",
			wants: []string{"E 0:0 unknown GPU model"}},
		{name: "model without MIG", model: "T4", in: "version: v1\n",
			wants: []string{"E 0:0 GPU model T4 does not support MIG"}},
		{name: "two documents", in: "version: v1\nmig-configs:\n  a: [{devices: all, mig-enabled: false}]\n---\nversion: v1\n",
			wants: []string{"E 5:1 mig-parted reads only the first YAML document"}},
		{name: "two documents in a ConfigMap value", in: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: mp}\ndata:\n  c: |\n    version: v1\n    mig-configs:\n      a: [{devices: all, mig-enabled: false}]\n    ---\n    version: v1\n",
			wants: []string{"E 10:5 mig-parted reads only the first YAML document of a config"}},
		{name: "JSON", in: "{\"version\": \"v1\", \"mig-configs\": {\"a\": [{\"devices\": \"all\", \"mig-enabled\": true, \"mig-devices\": {\"7g.40gb\": 2}}]}}\n", model: "A100-40GB",
			wants: []string{"E 1:96 2× 7g.40gb but at most 1 fit"}},
		{name: "ConfigMap", in: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: mig-parted-config}\ndata:\n  config.yaml: |\n    version: v1\n    mig-configs:\n      a:\n      - devices: all\n        mig-enabled: true\n", model: "A100-40GB",
			wants: []string{"E 9:9 data[config.yaml].mig-configs.a[0].mig-devices"},
			check: func(t *testing.T, s *Spec) {
				if len(s.Imported) != 1 || s.Imported[0].Where.Line != 8 || s.Imported[0].Where.Column != 7 {
					t.Errorf("imported %+v, want a at 8:7", s.Imported)
				}
			}},
		{name: "empty", in: "\n", wants: []string{"E 0:0 the file is empty"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s *Spec
			var diags Diagnostics
			if tc.model != "" {
				s, diags = ReadMIGPartedConfigFor("mp.yaml", []byte(tc.in), tc.model)
			} else {
				s, diags = ReadMIGPartedConfig("mp.yaml", []byte(tc.in))
			}
			nvExpect(t, diags, tc.wants)
			if tc.check != nil {
				tc.check(t, s)
			}
		})
	}
}

// TestMIGPartedTestdata reads the files under testdata/nvidia, among them
// the seed's half-balanced config verbatim.
func TestMIGPartedTestdata(t *testing.T) {
	halfBalanced := []ImportedDevices{
		{Indexes: []int{0, 1, 2, 3}, MIGEnabled: true, MIGDevices: map[string]int{"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}},
		{Indexes: []int{4, 5, 6, 7}},
	}
	for _, tc := range []struct {
		file, model string
		wants       []string
		imps        []ImportedSharing
	}{
		// The seed writes apiVersion: v1 where mig-parted wants version: v1.
		{file: "seed-half-balanced.yaml", model: "A100-40GB",
			wants: []string{"E 1:1 mig-parted wants version: v1, not apiVersion: v1", "E 1:1 version is missing"},
			imps:  []ImportedSharing{{Source: SourceMIGParted, Name: "half-balanced", Devices: halfBalanced}}},
		{file: "mig-parted-a100.yaml", model: "A100-40GB",
			imps: []ImportedSharing{
				{Source: SourceMIGParted, Name: "all-disabled", Devices: []ImportedDevices{{All: true}}},
				{Source: SourceMIGParted, Name: "all-1g.5gb", Devices: []ImportedDevices{{All: true, DeviceFilter: []string{"0x20B010DE", "0x20B110DE"}, MIGEnabled: true, MIGDevices: map[string]int{"1g.5gb": 7}}}},
				{Source: SourceMIGParted, Name: "balanced", Devices: []ImportedDevices{{All: true, DeviceFilter: []string{"0x20B010DE"}, MIGEnabled: true, MIGDevices: map[string]int{"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}}}},
				{Source: SourceMIGParted, Name: "shared-compute", Devices: []ImportedDevices{
					{Indexes: []int{0, 1}, MIGEnabled: true, MIGDevices: map[string]int{"1c.2g.10gb": 2, "1g.5gb+me": 1}},
					{Indexes: []int{2, 3}}}},
			}},
		// The same file on an A30: the entries without a device-filter are
		// checked against it, the A100 entries are not.
		{file: "mig-parted-a100.yaml", model: "A30",
			wants: []string{"E 28:9 A30 has no MIG profile 2g.10gb", "E 29:9 A30 has no MIG profile 1g.5gb+me"}},
		{file: "mig-parted-configmap.yaml", model: "A100-40GB",
			imps: []ImportedSharing{
				{Source: SourceMIGParted, Name: "all-disabled", Devices: []ImportedDevices{{All: true}}},
				{Source: SourceMIGParted, Name: "all-3g.20gb", Devices: []ImportedDevices{{All: true, MIGEnabled: true, MIGDevices: map[string]int{"3g.20gb": 2}}}},
			}},
		{file: "mig-parted-invalid.yaml",
			wants: []string{
				`E 4:22 quote it: "0x20B010DE"`,
				"E 14:9 1× 4g.20gb + 2× 2g.10gb do not fit on A100-40GB: needs 8 compute slices, the GPU has 7",
				`E 17:16 devices "some"`,
				"E 19:7 not allowed when mig-enabled is false",
				"E 21:7 devices is required",
				`E 23:9 profile "1g.5g"`,
				"E 24:20 count -1 is negative",
				`E 27:7 did you mean "mig-devices"`,
				"E 25:7 mig-devices is required",
				`E 29:10 config "empty" is empty`,
			}},
		{file: "mig-parted-invalid.yaml", model: "A100-40GB",
			wants: []string{
				`E 4:22 quote it: "0x20B010DE"`,
				"E 8:9 3× 3g.20gb but at most 2 fit",
				"E 14:9 needs 8 compute slices",
				`E 17:16 devices "some"`,
				"E 19:7 not allowed when mig-enabled is false",
				"E 21:7 devices is required",
				`E 23:9 profile "1g.5g"`,
				"E 24:20 count -1 is negative",
				`E 27:7 did you mean "mig-devices"`,
				"E 25:7 mig-devices is required",
				`E 29:10 config "empty" is empty`,
			}},
	} {
		t.Run(tc.file+"/"+tc.model, func(t *testing.T) {
			path := filepath.Join("testdata", "nvidia", tc.file)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var s *Spec
			var diags Diagnostics
			if tc.model != "" {
				s, diags = ReadMIGPartedConfigFor(path, data, tc.model)
			} else {
				s, diags = ReadMIGPartedConfig(path, data)
			}
			nvExpect(t, diags, tc.wants)
			if tc.imps != nil {
				nvImported(t, s, tc.imps...)
			}
		})
	}
	// With version: v1 the seed's config is valid and fits an A100-40GB.
	data, err := os.ReadFile(filepath.Join("testdata", "nvidia", "seed-half-balanced.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	fixed := append([]byte("version: v1\n"), data[len("apiVersion: v1\n"):]...)
	s, diags := ReadMIGPartedConfigFor("fixed.yaml", fixed, "A100-40GB")
	nvExpect(t, diags, nil)
	nvImported(t, s, ImportedSharing{Source: SourceMIGParted, Name: "half-balanced", Devices: halfBalanced})
}
