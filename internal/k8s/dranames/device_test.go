package dranames

import (
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/catalog"
)

func TestDeviceNamesReadBack(t *testing.T) {
	for name, want := range map[string]DeviceName{
		"gpu-0":                      {Type: TypeGPU},
		"gpu-12":                     {Type: TypeGPU, Index: 12},
		"gpu-3-shared":               {Type: TypeShared, Index: 3},
		"gpu-0-shared-t-0123456789":  {Type: TypeShared, TenantHash: "0123456789"},
		"gpu-1-mig-1g-5gb-at-6":      {Type: TypeMIG, Index: 1, Profile: "1g.5gb", Start: 6},
		"gpu-7-mig-1g-10gb-me-at-0":  {Type: TypeMIG, Index: 7, Profile: "1g.10gb+me", Start: 0},
		"gpu-0-mig-7g-80gb-at-0":     {Type: TypeMIG, Profile: "7g.80gb"},
		"gpu-2-mig-1g-24gb-gfx-at-3": {Type: TypeMIG, Index: 2, Profile: "1g.24gb+gfx", Start: 3},
	} {
		got, err := ParseDeviceName(name)
		if err != nil || got != want {
			t.Errorf("ParseDeviceName(%q) = %+v, %v; want %+v", name, got, err, want)
			continue
		}
		if s := got.String(); s != name {
			t.Errorf("%+v.String() = %q, want %q", got, s, name)
		}
	}
}

func TestBadDeviceNamesSayWhatIsValid(t *testing.T) {
	for name, why := range map[string]string{
		"":                           "no gpu- prefix",
		"GPU-0":                      "no gpu- prefix",
		"gpu-":                       `GPU index ""`,
		"gpu-x":                      `GPU index "x"`,
		"gpu-01":                     `GPU index "01"`,
		"gpu--1":                     `GPU index ""`,
		"gpu-0-":                     `unknown kind ""`,
		"gpu-0-whole":                `unknown kind "whole"`,
		"gpu-0-shared-t-":            `tenant hash ""`,
		"gpu-0-shared-t-0123456789a": "not 10 lowercase hex digits",
		"gpu-0-shared-t-ABCDEF0123":  "not 10 lowercase hex digits",
		"gpu-0-mig-1g-5gb":           "without -at-<start>",
		"gpu-0-mig-1g-5gb-at-":       `start ""`,
		"gpu-0-mig-1g-5gb-at-06":     `start "06"`,
		"gpu-0-mig-1g.5gb-at-6":      `profile "1g.5gb"`,
		"gpu-0-mig-1g-at-6":          `profile "1g"`,
		"gpu-0-mig-g-5gb-at-6":       `profile "g-5gb"`,
		"gpu-0-mig-1g-5gb--at-6":     `profile "1g-5gb-"`,
		"gpu-0-mig-1g-5GB-at-6":      `profile "1g-5GB"`,
	} {
		_, err := ParseDeviceName(name)
		if err == nil || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), "want gpu-<index>") {
			t.Errorf("ParseDeviceName(%q): %v; want an error saying %q and what is valid", name, err, why)
		}
	}
}

// Every MIG profile of the catalog survives its device name.
func TestEveryCatalogProfileReadsBack(t *testing.T) {
	n := 0
	for _, g := range catalog.Default().GPUs() {
		if g.MIG == nil {
			continue
		}
		for _, p := range g.MIG.Profiles {
			d := DeviceName{Type: TypeMIG, Index: 3, Profile: p.Name, Start: 4}
			got, err := ParseDeviceName(d.String())
			if err != nil || got != d {
				t.Errorf("%s %s: %q reads back as %+v, %v", g.ID, p.Name, d.String(), got, err)
			}
			n++
		}
	}
	if n < 50 {
		t.Fatalf("only %d MIG profiles in the catalog", n)
	}
}

func TestSharedDeviceName(t *testing.T) {
	// The name the driver has always published for tenant team-a's copy.
	if got := SharedDeviceName(2, "team-a"); got != "gpu-2-shared-t-"+TenantHash("team-a") || len(TenantHash("team-a")) != 10 {
		t.Fatalf("SharedDeviceName = %q", got)
	}
	n, err := ParseDeviceName(SharedDeviceName(2, "team-a"))
	if err != nil || n.Type != TypeShared || n.Index != 2 || n.TenantHash != TenantHash("team-a") {
		t.Fatalf("read back %+v, %v", n, err)
	}
}

// attrs is a published device's attributes for ReadDevice.
type attrs map[string]any

func (a attrs) String(name string) (string, bool) { s, ok := a[name].(string); return s, ok }
func (a attrs) Int(name string) (int64, bool)     { n, ok := a[name].(int); return int64(n), ok }
func (a attrs) Capacity(name string) (int64, bool) {
	n, ok := a["capacity:"+name].(int)
	return int64(n), ok
}

func TestReadDevice(t *testing.T) {
	mig := attrs{AttrType: TypeMIG, AttrIndex: 1, AttrProfile: "3g.20gb", AttrStart: 4, AttrParentUUID: "GPU-1", AttrModel: "A100-40GB",
		"capacity:" + CapacityMemory: 20 << 30}
	d, err := ReadDevice("gpu-1-mig-3g-20gb-at-4", mig)
	if err != nil || d.GPU != "GPU-1" || d.Profile != "3g.20gb" || d.Start != 4 || d.Model != "A100-40GB" || d.Type != TypeMIG || d.MemoryMiB != 20<<10 {
		t.Fatalf("MIG device: %+v, %v", d, err)
	}
	copyName := SharedDeviceName(0, "acme")
	d, err = ReadDevice(copyName, attrs{AttrType: TypeShared, AttrIndex: 0, AttrUUID: "GPU-0", AttrTenant: "acme"})
	if err != nil || d.Tenant != "acme" || d.GPU != "GPU-0" {
		t.Fatalf("tenant copy: %+v, %v", d, err)
	}
	for _, c := range []struct {
		name string
		a    attrs
		want string
	}{
		{"gpu-0", attrs{AttrType: "tpu", AttrIndex: 0, AttrUUID: "u"}, `attribute type "tpu"; want gpu, shared or mig`},
		{"gpu-0", attrs{AttrType: TypeShared, AttrIndex: 0, AttrUUID: "u"}, "the name is a gpu device's"},
		{"gpu-0", attrs{AttrType: TypeGPU, AttrIndex: 1, AttrUUID: "u"}, "attribute index: want 0"},
		{"gpu-0", attrs{AttrType: TypeGPU, AttrUUID: "u"}, "attribute index: want 0"},
		{"gpu-0", attrs{AttrType: TypeGPU, AttrIndex: 0}, "no GPU uuid (attribute uuid)"},
		{"gpu-1-mig-3g-20gb-at-4", attrs{AttrType: TypeMIG, AttrIndex: 1, AttrProfile: "3g.20gb", AttrStart: 0, AttrParentUUID: "u"}, "want 3g.20gb and 4"},
		{"gpu-1-mig-3g-20gb-at-4", attrs{AttrType: TypeMIG, AttrIndex: 1, AttrStart: 4, AttrParentUUID: "u"}, "want 3g.20gb and 4"},
		{"gpu-1-mig-3g-20gb-at-4", attrs{AttrType: TypeMIG, AttrIndex: 1, AttrProfile: "3g.20gb", AttrStart: 4, AttrUUID: "u"}, "attribute parentUUID"},
		{copyName, attrs{AttrType: TypeShared, AttrIndex: 0, AttrUUID: "u", AttrTenant: "other"}, "another tenant's copy"},
		{copyName, attrs{AttrType: TypeShared, AttrIndex: 0, AttrUUID: "u"}, "another tenant's copy"},
		{"gpu-0-shared", attrs{AttrType: TypeShared, AttrIndex: 0, AttrUUID: "u", AttrTenant: "acme"}, "no tenant's copy"},
		{"gpu-0-parted", attrs{AttrType: TypeGPU, AttrIndex: 0, AttrUUID: "u"}, `unknown kind "parted"`},
	} {
		if _, err := ReadDevice(c.name, c.a); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ReadDevice(%s, %v): %v; want an error containing %q", c.name, c.a, err, c.want)
		}
	}
}

// FuzzDeviceName: every name ParseDeviceName accepts is written back the
// same by String, and reads back the same again.
func FuzzDeviceName(f *testing.F) {
	for _, s := range []string{"gpu-0", "gpu-3-shared", "gpu-0-shared-t-0123456789", "gpu-1-mig-1g-5gb-at-6",
		"gpu-7-mig-1g-10gb-me-at-0", "gpu-01", "gpu-0-mig-1g-5gb-at-at-3", "gpu-0-mig-1g-5gb--at-1", "gpu-"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseDeviceName(s)
		if err != nil {
			return
		}
		if got := n.String(); got != s {
			t.Fatalf("ParseDeviceName(%q) = %+v, written back as %q", s, n, got)
		}
		again, err := ParseDeviceName(n.String())
		if err != nil || again != n {
			t.Fatalf("%q reads back as %+v, %v; want %+v", s, again, err, n)
		}
	})
}
