package cli

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// lockedBuffer collects a child's output while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// runProc is a `gpuslice run` process.
type runProc struct {
	cmd         *exec.Cmd
	out, errOut *lockedBuffer
	done        chan struct{}
	err         error
	elapsed     time.Duration
}

func startRun(t *testing.T, bin, addr, token string, args ...string) *runProc {
	t.Helper()
	p := &runProc{out: &lockedBuffer{}, errOut: &lockedBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, append([]string{"run", "--server", "http://" + addr, "--token", token, "--node", "crashnode"}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.errOut
	start := time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		p.elapsed = time.Since(start)
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// waitOutput waits until the process's stderr (or stdout) matches re and
// returns the first submatch.
func (p *runProc) waitOutput(t *testing.T, re *regexp.Regexp) string {
	t.Helper()
	var m []string
	testkit.Eventually(t, 30*time.Second, fmt.Sprint(re), func() (bool, string) {
		if m = re.FindStringSubmatch(p.errOut.String() + p.out.String()); m != nil {
			return true, ""
		}
		select {
		case <-p.done:
			t.Fatalf("run exited (%v) before %s\nstdout %s\nstderr %s", p.err, re, p.out.String(), p.errOut.String())
		default:
		}
		return false, fmt.Sprintf("stdout %s\nstderr %s", p.out.String(), p.errOut.String())
	})
	if len(m) > 1 {
		return m[1]
	}
	return m[0]
}

// exitCode waits for the process and returns its exit code.
func (p *runProc) exitCode(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		t.Fatalf("run still going after %s\nstdout %s\nstderr %s", within, p.out.String(), p.errOut.String())
	}
	if p.err == nil {
		return 0
	}
	var ee *exec.ExitError
	if !errors.As(p.err, &ee) {
		t.Fatalf("run: %v", p.err)
	}
	return ee.ExitCode()
}

func claimState(t *testing.T, addr, token, id string) api.Claim {
	t.Helper()
	var c api.Claim
	code, err := apiCall(addr, token, "GET", "/v1/claims/"+id, nil, &c)
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET claim %s: %d %v", id, code, err)
	}
	return c
}

var (
	pendingRe   = regexp.MustCompile(`gpuslice: (\S+) pending, queue position`)
	allocatedRe = regexp.MustCompile(`gpuslice: (\S+) allocated:`)
)

// gpuslice run against a real serve, as a user runs it: Ctrl-C and SIGTERM
// release the claim whether it is pending or CMD runs and exit 128+signal;
// --timeout bounds the wait; a tenant token runs without --tenant.
func TestRunProcessSignalsTimeoutTenant(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gpuslice and spawns a server")
	}
	t.Parallel()
	// Exit codes and signals are the process's own, so they are tested on
	// the gpuslice binary.
	bin := testkit.GpusliceBinary(t)
	dir := t.TempDir()
	addr := freePort(t)
	srv := startServe(t, dir, addr)
	defer func() { _ = srv.Process.Signal(syscall.SIGTERM); _ = srv.Wait() }()
	tokB, err := os.ReadFile(filepath.Join(dir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	admin := strings.TrimSpace(string(tokB))

	t.Run("tenant token without --tenant", func(t *testing.T) {
		if code, err := apiCall(addr, admin, "PUT", "/v1/tenants/research", api.Tenant{Name: "research"}, nil); err != nil || code >= 300 {
			t.Fatalf("put tenant: %d %v", code, err)
		}
		var tok api.Token
		if code, err := apiCall(addr, admin, "POST", "/v1/tokens", api.CreateTokenRequest{Role: api.RoleTenant, Tenant: "research"}, &tok); err != nil || code >= 300 {
			t.Fatalf("create token: %d %v", code, err)
		}
		p := startRun(t, bin, addr, tok.Secret, "--memory", "1GiB", "--", "sh", "-c", "echo ran")
		if code := p.exitCode(t, 60*time.Second); code != 0 || !strings.Contains(p.out.String(), "ran") {
			t.Fatalf("tenant token run: exit %d\nstdout %s\nstderr %s", code, p.out.String(), p.errOut.String())
		}
		id := allocatedRe.FindStringSubmatch(p.errOut.String())[1]
		if c := claimState(t, addr, admin, id); c.Tenant != "research" || c.State != api.Released {
			t.Fatalf("claim %s: tenant %s, %s", id, c.Tenant, c.State)
		}
		// An admin token without --tenant claims for "default".
		p = startRun(t, bin, addr, admin, "--memory", "1GiB", "--", "true")
		if code := p.exitCode(t, 60*time.Second); code != 0 {
			t.Fatalf("admin run: exit %d\nstderr %s", code, p.errOut.String())
		}
		id = allocatedRe.FindStringSubmatch(p.errOut.String())[1]
		if c := claimState(t, addr, admin, id); c.Tenant != "default" {
			t.Fatalf("admin claim %s: tenant %s", id, c.Tenant)
		}
		// A tenant token naming another tenant: the server's refusal, as is.
		p = startRun(t, bin, addr, tok.Secret, "--tenant", "default", "--", "true")
		if code := p.exitCode(t, 60*time.Second); code == 0 || !strings.Contains(p.errOut.String(), "a tenant token acts for its own tenant only") {
			t.Fatalf("tenant token naming another tenant: exit %d\nstderr %s", code, p.errOut.String())
		}
	})

	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run("while CMD runs "+sig.String(), func(t *testing.T) {
			p := startRun(t, bin, addr, admin, "--memory", "1GiB", "--", "sh", "-c", "echo started; exec sleep 60")
			id := p.waitOutput(t, allocatedRe)
			p.waitOutput(t, regexp.MustCompile("started"))
			_ = p.cmd.Process.Signal(sig)
			if code := p.exitCode(t, 20*time.Second); code != 128+int(sig) {
				t.Fatalf("exit %d, want %d\nstderr %s", code, 128+int(sig), p.errOut.String())
			}
			if c := claimState(t, addr, admin, id); c.State != api.Released {
				t.Fatalf("claim %s is %s after %s\nstderr %s", id, c.State, sig, p.errOut.String())
			}
		})
	}

	// Fill every GPU, so the next claims wait.
	var filler api.Claim
	fill := map[string]any{"tenant": "default", "requests": []alloc.Request{{Name: "gpu", Count: 8, Mode: alloc.Exclusive}}}
	if code, err := apiCall(addr, admin, "POST", "/v1/claims", fill, &filler); err != nil || code != http.StatusCreated || filler.State != api.Allocated {
		t.Fatalf("filler: %d %v %+v", code, err, filler)
	}

	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run("pending "+sig.String(), func(t *testing.T) {
			p := startRun(t, bin, addr, admin, "--memory", "10GiB", "--", "true")
			id := p.waitOutput(t, pendingRe)
			time.Sleep(300 * time.Millisecond) // into the long poll
			_ = p.cmd.Process.Signal(sig)
			if code := p.exitCode(t, 20*time.Second); code != 128+int(sig) {
				t.Fatalf("exit %d, want %d\nstderr %s", code, 128+int(sig), p.errOut.String())
			}
			// (not a bare "404": a random claim id may contain it)
			if strings.Contains(p.errOut.String(), "404 page not found") || strings.Contains(p.errOut.String(), "HTTP 404") || strings.Contains(p.errOut.String(), "releasing "+id+":") {
				t.Fatalf("release failed:\n%s", p.errOut.String())
			}
			if c := claimState(t, addr, admin, id); c.State != api.Released {
				t.Fatalf("claim %s is %s after %s\nstderr %s", id, c.State, sig, p.errOut.String())
			}
		})
	}

	t.Run("timeout", func(t *testing.T) {
		for _, args := range [][]string{
			{"--memory", "10GiB"},                      // waits for a GPU held by others
			{"--memory", "500GiB", "--wait-for-nodes"}, // waits for a node that may never join
		} {
			p := startRun(t, bin, addr, admin, append(append([]string{"--timeout", "3s"}, args...), "--", "true")...)
			code := p.exitCode(t, 15*time.Second)
			if code == 0 || !strings.Contains(p.errOut.String(), "still pending") || !strings.Contains(p.errOut.String(), "--timeout 3s") {
				t.Fatalf("%v: exit %d\nstderr %s", args, code, p.errOut.String())
			}
			if p.elapsed > 8*time.Second {
				t.Fatalf("%v: --timeout 3s took %s", args, p.elapsed)
			}
			id := pendingRe.FindStringSubmatch(p.errOut.String())[1]
			if c := claimState(t, addr, admin, id); c.State != api.Released {
				t.Fatalf("%v: claim %s is %s after the timeout", args, id, c.State)
			}
		}
		// A claim that can never fit is refused at once, in the server's words.
		p := startRun(t, bin, addr, admin, "--timeout", "3s", "--memory", "500GiB", "--", "true")
		if code := p.exitCode(t, 15*time.Second); code == 0 || !strings.Contains(p.errOut.String(), "HTTP 422") {
			t.Fatalf("never fits: exit %d\nstderr %s", code, p.errOut.String())
		}
	})
}
