package apitest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// EnvGpusliceScheduler names the gpuslice-scheduler binary to run instead
// of the one scripts/gpuslice-scheduler.sh builds into the cache.
const EnvGpusliceScheduler = "GPUSLICE_SCHEDULER_BIN"

// GpusliceSchedulerBinary returns the gpuslice-scheduler binary built for
// the selected Kubernetes release (SelectedVersion): $GPUSLICE_SCHEDULER_BIN,
// else
// ${GPUSLICE_CACHE:-$HOME/.cache/gpuslice}/gpuslice-scheduler/VERSION/gpuslice-scheduler
// (what `K8S_VERSION=VERSION scripts/gpuslice-scheduler.sh` builds). When
// it is missing the test is skipped, or failed with
// GPUSLICE_REQUIRE_APISERVER=1; a binary of another release (its
// --version) fails the test.
func GpusliceSchedulerBinary(t testing.TB) string {
	t.Helper()
	v, err := SelectedVersion()
	if err != nil {
		t.Fatal("apitest: ", err)
	}
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
		bin = filepath.Join(root, "gpuslice-scheduler", v.Git, "gpuslice-scheduler")
	}
	if st, err := os.Stat(bin); err != nil || st.IsDir() {
		msg := "gpuslice-scheduler not built: run K8S_VERSION=" + v.Git + " scripts/gpuslice-scheduler.sh (" + bin + " is missing)"
		if os.Getenv(EnvRequire) == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version: %v\n%s", bin, err, out)
	}
	// kube-scheduler prints "Kubernetes v1.37.2".
	if got := strings.TrimSpace(string(out)); !strings.HasSuffix(got, " "+v.Git) {
		t.Fatalf("%s is %q, not Kubernetes %s (%s=%s): build it with K8S_VERSION=%s scripts/gpuslice-scheduler.sh",
			bin, got, v.Git, EnvVersion, SelectedVersionName(), v.Git)
	}
	return bin
}
