package testkit

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

// update is the one -update flag: `go test ./internal/x -update` rewrites
// that package's golden files instead of comparing against them.
var update = flag.Bool("update", false, "rewrite the golden files in testdata/ instead of comparing with them")

// Updating reports whether this run rewrites golden files (-update).
func Updating() bool { return *update }

// Golden compares got with the file at path (relative to the test's
// package directory). With -update it writes got there instead, creating
// the directory. On a mismatch the test fails naming the file, the first
// differing line and how to accept the new output.
func Golden(t testing.TB, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run `go test -run '%s' -update` to write it)", err, t.Name())
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the output at %s (run `go test -run '%s' -update` to accept it)\n%s",
			path, firstDiff(want, got), t.Name(), diffSnippet(want, got))
	}
}

// firstDiff names the first line on which want and got differ.
func firstDiff(want, got []byte) string {
	w, g := bytes.Split(want, []byte("\n")), bytes.Split(got, []byte("\n"))
	for i := 0; i < len(w) && i < len(g); i++ {
		if !bytes.Equal(w[i], g[i]) {
			return "line " + itoa(i+1)
		}
	}
	return "line " + itoa(min(len(w), len(g))+1)
}

// diffSnippet shows the first differing line of each side.
func diffSnippet(want, got []byte) string {
	w, g := bytes.Split(want, []byte("\n")), bytes.Split(got, []byte("\n"))
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl []byte
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if !bytes.Equal(wl, gl) || i >= len(w) || i >= len(g) {
			return "--- golden: " + string(wl) + "\n+++ got:    " + string(gl)
		}
	}
	return ""
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}
