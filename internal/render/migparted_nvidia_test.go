//go:build cgo

// NVIDIA's mig-parted module reaches go-nvml (through pkg/types), which
// needs cgo to build; without cgo, TestMIGPartedStrictDecoding's own types
// and gpuslice's reader check the output instead.

package render

import (
	"maps"
	"testing"

	mpv1 "github.com/NVIDIA/mig-parted/api/spec/v1"
	"sigs.k8s.io/yaml"
)

// TestMIGPartedParsesWithNVIDIATypes decodes the output with mig-parted's
// own api/spec/v1 types, whose UnmarshalJSON applies mig-parted's rules
// (version, required fields, mig-devices only when enabled, profile
// format), and walks each config as mig-parted does: every entry that
// matches a GPU index, in order.
func TestMIGPartedParsesWithNVIDIATypes(t *testing.T) {
	var s mpv1.Spec
	if err := yaml.Unmarshal(renderMP(t), &s); err != nil {
		t.Fatalf("NVIDIA's types reject the config: %v", err)
	}
	if s.Version != mpv1.Version {
		t.Errorf("version %q", s.Version)
	}
	if len(s.MigConfigs) != len(mpWant) {
		t.Errorf("%d configs, want %d", len(s.MigConfigs), len(mpWant))
	}
	for _, pp := range nvPlan().Pools {
		configs := map[string]mpv1.MigConfigSpecSlice{}
		for name, c := range s.MigConfigs {
			if name == MIGPartedConfigPrefix+pp.Name || (len(name) > len(MIGPartedConfigPrefix+pp.Name)+1 && name[:len(MIGPartedConfigPrefix+pp.Name)+1] == MIGPartedConfigPrefix+pp.Name+"-") {
				configs[name] = c
			}
		}
		if len(configs) == 0 {
			t.Errorf("%s: no config", pp.Name)
			continue
		}
		nodes := map[string]bool{}
		for _, gp := range pp.GPUs {
			nodes[gp.Node] = true
		}
		for node := range nodes {
			matched := false
			for _, c := range configs {
				ok := true
				for _, gp := range pp.GPUs {
					if gp.Node != node {
						continue
					}
					var last *mpv1.MigConfigSpec
					for i := range c {
						if c[i].MatchesAllDevices() || c[i].MatchesDevices(gp.Index) {
							last = &c[i]
						}
					}
					want := map[string]int{}
					for _, in := range gp.Instances {
						want[in.Profile]++
					}
					switch {
					case last == nil || last.MigEnabled != gp.MIG:
						ok = false
					case gp.MIG && !maps.Equal(map[string]int(last.MigDevices), want):
						ok = false
					}
				}
				matched = matched || ok
			}
			if !matched {
				t.Errorf("%s: no config gives node %s its planned MIG layout", pp.Name, node)
			}
		}
	}
}
