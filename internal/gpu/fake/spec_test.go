package fake_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpu/fake"
)

func TestPresets(t *testing.T) {
	want := []string{"dgx-a100", "dgx-a100-80", "dgx-h100", "dgx-h200", "l4x4", "mixed", "t4"}
	if got := fake.Presets(); !slices.Equal(got, want) {
		t.Fatalf("Presets() = %v, want %v", got, want)
	}
	type summary struct {
		n      int
		name   string
		migOn  int
		capMIG bool
	}
	for name, w := range map[string]summary{
		"dgx-a100":    {8, "NVIDIA A100-SXM4-40GB", 0, true},
		"dgx-a100-80": {8, "NVIDIA A100-SXM4-80GB", 0, true},
		"dgx-h100":    {8, "NVIDIA H100 80GB HBM3", 0, true},
		"dgx-h200":    {8, "NVIDIA H200", 0, true},
		"l4x4":        {4, "NVIDIA L4", 0, false},
		"t4":          {1, "Tesla T4", 0, false},
	} {
		gs := gpus(t, mustPreset(t, name))
		if len(gs) != w.n {
			t.Errorf("%s: %d GPUs, want %d", name, len(gs), w.n)
		}
		for _, g := range gs {
			if g.Name != w.name || g.MIGCapable != w.capMIG || g.MIGEnabled || !g.Healthy || len(g.Instances) != 0 {
				t.Errorf("%s: GPU %+v", name, g)
			}
		}
	}
	gs := gpus(t, mustPreset(t, "MIXED"))
	var models []string
	for _, g := range gs {
		models = append(models, g.Model)
		if g.MIGEnabled != (g.Model == "A100-40GB") {
			t.Errorf("mixed: GPU %d %s migEnabled=%v", g.Index, g.Model, g.MIGEnabled)
		}
	}
	if want := []string{"A100-40GB", "A100-40GB", "L4", "L4"}; !slices.Equal(models, want) {
		t.Errorf("mixed: %v, want %v", models, want)
	}

	_, err := fake.Preset("dgx-a10")
	var nf *catalog.NotFoundError
	if !errors.As(err, &nf) || nf.Suggestion == "" || !slices.Contains(nf.Valid, "dgx-h100") {
		t.Errorf("Preset(dgx-a10): %v", err)
	}
}

func TestNewRejects(t *testing.T) {
	many := make([]fake.GPUSpec, fake.MaxGPUs+1)
	for i := range many {
		many[i].Model = "T4"
	}
	for _, tc := range []struct {
		name string
		spec fake.MachineSpec
		is   error
		want string
	}{
		{"unknown model", fake.MachineSpec{GPUs: []fake.GPUSpec{{Model: "A100-40G"}}}, nil, `did you mean "A100-40GB"`},
		{"MIG on L4", fake.MachineSpec{GPUs: []fake.GPUSpec{{Model: "L4", MIGEnabled: true}}}, gpu.ErrNoMIG, "GPU 0"},
		{"instances without MIG", fake.MachineSpec{GPUs: []fake.GPUSpec{{Model: "A100-40GB", Instances: []string{"7g.40gb@0"}}}}, nil, "need MIG"},
		{"wrong start", fake.MachineSpec{GPUs: []fake.GPUSpec{{Model: "T4"}, {Model: "A100-40GB", MIGEnabled: true, Instances: []string{"3g.20gb@2"}}}}, gpu.ErrPlacement, "GPU 1"},
		{"overlap", fake.MachineSpec{GPUs: []fake.GPUSpec{{Model: "A100-40GB", MIGEnabled: true, Instances: []string{"3g.20gb@0", "2g.10gb@2"}}}}, gpu.ErrPlacement, "overlaps"},
		{"no room", fake.MachineSpec{GPUs: []fake.GPUSpec{{Model: "A100-40GB", MIGEnabled: true, Instances: []string{"7g.40gb", "1g.5gb"}}}}, gpu.ErrPlacement, "does not fit"},
		{"bad item", fake.MachineSpec{GPUs: []fake.GPUSpec{{Model: "A100-40GB", MIGEnabled: true, Instances: []string{"3g.20gb@x"}}}}, nil, "start"},
		{"too many GPUs", fake.MachineSpec{GPUs: many}, nil, "at most 64"},
	} {
		_, err := fake.New(tc.spec)
		if err == nil || (tc.is != nil && !errors.Is(err, tc.is)) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

func TestNewBuilds(t *testing.T) {
	m := mustNew(t, fake.MachineSpec{GPUs: []fake.GPUSpec{
		{Model: "NVIDIA A100-PCIE-40GB", MIGEnabled: true, Instances: []string{"3g.20gb", "3g.20gb"}},
		{Model: "nvidia l4", Healthy: new(false)},
		{Model: "NVIDIA-H100-80GB-HBM3", Healthy: new(true)},
	}})
	gs := gpus(t, m)
	if g := gs[0]; g.Name != "NVIDIA A100-PCIE-40GB" || g.Model != "A100-40GB" || len(g.Instances) != 2 ||
		g.Instances[0].Start != 0 || g.Instances[1].Start != 4 {
		t.Errorf("GPU 0: %+v", g)
	}
	if g := gs[1]; g.Name != "NVIDIA L4" || g.Healthy {
		t.Errorf("GPU 1: %+v", g)
	}
	if g := gs[2]; g.Model != "H100-80GB-SXM" || !g.Healthy {
		t.Errorf("GPU 2: %+v", g)
	}
	if m, err := fake.New(fake.MachineSpec{}); err != nil || len(gpus(t, m)) != 0 {
		t.Errorf("an empty machine: %v", err)
	}
}

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestLoadSpecFiles(t *testing.T) {
	spec, err := fake.LoadSpec("dgx-a100-mig.yaml", readTestdata(t, "dgx-a100-mig.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	gs := gpus(t, mustNew(t, spec))
	if len(gs) != 8 {
		t.Fatalf("%d GPUs, want 8", len(gs))
	}
	for i, g := range gs {
		if want := i < 4; g.MIGEnabled != want || (len(g.Instances) == 4) != want {
			t.Errorf("GPU %d: mig=%v with %d instances", i, g.MIGEnabled, len(g.Instances))
		}
		if g.Name != "NVIDIA A100-SXM4-40GB" {
			t.Errorf("GPU %d: %s", i, g.Name)
		}
	}

	spec, err = fake.LoadSpec("lab.yaml", readTestdata(t, "lab.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := mustNew(t, spec)
	if m.Info().DriverVersion != "570.86" {
		t.Errorf("driver %q", m.Info().DriverVersion)
	}
	gs = gpus(t, m)
	var layout []string
	for _, in := range gs[0].Instances {
		layout = append(layout, fmt.Sprintf("%s@%d", in.Profile, in.Start))
	}
	// mig.Place puts each instance where the most capacity stays free.
	if want := []string{"2g.20gb@0", "1g.10gb@2", "3g.40gb@4"}; !slices.Equal(layout, want) {
		t.Errorf("auto placement: %v, want %v", layout, want)
	}
	if len(gs) != 3 || gs[1].Healthy || gs[2].Model != "T4" {
		t.Errorf("lab: %+v", gs)
	}
	if _, err := m.CreateInstance(context.Background(), 0, "1g.10gb", 3); err != nil {
		t.Errorf("the last free slice: %v", err)
	}
}

func TestLoadSpecErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"empty", "", []string{"m.yaml: empty machine spec"}},
		{"null", "---\n", []string{"empty machine spec"}},
		{"syntax", "gpus: [\n", []string{"m.yaml: "}},
		{"not a mapping", "- 1\n", []string{"m.yaml:1:1: want a mapping"}},
		{"no gpus", "driverVersion: x\n", []string{"no gpus"}},
		{"gpus empty", "gpus: []\n", []string{"m.yaml:1:7: gpus: empty"}},
		{"gpus scalar", "gpus: 4\n", []string{`m.yaml:1:7: gpus: want a list of GPUs, got "4"`}},
		{"unknown top key", "gpu: []\n", []string{`m.yaml:1:1: unknown key "gpu"; did you mean "gpus"?`}},
		{"unknown gpu key", "gpus:\n  - model: T4\n    modle: T4\n", []string{`m.yaml:3:5: gpus[0]: unknown key "modle"; did you mean "model"?`, "valid keys: count, healthy, instances, mig, model"}},
		{"duplicate key", "gpus:\n  - model: T4\n    model: L4\n", []string{`m.yaml:3:5: gpus[0]: key "model" appears twice`}},
		{"no model", "gpus:\n  - count: 2\n", []string{"m.yaml:2:5: gpus[0]: no model"}},
		{"unknown model", "gpus:\n  - model: A100-40G\n", []string{`m.yaml:2:12: gpus[0].model: unknown GPU model "A100-40G"; did you mean "A100-40GB"?`, "valid: "}},
		{"bad count", "gpus:\n  - model: T4\n    count: two\n", []string{`m.yaml:3:12: gpus[0].count: want a whole number, got "two"`}},
		{"zero count", "gpus:\n  - model: T4\n    count: 0\n", []string{"m.yaml:3:12: gpus[0].count: 0; want 1..64"}},
		{"too many", "gpus:\n  - model: T4\n    count: 40\n  - model: L4\n    count: 40\n", []string{"m.yaml:4:5: gpus[1]: the machine has 80 GPUs so far; at most 64"}},
		{"bad bool", "gpus:\n  - model: T4\n    mig: yes please\n", []string{"m.yaml:3:10: gpus[0].mig: want true or false"}},
		{"MIG on T4", "gpus:\n  - model: T4\n    mig: true\n", []string{"m.yaml:3:10: gpus[0].mig: T4 does not support MIG; MIG-capable models: ", "A100-40GB"}},
		{"instances without mig", "gpus:\n  - model: A100-40GB\n    instances: [7g.40gb@0]\n", []string{"m.yaml:3:16: gpus[0].instances: instances need mig: true"}},
		{"wrong start", "gpus:\n  - model: A100-40GB\n    mig: true\n    instances:\n      - 3g.20gb@0\n      - 3g.20gb@2\n", []string{"m.yaml:6:9: gpus[0].instances[1]: 3g.20gb@2: ", "3g.20gb may start at {0,4}:4"}},
		{"overlap", "gpus:\n  - model: A100-40GB\n    mig: true\n    instances: [4g.20gb@0, 2g.10gb@2]\n", []string{"m.yaml:4:28: gpus[0].instances[1]: 2g.10gb@2: ", "overlaps 4g.20gb@0"}},
		{"unknown profile", "gpus:\n  - model: H100-80GB-SXM\n    mig: true\n    instances: [3g.20gb@0]\n", []string{`unknown MIG profile of H100-80GB-SXM "3g.20gb"`}},
		{"bad item", "gpus:\n  - model: A100-40GB\n    mig: true\n    instances: [{a: 1}]\n", []string{"m.yaml:4:17: gpus[0].instances[0]: want a non-empty string, got a mapping"}},
		{"alias", "x: &a T4\ngpus:\n  - model: *a\n", []string{`unknown key "x"`, "m.yaml:3:12: gpus[0].model: aliases are not supported"}},
		{"two documents", "gpus: [{model: T4}]\n---\ngpus: []\n", []string{"more than one YAML document"}},
		{"every problem", "gpus:\n  - model: nope\n  - model: T4\n    count: -1\n", []string{"m.yaml:2:12", "m.yaml:4:12"}},
	} {
		spec, err := fake.LoadSpec("m.yaml", []byte(tc.yaml))
		if err == nil {
			t.Errorf("%s: accepted as %+v", tc.name, spec)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error\n%v\nwant it to contain %q", tc.name, err, w)
			}
		}
	}

	_, err := fake.LoadSpec("m.yaml", []byte("gpus:\n  - model: A100-40G\n"))
	var nf *catalog.NotFoundError
	var se *fake.SpecError
	if !errors.As(err, &nf) || !slices.Contains(nf.Valid, "A100-40GB") || !errors.As(err, &se) || se.Line != 2 {
		t.Errorf("unknown model: %v, want a *SpecError at line 2 wrapping a *catalog.NotFoundError", err)
	}
	_, err = fake.LoadSpec("m.yaml", []byte("gpus:\n  - model: L4\n    mig: true\n"))
	if !errors.Is(err, gpu.ErrNoMIG) {
		t.Errorf("MIG on L4: %v, want ErrNoMIG", err)
	}
}

func TestLoadSpecDefaultsAndForms(t *testing.T) {
	spec, err := fake.LoadSpec("", []byte(`gpus:
  - {model: A100-40GB, count: 2, mig: true, instances: "1g.5gb@0, 1g.5gb@1"}
  - {model: T4, healthy: true}
  - {model: L4, healthy: false, instances: null}
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.GPUs) != 4 || spec.DriverVersion != "" {
		t.Fatalf("spec %+v", spec)
	}
	if g := spec.GPUs[1]; g.Model != "A100-40GB" || !g.MIGEnabled || !slices.Equal(g.Instances, []string{"1g.5gb@0", "1g.5gb@1"}) || g.Healthy != nil {
		t.Errorf("GPU 1: %+v", g)
	}
	spec.GPUs[0].Instances[0] = "changed"
	if spec.GPUs[1].Instances[0] == "changed" {
		t.Error("counted GPUs share their instance list")
	}
	if h := spec.GPUs[2].Healthy; h == nil || !*h {
		t.Errorf("healthy: true read as %v", h)
	}
	if h := spec.GPUs[3].Healthy; h == nil || *h {
		t.Errorf("healthy: false read as %v", h)
	}
	_, err = fake.LoadSpec("", []byte("gpus: 3\n"))
	if err == nil || !strings.HasPrefix(err.Error(), "line 1: gpus:") {
		t.Errorf("without a file name: %v", err)
	}
}
