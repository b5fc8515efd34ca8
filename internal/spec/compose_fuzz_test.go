package spec

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzReadCompose: ReadCompose never panics, and every diagnostic names
// the file it came from.
func FuzzReadCompose(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "compose", "*.yaml"))
	for _, p := range seeds {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("services:\n  a:\n    image: x\n    gpus: all\nx-gpuslice: {mode: mps, memory: 1}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, ds := ReadCompose("fuzz.yaml", data)
		if s == nil {
			t.Fatal("nil spec")
		}
		for _, d := range ds {
			if d.Pos.File != "fuzz.yaml" || d.Message == "" {
				t.Fatalf("bad diagnostic %+v", d)
			}
		}
	})
}
