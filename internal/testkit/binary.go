package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// GpusliceBinary returns the path of a gpuslice binary built from this
// checkout. scripts/test.sh builds it once per run and exports
// GPUSLICE_BIN; without it (a plain `go test`) the first caller in a test
// process builds it into a temp dir, and every later caller reuses that.
func GpusliceBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("GPUSLICE_BIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("GPUSLICE_BIN=%s: %v", p, err)
		}
		return p
	}
	binOnce.Do(func() {
		binPath, binErr = buildGpuslice()
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// buildGpuslice builds ./cmd/gpuslice of the module this package is in.
func buildGpuslice() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("testkit: cannot find the module root")
	}
	root := filepath.Join(filepath.Dir(file), "..", "..")
	// One file per test process, in one directory; binaries of processes
	// that have ended are removed here, so runs do not pile up in /tmp.
	dir := filepath.Join(os.TempDir(), "gpuslice-testbin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	sweepDead(dir)
	out := filepath.Join(dir, fmt.Sprintf("gpuslice-%d", os.Getpid()))
	cmd := exec.Command("go", "build", "-o", out, "./cmd/gpuslice")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building gpuslice: %v\n%s", err, b)
	}
	return out, nil
}

// sweepDead removes binaries whose test process no longer runs.
func sweepDead(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "gpuslice-%d", &pid); err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat(filepath.Join("/proc", fmt.Sprint(pid))); os.IsNotExist(err) {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}
