package controlplane

import (
	"os"
	"strings"
	"testing"
)

func TestParseVersion(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Version
	}{
		{"v1.36.3", Version{Git: "v1.36.3", Major: 1, Minor: 36, Patch: 3}},
		{"v1.37.2", Version{Git: "v1.37.2", Major: 1, Minor: 37, Patch: 2}},
		{"v1.37.0-rc.1", Version{Git: "v1.37.0-rc.1", Major: 1, Minor: 37}},
		{"v1.36.3+dirty", Version{Git: "v1.36.3+dirty", Major: 1, Minor: 36, Patch: 3}},
	} {
		got, err := ParseVersion(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseVersion(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "1.36.3", "v1.36", "v1..3", "v1.x.3", "v1.36.-3", "v1.36.+3", "v-1.36.3", "v1.36.3.4x"} {
		if v, err := ParseVersion(in); err == nil {
			t.Errorf("ParseVersion(%q) = %+v, want an error", in, v)
		} else if !strings.Contains(err.Error(), "vMAJOR.MINOR.PATCH") {
			t.Errorf("ParseVersion(%q): %v does not say what is valid", in, err)
		}
	}
}

func TestVersionAtLeast(t *testing.T) {
	v36, v37 := Version{Major: 1, Minor: 36}, Version{Major: 1, Minor: 37}
	if !v37.AtLeast(37) || !v37.AtLeast(36) || v36.AtLeast(37) || !v36.AtLeast(36) {
		t.Errorf("AtLeast: 1.36 >= 37 %v, 1.37 >= 37 %v", v36.AtLeast(37), v37.AtLeast(37))
	}
	if !(Version{Major: 2}).AtLeast(40) {
		t.Error("2.0 is not at least 1.40")
	}
}

func TestSelectedVersion(t *testing.T) {
	t.Setenv(EnvVersion, "")
	if v, err := SelectedVersion(); err != nil || v.Git != DefaultKubernetesVersion {
		t.Errorf("unset: %+v, %v; want %s", v, err, DefaultKubernetesVersion)
	}
	t.Setenv(EnvVersion, "v1.37.2")
	if v, err := SelectedVersion(); err != nil || v.Minor != 37 {
		t.Errorf("v1.37.2: %+v, %v", v, err)
	}
	if got := BinDir(); !strings.HasSuffix(got, "/k8s/v1.37.2") && os.Getenv(EnvBinDir) == "" {
		t.Errorf("BinDir() = %q, want .../k8s/v1.37.2", got)
	}
	// A release scripts/controlplane.sh cannot build is an error naming
	// the variable and what is Supported, not a quiet fallback.
	t.Setenv(EnvVersion, "v1.35.0")
	_, err := SelectedVersion()
	if err == nil || !strings.Contains(err.Error(), EnvVersion) || !strings.Contains(err.Error(), "v1.37.2") {
		t.Errorf("v1.35.0: %v, want an error naming %s and the Supported versions", err, EnvVersion)
	}
	if o := (Options{}).withDefaults(); o.Version != "v1.35.0" {
		t.Errorf("withDefaults kept %q, want the unsupported value for Launch to report", o.Version)
	}
}

// TestFeatureGates: each release's gates are those its kube_features.go
// lets a test switch on. A gate a release does not know stops its API
// server from starting; a gate locked to its default cannot be switched.
func TestFeatureGates(t *testing.T) {
	for _, v := range SupportedVersions {
		pv, err := ParseVersion(v)
		if err != nil {
			t.Fatal(err)
		}
		gates := FeatureGatesFor(pv)
		if gates == "" {
			t.Errorf("%s: no feature gates", v)
			continue
		}
		if got := (Options{Version: v}).FeatureGates(); got != gates {
			t.Errorf("%s: Options.FeatureGates() = %q, want %q", v, got, gates)
		}
		if got := (Options{Version: v, ExtraFeatureGates: "X=true"}).FeatureGates(); got != gates+",X=true" {
			t.Errorf("%s: with ExtraFeatureGates: %q", v, got)
		}
		// Every release: the partitionable devices, consumable capacity and
		// device taints gpuslice relies on are on.
		for _, g := range []string{"DRAPartitionableDevices=true", "DRAConsumableCapacity=true", "DRADeviceTaints=true"} {
			if !strings.Contains(","+gates+",", ","+g+",") {
				t.Errorf("%s: %s is missing from %s", v, g, gates)
			}
		}
	}
	v37 := Version{Major: 1, Minor: 37}
	for _, locked := range []string{"DRAExtendedResource", "DRAPrioritizedList", "DRAResourceClaimDeviceStatus"} {
		if strings.Contains(FeatureGatesFor(v37), locked+"=") {
			t.Errorf("1.37 sets %s, which is GA and locked there", locked)
		}
	}
	if g := FeatureGatesFor(Version{Major: 1, Minor: 30}); g != "" {
		t.Errorf("1.30: %q, want none", g)
	}
}

func FuzzParseVersion(f *testing.F) {
	for _, s := range []string{"v1.36.3", "v1.37.0-rc.1", "v1..", "v1.2.3+x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseVersion(s)
		if err != nil {
			if v != (Version{}) {
				t.Errorf("%q: error %v with %+v", s, err, v)
			}
			return
		}
		if v.Git != s || v.Major < 0 || v.Minor < 0 || v.Patch < 0 || !strings.HasPrefix(s, "v") {
			t.Errorf("%q: %+v", s, v)
		}
	})
}
