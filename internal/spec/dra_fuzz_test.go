package spec

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuslice/gpuslice/internal/alloc"
)

// FuzzReadDRA: ReadDRA never panics, always returns a Spec, puts the file
// on every diagnostic, and every selector it builds compiles.
func FuzzReadDRA(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "dra", "*.yaml"))
	for _, p := range files {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte("apiVersion: resource.k8s.io/v1beta1\nkind: ResourceClaim\nmetadata: {name: x}\nspec: {devices: {requests: [{name: a, firstAvailable: [{name: b, deviceClassName: gpu.nvidia.com}]}]}}\n"))
	f.Add([]byte("...\n---\n...\nkind: Pod\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, ds := ReadDRA("f.yaml", data)
		if s == nil {
			t.Fatal("nil spec")
		}
		for _, d := range ds {
			if d.Pos.File != "f.yaml" || d.Message == "" {
				t.Fatalf("diagnostic without file or message: %+v", d)
			}
		}
		for _, w := range s.Workloads {
			if w.Replicas < 1 || w.Requests == nil {
				t.Fatalf("workload %+v", w)
			}
			for _, r := range w.Requests {
				if r.Selector == "" {
					continue
				}
				if _, err := alloc.CompileSelector(r.Selector); err != nil {
					t.Fatalf("built selector does not compile: %v", err)
				}
			}
		}
	})
}
