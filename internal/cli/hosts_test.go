package cli

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// syncBuffer is a bytes.Buffer a child process writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// gsStart starts `gpuslice ARGS` (the test binary as the CLI, see
// TestServeChild) and returns it running; it is killed when the test ends.
func gsStart(t *testing.T, args ...string) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestServeChild$")
	cmd.Env = append(os.Environ(), "GPUSLICE_SERVE_CHILD="+strings.Join(args, " "))
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd, logs
}

// gsRun runs `gpuslice ARGS` to its end (a minute at most) and returns
// its exit code and output.
func gsRun(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd, logs := gsStart(t, args...)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode(), logs.String()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, logs.String()
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("gpuslice %s did not end:\n%s", strings.Join(args, " "), logs.String())
		return 0, ""
	}
}

// serveUp starts `gpuslice serve` on a fresh data directory with extra
// flags and waits until it answers on url (http or https).
func serveUp(t *testing.T, extra ...string) (dir, addr, url string, child *exec.Cmd, logs *syncBuffer) {
	t.Helper()
	dir, addr = t.TempDir(), freePort(t)
	args := append([]string{"serve", "--listen", addr, "--data-dir", dir}, extra...)
	child, logs = gsStart(t, args...)
	scheme := "http"
	for _, a := range extra {
		if a == "--tls-self-signed" {
			scheme = "https"
		}
	}
	url = scheme + "://" + addr
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	up := healthy(url, hc)
	testkit.Eventually(t, 30*time.Second, "serve to start", func() (bool, string) {
		if child.ProcessState != nil {
			t.Fatalf("serve exited:\n%s", logs.String())
		}
		ok, why := up()
		return ok, why + "\n" + logs.String()
	})
	t.Cleanup(func() {
		if child.ProcessState == nil {
			_ = child.Process.Signal(syscall.SIGTERM)
			_ = child.Wait()
		}
	})
	return dir, addr, url, child, logs
}

// agentTokenFor makes an agent token bound to node with `tokens create`.
func agentTokenFor(t *testing.T, url, admin, node string, conn ...string) string {
	t.Helper()
	args := append([]string{"tokens", "create", "--role", "agent", "--node", node, "--server", url, "--token", admin, "-o", "json"}, conn...)
	code, out := gsRun(t, args...)
	var tok api.Token
	if code != 0 || json.Unmarshal([]byte(out), &tok) != nil || tok.Secret == "" {
		t.Fatalf("tokens create for %s: exit %d\n%s", node, code, out)
	}
	return tok.Secret
}

// nodesLs lists node names with `nodes ls -o json`.
func nodesLs(t *testing.T, url, admin string, conn ...string) (map[string]string, int, string) {
	t.Helper()
	code, out := gsRun(t, append([]string{"nodes", "ls", "--server", url, "--token", admin, "-o", "json"}, conn...)...)
	var ns []api.Node
	got := map[string]string{}
	if code == 0 {
		if err := json.Unmarshal([]byte(out), &ns); err != nil {
			t.Fatalf("nodes ls: %v\n%s", err, out)
		}
		for _, n := range ns {
			got[n.Name] = string(n.State)
		}
	}
	return got, code, out
}

// waitNodes waits until `nodes ls` shows every one of names.
func waitNodes(t *testing.T, url, admin string, conn []string, agentLogs *syncBuffer, names ...string) map[string]string {
	t.Helper()
	var got map[string]string
	testkit.Eventually(t, 30*time.Second, fmt.Sprintf("nodes ls to show all of %v", names), func() (bool, string) {
		var code int
		var out string
		got, code, out = nodesLs(t, url, admin, conn...)
		missing := 0
		for _, n := range names {
			if _, ok := got[n]; !ok {
				missing++
			}
		}
		return code == 0 && missing == 0, fmt.Sprintf("exit %d\n%s\nagent:\n%s", code, out, agentLogs.String())
	})
	return got
}

// The README's second host, simulated on the same machine as serve: its
// GPUs are seeded from its node name, so they do not clash with the local
// node's and it registers.
func TestSimulatedSecondHostOnOneMachine(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns servers")
	}
	t.Parallel()
	dir, _, url, _, _ := serveUp(t, "--simulate", "l4x4", "--node", "local-1")
	admin := adminToken(t, dir)
	tok := agentTokenFor(t, url, admin, "sim-1")
	_, agentLogs := gsStart(t, "agent", "--simulate", "l4x4", "--node", "sim-1", "--server", url, "--token", tok, "--interval", "200ms")
	got := waitNodes(t, url, admin, nil, agentLogs, "local-1", "sim-1")
	if len(got) != 2 {
		t.Fatalf("nodes: %v", got)
	}
	if s := agentLogs.String(); strings.Contains(s, "already reported") {
		t.Errorf("the agent's GPUs clashed with the local node's:\n%s", s)
	}
}

// nodes rm deletes a node whose agent has stopped; an unknown node is an
// error.
func TestNodesRm(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns servers")
	}
	t.Parallel()
	dir, _, url, _, _ := serveUp(t, "--simulate", "l4x4", "--no-agent")
	admin := adminToken(t, dir)
	tok := agentTokenFor(t, url, admin, "sim-1")
	agent, agentLogs := gsStart(t, "agent", "--simulate", "l4x4", "--node", "sim-1", "--server", url, "--token", tok, "--interval", "200ms")
	waitNodes(t, url, admin, nil, agentLogs, "sim-1")
	_ = agent.Process.Signal(syscall.SIGTERM)
	_ = agent.Wait()

	code, out := gsRun(t, "nodes", "rm", "sim-1", "--server", url, "--token", admin)
	if code != 0 || !strings.Contains(out, "deleted node sim-1") {
		t.Fatalf("nodes rm sim-1: exit %d\n%s", code, out)
	}
	got, code, out := nodesLs(t, url, admin)
	if code != 0 || len(got) != 0 {
		t.Fatalf("after nodes rm: exit %d, nodes %v\n%s", code, got, out)
	}
	code, out = gsRun(t, "nodes", "rm", "sim-1", "--server", url, "--token", admin)
	if code == 0 || !strings.Contains(out, "not registered") {
		t.Fatalf("nodes rm of a deleted node: exit %d\n%s", code, out)
	}
	// A tenant token may not delete nodes.
	code, out = gsRun(t, "tokens", "create", "--tenant", "default", "--server", url, "--token", admin, "-o", "json")
	var tt api.Token
	if code != 0 || json.Unmarshal([]byte(out), &tt) != nil {
		t.Fatalf("tokens create: exit %d\n%s", code, out)
	}
	if code, out = gsRun(t, "nodes", "rm", "x", "--server", url, "--token", tt.Secret); code == 0 {
		t.Fatalf("nodes rm with a tenant token succeeded:\n%s", out)
	}
}

// serveFails runs serve with args on a fresh data directory, expects a
// non-zero exit, and that no admin token was made.
func serveFails(t *testing.T, addr string, args ...string) string {
	t.Helper()
	dir := t.TempDir()
	code, out := gsRun(t, append([]string{"serve", "--listen", addr, "--data-dir", dir, "--simulate", "l4x4"}, args...)...)
	if code == 0 {
		t.Errorf("serve %v exited 0:\n%s", args, out)
	}
	if strings.Contains(out, "admin token") || strings.Contains(out, "gs_") {
		t.Errorf("serve %v printed an admin token though it did not start:\n%s", args, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "admin.token")); err == nil {
		t.Errorf("serve %v wrote admin.token though it did not start", args)
	}
	return out
}

func TestServeMissingCertificateFails(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns servers")
	}
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "nope.pem")
	out := serveFails(t, freePort(t), "--tls-cert", missing, "--tls-key", missing)
	if !strings.Contains(out, "nope.pem") {
		t.Errorf("serve does not name the missing certificate:\n%s", out)
	}
}

func TestServeBusyPortFails(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns servers")
	}
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	out := serveFails(t, l.Addr().String())
	if !strings.Contains(out, "address already in use") {
		t.Errorf("serve does not say the port is busy:\n%s", out)
	}
}

// serve --tls-self-signed: the CLI and an agent reach it over https with
// --ca; without it the certificate is refused.
func TestServeSelfSignedTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns servers")
	}
	t.Parallel()
	dir, _, url, _, logs := serveUp(t, "--simulate", "l4x4", "--node", "local-1", "--tls-self-signed")
	certPath := filepath.Join(dir, "tls-cert.pem")
	pemData, err := os.ReadFile(certPath)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(pemData)
	if block == nil {
		t.Fatalf("%s holds no PEM block", certPath)
	}
	sum := sha256.Sum256(block.Bytes)
	if s := logs.String(); !strings.Contains(s, fmt.Sprintf("%02X:%02X", sum[0], sum[1])) || !strings.Contains(s, "--ca "+certPath) {
		t.Errorf("serve does not print the certificate's fingerprint and --ca path:\n%s", s)
	}
	admin := adminToken(t, dir)
	ca := []string{"--ca", certPath}
	got, code, out := nodesLs(t, url, admin, ca...)
	if code != 0 || got["local-1"] == "" {
		t.Fatalf("nodes ls over https with --ca: exit %d, nodes %v\n%s", code, got, out)
	}
	if _, code, out = nodesLs(t, url, admin); code == 0 || !strings.Contains(out, "certificate") {
		t.Fatalf("nodes ls over https without --ca: exit %d, want a certificate error\n%s", code, out)
	}
	tok := agentTokenFor(t, url, admin, "sim-1", ca...)
	_, agentLogs := gsStart(t, "agent", "--simulate", "l4x4", "--node", "sim-1", "--server", url, "--token", tok, "--interval", "200ms", "--ca", certPath)
	waitNodes(t, url, admin, ca, agentLogs, "local-1", "sim-1")
}
