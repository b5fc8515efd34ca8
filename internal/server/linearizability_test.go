package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/gpuslice/gpuslice/internal/agent"
	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/gpu/fake"
	"github.com/gpuslice/gpuslice/internal/server"
	"github.com/gpuslice/gpuslice/internal/state"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

var linzLong = flag.Bool("linz.long", false,
	"run TestClaimsLinearizable longer (10 rounds × 10s, 16 workers); GPUSLICE_LINZ_ROUNDS, _DURATION, _WORKERS, _SEED, _MIX override")

// TestClaimsLinearizable drives a real `gpuslice serve` (a subprocess over
// SQLite, over real HTTP) with many clients hitting the same claims at the
// same moment — DELETE, POST running, POST failed and GET racing each
// other, the scheduler moving pending claims by itself, a node
// re-registered every 50 ms — and SIGKILLs and restarts it mid-round and
// between rounds. The recorded history is checked with Porcupine against
// the sequential life of one claim (partitioned by claim id):
//
//	create → pending | allocated      pending → allocated by the scheduler, at any time
//	DELETE → 200 released             from pending, allocated, running, released; 409 on failed
//	POST running → 200 running        from allocated, running; 409 (current state) otherwise
//	POST failed → 200 failed          from pending, allocated, running, failed; 409 on released
//	GET → 200 the current state       released and failed are final
//
// A request the kill cut off (or that timed out, or got a 5xx) has an
// unknown outcome: it may have happened, at any time after its call. After
// the last round the database is opened in-process and Server.Check must
// hold, and no two live claims may share a GPU one of them holds
// exclusively — also checked on list snapshots while the rounds run, with
// a quota tenant that must never hold more than its quota.
//
// The default run is bounded (3 rounds × 2s, 8 workers; -short: 2 × 1s);
// -linz.long or the GPUSLICE_LINZ_* variables run longer. On a violation the Porcupine
// visualization is written under $GPUSLICE_LINZ_OUT (else a new temporary
// directory, kept) and its path printed. GPUSLICE_LINZ_BIN runs a given
// gpuslice binary instead of testkit's (GPUSLICE_BIN, or ./cmd/gpuslice
// built once per run).
func TestClaimsLinearizable(t *testing.T) {
	cfg := linzConfigFromEnv(t)
	bin := linzBinary(t)
	r := &linzRun{t: t, cfg: cfg, bin: bin, dataDir: t.TempDir(), logDir: t.TempDir(), start: time.Now(),
		owner: map[string]string{}, stats: map[string]int{}, live: map[string]api.ClaimState{},
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 0,
			IdleConnTimeout: 30 * time.Second, DisableCompression: true}}}
	t.Cleanup(r.client.CloseIdleConnections)
	t.Cleanup(r.killQuietly)
	t.Logf("linearizability: seed %d, %d rounds × %v, %d workers, mix %v (GPUSLICE_LINZ_SEED=%d reproduces the choices, not the timing)",
		cfg.seed, cfg.rounds, cfg.duration, cfg.workers, cfg.mix, cfg.seed)
	began := time.Now()

	if err := r.startServer(); err != nil {
		t.Fatal(err)
	}
	r.setup()
	bg, stopBG := context.WithCancel(context.Background())
	var bgDone sync.WaitGroup
	bgDone.Add(2)
	go func() { defer bgDone.Done(); r.nodeLoop(bg) }()
	go func() { defer bgDone.Done(); r.watchLoop(bg) }()
	t.Cleanup(func() { stopBG(); bgDone.Wait() }) // also after a t.Fatal

	rng := rand.New(rand.NewPCG(cfg.seed, 0x6c696e7a))
	for round := range cfg.rounds {
		if round > 0 {
			if err := r.startServer(); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.round(round, rng); err != nil {
			t.Fatal(err)
		}
		// With requests in flight: their outcome is unknown.
		if err := r.kill(); err != nil {
			t.Fatal(err)
		}
	}
	// Audit: a fresh server on the same data reads every claim once more
	// (checked with the rest) and lists them all.
	if err := r.startServer(); err != nil {
		t.Fatal(err)
	}
	r.audit()
	stopBG()
	bgDone.Wait()
	if err := r.kill(); err != nil {
		t.Fatal(err)
	}
	ran := time.Since(began)

	checkStart := time.Now()
	illegal := r.checkHistory()
	checked := time.Since(checkStart)
	r.checkStore(illegal)

	r.mu.Lock()
	defer r.mu.Unlock()
	counts := map[linzOp]int{}
	unknown, listed := 0, 0
	for _, op := range r.ops {
		counts[op.Input.(linzIn).Op]++
		out := op.Output.(linzOut)
		if out.Unknown {
			unknown++
		}
		if out.Note == "list" {
			listed++
		}
	}
	t.Logf("linearizability: %d operations checked on %d claims (create %d, GET %d of which %d from lists, DELETE %d, running %d, failed %d; "+
		"%d with unknown outcome); %d requests refused while the server was down; %d server kills; rounds took %v, the check %v",
		len(r.ops), len(r.owner), counts[opCreate], counts[opGet], listed, counts[opRelease], counts[opRunning], counts[opFailed], unknown,
		r.stats["refused"], r.kills.Load(), ran.Round(time.Millisecond), checked.Round(time.Millisecond))
	t.Logf("linearizability: answers %v", linzSortedStats(r.stats))
}

// linzConfig sizes a run.
type linzConfig struct {
	rounds       int
	duration     time.Duration
	workers      int
	seed         uint64
	mix          linzMix
	reqTimeout   time.Duration
	checkTimeout time.Duration
}

// linzMix weighs the transitions the workers send at a burst's claims.
type linzMix struct{ release, running, failed, get int }

// linzGentle is the mix of a burst's operations after the first.
var linzGentle = linzMix{release: 4, running: 50, failed: 2, get: 44}

func (m linzMix) String() string {
	return fmt.Sprintf("release=%d,running=%d,failed=%d,get=%d", m.release, m.running, m.failed, m.get)
}

func (m linzMix) pick(rng *rand.Rand) linzOp {
	n := rng.IntN(m.release + m.running + m.failed + m.get)
	switch {
	case n < m.release:
		return opRelease
	case n < m.release+m.running:
		return opRunning
	case n < m.release+m.running+m.failed:
		return opFailed
	}
	return opGet
}

func linzConfigFromEnv(t *testing.T) linzConfig {
	t.Helper()
	c := linzConfig{rounds: 3, duration: 2 * time.Second, workers: 8, seed: uint64(time.Now().UnixNano()),
		mix: linzMix{release: 30, running: 35, failed: 10, get: 25}, reqTimeout: 10 * time.Second, checkTimeout: time.Minute}
	if testing.Short() {
		c.rounds, c.duration = 2, time.Second
	}
	if *linzLong {
		c.rounds, c.duration, c.workers, c.checkTimeout = 10, 10*time.Second, 16, 5*time.Minute
	}
	atoi := func(name string, dst *int) {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				t.Fatalf("%s=%q: want a whole number ≥ 1", name, v)
			}
			*dst = n
		}
	}
	atoi("GPUSLICE_LINZ_ROUNDS", &c.rounds)
	atoi("GPUSLICE_LINZ_WORKERS", &c.workers)
	if v := os.Getenv("GPUSLICE_LINZ_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("GPUSLICE_LINZ_DURATION=%q: want a duration like 10s", v)
		}
		c.duration = d
	}
	if v := os.Getenv("GPUSLICE_LINZ_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("GPUSLICE_LINZ_SEED=%q: %v", v, err)
		}
		c.seed = n
	}
	if v := os.Getenv("GPUSLICE_LINZ_MIX"); v != "" {
		m := linzMix{}
		for _, kv := range strings.Split(v, ",") {
			k, val, _ := strings.Cut(kv, "=")
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 {
				t.Fatalf("GPUSLICE_LINZ_MIX=%q: %q", v, kv)
			}
			switch k {
			case "release":
				m.release = n
			case "running":
				m.running = n
			case "failed":
				m.failed = n
			case "get":
				m.get = n
			default:
				t.Fatalf("GPUSLICE_LINZ_MIX=%q: %q is not release, running, failed or get", v, k)
			}
		}
		if m.release+m.running+m.failed+m.get == 0 {
			t.Fatalf("GPUSLICE_LINZ_MIX=%q: all zero", v)
		}
		c.mix = m
	}
	return c
}

// linzBinary is $GPUSLICE_LINZ_BIN, else the gpuslice binary of this
// checkout that testkit builds once per run ($GPUSLICE_BIN when set).
func linzBinary(t *testing.T) string {
	t.Helper()
	if b := os.Getenv("GPUSLICE_LINZ_BIN"); b != "" {
		return b
	}
	return testkit.GpusliceBinary(t)
}

// linzOp is what a recorded operation does to a claim.
type linzOp uint8

const (
	opCreate linzOp = iota
	opGet
	opRelease
	opRunning
	opFailed
)

func (o linzOp) String() string {
	return [...]string{"create", "GET", "DELETE", "running", "failed"}[o]
}

// linzIn is an operation's input: what and on which claim.
type linzIn struct {
	Op    linzOp
	Claim string
}

// linzOut is an operation's answer. Unknown: no answer (the server was
// killed, the request timed out, or a 5xx): it may or may not have
// happened.
type linzOut struct {
	Unknown bool
	Status  int
	// State is the claim's state in the answer: the claim of a 200/201,
	// api.Error.State of a 409.
	State api.ClaimState
	// Note is a short reason for an unknown or unexpected answer.
	Note string
}

// linzSet is a set of the states a claim may be in: the model's state.
// Pending is always with allocated — the scheduler may move a pending
// claim at any time, so after any operation both are possible.
type linzSet uint8

const (
	sNone linzSet = 1 << iota // not created yet
	sPending
	sAllocated
	sRunning
	sReleased
	sFailed
)

func linzBit(s api.ClaimState) linzSet {
	switch s {
	case api.Pending:
		return sPending
	case api.Allocated:
		return sAllocated
	case api.Running:
		return sRunning
	case api.Released:
		return sReleased
	case api.Failed:
		return sFailed
	}
	return 0
}

func (s linzSet) String() string {
	var names []string
	for _, n := range []struct {
		bit  linzSet
		name string
	}{{sNone, "none"}, {sPending, "pending"}, {sAllocated, "allocated"}, {sRunning, "running"}, {sReleased, "released"}, {sFailed, "failed"}} {
		if s&n.bit != 0 {
			names = append(names, n.name)
		}
	}
	return "{" + strings.Join(names, "|") + "}"
}

// linzStep1 is one operation from one definite state: the states it may
// lead to (0: it cannot happen from there with that answer).
func linzStep1(from linzSet, in linzIn, out linzOut) linzSet {
	const startRelease = sPending | sAllocated | sRunning | sReleased
	const startRunning = sAllocated | sRunning
	const startFailed = sPending | sAllocated | sRunning | sFailed
	if out.Unknown { // it happened or it did not
		next := from
		switch {
		case in.Op == opRelease && from&startRelease != 0:
			next |= sReleased
		case in.Op == opRunning && from&startRunning != 0:
			next |= sRunning
		case in.Op == opFailed && from&startFailed != 0:
			next |= sFailed
		case in.Op == opCreate && from == sNone:
			next |= sPending | sAllocated
		}
		return next
	}
	got := linzBit(out.State)
	// A 409 must name the current state (api.Error.State); one that names
	// none is taken as any state the transition refuses from.
	refused := func(allowed linzSet) linzSet {
		if from&allowed != 0 && (out.State == "" || got == from) {
			return from
		}
		return 0
	}
	switch in.Op {
	case opCreate:
		if out.Status == http.StatusCreated && from == sNone && got&(sPending|sAllocated) != 0 {
			return got
		}
	case opGet:
		if out.Status == http.StatusOK && got == from {
			return from
		}
	case opRelease:
		if out.Status == http.StatusOK && got == sReleased && from&startRelease != 0 {
			return sReleased
		}
		if out.Status == http.StatusConflict {
			return refused(sFailed)
		}
	case opRunning:
		if out.Status == http.StatusOK && got == sRunning && from&startRunning != 0 {
			return sRunning
		}
		if out.Status == http.StatusConflict {
			return refused(sPending | sReleased | sFailed)
		}
	case opFailed:
		if out.Status == http.StatusOK && got == sFailed && from&startFailed != 0 {
			return sFailed
		}
		if out.Status == http.StatusConflict {
			return refused(sReleased)
		}
	}
	return 0
}

// linzModel is the sequential life of one claim, partitioned by claim id.
func linzModel() porcupine.Model {
	return porcupine.Model{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			idx := map[string]int{}
			var parts [][]porcupine.Operation
			for _, op := range history {
				id := op.Input.(linzIn).Claim
				i, ok := idx[id]
				if !ok {
					i = len(parts)
					idx[id] = i
					parts = append(parts, nil)
				}
				parts[i] = append(parts[i], op)
			}
			return parts
		},
		Init: func() any { return sNone },
		Step: func(st, input, output any) (bool, any) {
			s, in, out := st.(linzSet), input.(linzIn), output.(linzOut)
			var next linzSet
			for b := sNone; b <= sFailed; b <<= 1 {
				if s&b != 0 {
					next |= linzStep1(b, in, out)
				}
			}
			if next == 0 {
				return false, s
			}
			if next&sPending != 0 {
				next |= sAllocated
			}
			return true, next
		},
		Equal:             func(a, b any) bool { return a.(linzSet) == b.(linzSet) },
		DescribeOperation: func(input, output any) string { return linzDescribe(input.(linzIn), output.(linzOut)) },
		DescribeState:     func(st any) string { return st.(linzSet).String() },
		DescribeOperationMetadata: func(m any) string {
			if m == nil {
				return ""
			}
			return fmt.Sprint(m)
		},
	}
}

func linzDescribe(in linzIn, out linzOut) string {
	s := fmt.Sprintf("%s %s → ", in.Op, in.Claim)
	switch {
	case out.Unknown:
		s += "? (" + out.Note + ")"
	default:
		s += strconv.Itoa(out.Status)
		if out.State != "" {
			s += " " + string(out.State)
		}
		if out.Note != "" {
			s += " (" + out.Note + ")"
		}
	}
	return s
}

// linzServer is one `gpuslice serve` process.
type linzServer struct {
	cmd  *exec.Cmd
	url  string
	log  string
	done chan struct{} // closed once the process is reaped
}

// linzRun is one test run: the server, the clients and the history.
type linzRun struct {
	t       *testing.T
	cfg     linzConfig
	bin     string
	dataDir string
	logDir  string
	start   time.Time
	client  *http.Client

	base  atomic.Pointer[string] // the current server's URL
	admin string
	// tenants' tokens by name; fixed after setup.
	tenants map[string]string
	nodes   map[string]api.RegisterRequest

	srvMu sync.Mutex
	srv   *linzServer
	gens  atomic.Int64 // servers started
	kills atomic.Int64

	mu         sync.Mutex
	ops        []porcupine.Operation
	owner      map[string]string // claim id → tenant
	stats      map[string]int
	violations []string // invariants broken on list snapshots

	// live holds the claims of earlier bursts last seen live, order them
	// oldest first; only the goroutine running the rounds uses them.
	live  map[string]api.ClaimState
	order []string
}

const (
	// linzLiveBound is about how many claims of earlier bursts stay live
	// (then the oldest are released): with the claims of the burst itself
	// a little more than the fleet's 8 GPUs hold, so some wait and a
	// release often hands a GPU to a queued claim.
	linzLiveBound   = 10
	linzQuotaTenant = "beta"
	linzQuotaMiB    = 16000
	linzQuotaAsk    = 4000
)

func (r *linzRun) now() int64 { return int64(time.Since(r.start)) }

func (r *linzRun) count(key string) {
	r.mu.Lock()
	r.stats[key]++
	r.mu.Unlock()
}

func (r *linzRun) violation(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.violations) < 20 {
		r.violations = append(r.violations, fmt.Sprintf("%8.3fs ", time.Since(r.start).Seconds())+fmt.Sprintf(format, args...))
	}
}

var linzURL = regexp.MustCompile(`gpuslice serving.* url=(\S+)`)

// startServer runs `gpuslice serve` on the data directory and waits for
// the URL it logs.
func (r *linzRun) startServer() error {
	r.srvMu.Lock()
	defer r.srvMu.Unlock()
	gen := r.gens.Add(1)
	logPath := filepath.Join(r.logDir, fmt.Sprintf("serve-%d.log", gen))
	f, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(r.bin, "serve", "--no-agent", "--store", "sqlite", "--data-dir", r.dataDir,
		"--listen", "127.0.0.1:0", "--simulate", "l4x4")
	cmd.Stdout = f
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	s := &linzServer{cmd: cmd, log: logPath, done: make(chan struct{})}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(f, line)
			if m := linzURL.FindStringSubmatch(line); m != nil {
				select {
				case urls <- strings.Trim(m[1], `"`):
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		_ = cmd.Wait()
		f.Close()
		close(s.done)
	}()
	select {
	case u := <-urls:
		s.url = u
	case <-s.done:
		return fmt.Errorf("gpuslice serve exited before serving:\n%s", linzTail(logPath))
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		return fmt.Errorf("gpuslice serve did not log its URL in 30s:\n%s", linzTail(logPath))
	}
	r.srv = s
	r.base.Store(&s.url)
	return nil
}

// kill SIGKILLs the server and waits until it is gone.
func (r *linzRun) kill() error {
	r.srvMu.Lock()
	defer r.srvMu.Unlock()
	s := r.srv
	if s == nil {
		return nil
	}
	r.srv = nil
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		return fmt.Errorf("gpuslice serve (pid %d) still there 30s after SIGKILL", s.cmd.Process.Pid)
	}
	r.kills.Add(1)
	return nil
}

// restart kills the server, if one runs, and starts another on the same
// data directory.
func (r *linzRun) restart() error {
	if err := r.kill(); err != nil {
		return err
	}
	return r.startServer()
}

func (r *linzRun) killQuietly() {
	r.srvMu.Lock()
	s := r.srv
	r.srv = nil
	r.srvMu.Unlock()
	if s != nil {
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
		}
	}
}

func linzTail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// send is one request to the current server, bounded in time.
func (r *linzRun) send(token, method, path string, body any) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.reqTimeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, *r.base.Load()+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, err
	}
	return resp.StatusCode, data, nil
}

// must sends a request outside the history (setup) and wants status want.
func (r *linzRun) must(token, method, path string, body any, want int, out any) {
	r.t.Helper()
	code, data, err := r.send(token, method, path, body)
	if err != nil || code != want {
		r.t.Fatalf("%s %s: %d %v: %s", method, path, code, err, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			r.t.Fatalf("%s %s: %v: %s", method, path, err, data)
		}
	}
}

// setup makes the tenants and their tokens and registers two simulated
// nodes of four L4s each.
func (r *linzRun) setup() {
	t := r.t
	tok, err := os.ReadFile(filepath.Join(r.dataDir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	r.admin = strings.TrimSpace(string(tok))
	r.tenants = map[string]string{}
	for name, quota := range map[string]int64{"acme": 0, linzQuotaTenant: linzQuotaMiB} {
		// Claims ask for priority 0 or 1 (an admin lets them).
		r.must(r.admin, "PUT", "/v1/tenants/"+name, api.Tenant{MemoryMiB: quota, MaxPriority: 1}, 200, nil)
		var tk api.Token
		r.must(r.admin, "POST", "/v1/tokens", api.CreateTokenRequest{Role: api.RoleTenant, Tenant: name}, 201, &tk)
		r.tenants[name] = tk.Secret
	}
	spec, err := fake.Preset("l4x4")
	if err != nil {
		t.Fatal(err)
	}
	r.nodes = map[string]api.RegisterRequest{}
	for i, name := range []string{"linz-a", "linz-b"} {
		m, err := fake.New(spec, fake.WithSeed(int64(7001+i)))
		if err != nil {
			t.Fatal(err)
		}
		gpus, err := m.GPUs(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		inv, err := agent.Inventory(name, gpus)
		if err != nil {
			t.Fatal(err)
		}
		req := api.RegisterRequest{Inventory: inv, Simulated: true, Driver: m.Info().DriverVersion}
		r.must(r.admin, "PUT", "/v1/nodes/"+name, req, 200, nil)
		r.nodes[name] = req
	}
}

// nodeLoop re-registers a node with the same inventory every 50 ms and
// heartbeats both every 200 ms, through kills and restarts.
func (r *linzRun) nodeLoop(ctx context.Context) {
	names := slices.Sorted(maps.Keys(r.nodes))
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		name := names[i%len(names)]
		code, body, err := r.send(r.admin, "PUT", "/v1/nodes/"+name, r.nodes[name])
		r.noteSide("register", code, body, err)
		if i%4 == 0 {
			for _, n := range names {
				code, body, err := r.send(r.admin, "POST", "/v1/nodes/"+n+"/heartbeat", api.HeartbeatRequest{})
				r.noteSide("heartbeat", code, body, err)
			}
		}
	}
}

func (r *linzRun) noteSide(what string, code int, body []byte, err error) {
	switch {
	case err != nil:
		r.count(what + " error")
	case code == http.StatusOK:
		r.count(what + " 200")
	default:
		r.count(fmt.Sprintf("%s %d", what, code))
		if code < 500 {
			r.violation("%s answered %d: %.200s", what, code, body)
		}
	}
}

// watchLoop lists the live claims every 25 ms (one store snapshot each)
// and checks what must hold in every committed state. Every claim in the
// list is also a read of its state within the list's call and return, so
// it goes into the history too (as a GET of client number workers): a
// running claim seen allocated again, or a released one seen live, is
// caught even when no worker read it at that moment.
func (r *linzRun) watchLoop(ctx context.Context) {
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		call, gen := r.now(), r.gens.Load()
		code, body, err := r.send(r.admin, "GET", "/v1/claims?state=pending&state=allocated&state=running&limit=5000", nil)
		ret := r.now()
		if err != nil || code != http.StatusOK {
			continue
		}
		var cs []api.Claim
		if err := json.Unmarshal(body, &cs); err != nil {
			r.violation("live claims list: %v", err)
			continue
		}
		r.count("snapshots")
		for _, v := range linzInvariants(cs) {
			r.violation("snapshot: %s", v)
		}
		for _, c := range cs {
			r.mu.Lock()
			_, known := r.owner[c.ID] // else its create's answer was lost
			r.mu.Unlock()
			if known {
				r.record(r.cfg.workers, linzIn{Op: opGet, Claim: c.ID}, linzOut{Status: http.StatusOK, State: c.State, Note: "list"}, call, ret, gen)
			}
		}
	}
}

// linzInvariants checks a consistent set of live claims: no GPU one claim
// holds exclusively is held by another, and the quota tenant holds at most
// its quota (a timeslice claim is charged the larger of what it asked and
// what it was given, a pending one what it asks).
func linzInvariants(live []api.Claim) []string {
	var out []string
	type holder struct {
		claim string
		mode  alloc.Mode
	}
	byGPU := map[string][]holder{}
	var quota int64
	var quotaClaims []string
	for _, c := range live {
		if !(c.State == api.Pending || c.State == api.Allocated || c.State == api.Running) {
			continue
		}
		if c.Tenant == linzQuotaTenant {
			var asked, given int64
			for _, rq := range c.Spec.Requests {
				asked += rq.MemoryMiB * int64(max(rq.Count, 1))
			}
			if c.State != api.Pending && c.Allocation != nil {
				for _, d := range c.Allocation.Devices {
					given += d.MemoryMiB
				}
			}
			quota += max(asked, given)
			quotaClaims = append(quotaClaims, c.ID+"("+string(c.State)+")")
		}
		if c.State == api.Pending || c.Allocation == nil {
			continue
		}
		for _, d := range c.Allocation.Devices {
			byGPU[d.GPU] = append(byGPU[d.GPU], holder{c.ID, d.Mode})
		}
	}
	for _, gpu := range slices.Sorted(maps.Keys(byGPU)) {
		hs := byGPU[gpu]
		if len(hs) < 2 {
			continue
		}
		for _, h := range hs {
			if h.mode == alloc.Exclusive {
				out = append(out, fmt.Sprintf("GPU %s is held exclusively by %s and also by %v", gpu, h.claim, hs))
				break
			}
		}
	}
	if quota > linzQuotaMiB {
		out = append(out, fmt.Sprintf("tenant %s holds %d MiB over its %d MiB quota: %v", linzQuotaTenant, quota, linzQuotaMiB, quotaClaims))
	}
	return out
}

// record adds an operation to the history. An unknown outcome's return
// is set to the end of the history when it is checked.
func (r *linzRun) record(client int, in linzIn, out linzOut, call, ret, gen int64) {
	if out.Unknown {
		ret = -1
	}
	r.mu.Lock()
	r.ops = append(r.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret,
		Metadata: fmt.Sprintf("server %d", gen)})
	r.mu.Unlock()
}

// classify turns an answer into an output; dropped: the request never
// reached a server (connection refused while it was down), so it did
// nothing and is left out.
func (r *linzRun) classify(what string, code int, data []byte, err error) (out linzOut, dropped bool) {
	switch {
	case err != nil && errors.Is(err, syscall.ECONNREFUSED):
		r.count("refused")
		return out, true
	case err != nil && errors.Is(err, context.DeadlineExceeded):
		// Unknown too; counted apart, since a stalled server shows here.
		r.count(what + " timed out")
		return linzOut{Unknown: true, Note: "timed out"}, false
	case err != nil:
		r.count(what + " no answer")
		msg := err.Error()
		if i := strings.LastIndex(msg, ": "); i >= 0 {
			msg = msg[i+2:]
		}
		return linzOut{Unknown: true, Note: msg}, false
	case code >= 500:
		r.count(fmt.Sprintf("%s %d", what, code))
		return linzOut{Unknown: true, Note: fmt.Sprintf("%d %.120s", code, data)}, false
	}
	out.Status = code
	switch code {
	case http.StatusOK, http.StatusCreated:
		var c api.Claim
		if json.Unmarshal(data, &c) == nil {
			out.State = c.State
		} else {
			out.Note = fmt.Sprintf("%.120s", data)
		}
	case http.StatusConflict:
		var e struct { // api.Error's state
			State string `json:"state"`
		}
		if json.Unmarshal(data, &e) == nil {
			out.State = api.ClaimState(e.State)
		}
	default:
		out.Note = fmt.Sprintf("%.160s", data)
	}
	r.count(fmt.Sprintf("%s %d %s", what, code, out.State))
	return out, false
}

// linzClaimReq is a claim for the tenant: acme mostly asks for whole L4s
// (exclusive, scarce: 8 of them) and sometimes 6000 MiB time-sliced; the
// quota tenant asks for 4000 MiB time-sliced.
func linzClaimReq(rng *rand.Rand, tenant string) api.CreateClaimRequest {
	rq := alloc.Request{Name: "gpu", Mode: alloc.Exclusive}
	switch {
	case tenant == linzQuotaTenant:
		rq.Mode, rq.MemoryMiB = alloc.TimeSlice, linzQuotaAsk
	case rng.IntN(10) < 3:
		rq.Mode, rq.MemoryMiB = alloc.TimeSlice, 6000
	}
	return api.CreateClaimRequest{ClaimSpec: api.ClaimSpec{Requests: []alloc.Request{rq}, Priority: rng.IntN(2)}}
}

// create posts a claim and records it if one was made.
func (r *linzRun) create(client int, tenant string, req api.CreateClaimRequest) (string, linzOut) {
	call, gen := r.now(), r.gens.Load()
	code, data, err := r.send(r.tenants[tenant], "POST", "/v1/claims", req)
	ret := r.now()
	out, dropped := r.classify("create", code, data, err)
	if dropped || out.Unknown || code != http.StatusCreated {
		// Refused (403 quota, 429 queue) or unknown: no id to check it by.
		if !dropped && !out.Unknown && code != http.StatusForbidden && code != http.StatusTooManyRequests {
			r.violation("create answered %d: %.200s", code, data)
		}
		return "", out
	}
	var c api.Claim
	if err := json.Unmarshal(data, &c); err != nil || c.ID == "" {
		r.violation("create answered 201 without a claim: %.200s", data)
		return "", out
	}
	r.mu.Lock()
	r.owner[c.ID] = tenant
	r.mu.Unlock()
	r.record(client, linzIn{Op: opCreate, Claim: c.ID}, out, call, ret, gen)
	return c.ID, out
}

// act sends one transition or read of a claim and records it.
func (r *linzRun) act(client int, op linzOp, id string) linzOut {
	method, path := "GET", "/v1/claims/"+id
	switch op {
	case opRelease:
		method = "DELETE"
	case opRunning:
		method, path = "POST", path+"/running"
	case opFailed:
		method, path = "POST", path+"/failed?reason=linz"
	}
	r.mu.Lock()
	token := r.tenants[r.owner[id]]
	r.mu.Unlock()
	call, gen := r.now(), r.gens.Load()
	code, data, err := r.send(token, method, path, nil)
	ret := r.now()
	out, dropped := r.classify(op.String(), code, data, err)
	if !dropped {
		r.record(client, linzIn{Op: op, Claim: id}, out, call, ret, gen)
	}
	return out
}

// round runs bursts until its time is up; one round (the second, or the
// only one) also has the server killed and restarted in its middle.
func (r *linzRun) round(round int, rng *rand.Rand) error {
	end := time.Now().Add(r.cfg.duration)
	var midKill sync.WaitGroup
	var midErr error
	if round == min(1, r.cfg.rounds-1) {
		midKill.Add(1)
		at := r.cfg.duration/3 + time.Duration(rng.Int64N(int64(r.cfg.duration/3)))
		go func() {
			defer midKill.Done()
			time.Sleep(at)
			midErr = r.restart()
		}()
	}
	bursts := 0
	for time.Now().Before(end) {
		bursts++
		r.burst(rng)
	}
	midKill.Wait()
	r.t.Logf("round %d: %d bursts, %d claims live", round, bursts, len(r.live))
	return midErr
}

// burst creates one to three claims at once, then every worker fires one
// to three operations at the same moment, most at the first new claim
// (the race: DELETEs, POST running and POST failed on one claim
// together), the rest at the other new claims and at claims of earlier
// bursts still live (pending ones racing the scheduler). Then every target
// is read once more.
func (r *linzRun) burst(rng *rand.Rand) {
	w, live, order := r.cfg.workers, r.live, &r.order
	fresh := make([]string, 1+rng.IntN(3))
	reqs := make([]api.CreateClaimRequest, len(fresh))
	tenants := make([]string, len(fresh))
	for i := range fresh {
		tenants[i] = "acme"
		if rng.IntN(4) == 0 {
			tenants[i] = linzQuotaTenant
		}
		reqs[i] = linzClaimReq(rng, tenants[i])
	}
	var wg sync.WaitGroup
	for i := range fresh {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fresh[i], _ = r.create(i, tenants[i], reqs[i])
		}()
	}
	wg.Wait()
	fresh = slices.DeleteFunc(fresh, func(id string) bool { return id == "" })
	targets := slices.Clone(fresh)
	// Up to three claims of earlier bursts; the oldest first once many
	// are live, so the queue stays short.
	*order = slices.DeleteFunc(*order, func(id string) bool { _, ok := live[id]; return !ok })
	for k := 0; k < 3 && len(*order) > 0; k++ {
		var id string
		if len(*order) > linzLiveBound {
			id = (*order)[0]
		} else {
			id = (*order)[rng.IntN(len(*order))]
		}
		if !slices.Contains(targets, id) {
			targets = append(targets, id)
		}
	}
	if len(targets) == 0 {
		time.Sleep(5 * time.Millisecond) // the server is down, or everything was refused
		return
	}
	type step struct {
		op linzOp
		id string
	}
	// Every worker's first operation hits the first new claim, with the
	// configured mix; its next ones (up to two) hit any target, mostly
	// reading and starting, so claims stay live across bursts and the
	// fleet stays full.
	gentle := linzGentle
	if r.cfg.mix.failed == 0 { // GPUSLICE_LINZ_MIX=…,failed=0: no POST failed at all
		gentle.failed = 0
	}
	plans := make([][]step, w)
	for i := range plans {
		plans[i] = append(plans[i], step{r.cfg.mix.pick(rng), targets[0]})
		for range rng.IntN(3) {
			plans[i] = append(plans[i], step{gentle.pick(rng), targets[rng.IntN(len(targets))]})
		}
	}
	gate := make(chan struct{})
	for i := range plans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			for _, s := range plans[i] {
				r.act(i, s.op, s.id)
			}
		}()
	}
	close(gate)
	wg.Wait()
	// Read every target once more (old ones past the queue's bound are
	// released instead), and remember which are still live.
	seen := make([]linzOut, len(targets))
	for i, id := range targets {
		op := opGet
		if !slices.Contains(fresh, id) && len(*order) > linzLiveBound {
			op = opRelease
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			seen[i] = r.act(i%w, op, id)
		}()
	}
	wg.Wait()
	for i, id := range targets {
		st := seen[i].State
		switch {
		case seen[i].Unknown || seen[i].Status == 0:
			// keep what we knew
			if _, ok := live[id]; !ok && slices.Contains(fresh, id) {
				live[id] = api.Pending
				*order = append(*order, id)
			}
		case st == api.Pending || st == api.Allocated || st == api.Running:
			if _, ok := live[id]; !ok {
				*order = append(*order, id)
			}
			live[id] = st
		default:
			delete(live, id)
		}
	}
}

// audit reads every claim from a fresh server (recorded: checked with the
// history) and checks the invariants on the full list.
func (r *linzRun) audit() {
	r.mu.Lock()
	ids := make([]string, 0, len(r.owner))
	for id := range r.owner {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	sort.Strings(ids)
	work := make(chan string)
	var wg sync.WaitGroup
	for i := range r.cfg.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				r.act(i, opGet, id)
			}
		}()
	}
	for _, id := range ids {
		work <- id
	}
	close(work)
	wg.Wait()
	var all []api.Claim
	for after := ""; ; {
		path := "/v1/claims?limit=5000"
		if after != "" {
			path += "&after=" + after
		}
		code, data, err := r.send(r.admin, "GET", path, nil)
		if err != nil || code != http.StatusOK {
			r.t.Errorf("listing the claims after the last restart: %d %v %.200s", code, err, data)
			return
		}
		var page []api.Claim
		if err := json.Unmarshal(data, &page); err != nil {
			r.t.Errorf("listing the claims: %v", err)
			return
		}
		all = append(all, page...)
		// A full page may have a next one (a server without pagination
		// answers everything at once).
		after = ""
		if len(page) == 5000 {
			after = strconv.FormatInt(page[len(page)-1].Seq, 10)
		}
		if after == "" {
			break
		}
	}
	r.mu.Lock()
	missing := 0
	byID := map[string]bool{}
	for _, c := range all {
		byID[c.ID] = true
	}
	for id := range r.owner {
		if !byID[id] {
			missing++
		}
	}
	r.mu.Unlock()
	if missing > 0 {
		r.violation("%d acknowledged claims missing from the list after the restart", missing)
	}
	for _, v := range linzInvariants(all) {
		r.violation("final list: %s", v)
	}
}

// checkHistory checks the recorded history with Porcupine and, on a
// violation, writes the visualization and prints the histories of the
// claims that broke the model.
func (r *linzRun) checkHistory() (illegalClaims []string) {
	t := r.t
	r.mu.Lock()
	ops := slices.Clone(r.ops)
	r.mu.Unlock()
	end := r.now() + 1
	for i := range ops {
		if ops[i].Return < 0 {
			ops[i].Return = end
		}
	}
	model := linzModel()
	// Each claim's operations are checked on their own (the model's
	// partition), in parallel, within one deadline for the whole history:
	// one pass says which claims broke the model — the detail the failure
	// message needs — and an illegal claim's exhaustive search is paid once.
	parts := model.Partition(ops)
	one := model
	one.Partition = nil
	results := make([]porcupine.CheckResult, len(parts))
	deadline := time.Now().Add(r.cfg.checkTimeout)
	work := make(chan int)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				results[i] = porcupine.Unknown
				if left := time.Until(deadline); left > 0 {
					results[i] = porcupine.CheckOperationsTimeout(one, parts[i], left)
				}
			}
		}()
	}
	for i := range parts {
		work <- i
	}
	close(work)
	wg.Wait()
	var illegal [][]porcupine.Operation
	undecided := 0
	symptoms := map[string]int{}
	for i, res := range results {
		switch res {
		case porcupine.Illegal:
			illegal = append(illegal, parts[i])
			for _, s := range linzSymptoms(parts[i]) {
				symptoms[s]++
			}
		case porcupine.Unknown:
			undecided++
		}
	}
	if undecided > 0 {
		t.Logf("linearizability: Porcupine did not decide %d of %d claims within %v: they are neither proven nor refuted",
			undecided, len(parts), r.cfg.checkTimeout)
	}
	if len(illegal) > 0 {
		// Shown: the shortest history of each symptom (they read best), at
		// most five.
		slices.SortStableFunc(illegal, func(a, b []porcupine.Operation) int { return len(a) - len(b) })
		var bad []string
		shownSymptom := map[string]bool{}
		for _, part := range illegal {
			fresh := false
			for _, s := range linzSymptoms(part) {
				fresh = fresh || !shownSymptom[s]
				shownSymptom[s] = true
			}
			if fresh && len(bad) < 5 {
				bad = append(bad, linzHistory(part))
				illegalClaims = append(illegalClaims, part[0].Input.(linzIn).Claim)
			}
		}
		dir := os.Getenv("GPUSLICE_LINZ_OUT")
		var err error
		if dir == "" {
			dir, err = os.MkdirTemp("", "gpuslice-linz-")
		} else {
			err = os.MkdirAll(dir, 0o755)
		}
		// The visualization shows the (up to 50 shortest) claims that broke
		// the model: all of them would make a page too big to read.
		var shown []porcupine.Operation
		for _, part := range illegal[:min(50, len(illegal))] {
			shown = append(shown, part...)
		}
		path := filepath.Join(dir, "linearizability.html")
		if err == nil {
			_, info := porcupine.CheckOperationsVerbose(model, shown, r.cfg.checkTimeout)
			err = porcupine.VisualizePath(model, info, path)
		}
		if err != nil {
			path = "(not written: " + err.Error() + ")"
		}
		t.Errorf("linearizability: the claims API is not linearizable: %d of %d claims have no legal order of their operations "+
			"(seed %d); symptoms (claims showing each): %s; visualization: %s\nthe shortest of each symptom:\n%s",
			len(illegal), len(parts), r.cfg.seed, linzSortedStats(symptoms), path, strings.Join(bad, "\n"))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range r.violations {
		t.Errorf("invariant: %s", v)
	}
	if len(illegalClaims) > 0 || len(r.violations) > 0 {
		t.Logf("warnings and errors the servers logged:\n%s", r.serverWarnings())
	}
	return illegalClaims
}

// linzSymptoms names what a claim's history shows that the contract
// rules out, comparing answers in real-time order (a returned before b
// was called), for the failure summary; the checker is what decides.
func linzSymptoms(part []porcupine.Operation) []string {
	seen := map[string]bool{}
	// A claim only moves forward: pending → allocated → running → final,
	// and a final state stays.
	rank := map[api.ClaimState]int{api.Pending: 1, api.Allocated: 2, api.Running: 3, api.Released: 4, api.Failed: 4}
	ack := func(in linzIn, out linzOut) bool {
		return !out.Unknown && (out.Status == http.StatusOK || out.Status == http.StatusCreated) && in.Op != opGet
	}
	for _, a := range part {
		ia, oa := a.Input.(linzIn), a.Output.(linzOut)
		if oa.Unknown || rank[oa.State] == 0 {
			continue
		}
		if (ia.Op == opRelease && oa.Status == http.StatusOK && oa.State != api.Released) ||
			(ia.Op == opFailed && oa.Status == http.StatusOK && oa.State != api.Failed) {
			seen[fmt.Sprintf("%s answered 200 %s", ia.Op, oa.State)] = true
		}
		how := "read"
		if ack(ia, oa) {
			how = "acknowledged"
		}
		for _, b := range part {
			ib, ob := b.Input.(linzIn), b.Output.(linzOut)
			if ob.Unknown || rank[ob.State] == 0 || b.Call <= a.Return {
				continue
			}
			switch {
			case rank[ob.State] < rank[oa.State]:
				seen[fmt.Sprintf("%s after %s was %s", ob.State, oa.State, how)] = true
			case rank[oa.State] == 4 && ob.State != oa.State:
				verb := "read"
				if ack(ib, ob) {
					verb = "acknowledged"
				}
				seen[fmt.Sprintf("%s %s after %s was %s", ob.State, verb, oa.State, how)] = true
			}
		}
	}
	if len(seen) == 0 {
		return []string{"other"}
	}
	return slices.Sorted(maps.Keys(seen))
}

// linzHistory prints one claim's operations in call order, times in ms
// from the start of the run.
func linzHistory(part []porcupine.Operation) string {
	part = slices.Clone(part)
	slices.SortFunc(part, func(a, b porcupine.Operation) int { return int(a.Call - b.Call) })
	var b strings.Builder
	fmt.Fprintf(&b, "claim %s:\n", part[0].Input.(linzIn).Claim)
	ms := func(ns int64) string { return fmt.Sprintf("%.3f", float64(ns)/1e6) }
	for _, op := range part {
		ret := ms(op.Return)
		if op.Output.(linzOut).Unknown {
			ret = "…"
		}
		fmt.Fprintf(&b, "  [%10s, %10s] ms  worker %2d  %-7s → %s  (%v)\n", ms(op.Call), ret, op.ClientId,
			op.Input.(linzIn).Op, strings.SplitN(linzDescribe(op.Input.(linzIn), op.Output.(linzOut)), "→ ", 2)[1], op.Metadata)
	}
	return b.String()
}

// checkStore opens the killed server's database in-process: Server.Check
// must hold (the allocator's rules; store and scheduler agree) and no two
// live claims share a GPU one of them holds exclusively.
// serverWarnings is the WARN and ERROR lines of the servers' logs.
func (r *linzRun) serverWarnings() string {
	var b strings.Builder
	n := 0
	for gen := int64(1); gen <= r.gens.Load(); gen++ {
		data, _ := os.ReadFile(filepath.Join(r.logDir, fmt.Sprintf("serve-%d.log", gen)))
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
				if n++; n <= 20 {
					fmt.Fprintf(&b, "  server %d: %.400s\n", gen, line)
				}
			}
		}
	}
	if n > 20 {
		fmt.Fprintf(&b, "  … %d lines in all\n", n)
	}
	return b.String()
}

func (r *linzRun) checkStore(illegal []string) {
	t := r.t
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := state.OpenSQLite(filepath.Join(r.dataDir, "gpuslice.db"), state.SQLiteOptions{})
	if err != nil {
		t.Fatalf("opening the database: %v", err)
	}
	defer db.Close()
	srv, err := server.New(ctx, server.Config{Store: db, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Policy: alloc.Policy{Placement: "binpack", AllowModeSwitch: true}, Simulated: true})
	if err != nil {
		t.Fatalf("a server over the final database: %v", err)
	}
	if err := srv.Check(ctx); err != nil {
		t.Errorf("Server.Check on the final database: %v", err)
	}
	var live []api.Claim
	err = db.View(ctx, func(tx state.Tx) error {
		var err error
		live, err = tx.ListClaims(state.ClaimFilter{States: []api.ClaimState{api.Pending, api.Allocated, api.Running}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range linzInvariants(live) {
		t.Errorf("final database: %s", v)
	}
	if len(illegal) == 0 {
		return
	}
	// The stored events of the claims that broke the model say what the
	// server did to them.
	var evs []api.Event
	err = db.View(ctx, func(tx state.Tx) error {
		for since := int64(0); ; {
			page, err := tx.EventsSince(since, 5000)
			if err != nil || len(page) == 0 {
				return err
			}
			evs = append(evs, page...)
			since = page[len(page)-1].Seq
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, id := range illegal {
		fmt.Fprintf(&b, "claim %s:\n", id)
		for _, e := range evs {
			if e.Claim == id {
				fmt.Fprintf(&b, "  #%d %s %s: %.300s\n", e.Seq, e.Time.Format("15:04:05.000"), e.Kind, e.Message)
			}
		}
	}
	t.Logf("stored events of the claims above:\n%s", b.String())
}

func linzSortedStats(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s: %d", k, m[k])
	}
	return b.String()
}
