package apitest

import (
	"os"
	"path/filepath"
	"testing"
)

// EnvGpusliceScheduler names the gpuslice-scheduler binary to run instead
// of the one scripts/gpuslice-scheduler.sh builds into the cache.
const EnvGpusliceScheduler = "GPUSLICE_SCHEDULER_BIN"

// GpusliceSchedulerBinary returns the gpuslice-scheduler binary:
// $GPUSLICE_SCHEDULER_BIN, else
// ${GPUSLICE_CACHE:-$HOME/.cache/gpuslice}/gpuslice-scheduler/gpuslice-scheduler
// (what scripts/gpuslice-scheduler.sh builds). When it is missing the test
// is skipped, or failed with GPUSLICE_REQUIRE_APISERVER=1.
func GpusliceSchedulerBinary(t testing.TB) string {
	t.Helper()
	bin := os.Getenv(EnvGpusliceScheduler)
	if bin == "" {
		root := os.Getenv(EnvCache)
		if root == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				t.Fatal(err)
			}
			root = filepath.Join(home, ".cache", "gpuslice")
		}
		bin = filepath.Join(root, "gpuslice-scheduler", "gpuslice-scheduler")
	}
	if st, err := os.Stat(bin); err != nil || st.IsDir() {
		msg := "gpuslice-scheduler not built: run scripts/gpuslice-scheduler.sh (" + bin + " is missing)"
		if os.Getenv(EnvRequire) == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return bin
}
