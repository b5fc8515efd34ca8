package render

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/plan"
	"github.com/gpuslice/gpuslice/internal/spec"
)

// fuzzPools are the pools an imported config meets in FuzzImportRoundTrip:
// a whole-GPU pool and a MIG-capable one (the only one, so a lone
// mig-parted config applies to it).
const fuzzPools = `apiVersion: gpuslice.dev/v1alpha1
kind: Spec
pools:
  - {name: t4, instanceType: g4dn.xlarge, nodes: 1}
  - {name: a100, instanceType: p4d.24xlarge, nodes: 1}
  - {name: default, instanceType: g6.xlarge, nodes: 1}
`

// FuzzImportRoundTrip: any device-plugin or mig-parted config that reads
// and applies to these pools without error renders into configs that read
// and apply again without error and give every pool the same configs and
// setup; nothing panics on the way.
func FuzzImportRoundTrip(f *testing.F) {
	var seeds []string
	for _, pattern := range []string{"testdata/imports/*/*.yaml", "testdata/imports/*/*.json", "../spec/testdata/nvidia/*"} {
		files, _ := filepath.Glob(pattern)
		seeds = append(seeds, files...)
	}
	for _, s := range seeds {
		if strings.Contains(s, ".golden.") {
			continue
		}
		data, err := os.ReadFile(s)
		if err == nil {
			if format, _ := spec.Detect(data); format == spec.FormatDevicePlugin || format == spec.FormatMIGParted {
				f.Add(data)
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		format, ok := spec.Detect(data)
		if !ok || (format != spec.FormatDevicePlugin && format != spec.FormatMIGParted) {
			return
		}
		read := func(files ...inputFile) (*spec.Spec, bool) {
			var merged *spec.Spec
			for _, in := range files {
				s, diags := spec.Read(in.name, in.data, "")
				if diags.Err() != nil {
					return nil, false
				}
				if merged == nil {
					merged = s
				} else {
					merged = spec.Merge(merged, s)
				}
			}
			return merged, spec.ApplyImported(merged).Err() == nil
		}
		s, ok := read(inputFile{"pools.yaml", []byte(fuzzPools)}, inputFile{"config.yaml", data})
		if !ok {
			return
		}
		p, err := plan.Make(s, plan.Options{})
		if err != nil {
			return
		}
		back := []inputFile{{"pools.yaml", []byte(fuzzPools)}}
		for _, target := range importTargets {
			out, err := Render(target, s, p)
			if err != nil {
				return // e.g. a config name that cannot be a label value
			}
			back = append(back, inputFile{"rendered." + target + ".yaml", out})
		}
		s2, ok := read(back...)
		if !ok {
			var all []string
			for _, b := range back[1:] {
				_, diags := spec.Read(b.name, b.data, "")
				all = append(all, diags.Error())
			}
			s3, _ := read(back...)
			var apply string
			if s3 != nil {
				apply = spec.ApplyImported(s3).Error()
			}
			t.Fatalf("the rendered configs do not read back: %v %s\ninput:\n%s\nrendered:\n%s\n%s", all, apply, data, back[1].data, back[2].data)
		}
		for i := range s.Pools {
			a, b := &s.Pools[i], &s2.Pools[i]
			if a.DevicePlugin != nil && !reflect.DeepEqual(comparableImport(a.DevicePlugin), comparableImport(b.DevicePlugin)) {
				t.Fatalf("pool %s: device-plugin config changed in the round trip\n%+v\n%+v\ninput:\n%s", a.Name, comparableImport(a.DevicePlugin), comparableImport(b.DevicePlugin), data)
			}
			if a.MIGParted != nil && !reflect.DeepEqual(comparableImport(a.MIGParted), comparableImport(b.MIGParted)) {
				t.Fatalf("pool %s: mig-parted config changed in the round trip\n%+v\n%+v\ninput:\n%s", a.Name, comparableImport(a.MIGParted), comparableImport(b.MIGParted), data)
			}
			if a.Sharing != b.Sharing || a.MIG != b.MIG || !reflect.DeepEqual(a.MIGLayout, b.MIGLayout) {
				t.Fatalf("pool %s: setup changed in the round trip: %+v %s %v -> %+v %s %v\ninput:\n%s", a.Name, a.Sharing, a.MIG, a.MIGLayout, b.Sharing, b.MIG, b.MIGLayout, data)
			}
		}
	})
}
