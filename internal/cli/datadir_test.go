package cli

import (
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// serveMustExit runs `gpuslice serve` on dir in a child process that is
// expected to refuse to start, and returns its exit code and output. A
// child still running after a minute has not refused: it is killed and the
// test fails.
func serveMustExit(t *testing.T, dir string) (int, string) {
	t.Helper()
	return gsRun(t, "serve", "--listen", freePort(t), "--data-dir", dir, "--simulate", "dgx-h100", "--node", "crashnode")
}

// stopServe ends a server with SIGTERM and expects a clean exit.
func stopServe(t *testing.T, child *exec.Cmd) {
	t.Helper()
	_ = child.Process.Signal(syscall.SIGTERM)
	if err := child.Wait(); err != nil {
		t.Errorf("serve (pid %d) after SIGTERM: %v", child.Process.Pid, err)
	}
}

func adminToken(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func lockHolder(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "lock"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// submitClaim creates a small time-sliced claim and expects 201.
func submitClaim(t *testing.T, addr, token string) string {
	t.Helper()
	req := map[string]any{"tenant": "default", "requests": []alloc.Request{{Name: "gpu", MemoryMiB: 1000, Mode: alloc.TimeSlice}}}
	var c api.Claim
	code, err := apiCall(addr, token, "POST", "/v1/claims", req, &c)
	if err != nil || code != http.StatusCreated {
		t.Fatalf("POST /v1/claims: %d %v", code, err)
	}
	return c.ID
}

func listClaims(t *testing.T, addr, token string) map[string]bool {
	t.Helper()
	var claims []api.Claim
	code, err := apiCall(addr, token, "GET", "/v1/claims", nil, &claims)
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /v1/claims: %d %v", code, err)
	}
	ids := map[string]bool{}
	for _, c := range claims {
		ids[c.ID] = true
	}
	return ids
}

// A second server on a data directory in use fails at once, naming the
// holder; the first goes on serving; once it stops, a new one starts.
func TestServeSecondServerOnOneDataDirFails(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns servers")
	}
	t.Parallel()
	dir := t.TempDir()
	addr := freePort(t)
	first := startServe(t, dir, addr)
	token := adminToken(t, dir)
	c1 := submitClaim(t, addr, token)

	code, out := serveMustExit(t, dir)
	want := "data directory " + dir + " is in use by another gpuslice serve (pid " + strconv.Itoa(first.Process.Pid) + "); stop it or pass another --data-dir"
	if code == 0 || !strings.Contains(out, want) {
		_ = first.Process.Kill()
		_ = first.Wait()
		t.Fatalf("second serve: exit %d, output:\n%s\nwant a non-zero exit saying %q", code, out, want)
	}
	if strings.Contains(out, "gpuslice serving") || strings.Contains(out, "admin token") {
		t.Errorf("the second serve went further than the lock:\n%s", out)
	}

	// The first is untouched: same lock holder, same admin token, and it
	// still takes claims.
	if got := lockHolder(t, dir); got != strconv.Itoa(first.Process.Pid) {
		t.Errorf("lock file names %q, want the first server's pid %d", got, first.Process.Pid)
	}
	if got := adminToken(t, dir); got != token {
		t.Errorf("admin.token changed under the first server")
	}
	c2 := submitClaim(t, addr, token)
	if ids := listClaims(t, addr, token); !ids[c1] || !ids[c2] {
		t.Errorf("first server lists %v, want %s and %s", ids, c1, c2)
	}
	stopServe(t, first)

	next := startServe(t, dir, addr)
	defer stopServe(t, next)
	if got := lockHolder(t, dir); got != strconv.Itoa(next.Process.Pid) {
		t.Errorf("lock file names %q, want the new server's pid %d", got, next.Process.Pid)
	}
	if ids := listClaims(t, addr, adminToken(t, dir)); !ids[c1] || !ids[c2] {
		t.Errorf("after the restart the server lists %v, want %s and %s", ids, c1, c2)
	}
}

// kill -9 leaves the lock file behind with the dead server's pid; the
// kernel has dropped its flock, so a restart takes the directory.
func TestServeLockFileOfKilledServerDoesNotBlock(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns servers")
	}
	t.Parallel()
	dir := t.TempDir()
	addr := freePort(t)
	child := startServe(t, dir, addr)
	token := adminToken(t, dir)
	id := submitClaim(t, addr, token)
	_ = child.Process.Signal(syscall.SIGKILL)
	_ = child.Wait()
	if got := lockHolder(t, dir); got != strconv.Itoa(child.Process.Pid) {
		t.Fatalf("lock file after kill -9 names %q, want the killed pid %d", got, child.Process.Pid)
	}

	next := startServe(t, dir, addr)
	defer stopServe(t, next)
	if got := lockHolder(t, dir); got != strconv.Itoa(next.Process.Pid) {
		t.Errorf("lock file names %q, want the new server's pid %d", got, next.Process.Pid)
	}
	if ids := listClaims(t, addr, token); !ids[id] {
		t.Errorf("after kill -9 and restart the server lists %v, want %s", ids, id)
	}
}

// wantRefusal checks that serve refused dir naming both files and what to
// do, and left both files as they were.
func wantRefusal(t *testing.T, dir string, says ...string) {
	t.Helper()
	tokPath, dbPath := filepath.Join(dir, "admin.token"), filepath.Join(dir, "gpuslice.db")
	tokBefore, _ := os.ReadFile(tokPath)
	dbBefore, dbErrBefore := os.ReadFile(dbPath)
	code, out := serveMustExit(t, dir)
	if code == 0 {
		t.Fatalf("serve started on %s:\n%s", dir, out)
	}
	for _, want := range append([]string{tokPath, dbPath, "restore", "remove " + tokPath + " to start afresh"}, says...) {
		if !strings.Contains(out, want) {
			t.Errorf("serve's error does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "admin token (shown once") {
		t.Errorf("serve made a new admin token:\n%s", out)
	}
	if tokAfter, _ := os.ReadFile(tokPath); !bytes.Equal(tokBefore, tokAfter) {
		t.Errorf("admin.token changed: %q → %q", tokBefore, tokAfter)
	}
	dbAfter, dbErrAfter := os.ReadFile(dbPath)
	if !bytes.Equal(dbBefore, dbAfter) || (dbErrBefore == nil) != (dbErrAfter == nil) {
		t.Errorf("gpuslice.db changed: %d bytes (%v) → %d bytes (%v)", len(dbBefore), dbErrBefore, len(dbAfter), dbErrAfter)
	}
}

func TestServeRefusesEmptyDatabaseWithAdminToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "admin.token"), []byte("gs_admin_secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "gpuslice.db"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wantRefusal(t, dir, "empty (0 bytes)")
}

func TestServeRefusesMissingDatabaseWithAdminToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "admin.token"), []byte("gs_admin_secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wantRefusal(t, dir, "does not exist")
}

func TestServeRefusesDamagedDatabase(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "admin.token"), []byte("gs_admin_secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "gpuslice.db"), bytes.Repeat([]byte("not a database. "), 512), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out := serveMustExit(t, dir)
	if code == 0 || !strings.Contains(out, "database is damaged") || !strings.Contains(out, "restore it from a backup") {
		t.Fatalf("serve on a damaged database: exit %d, output:\n%s", code, out)
	}
}

// A directory that does not exist yet is made, bootstrapped and locked as
// before; a clean stop empties the lock file and the restart finds its
// database (admin.token now exists).
func TestServeStartsInFreshDataDir(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns servers")
	}
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "new", "data")
	addr := freePort(t)
	child := startServe(t, dir, addr)
	token := adminToken(t, dir)
	if got := lockHolder(t, dir); got != strconv.Itoa(child.Process.Pid) {
		t.Errorf("lock file names %q, want pid %d", got, child.Process.Pid)
	}
	id := submitClaim(t, addr, token)
	stopServe(t, child)
	if got := lockHolder(t, dir); got != "" {
		t.Errorf("lock file after a clean stop holds %q, want it empty", got)
	}

	next := startServe(t, dir, addr)
	defer stopServe(t, next)
	if got := adminToken(t, dir); got != token {
		t.Errorf("the restart made a new admin token")
	}
	if ids := listClaims(t, addr, token); !ids[id] {
		t.Errorf("after a restart the server lists %v, want %s", ids, id)
	}
}

// `serve --store memory` on a directory that holds a SQLite store's
// database and admin token refuses to start: its fresh tokens would
// replace the ones the database's users hold.
func TestServeMemoryStoreLeavesSQLiteTokensAlone(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns servers")
	}
	t.Parallel()
	dir := t.TempDir()
	addr := freePort(t)
	child := startServe(t, dir, addr)
	stopServe(t, child)
	before, err := os.ReadFile(filepath.Join(dir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	code, out := gsRun(t, "serve", "--store", "memory", "--listen", freePort(t), "--data-dir", dir, "--simulate", "dgx-h100", "--node", "crashnode")
	if code == 0 || !strings.Contains(out, "--store memory") || !strings.Contains(out, "--data-dir") {
		t.Fatalf("serve --store memory on a SQLite data directory: exit %d:\n%s", code, out)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "admin.token")); !bytes.Equal(before, after) {
		t.Fatalf("admin.token changed: %q → %q", before, after)
	}
	// On a directory of its own it runs.
	mem := t.TempDir()
	c, logs := gsStart(t, "serve", "--store", "memory", "--listen", freePort(t), "--data-dir", mem, "--simulate", "dgx-h100", "--node", "m")
	testkit.Eventually(t, 20*time.Second, "serve --store memory to start", func() (bool, string) {
		if c.ProcessState != nil {
			t.Fatalf("serve --store memory exited:\n%s", logs.String())
		}
		_, err := os.Stat(filepath.Join(mem, "admin.token"))
		return err == nil, logs.String()
	})
}
