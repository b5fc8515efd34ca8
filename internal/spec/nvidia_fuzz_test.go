package spec

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// nvSeeds adds the NVIDIA testdata files and a few edge cases to a corpus.
func nvSeeds(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "nvidia", "*"))
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		"", "{}", "[]", "null", "version: v1\n", "kind: ConfigMap\ndata:\n  a: |\n    x: [\n",
		"kind: ConfigMap\ndata:\n  a: >\n    {\"sharing\":\n    {\"mps\": 1}}\n",
		"a: &a [1, 2]\nb: &b [*a, *a]\nc: [*b, *b]\n",
		"version: v1\nmig-configs:\n  x: &x [{devices: all, mig-enabled: true, mig-devices: {\"1g.5gb\": 9999999999}}]\n  y: *x\n",
		"\xef\xbb\xbfversion: v1\r\nsharing:\r\n  timeSlicing:\r\n    resources: [{name: nvidia.com/gpu, replicas: 2}]\r\n",
	} {
		f.Add([]byte(s))
	}
}

// nvFuzzCheck holds for any input: a spec comes back, every diagnostic is
// well formed and inside the file, and reading is deterministic.
func nvFuzzCheck(t *testing.T, data []byte, read func() (*Spec, Diagnostics)) {
	s, diags := read()
	if s == nil {
		t.Fatal("nil spec")
	}
	lines := 1 + bytes.Count(data, []byte("\n")) + bytes.Count(data, []byte("\r"))
	for _, d := range diags {
		if d.Severity != Error && d.Severity != Warning {
			t.Errorf("severity %q", d.Severity)
		}
		if d.Message == "" || d.Pos.File != "f.yaml" {
			t.Errorf("malformed %+v", d)
		}
		if d.Pos.Line < 0 || d.Pos.Line > lines || d.Pos.Column < 0 {
			t.Errorf("position outside the file (%d lines): %s", lines, d)
		}
	}
	for _, imp := range s.Imported {
		if imp.Where.Line < 0 || imp.Where.Line > lines {
			t.Errorf("%s is at line %d of %d", imp.Name, imp.Where.Line, lines)
		}
	}
	s2, diags2 := read()
	if !reflect.DeepEqual(diags, diags2) || !reflect.DeepEqual(s, s2) {
		t.Error("two reads differ")
	}
}

func FuzzReadDevicePluginConfig(f *testing.F) {
	nvSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		nvFuzzCheck(t, data, func() (*Spec, Diagnostics) { return ReadDevicePluginConfig("f.yaml", data) })
	})
}

func FuzzReadMIGPartedConfig(f *testing.F) {
	nvSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		nvFuzzCheck(t, data, func() (*Spec, Diagnostics) { return ReadMIGPartedConfig("f.yaml", data) })
		nvFuzzCheck(t, data, func() (*Spec, Diagnostics) { return ReadMIGPartedConfigFor("f.yaml", data, "A100-40GB") })
	})
}

// TestNVIDIAAliasBomb: aliases cannot make the readers walk an exponential
// number of nodes.
func TestNVIDIAAliasBomb(t *testing.T) {
	var b bytes.Buffer
	b.WriteString("version: v1\nx0: &x0 [1, 1, 1, 1, 1, 1, 1, 1]\n")
	for i := 1; i < 12; i++ {
		b.WriteString("x" + string(rune('a'+i)) + ": &x" + string(rune('a'+i)) + " [")
		for j := 0; j < 8; j++ {
			if j > 0 {
				b.WriteString(", ")
			}
			if i == 1 {
				b.WriteString("*x0")
			} else {
				b.WriteString("*x" + string(rune('a'+i-1)))
			}
		}
		b.WriteString("]\n")
	}
	for _, read := range []func(string, []byte) (*Spec, Diagnostics){ReadDevicePluginConfig, ReadMIGPartedConfig} {
		_, diags := read("bomb.yaml", b.Bytes())
		nvExpect(t, diags, []string{"E 1:1 expands to more than"})
	}
}
