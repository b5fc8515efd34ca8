package cli

// The seeds taken verbatim by a user (testdata/seeds, copies of the
// Omnistrate documentation's compose examples): what they run on a real
// `gpuslice serve`.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// The seed's time-slicing compose file runs as written: `services put -f
// compose.yaml -- CMD` with the admin token creates the tenant the file
// names (its plan's slug) with no quota, and its replica runs. Then serve
// is stopped by a signal while its replica ignores SIGTERM (and left a
// child running): serve ends it (SIGKILL after the grace) and exits within
// a bound, and no process of the replica survives — for SIGTERM, and for
// SIGHUP (a closed terminal) after a restart.
func TestSeedComposeRunsAsWrittenAndSignalsStopItsReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns servers")
	}
	t.Parallel()
	dir, root := t.TempDir(), filepath.Join(os.TempDir(), fmt.Sprintf("gpuslice-test-seed-replicas-%d", os.Getpid()))
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	addr := freePort(t)
	args := []string{"--replica-dir", root, "--simulate", "t4"}
	child, logs := startServeWith(t, dir, addr, nil, args...)
	done := false
	t.Cleanup(func() {
		if !done {
			_ = child.Process.Kill()
			_ = child.Wait()
		}
	})
	tokB, err := os.ReadFile(filepath.Join(dir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	admin := strings.TrimSpace(string(tokB))
	// A replica that ignores SIGTERM (so does the child it leaves
	// running: an ignored signal stays ignored across exec).
	script := `trap "" TERM; env > env; sleep 1000 & echo $$ $! > pids; wait; wait`
	out := run("services", "put", "-f", "testdata/seeds/compose-timeslicing.yaml", "--server", "http://"+addr, "--token", admin, "--", "sh", "-c", script)
	if strings.Contains(out, "error:") || !strings.Contains(out, "created tenant gpu-slicing-example-hosted-tier") {
		t.Fatalf("the seed's compose file, as written:\n%s\n%s", out, logs.String())
	}
	var ten api.Tenant
	if code, err := apiCall(addr, admin, "GET", "/v1/tenants/gpu-slicing-example-hosted-tier", nil, &ten); err != nil || code != 200 ||
		ten.MemoryMiB != 0 || ten.ComputePercent != 0 || len(ten.Commands) != 0 {
		t.Fatalf("created tenant: %d %v %+v, want no quota and no allowed command", code, err, ten)
	}
	// Put again: the tenant exists now, nothing is created twice.
	if out := run("services", "put", "-f", "testdata/seeds/compose-timeslicing.yaml", "--server", "http://"+addr, "--token", admin, "--", "sh", "-c", script); strings.Contains(out, "error:") || strings.Contains(out, "created tenant") {
		t.Fatalf("second put:\n%s", out)
	}

	stop := func(sig syscall.Signal) {
		t.Helper()
		var rs []replicaSeen
		testkit.Eventually(t, 30*time.Second, "the seed's replica to start", func() (bool, string) {
			rs = readReplicas(t, root)
			return len(rs) == 1 && rs[0].claim != "" && alive(rs[0].bg), fmt.Sprintf("%+v\n%s", rs, logs.String())
		})
		start := time.Now()
		_ = child.Process.Signal(sig)
		exited := make(chan error, 1)
		go func() { exited <- child.Wait() }()
		// The replica has serve's 10s grace after SIGTERM, then SIGKILL;
		// serve then releases the claim and exits.
		select {
		case <-exited:
		case <-time.After(25 * time.Second):
			t.Fatalf("serve still runs %s after %v\n%s", time.Since(start), sig, logs.String())
		}
		done = true
		took := time.Since(start)
		for _, r := range rs {
			if alive(r.pid) || alive(r.bg) {
				t.Errorf("after %v: replica %d (child %d) outlived serve", sig, r.pid, r.bg)
			}
			_ = os.Remove(filepath.Join(r.dir, "pids"))
		}
		if !strings.Contains(logs.String(), "stopping service replicas") {
			t.Errorf("after %v serve did not stop its replicas itself:\n%s", sig, logs.String())
		}
		t.Logf("%v: serve exited %s after the signal (replica ignoring SIGTERM)", sig, took.Round(100*time.Millisecond))
	}
	stop(syscall.SIGTERM)
	child, logs = startServeWith(t, dir, addr, nil, args...)
	done = false
	stop(syscall.SIGHUP)
}
