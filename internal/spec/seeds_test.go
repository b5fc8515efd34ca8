package spec

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuslice/gpuslice/internal/alloc"
)

func seedFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "nvidia", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The seeds' device-plugin ConfigMaps hold one data key ("any",
// "config.json") and no node label selects it: the device plugin's config
// manager takes a ConfigMap's only key as every node's config (fallback
// "single", after "named" = data key "default"), and so does plan.
func TestSingleKeyConfigMapIsEveryNodesConfig(t *testing.T) {
	spec := seedFile(t, "seed-eks-cifar10.yaml")
	for _, tc := range []struct {
		file, key string
		replicas  int
	}{
		{"seed-eks-configmap.yaml", "any", 10},
		{"seed-configmap.yaml", "config.json", 3},
	} {
		s, diags := readFiles(t, "spec.yaml", spec, tc.file, seedFile(t, tc.file))
		if err := diags.Err(); err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		p := s.Pools[0]
		if p.Sharing.Mode != alloc.TimeSlice || p.Sharing.Replicas != tc.replicas || len(p.FixedBy) == 0 {
			t.Errorf("%s: pool sharing %+v fixed by %q, want time-slicing ×%d from data key %q", tc.file, p.Sharing, p.FixedBy, tc.replicas, tc.key)
		}
	}

	// The fallbacks in the device plugin's order: data key "default"
	// ("named") wins over another ConfigMap's only key ("single").
	named := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata:\n  default: |\n    version: v1\n    sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 5}]}}\n  other: |\n    version: v1\n"
	s, diags := readFiles(t, "spec.yaml", spec, "named.yaml", named, "single.yaml", seedFile(t, "seed-eks-configmap.yaml"))
	if s.Pools[0].Sharing.Replicas != 5 {
		t.Errorf("named and single: replicas %d, want the default key's 5 (%v)", s.Pools[0].Sharing.Replicas, diags)
	}
	// Two keys, neither "default" nor the pool's: the device plugin finds
	// no config (every fallback fails), and plan says no pool uses them.
	two := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata:\n  x: |\n    version: v1\n  y: |\n    version: v1\n"
	_, diags = readFiles(t, "spec.yaml", spec, "two.yaml", two)
	wantDiag(t, diags, "E two.yaml:5 no pool uses the nvidia-device-plugin data keys")
	// Two single-key ConfigMaps: ambiguous, as two defaults would be.
	_, diags = readFiles(t, "spec.yaml", spec, "a.yaml", seedFile(t, "seed-eks-configmap.yaml"), "b.yaml", seedFile(t, "seed-configmap.yaml"))
	wantDiag(t, diags, "E spec.yaml:8 ambiguous|only data key", "E a.yaml:7 no pool uses", "E b.yaml:7 no pool uses")
	// A node label still selects by key: a pool labelled for another key
	// does not take the single one.
	labelled := replaceOnce(t, spec, "    instanceType: p3.8xlarge\n", "    instanceType: p3.8xlarge\n    labels: {nvidia.com/device-plugin.config: other}\n")
	_, diags = readFiles(t, "spec.yaml", labelled, "single.yaml", seedFile(t, "seed-eks-configmap.yaml"))
	wantDiag(t, diags, "E spec.yaml:8 names a device-plugin config that no input has", "E single.yaml:7 no pool uses")
}

func replaceOnce(t *testing.T, s, old, new string) string {
	t.Helper()
	i := len(s)
	for j := 0; j+len(old) <= len(s); j++ {
		if s[j:j+len(old)] == old {
			i = j
			break
		}
	}
	if i == len(s) {
		t.Fatalf("%q not in the spec", old)
	}
	return s[:i] + new + s[i+len(old):]
}
