package render

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/model"
	"github.com/gpuslice/gpuslice/internal/plan"
	"github.com/gpuslice/gpuslice/internal/spec"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// importTargets are the targets that write imported configs back.
var importTargets = []string{"nvidia-device-plugin", "mig-parted"}

type inputFile struct {
	name string
	data []byte
}

// readApplied reads files as gpuslice plan does: each in its detected
// format, merged, then the imported configs applied to their pools. Errors
// fail the test.
func readApplied(t *testing.T, files []inputFile) *spec.Spec {
	t.Helper()
	var merged *spec.Spec
	var all spec.Diagnostics
	for _, f := range files {
		s, diags := spec.Read(f.name, f.data, "")
		all = append(all, diags...)
		if merged == nil {
			merged = s
		} else {
			merged = spec.Merge(merged, s)
		}
	}
	if err := all.Err(); err != nil {
		t.Fatal(err)
	}
	if err := spec.ApplyImported(merged).Err(); err != nil {
		t.Fatal(err)
	}
	return merged
}

// importCase lists a case directory's input files, and which of them are
// NVIDIA configs.
func importCase(t *testing.T, dir string) (all, specs []inputFile) {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, "*"))
	for _, n := range names {
		if strings.Contains(n, ".golden.") || (!strings.HasSuffix(n, ".yaml") && !strings.HasSuffix(n, ".json")) {
			continue
		}
		data, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		f := inputFile{name: filepath.ToSlash(n), data: data}
		all = append(all, f)
		if format, _ := spec.Detect(data); format != spec.FormatDevicePlugin && format != spec.FormatMIGParted {
			specs = append(specs, f)
		}
	}
	if len(specs) == 0 || len(specs) == len(all) {
		t.Fatalf("%s: want a spec and at least one NVIDIA config", dir)
	}
	return all, specs
}

// comparable strips what a round trip may change: positions, the file and
// a bare config's name (it comes back under its pool's data key).
func comparableImport(imp *model.ImportedSharing) *model.ImportedSharing {
	if imp == nil {
		return nil
	}
	c := *imp
	c.Where, c.SharingWhere, c.File, c.Key, c.Single = model.Pos{}, model.Pos{}, "", "", false
	if c.Source == spec.SourceDevicePlugin {
		c.Name = ""
	}
	c.Devices = nil
	for _, d := range imp.Devices {
		d.Where, d.DevicesWhere = model.Pos{}, model.Pos{}
		if len(d.MIGDevices) == 0 {
			d.MIGDevices = nil
		}
		if len(d.Indexes) == 0 {
			d.Indexes = nil
		}
		c.Devices = append(c.Devices, d)
	}
	return &c
}

// TestImportedRoundTrip: for every case under testdata/imports, the
// imported configs fix their pools, render writes them back (golden
// files), and reading the spec with the rendered files instead of the
// configs gives every pool the same configs and the same setup.
func TestImportedRoundTrip(t *testing.T) {
	dirs, _ := filepath.Glob(filepath.Join("testdata", "imports", "*"))
	n := 0
	for _, dir := range dirs {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			continue
		}
		n++
		t.Run(filepath.Base(dir), func(t *testing.T) {
			all, specs := importCase(t, dir)
			s := readApplied(t, all)
			p, err := plan.Make(s, plan.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Unplaced) > 0 {
				t.Fatalf("unplaced: %+v", p.Unplaced)
			}
			back := append([]inputFile(nil), specs...)
			for _, target := range importTargets {
				out, err := Render(target, s, p)
				if err != nil {
					t.Fatal(err)
				}
				testkit.Golden(t, filepath.Join(dir, target+".golden.yaml"), out)
				back = append(back, inputFile{name: "rendered." + target + ".yaml", data: out})
			}
			s2 := readApplied(t, back)
			imported := 0
			for i := range s.Pools {
				a, b := &s.Pools[i], &s2.Pools[i]
				for _, pair := range [][2]*model.ImportedSharing{{a.DevicePlugin, b.DevicePlugin}, {a.MIGParted, b.MIGParted}} {
					if pair[0] == nil {
						continue
					}
					imported++
					if got, want := comparableImport(pair[1]), comparableImport(pair[0]); !reflect.DeepEqual(got, want) {
						t.Errorf("pool %s: %s config after the round trip\n got %+v\nwant %+v", a.Name, want.Source, got, want)
					}
				}
				if a.DevicePlugin != nil && !reflect.DeepEqual(a.Sharing, b.Sharing) {
					t.Errorf("pool %s: sharing %+v after the round trip, want %+v", a.Name, b.Sharing, a.Sharing)
				}
				if a.MIGParted != nil && (a.MIG != b.MIG || !reflect.DeepEqual(a.MIGLayout, b.MIGLayout)) {
					t.Errorf("pool %s: MIG %s %v after the round trip, want %s %v", a.Name, b.MIG, b.MIGLayout, a.MIG, a.MIGLayout)
				}
				if a.DevicePlugin != nil && !reflect.DeepEqual(a.MIGSharingByProfile, b.MIGSharingByProfile) {
					t.Errorf("pool %s: MIG sharing %v after the round trip, want %v", a.Name, b.MIGSharingByProfile, a.MIGSharingByProfile)
				}
			}
			if imported == 0 {
				t.Fatal("no pool uses an imported config")
			}
		})
	}
	if n == 0 {
		t.Fatal("no case under testdata/imports")
	}
}
