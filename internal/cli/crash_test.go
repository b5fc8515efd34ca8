package cli

import (
	"bytes"
	"context"
	"encoding/json"
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

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// TestServeChild is not a test: the crash test re-executes the test binary
// with GPUSLICE_SERVE_CHILD set, and this runs `gpuslice serve` in it.
func TestServeChild(t *testing.T) {
	args := os.Getenv("GPUSLICE_SERVE_CHILD")
	if args == "" {
		t.Skip("helper process for TestKillNineKeepsAcknowledgedClaims")
	}
	cmd := New(os.Stdout, os.Stderr)
	cmd.SetArgs(strings.Fields(args))
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// freePort returns a loopback address no one listens on, and never the
// same one twice in this process: tests run in parallel, and one that
// restarts serve on its address must not find another test's serve there.
func freePort(t *testing.T) string {
	t.Helper()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		givenPorts.Lock()
		taken := givenPorts.m[addr]
		givenPorts.m[addr] = true
		givenPorts.Unlock()
		if !taken {
			return addr
		}
	}
}

var givenPorts = struct {
	sync.Mutex
	m map[string]bool
}{m: map[string]bool{}}

// startServe runs `gpuslice serve` in a child process and waits until it
// answers.
func startServe(t *testing.T, dir, addr string) *exec.Cmd {
	t.Helper()
	cmd, _ := startServeWith(t, dir, addr, nil)
	return cmd
}

// startServeWith is startServe with more variables in serve's environment
// and more arguments (no spaces in them), returning its output too.
func startServeWith(t *testing.T, dir, addr string, env []string, args ...string) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestServeChild$")
	cmd.Env = append(os.Environ(), "GPUSLICE_SERVE_CHILD=serve --listen "+addr+" --data-dir "+dir+" --simulate dgx-h100 --node crashnode "+strings.Join(args, " "))
	cmd.Env = append(cmd.Env, env...)
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	// A process serve leaves behind may hold the output pipe: Wait does
	// not wait for it past this.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := testkit.Wait(ctx, healthy("http://"+addr, http.DefaultClient)); err != nil {
		_ = cmd.Process.Kill()
		t.Fatalf("serve did not start: %v\n%s", err, logs.String())
	}
	return cmd, logs
}

// healthy is a condition for testkit: serve at url answers /healthz.
func healthy(url string, hc *http.Client) func() (bool, string) {
	return func() (bool, string) {
		resp, err := hc.Get(url + "/healthz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return true, ""
	}
}

func apiCall(addr, token, method, path string, body any, out any) (int, error) {
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, _ := http.NewRequest(method, "http://"+addr+path, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if out != nil {
		_ = json.NewDecoder(resp.Body).Decode(out)
	}
	return resp.StatusCode, nil
}

// kill -9 of the server during a burst of concurrent claim submissions:
// after a restart every acknowledged claim is there exactly once and no
// device is over capacity.
func TestKillNineKeepsAcknowledgedClaims(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns servers")
	}
	t.Parallel()
	dir := t.TempDir()
	addr := freePort(t)
	acked := map[string]bool{}
	for round := 0; round < 3; round++ {
		child := startServe(t, dir, addr)
		tokB, err := os.ReadFile(filepath.Join(dir, "admin.token"))
		if err != nil {
			t.Fatal(err)
		}
		token := strings.TrimSpace(string(tokB))
		var mu sync.Mutex
		before := len(acked)
		// The burst goes on until serve is killed.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var wg sync.WaitGroup
		for w := 0; w < 16; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := 0; ctx.Err() == nil; i++ {
					req := map[string]any{"tenant": "default", "requests": []alloc.Request{{Name: "gpu", MemoryMiB: int64(1000 + 100*(w%5)), Mode: alloc.TimeSlice}}}
					var c api.Claim
					code, err := apiCall(addr, token, "POST", "/v1/claims", req, &c)
					if err == nil && code == http.StatusCreated {
						mu.Lock()
						acked[c.ID] = true
						mu.Unlock()
					}
				}
			}(w)
		}
		// Killed 200 ms into the burst, once this round has had 7 claims
		// acknowledged (3 rounds: over the 20 checked below) however
		// loaded the machine is.
		time.Sleep(200 * time.Millisecond)
		testkit.Eventually(t, 30*time.Second, "7 claims acknowledged in this round", func() (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			return len(acked)-before >= 7, fmt.Sprintf("%d so far", len(acked)-before)
		})
		_ = child.Process.Signal(syscall.SIGKILL)
		_ = child.Wait()
		cancel()
		wg.Wait()
	}
	child := startServe(t, dir, addr)
	defer func() { _ = child.Process.Signal(syscall.SIGTERM); _ = child.Wait() }()
	tokB, _ := os.ReadFile(filepath.Join(dir, "admin.token"))
	token := strings.TrimSpace(string(tokB))
	var claims []api.Claim
	if _, err := apiCall(addr, token, "GET", "/v1/claims?limit=5000", nil, &claims); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	var live []alloc.Allocation
	for _, c := range claims {
		seen[c.ID]++
		if c.Allocation != nil && (c.State == api.Allocated || c.State == api.Running) {
			live = append(live, *c.Allocation)
		}
	}
	if len(acked) < 20 {
		t.Fatalf("only %d claims were acknowledged; the burst did not run", len(acked))
	}
	for id := range acked {
		if seen[id] != 1 {
			t.Errorf("acknowledged claim %s is there %d times", id, seen[id])
		}
	}
	// No device over capacity: the allocator re-checks every rule when it
	// rebuilds from the stored fleet and allocations.
	var nodes []api.Node
	if _, err := apiCall(addr, token, "GET", "/v1/nodes", nil, &nodes); err != nil {
		t.Fatal(err)
	}
	var f alloc.Fleet
	for _, n := range nodes {
		inv := n.Inventory
		inv.Name = n.Name
		f.Nodes = append(f.Nodes, inv)
	}
	st, err := alloc.NewState(f, nil, alloc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range live {
		a := live[i]
		// The agent reports devices as dynamic; the sharing each allocation
		// configured is part of its commit, as in the server's rebuild.
		var keep []alloc.Change
		for _, ch := range a.Changes {
			if ch.Kind == alloc.ConfigureShare {
				keep = append(keep, ch)
			}
		}
		a.Changes = keep
		if err := st.Apply(&a); err != nil {
			t.Errorf("claim %s over capacity or conflicting: %v", a.Claim, err)
		}
	}
	if err := st.Check(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d claims acknowledged across 3 kills, all present once; %d live allocations consistent", len(acked), len(live))
}
