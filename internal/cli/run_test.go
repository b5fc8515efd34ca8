package cli

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuslice/gpuslice/internal/api"
)

// gpuslice run against a real serve: the command sees its devices in the
// environment, its exit code comes back, and the claim is released.
func TestRunEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a server")
	}
	t.Parallel()
	dir := t.TempDir()
	addr := freePort(t)
	child := startServe(t, dir, addr)
	defer func() { _ = child.Process.Signal(syscall.SIGTERM); _ = child.Wait() }()
	tokB, err := os.ReadFile(filepath.Join(dir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(tokB))
	run := func(args ...string) (string, string, error) {
		var out, errOut bytes.Buffer
		cmd := New(&out, &errOut)
		cmd.SetArgs(append([]string{"run", "--server", "http://" + addr, "--token", token, "--node", "crashnode", "--timeout", "20s"}, args...))
		err := cmd.Execute()
		return out.String(), errOut.String(), err
	}
	out, errOut, err := run("--memory", "10GiB", "--compute", "25", "--", "sh", "-c", "echo devices=$CUDA_VISIBLE_DEVICES limit=$GPUSLICE_MEMORY_LIMIT_MIB; exit 7")
	var exit *ExitError
	if !errors.As(err, &exit) || exit.Code != 7 {
		t.Fatalf("exit: %v\nstdout %s\nstderr %s", err, out, errOut)
	}
	if !strings.Contains(out, "devices=GPU-") || !strings.Contains(out, "limit=10240") {
		t.Fatalf("the command did not see its allocation: %q", out)
	}
	// A MIG claim: the agent creates the instance and the command sees its uuid.
	out, errOut, err = run("--mode", "mig", "--profile", "1g.10gb", "--", "sh", "-c", "echo devices=$CUDA_VISIBLE_DEVICES")
	if err != nil || !strings.Contains(out, "devices=MIG-") {
		t.Fatalf("mig run: %v\nstdout %s\nstderr %s", err, out, errOut)
	}
	var claims []api.Claim
	if _, err := apiCall(addr, token, "GET", "/v1/claims", nil, &claims); err != nil {
		t.Fatal(err)
	}
	for _, c := range claims {
		if c.State != api.Released {
			t.Errorf("claim %s is %s after run returned", c.ID, c.State)
		}
	}
}
