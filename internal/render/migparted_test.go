package render

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/plan"
	"github.com/gpuslice/gpuslice/internal/spec"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

func renderMP(t *testing.T) []byte {
	t.Helper()
	out, err := Render("mig-parted", nvSpec(), nvPlan())
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestMIGPartedGolden(t *testing.T) {
	testkit.Golden(t, filepath.Join("testdata", "nvidia-mig-parted.golden.yaml"), renderMP(t))
}

// mpWantEntry is one expected entry: devices ("all" or indexes), MIG on,
// counts.
type mpWantEntry struct {
	devices string
	enabled bool
	counts  map[string]int
}

var mpWant = map[string][]mpWantEntry{
	"gpuslice-t4-shared": {{"all", false, nil}},
	"gpuslice-l4-mps":    {{"all", false, nil}},
	"gpuslice-a100-mig": {
		{"[0 1]", true, map[string]int{"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}},
		{"[2]", true, map[string]int{"3g.20gb": 1, "2g.10gb": 1, "1g.5gb+me": 1}},
		{"[3]", false, nil},
	},
	"gpuslice-h100-dyn":   {{"[0]", true, map[string]int{"7g.80gb": 1}}, {"[1]", true, map[string]int{"1g.10gb": 3}}},
	"gpuslice-h100-dyn-2": {{"[0]", true, map[string]int{"3g.40gb": 2}}, {"[1]", true, map[string]int{}}},
	"gpuslice-a30-mixed":  {{"[0]", false, nil}, {"[1]", true, map[string]int{"2g.12gb": 2}}},
	"gpuslice-plain":      {{"all", false, nil}},
}

// mpStrictSpec mirrors mig-parted's api/spec/v1 schema for strict decoding
// (every field known, nothing else accepted). It is the fallback check that
// runs without cgo; migparted_nvidia_test.go decodes with NVIDIA's own
// types when cgo is available.
type mpStrictSpec struct {
	Version    string                    `json:"version"`
	MigConfigs map[string][]mpStrictItem `json:"mig-configs"`
}

type mpStrictItem struct {
	DeviceFilter json.RawMessage `json:"device-filter,omitempty"`
	Devices      json.RawMessage `json:"devices"`
	MigEnabled   *bool           `json:"mig-enabled"`
	MigDevices   map[string]int  `json:"mig-devices"`
}

func (it mpStrictItem) devices() (string, error) {
	var all string
	if err := json.Unmarshal(it.Devices, &all); err == nil {
		if all != "all" {
			return "", fmt.Errorf("devices %q", all)
		}
		return all, nil
	}
	var idx []int
	if err := json.Unmarshal(it.Devices, &idx); err != nil {
		return "", fmt.Errorf("devices %s: %v", it.Devices, err)
	}
	return fmt.Sprint(idx), nil
}

func TestMIGPartedStrictDecoding(t *testing.T) {
	var s mpStrictSpec
	if err := yaml.UnmarshalStrict(renderMP(t), &s); err != nil {
		t.Fatal(err)
	}
	if s.Version != "v1" {
		t.Errorf("version %q", s.Version)
	}
	if got, want := slices.Sorted(maps.Keys(s.MigConfigs)), slices.Sorted(maps.Keys(mpWant)); !slices.Equal(got, want) {
		t.Fatalf("configs %v, want %v", got, want)
	}
	for name, items := range s.MigConfigs {
		want := mpWant[name]
		if len(items) != len(want) {
			t.Errorf("%s: %d entries, want %d", name, len(items), len(want))
			continue
		}
		for i, it := range items {
			dev, err := it.devices()
			if err != nil || dev != want[i].devices {
				t.Errorf("%s[%d]: devices %q (%v), want %q", name, i, dev, err, want[i].devices)
			}
			if it.MigEnabled == nil || *it.MigEnabled != want[i].enabled {
				t.Errorf("%s[%d]: mig-enabled %v, want %v", name, i, it.MigEnabled, want[i].enabled)
			}
			if want[i].enabled && (it.MigDevices == nil || !maps.Equal(it.MigDevices, want[i].counts)) {
				t.Errorf("%s[%d]: mig-devices %v, want %v", name, i, it.MigDevices, want[i].counts)
			}
			if !want[i].enabled && it.MigDevices != nil {
				t.Errorf("%s[%d]: mig-devices on a MIG-disabled entry", name, i)
			}
		}
	}
}

// TestMIGPartedRoundTripReader reads the output back with gpuslice's
// reader (mig-parted's rules) and checks, for every pool with MIG, that
// the counts fit the pool's GPU model, and that every planned node finds a
// config whose entries give each of its GPUs the planned counts.
func TestMIGPartedRoundTripReader(t *testing.T) {
	out := renderMP(t)
	s, diags := spec.ReadMIGPartedConfig("mig-parted.yaml", out)
	if len(diags) > 0 {
		t.Fatalf("diagnostics: %v", diags)
	}
	byName := map[string]spec.ImportedSharing{}
	for _, imp := range s.Imported {
		if imp.Source != spec.SourceMIGParted {
			t.Errorf("%s: source %q", imp.Name, imp.Source)
		}
		byName[imp.Name] = imp
	}
	for _, pp := range nvPlan().Pools {
		// Fit: the reader checks counts against a model.
		_, diags := spec.ReadMIGPartedConfigFor("mig-parted.yaml", out, pp.GPU)
		g, err := catalog.Default().GPU(pp.GPU)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range diags {
			if strings.HasPrefix(d.Path, "mig-configs."+MIGPartedConfigPrefix+pp.Name+".") ||
				strings.HasPrefix(d.Path, "mig-configs."+MIGPartedConfigPrefix+pp.Name+"-") {
				t.Errorf("%s on %s: %s", pp.Name, pp.GPU, d)
			}
		}
		if g.MIG == nil && len(diags) != 1 {
			t.Errorf("%s: a model without MIG should give one error, got %v", pp.GPU, diags)
		}
		// Every node finds its layout.
		nodes := map[string][]plan.GPUPlan{}
		for _, gp := range pp.GPUs {
			nodes[gp.Node] = append(nodes[gp.Node], gp)
		}
		for node, gpus := range nodes {
			found := false
			for name, imp := range byName {
				if name != MIGPartedConfigPrefix+pp.Name && !strings.HasPrefix(name, MIGPartedConfigPrefix+pp.Name+"-") {
					continue
				}
				if mpNodeMatches(imp, gpus) {
					found = true
				}
			}
			if !found {
				t.Errorf("%s: no config gives node %s its planned layout", pp.Name, node)
			}
		}
	}
}

// mpNodeMatches applies a config to a node's GPUs as mig-parted does (each
// matching entry in order, the last one wins) and compares with the plan.
func mpNodeMatches(imp spec.ImportedSharing, gpus []plan.GPUPlan) bool {
	for _, gp := range gpus {
		var got *spec.ImportedDevices
		for i := range imp.Devices {
			d := &imp.Devices[i]
			if d.All || slices.Contains(d.Indexes, gp.Index) {
				got = d
			}
		}
		if got == nil || got.MIGEnabled != gp.MIG {
			return false
		}
		want := map[string]int{}
		for _, in := range gp.Instances {
			want[in.Profile]++
		}
		if gp.MIG && !maps.Equal(got.MIGDevices, want) && !(len(want) == 0 && len(got.MIGDevices) == 0) {
			return false
		}
	}
	return true
}

func TestMIGPartedComments(t *testing.T) {
	out := string(renderMP(t))
	for _, want := range []string{
		"ignores placements",
		"#   2g.10gb@0 1g.5gb@2 1g.5gb@3 3g.20gb@4  <- a100-mig-0 GPU 0-1; a100-mig-1 GPU 0-1",
		"#   3g.40gb@0 3g.40gb@4  <- h100-dyn-1 GPU 0",
		"dynamic MIG: this is the planned layout",
		"label each node with its own config",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

func TestMIGPartedRejectsBadPools(t *testing.T) {
	if _, err := Render("mig-parted", nil, nil); err == nil {
		t.Error("a nil plan should be an error")
	}
	p := &plan.Plan{Pools: []plan.PoolPlan{{Name: strings.Repeat("p", 60), GPU: "A30", GPUsPerNode: 1, Nodes: 1, GPUs: []plan.GPUPlan{nvMIG("n", 0)}}}}
	if _, err := Render("mig-parted", nil, p); err == nil {
		t.Error("a config name longer than a label value should be an error")
	}
}
