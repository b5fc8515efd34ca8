package cli

// Lifetimes under crashes: service replicas and gpuslice run's CMD never
// outlive their claims, and claims never outlive their processes —
// kill -9 of serve or of run included. Real `gpuslice serve` and
// `gpuslice run` processes (the test binary, see TestServeChild).

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/model"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// alive says whether pid is a live process (not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z'
}

// replicaSeen is what one replica wrote into its working directory.
type replicaSeen struct {
	dir      string
	uid      string
	token    string
	env      []string
	claim    string
	pid, bg  int // the replica (group leader) and a child it left running
	children []int
}

func readReplicas(t *testing.T, root string) []replicaSeen {
	t.Helper()
	var out []replicaSeen
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		dir := filepath.Join(root, e.Name())
		pids, err := os.ReadFile(filepath.Join(dir, "pids"))
		if err != nil {
			continue // not started yet
		}
		f := strings.Fields(string(pids))
		if len(f) != 2 {
			continue // being written
		}
		r := replicaSeen{dir: dir}
		r.pid, _ = strconv.Atoi(f[0])
		r.bg, _ = strconv.Atoi(f[1])
		uid, _ := os.ReadFile(filepath.Join(dir, "uid"))
		tok, _ := os.ReadFile(filepath.Join(dir, "tok"))
		r.uid, r.token = strings.TrimSpace(string(uid)), strings.TrimSpace(string(tok))
		env, _ := os.ReadFile(filepath.Join(dir, "env"))
		sc := bufio.NewScanner(strings.NewReader(string(env)))
		for sc.Scan() {
			r.env = append(r.env, sc.Text())
			if v, ok := strings.CutPrefix(sc.Text(), "GPUSLICE_CLAIM="); ok {
				r.claim = v
			}
		}
		out = append(out, r)
	}
	return out
}

// The attack of the issue, end to end on a real serve running as it would
// on a host: a service replica tries to read the admin token and the
// server's environment; then serve is killed with kill -9 (its replicas
// and a child one left running must not survive the next start, and
// their claims are released), and stopped with SIGTERM (its replicas stop
// and release their claims before it exits).
func TestServeLeavesNoReplicaBehind(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns servers")
	}
	t.Parallel()
	// Replicas run as other uids when the test runs as root: their
	// directory must be one others may pass through (t.TempDir is not).
	dir, root := t.TempDir(), filepath.Join(os.TempDir(), fmt.Sprintf("gpuslice-test-replicas-%d", os.Getpid()))
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	addr := freePort(t)
	env := []string{"GPUSLICE_TEST_SECRET=server-only"}
	args := []string{"--replica-dir", root}
	child, logs := startServeWith(t, dir, addr, env, args...)
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = child.Process.Kill()
			_ = child.Wait()
		}
	})
	tokB, err := os.ReadFile(filepath.Join(dir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	admin := strings.TrimSpace(string(tokB))
	// The admin lets tenant acme run one script; acme puts the service.
	script := "id -u > uid; cat " + filepath.Join(dir, "admin.token") + " > tok 2>/dev/null; env > env; sleep 1000 & echo $$ $! > pids; wait"
	cmdline := []string{"sh", "-c", script}
	if code, err := apiCall(addr, admin, "PUT", "/v1/tenants/acme", api.Tenant{Commands: []api.AllowedCommand{{Command: cmdline}}}, nil); err != nil || code != 200 {
		t.Fatalf("tenant: %d %v", code, err)
	}
	var tok api.Token
	if code, err := apiCall(addr, admin, "POST", "/v1/tokens", api.CreateTokenRequest{Role: api.RoleTenant, Tenant: "acme"}, &tok); err != nil || code != 201 {
		t.Fatalf("token: %d %v", code, err)
	}
	svc := api.PutServiceRequest{ServiceSpec: api.ServiceSpec{
		Claim:       api.ClaimSpec{Requests: []alloc.Request{{Name: "gpu", MemoryMiB: 2048, Mode: alloc.TimeSlice}}},
		Command:     cmdline,
		Autoscaling: model.Autoscaling{MinReplicas: 2, MaxReplicas: 2},
	}}
	if code, err := apiCall(addr, tok.Secret, "PUT", "/v1/services/web", svc, nil); err != nil || code != 200 {
		t.Fatalf("service: %d %v", code, err)
	}
	var first []replicaSeen
	testkit.Eventually(t, 30*time.Second, "two replicas to start", func() (bool, string) {
		first = readReplicas(t, root)
		return len(first) == 2 && first[0].claim != "" && first[1].claim != "", fmt.Sprintf("%+v\n%s", first, logs.String())
	})
	for _, r := range first {
		if os.Geteuid() == 0 && (r.uid == "0" || r.uid == "") {
			t.Errorf("replica %s runs as uid %q: serve as root must never run replicas as root", r.dir, r.uid)
		}
		if r.token != "" {
			t.Errorf("replica %s read the admin token", r.dir)
		}
		for _, kv := range r.env {
			if strings.HasPrefix(kv, "GPUSLICE_TEST_SECRET=") || strings.HasPrefix(kv, "GPUSLICE_SERVE_CHILD=") {
				t.Errorf("replica %s inherited serve's environment: %s", r.dir, kv)
			}
		}
		if fi, err := os.Stat(r.dir); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("replica directory %s: %v %v, want mode 0700", r.dir, fi.Mode(), err)
		}
	}
	if os.Geteuid() == 0 && first[0].uid == first[1].uid {
		t.Errorf("two replicas share uid %s", first[0].uid)
	}

	// kill -9: the replicas die with serve (parent-death signal); the
	// child each left running in its group is ended by the next start,
	// and the claims of the old replicas are released.
	_ = child.Process.Signal(syscall.SIGKILL)
	_ = child.Wait()
	killed = true
	for _, r := range first {
		testkit.Eventually(t, 5*time.Second, "replica "+strconv.Itoa(r.pid)+" to die with serve (kill -9)", func() (bool, string) {
			return !alive(r.pid), "it outlived kill -9 of serve"
		})
	}
	for _, r := range first {
		_ = os.Remove(filepath.Join(r.dir, "pids")) // the next run's replicas write their own
	}
	child, logs = startServeWith(t, dir, addr, env, args...)
	killed = false
	for _, r := range first {
		testkit.Eventually(t, 20*time.Second, "the next start to end the child of a replica of the killed serve", func() (bool, string) {
			return !alive(r.bg), "it still runs\n" + logs.String()
		})
	}
	var second []replicaSeen
	testkit.Eventually(t, 30*time.Second, "two new replicas after the restart", func() (bool, string) {
		second = readReplicas(t, root)
		return len(second) == 2 && second[0].claim != "" && second[1].claim != "", fmt.Sprintf("%+v\n%s", second, logs.String())
	})
	var claims []api.Claim
	if _, err := apiCall(addr, admin, "GET", "/v1/claims?state=pending&state=allocated&state=running", nil, &claims); err != nil {
		t.Fatal(err)
	}
	var live []string
	for _, c := range claims {
		live = append(live, c.ID)
	}
	for _, r := range first {
		if slices.Contains(live, r.claim) {
			t.Errorf("claim %s of a replica killed with serve is still live after the restart", r.claim)
		}
	}
	if len(live) != 2 {
		t.Errorf("live claims after the restart: %v, want the two new replicas' only", live)
	}

	// SIGTERM: serve stops its replicas (and their children) and releases
	// their claims before it exits.
	_ = child.Process.Signal(syscall.SIGTERM)
	_ = child.Wait()
	killed = true
	for _, r := range second {
		if alive(r.pid) || alive(r.bg) {
			t.Errorf("replica %d (child %d) outlived serve's SIGTERM", r.pid, r.bg)
		}
	}
	child, _ = startServeWith(t, dir, addr, env, "--no-agent")
	killed = false
	for _, r := range second {
		var c api.Claim
		if _, err := apiCall(addr, admin, "GET", "/v1/claims/"+r.claim, nil, &c); err != nil || c.State != api.Released {
			t.Errorf("claim %s of a replica stopped by SIGTERM: %s %v, want released", r.claim, c.State, err)
		}
	}
	_ = child.Process.Signal(syscall.SIGTERM)
	_ = child.Wait()
	killed = true
}

// gpuslice run killed with kill -9: its CMD dies with it, and the claim is
// released once its lease and the server's grace have passed.
func TestKillNineOfRunReleasesItsClaim(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns servers")
	}
	t.Parallel()
	dir := t.TempDir()
	addr := freePort(t)
	child, logs := startServeWith(t, dir, addr, nil, "--lease-grace", "1s")
	t.Cleanup(func() { _ = child.Process.Signal(syscall.SIGTERM); _ = child.Wait() })
	admin, run, runLogs, pid, id := runSleeper(t, dir, addr, "2s")
	// Alive past two leases: run renews it.
	time.Sleep(5 * time.Second)
	var c api.Claim
	if _, err := apiCall(addr, admin, "GET", "/v1/claims/"+id, nil, &c); err != nil || c.State.Final() {
		t.Fatalf("claim of a live run after two leases: %s (%s) %v\n%s\n%s", c.State, c.Reason, err, runLogs.String(), logs.String())
	}
	_ = run.Process.Signal(syscall.SIGKILL)
	_ = run.Wait()
	testkit.Eventually(t, 5*time.Second, "CMD to die with gpuslice run (kill -9)", func() (bool, string) {
		return !alive(pid), "CMD outlived kill -9 of gpuslice run"
	})
	testkit.Eventually(t, 15*time.Second, "the claim of a killed run to be released", func() (bool, string) {
		_, err := apiCall(addr, admin, "GET", "/v1/claims/"+id, nil, &c)
		return err == nil && c.State == api.Released, fmt.Sprintf("%s (%s) %v", c.State, c.Reason, err)
	})
	if !strings.Contains(c.Reason, "lease expired") {
		t.Errorf("reason %q, want lease expired", c.Reason)
	}
}

// gpuslice run whose claim an admin releases stops CMD and fails.
func TestRunStopsWhenItsClaimIsReleased(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns servers")
	}
	t.Parallel()
	dir := t.TempDir()
	addr := freePort(t)
	child, _ := startServeWith(t, dir, addr, nil)
	t.Cleanup(func() { _ = child.Process.Signal(syscall.SIGTERM); _ = child.Wait() })
	admin, run, runLogs, pid, id := runSleeper(t, dir, addr, "1s")
	if code, err := apiCall(addr, admin, "DELETE", "/v1/claims/"+id, nil, nil); err != nil || code != 200 {
		t.Fatalf("release: %d %v", code, err)
	}
	done := make(chan error, 1)
	go func() { done <- run.Wait() }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(runLogs.String(), "is over") {
			t.Fatalf("run after its claim was released: %v\n%s", err, runLogs.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("run kept CMD running after its claim was released\n%s", runLogs.String())
	}
	if alive(pid) {
		t.Fatalf("CMD %d still runs after its claim was released", pid)
	}
}

// runSleeper starts `gpuslice run --lease LEASE -- sh SCRIPT` against the
// serve of dir at addr, the script writing its pid and sleeping, and
// waits until it runs: the admin token, run, its output, CMD's pid and
// the claim's id.
func runSleeper(t *testing.T, dir, addr, lease string) (admin string, run *exec.Cmd, runLogs *syncBuffer, pid int, id string) {
	t.Helper()
	tokB, _ := os.ReadFile(filepath.Join(dir, "admin.token"))
	admin = strings.TrimSpace(string(tokB))
	pidFile := filepath.Join(t.TempDir(), "pid")
	script := filepath.Join(t.TempDir(), "cmd.sh")
	if err := os.WriteFile(script, []byte("echo $$ > "+pidFile+"\nexec sleep 1000\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	run, runLogs = gsStart(t, "run", "--server", "http://"+addr, "--token", admin, "--node", "crashnode", "--memory", "2GiB", "--lease", lease, "--", "sh", script)
	testkit.Eventually(t, 20*time.Second, "run to start CMD", func() (bool, string) {
		b, err := os.ReadFile(pidFile)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0, runLogs.String()
	})
	var claims []api.Claim
	if _, err := apiCall(addr, admin, "GET", "/v1/claims?state=allocated&state=running", nil, &claims); err != nil || len(claims) != 1 {
		t.Fatalf("live claims: %v %v", claims, err)
	}
	return admin, run, runLogs, pid, claims[0].ID
}
