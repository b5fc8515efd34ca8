package apitest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuslice/gpuslice/internal/k8s/controlplane"
)

// Start launches etcd and kube-apiserver for the test, waits until the API
// server is ready and the Karpenter CRDs are established, and stops both
// when the test and its subtests end. If the binaries have not been built
// it skips the test, or fails it when GPUSLICE_REQUIRE_APISERVER=1.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith is Start with options.
func StartWith(t testing.TB, opts Options) *Server {
	t.Helper()
	dir := controlplane.BinDir()
	if opts.Version != "" && os.Getenv(controlplane.EnvBinDir) == "" {
		dir = controlplane.BinDirFor(opts.Version)
	}
	SkipUnlessBuilt(t, dir)
	s, stop, err := controlplane.Launch(t.Context(), dir, t.TempDir(), opts)
	// Stop whatever started, even on error; apiserver before etcd.
	t.Cleanup(func() {
		logs := stop()
		if t.Failed() {
			t.Log(logs)
		}
	})
	if err != nil {
		t.Fatalf("apitest: %v", err)
	}
	return s
}

// SkipUnlessBuilt skips t (or fails it when GPUSLICE_REQUIRE_APISERVER=1)
// when dir lacks the control plane's binaries.
func SkipUnlessBuilt(t testing.TB, dir string) {
	t.Helper()
	if _, err := controlplane.SelectedVersion(); err != nil {
		t.Fatal("apitest: ", err) // a typo must not skip every test
	}
	why := controlplane.Missing(dir)
	if why == "" && !controlplane.Supported {
		why = "the control plane runs only on Linux"
	}
	if why != "" {
		msg := "kube-apiserver not built: run scripts/controlplane.sh (" + why + ")"
		if os.Getenv(controlplane.EnvRequire) == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// StartScheduler runs the kube-scheduler binary from s.BinDir against s:
// a kubeconfig with s's client certificate (system:masters), leader
// election off, the options' configuration, profiles and feature gates,
// serving /readyz on a free loopback port. It returns once /readyz answers
// (its informers have synced) and stops the scheduler when the test ends;
// on a failed test the end of its log is written to the test log.
//
// Pods whose spec.schedulerName names one of its profiles are bound to
// Nodes and their ResourceClaims allocated against ResourceSlices, exactly
// as in a cluster; nothing else runs (no controller manager, no kubelet),
// so a test creates Pods itself and reads spec.nodeName and
// ResourceClaim status.allocation back.
func StartScheduler(t testing.TB, s *Server, opts SchedulerOptions) *Scheduler {
	t.Helper()
	sc, err := controlplane.LaunchScheduler(t.Context(), s, t.TempDir(), opts)
	if sc != nil {
		t.Cleanup(func() {
			sc.Stop()
			if t.Failed() {
				t.Logf("kube-scheduler log (tail):\n%s", sc.Tail(12000))
			}
		})
	}
	if err != nil {
		t.Fatalf("apitest: %v", err)
	}
	return sc
}

// StartControllerManager runs kube-controller-manager from s.BinDir
// against s, as StartScheduler runs the scheduler: a kubeconfig with s's
// client certificate, leader election off, only the options' controllers,
// the API server's feature gates, /healthz on a free loopback port. It
// returns once /healthz answers and stops it when the test ends; on a
// failed test the end of its log goes to the test log. Without the
// binary (an older scripts/controlplane.sh build) it skips the test, or
// fails it when GPUSLICE_REQUIRE_APISERVER=1.
//
// No kubelet runs: a pod the controllers delete gracefully (an eviction)
// keeps its deletionTimestamp until the test deletes it with grace period
// 0, as a kubelet confirming the containers stopped would.
func StartControllerManager(t testing.TB, s *Server, opts ControllerManagerOptions) *ControllerManager {
	t.Helper()
	bin := filepath.Join(s.BinDir, "kube-controller-manager")
	if st, err := os.Stat(bin); err != nil || st.IsDir() {
		msg := "kube-controller-manager not built: run scripts/controlplane.sh (" + s.BinDir + " lacks it)"
		if os.Getenv(controlplane.EnvRequire) == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	cm, err := controlplane.LaunchControllerManager(t.Context(), s, t.TempDir(), opts)
	if cm != nil {
		t.Cleanup(func() {
			cm.Stop()
			if t.Failed() {
				t.Logf("kube-controller-manager log (tail):\n%s", cm.Tail(12000))
			}
		})
	}
	if err != nil {
		t.Fatalf("apitest: %v", err)
	}
	return cm
}
