package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/testkit"
)

// TestREADMEWalk walks the README as a new user would: it builds the
// binary with the README's own command, starts `./gpuslice serve` on a
// fresh home directory (simulated GPUs), and runs every command of every
// ```sh block in order with sh, checking that each exits 0 and that its
// output shows what the README says next to it. A command the walk does
// not know, or one it knows that the README no longer has, fails the test:
// the README and this walk change together.
//
// The pages that go on with the README's serve (servedDocs) are walked in
// order after it, on that serve. Every other page neither starts nor
// talks to a server: each is walked from a fresh directory of its own (its
// own home, no server to reach), beside the README, once the binary is
// built.
//
// Two substitutions are made, both about where things are rather than
// what they do: serve listens on a free port (GPUSLICE_LISTEN, with
// GPUSLICE_SERVER for the CLI, and the curl line's localhost:7777), and
// the agent line gets the secret the line before it printed. The build
// line is the command testkit.GpusliceBinary runs: the walk takes the
// binary it built once for every test that runs it (GPUSLICE_BIN from
// scripts/test.sh, or once per test process).
func TestREADMEWalk(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs the README")
	}
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var served []readmeLine
	var offline [][]readmeLine // a page each
	for _, f := range walkedDocs {
		lines := readmeCommands(t, root, f)
		for _, l := range lines {
			seen[l.raw] = true
			if _, ok := readmeSteps[l.raw]; !ok {
				t.Errorf("%s: the walk does not know %q: add it to readmeSteps with what its output must show", l.pos(), l.raw)
			}
		}
		if servedDocs[f] {
			served = append(served, lines...)
		} else if len(lines) > 0 {
			offline = append(offline, lines)
		}
	}
	for raw := range readmeSteps {
		if !seen[raw] {
			t.Errorf("the walk knows %q, which neither the README nor docs/ has any more: remove it from readmeSteps", raw)
		}
	}

	tmp := t.TempDir()
	// newWalk makes a working directory (with the repository's examples)
	// and a home directory for a walk; server is where its CLI reaches.
	newWalk := func(t *testing.T, name, listen, server string) *walk {
		work, home := filepath.Join(tmp, name, "work"), filepath.Join(tmp, name, "home")
		for _, d := range []string{work, home} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink(filepath.Join(root, "examples"), filepath.Join(work, "examples")); err != nil {
			t.Fatal(err)
		}
		env := []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "GPUSLICE_LISTEN=" + listen, "GPUSLICE_SERVER=" + server}
		return &walk{t: t, work: work, env: env, addr: listen}
	}

	// The README's walk builds the binary; the other pages wait for it.
	built, servedDone := make(chan struct{}), make(chan struct{})
	var bin string
	t.Run("README", func(t *testing.T) {
		t.Parallel()
		defer close(servedDone)
		addr := freePort(t)
		w := newWalk(t, "readme", addr, "http://"+addr)
		w.built = func(path string) { bin = path; close(built) }
		defer w.stop()
		w.walk(served)
	})
	for _, lines := range offline {
		t.Run(lines[0].file, func(t *testing.T) {
			t.Parallel()
			select {
			case <-built:
			case <-servedDone:
				select {
				case <-built:
				default:
					t.Fatal("the README's walk ended before it built the binary")
				}
			}
			// No server: a command of this page that needs one fails.
			w := newWalk(t, strings.TrimSuffix(filepath.Base(lines[0].file), ".md"), "127.0.0.1:1", "http://127.0.0.1:1")
			if err := os.Symlink(bin, filepath.Join(w.work, "gpuslice")); err != nil {
				t.Fatal(err)
			}
			defer w.stop()
			w.walk(lines)
		})
	}
}

// walk runs lines in order, each as its step in readmeSteps says.
func (w *walk) walk(lines []readmeLine) {
	t := w.t
	for _, l := range lines {
		step, ok := readmeSteps[l.raw]
		if !ok {
			continue // reported by TestREADMEWalk
		}
		if step.skip != "" {
			t.Logf("%s: skipped %q: %s", l.pos(), l.cmd, step.skip)
			continue
		}
		t.Logf("%s: %s", l.pos(), l.cmd)
		cmd := l.cmd
		if step.rewrite != nil {
			cmd = step.rewrite(w, cmd)
		}
		if step.background {
			w.start(l, cmd, step)
			continue
		}
		if step.before != nil {
			step.before(w)
		}
		out := w.run(l, cmd)
		for _, want := range step.want {
			if !strings.Contains(out, want) {
				t.Errorf("%s: %s: output lacks %q:\n%s", l.pos(), l.cmd, want, out)
			}
		}
		if step.check != nil {
			if err := step.check(w, out); err != nil {
				t.Errorf("%s: %s: %v\n%s", l.pos(), l.cmd, err, out)
			}
		}
	}
}

// servedDocs are the pages that go on with the README's serve, walked in
// order after the README on it; the other pages of walkedDocs need no
// server.
var servedDocs = map[string]bool{
	"README.md":           true,
	"docs/tour.md":        true,
	"docs/hosts.md":       true,
	"docs/trust-model.md": true,
	"docs/services.md":    true,
}

// walkedDocs are the files whose ```sh blocks the walk runs, in order:
// the README's tour first (it builds the binary and starts serve), then
// the docs that go on from it. TestEveryDocIsWalked keeps the list whole.
var walkedDocs = []string{
	"README.md",
	"docs/tour.md",
	"docs/plan-and-render.md",
	"docs/advise.md",
	"docs/catalog.md",
	"docs/hosts.md",
	"docs/trust-model.md",
	"docs/services.md",
	"docs/kubernetes.md",
	"docs/gpuslice-scheduler.md",
	"docs/kubernetes-autoscaling.md",
	"docs/dashboard.md",
	"docs/sandbox.md",
	"docs/kubernetes-versions.md",
}

// TestEveryDocIsWalked fails when a page under docs/ has a ```sh block
// the walk does not run: every command a page tells a user to type is
// run by TestREADMEWalk (or skipped there with the reason).
func TestEveryDocIsWalked(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	walked := map[string]bool{}
	for _, f := range walkedDocs {
		walked[f] = true
	}
	for _, p := range pages {
		rel, _ := filepath.Rel(root, p)
		if !walked[rel] && len(readmeCommands(t, root, rel)) > 0 {
			t.Errorf("%s has ```sh commands the README walk does not run: add it to walkedDocs", rel)
		}
	}
}

// readmeLine is one command of a ```sh block.
type readmeLine struct {
	file string // relative to the repository root
	line int
	raw  string // the line as written, trimmed
	cmd  string // without its comment
}

func (l readmeLine) pos() string { return fmt.Sprintf("%s:%d", l.file, l.line) }

// readmeCommands returns every command line of a page's ```sh blocks.
func readmeCommands(t *testing.T, root, file string) []readmeLine {
	t.Helper()
	f, err := os.Open(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []readmeLine
	in := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		text := sc.Text()
		switch {
		case strings.HasPrefix(text, "```sh"):
			in = true
			continue
		case strings.HasPrefix(text, "```"):
			in = false
			continue
		case !in:
			continue
		}
		cmd := strings.TrimSpace(stripShellComment(text))
		if cmd == "" {
			continue
		}
		out = append(out, readmeLine{file: file, line: n, raw: strings.TrimSpace(text), cmd: cmd})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// stripShellComment cuts a line at a '#' that starts a shell comment: at
// the start of the line or after a blank, outside quotes.
func stripShellComment(s string) string {
	var quote rune
	prevBlank := true
	for i, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && prevBlank:
			return s[:i]
		}
		prevBlank = r == ' ' || r == '\t'
	}
	return s
}

// readmeStep is what the walk does with one README line.
type readmeStep struct {
	skip       string   // why the walk does not run it
	background bool     // starts a long-running process (serve, agent)
	want       []string // substrings the output must contain
	check      func(w *walk, out string) error
	rewrite    func(w *walk, cmd string) string
	before     func(w *walk)
	ready      func(w *walk) error // for background steps: when it is up
}

// walk is the state of one README walk.
type walk struct {
	t          *testing.T
	work, addr string
	env        []string
	procs      []*exec.Cmd
	agent      *exec.Cmd
	agentToken string
	built      func(path string) // called once the build line made the binary
}

func (w *walk) run(l readmeLine, cmd string) string {
	w.t.Helper()
	if cmd == readmeBuild {
		// testkit.GpusliceBinary runs this very command in the
		// repository root, once per run (scripts/test.sh, GPUSLICE_BIN)
		// or once per test process, for every test that runs the binary.
		bin := filepath.Join(w.work, "gpuslice")
		if err := os.Symlink(testkit.GpusliceBinary(w.t), bin); err != nil {
			w.t.Fatal(err)
		}
		if w.built != nil {
			w.built(bin)
		}
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, "sh", "-c", cmd)
	c.Dir, c.Env = w.work, w.env
	out, err := c.CombinedOutput()
	if err != nil {
		w.t.Fatalf("%s: %s: %v\n%s", l.pos(), l.cmd, err, out)
	}
	return string(out)
}

// readmeBuild is the README's build line, the command
// testkit.GpusliceBinary runs (with its own output path).
const readmeBuild = "go build -o gpuslice ./cmd/gpuslice"

func (w *walk) start(l readmeLine, cmd string, step readmeStep) {
	w.t.Helper()
	c := exec.Command("sh", "-c", "exec "+cmd)
	c.Dir, c.Env = w.work, w.env
	logs := &syncBuffer{}
	c.Stdout, c.Stderr = logs, logs
	if err := c.Start(); err != nil {
		w.t.Fatal(err)
	}
	w.procs = append(w.procs, c)
	if strings.Contains(cmd, " agent ") {
		w.agent = c
	}
	testkit.Eventually(w.t, 30*time.Second, l.pos()+": "+l.cmd+" to come up", func() (bool, string) {
		if err := step.ready(w); err != nil {
			return false, err.Error() + "\n" + logs.String()
		}
		return true, ""
	})
}

func (w *walk) stop() {
	for _, c := range w.procs {
		if c.ProcessState == nil {
			_ = c.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = c.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = c.Process.Kill()
				<-done
			}
		}
	}
}

// gs runs the built binary (not a README line) and returns its output.
func (w *walk) gs(args ...string) (string, error) {
	c := exec.Command(filepath.Join(w.work, "gpuslice"), args...)
	c.Dir, c.Env = w.work, w.env
	out, err := c.CombinedOutput()
	return string(out), err
}

var (
	gpuUUID  = regexp.MustCompile(`(?m)^GPU-[0-9a-f-]{36}$`)
	migUUID  = regexp.MustCompile(`(?m)^MIG-[0-9a-f-]{36}$`)
	agentTok = regexp.MustCompile(`gs_agent_[0-9a-f]+`)
)

// serveUpAt says whether serve answers /healthz.
func serveUpAt(w *walk) error {
	resp, err := http.Get("http://" + w.addr + "/healthz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("healthz: %s", resp.Status)
	}
	return nil
}

// nodeRows is `nodes ls -o json` as node name → GPUs and state.
func nodeRows(w *walk) (map[string]string, error) {
	out, err := w.gs("nodes", "ls", "-o", "json")
	if err != nil {
		return nil, fmt.Errorf("%v: %s", err, out)
	}
	var nodes []struct {
		Name      string `json:"name"`
		State     string `json:"state"`
		Inventory struct {
			GPUs []struct {
				Model string `json:"model"`
			} `json:"gpus"`
		} `json:"inventory"`
	}
	if err := json.Unmarshal([]byte(out), &nodes); err != nil {
		return nil, fmt.Errorf("nodes ls -o json: %v: %s", err, out)
	}
	m := map[string]string{}
	for _, n := range nodes {
		model := ""
		if len(n.Inventory.GPUs) > 0 {
			model = n.Inventory.GPUs[0].Model
		}
		m[n.Name] = fmt.Sprintf("%s %d×%s", n.State, len(n.Inventory.GPUs), model)
	}
	return m, nil
}

// readmeSteps is every README command line, as written, and what the
// walk does with it.
var readmeSteps = map[string]readmeStep{
	"./gpuslice advise examples/advise/study.yaml              # per workload: mechanism, sizing, why; the mix priced 5 ways": {
		want: []string{"ADVICE", "triton-light", "mps", "time-slicing", "dedicated", "THE STUDY'S COMPARISON", "recsys"},
	},
	"./gpuslice simulate examples/advise/study.yaml --svg out/sim.svg   # a simulated week, strategy against strategy, charted": {
		want: []string{"STRATEGY", "advised", "GPU-HOURS", "7d simulated", "chart: out/sim.svg"},
		check: func(w *walk, _ string) error {
			b, err := os.ReadFile(filepath.Join(w.work, "out", "sim.svg"))
			if err != nil {
				return err
			}
			if !strings.Contains(string(b), "<polyline") {
				return fmt.Errorf("sim.svg has no lines")
			}
			return nil
		},
	},
	"./gpuslice bench simulate --gpus 1000 --duration 1d       # how long simulate takes on a big fleet": {
		want: []string{"1000 GPUs", "allocator decisions", "dedicated"},
	},
	"./gpuslice services put -f examples/services/hello.yaml   # 1..3 replicas of a 4 GiB time-sliced claim, proxy on :8080": {
		want: []string{"hello", "1..3", "8080 (auto-stop)"},
	},
	"./gpuslice services ls                                    # replicas, ready, range, port, last decision": {want: []string{"hello", "default"}},
	"./gpuslice tenants put acme --memory-mib 40960 --max-priority 10 --allow-command 'python3 /srv/serve.py' --allow-env MODEL": {
		want: []string{"tenant acme: memory quota 40960 MiB", "max priority 10", `may run ["python3" "/srv/serve.py"] setting MODEL`},
	},
	"./gpuslice services get hello                             # every decision with its reason":           {want: []string{"TIME", "REASON"}},
	"./gpuslice services rm hello                              # replicas stop, their claims are released": {}, // TestIdleStopsAndARequestWakes and TestScaleDownLosesNoRequest (internal/services) check replicas stop and claims are released
	"go run ./cmd/gpuslice serve": {skip: "the same server as `./gpuslice serve`, which the walk starts below"},
	"./scripts/test.sh":           {skip: "the command that runs this test"},
	readmeBuild: {check: func(w *walk, _ string) error {
		_, err := os.Stat(filepath.Join(w.work, "gpuslice"))
		return err
	}},
	"./gpuslice serve                      # or: --simulate dgx-h100 | l4x4 | mixed | examples/machines/lab.yaml": {
		background: true, ready: serveUpAt,
	},
	"./gpuslice nodes ls                   # your host, 8 simulated A100s": {
		want: []string{"8×A100-40GB", "(simulated)", "ready"},
	},
	"./gpuslice run --memory 10GiB --compute 25 -- sh -c 'echo $CUDA_VISIBLE_DEVICES'": {
		want: []string{"allocated:", "timeslice 10240MiB"},
		check: func(_ *walk, out string) error {
			if !gpuUUID.MatchString(out) {
				return fmt.Errorf("CMD did not print a GPU uuid as CUDA_VISIBLE_DEVICES")
			}
			return nil
		},
	},
	"./gpuslice run --mode mig --profile 3g.20gb -- sh -c 'echo $CUDA_VISIBLE_DEVICES'": {
		want: []string{" mig 19968MiB"},
		check: func(_ *walk, out string) error {
			if !migUUID.MatchString(out) {
				return fmt.Errorf("CMD did not see a MIG uuid")
			}
			return nil
		},
	},
	"./gpuslice run --mode mps --memory 4GiB --compute 30 -- env | grep CUDA_MPS": {
		want: []string{"CUDA_MPS_PIPE_DIRECTORY=", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=", "=4096M"},
	},
	"./gpuslice run --memory 8GiB -- sleep 10       # on simulated GPUs a running claim gets a simulated": {
		want: []string{"timeslice 8192MiB"},
	},
	"./gpuslice usage                                #   process: usage shows GPU- and MiB-seconds, and": {
		want: []string{"GPU-SECONDS", "MIB-SECONDS", "SM-SECONDS", "default"},
		check: func(_ *walk, out string) error {
			// The default tenant ran claims for more than ten seconds,
			// billed per agent heartbeat (2 s under serve): the interval a
			// claim ends in may go unbilled. `run --memory 8GiB` shares a
			// whole GPU (a claim that names no MIG profile gets one while
			// one is free), where NVML samples its process's SMs: the
			// SM-seconds are not 0, as they were in a MIG instance.
			for _, l := range strings.Split(out, "\n") {
				f := strings.Fields(l)
				if len(f) >= 7 && f[0] == "default" {
					var gpuSeconds, smSeconds float64
					if _, err := fmt.Sscan(f[4], &gpuSeconds); err != nil || gpuSeconds < 8 {
						return fmt.Errorf("GPU-seconds %q, want at least 8 after `sleep 10`", f[4])
					}
					if _, err := fmt.Sscan(f[5], &smSeconds); err != nil || smSeconds <= 0 {
						return fmt.Errorf("SM-seconds %q, want some: the 8GiB claim runs on a whole GPU", f[5])
					}
					return nil
				}
			}
			return fmt.Errorf("no row for tenant default")
		},
	},
	"./gpuslice claims ls": {
		check: func(_ *walk, out string) error {
			rows := strings.Split(strings.TrimSpace(out), "\n")
			if len(rows) != 5 { // header + the four claims run above
				return fmt.Errorf("%d rows, want a header and the 4 claims run above", len(rows))
			}
			for _, r := range rows[1:] {
				if !strings.Contains(r, " released ") {
					return fmt.Errorf("a claim whose CMD ended is not released: %s", r)
				}
			}
			return nil
		},
	},
	"./gpuslice tenants put research --memory-mib 40960      # a tenant with a quota": {
		want: []string{"tenant research", "memory quota 40960 MiB"},
	},
	"./gpuslice tokens create --role tenant --tenant research  # its token: sees only its claims": {
		want: []string{"(tenant research)", "gs_t_"},
	},
	`curl -s -H "Authorization: Bearer $(cat ~/.local/share/gpuslice/admin.token)" localhost:7777/metrics | grep gpuslice_`: {
		rewrite: func(w *walk, cmd string) string { return strings.Replace(cmd, "localhost:7777", w.addr, 1) },
		want:    []string{"gpuslice_allocation_latency_seconds", "gpuslice_"},
	},
	"./gpuslice plan examples/compose-timeslicing.yaml":                                                    {want: []string{"GPUS"}},
	"mkdir -p out                                    # what the commands write goes here (ignored by git)": {},
	"./gpuslice plan examples/nvidia/pool.yaml examples/nvidia/dp-config.yaml   # dp-config: timeSlicing replicas 4 -> timeslice×4": {
		want: []string{"timeslice×4", `fixed by device-plugin config "default" (examples/nvidia/dp-config.yaml:15)`},
	},
	"./gpuslice render examples/nvidia/pool.yaml examples/nvidia/dp-config.yaml --target nvidia-device-plugin": {
		want: []string{"kind: ConfigMap", "replicas: 4", "renameByDefault: true"},
	},
	"./gpuslice plan examples/nvidia/cluster.yaml examples/nvidia/device-plugin-configmap.yaml examples/nvidia/mig-parted.yaml": {
		want: []string{`mig-parted config "all-balanced"`, `device-plugin config "t4-timesliced"`, `device-plugin config "l4-mps"`, "mps≤4", "timeslice×8"},
	},
	"./gpuslice plan examples/compose-mig.yaml -o yaml": {
		check: func(_ *walk, out string) error {
			if !strings.Contains(out, "placements:") && !strings.Contains(out, "pools:") {
				return fmt.Errorf("not a plan in YAML")
			}
			return nil
		},
	},
	"./gpuslice plan examples/gpuslice.yaml          # pools, tenants with quotas, MIG, constraints": {want: []string{"GPUS"}},
	"./gpuslice render examples/gpuslice.yaml --target karpenter      # also: dra, kubernetes,": {
		want: []string{"kind: NodePool", "karpenter.sh/v1"},
	},
	"./gpuslice schema > out/gpuslice.schema.json    # for editors (yaml-language-server)": {
		check: func(w *walk, _ string) error {
			b, err := os.ReadFile(filepath.Join(w.work, "out", "gpuslice.schema.json"))
			if err != nil {
				return err
			}
			var v map[string]any
			if err := json.Unmarshal(b, &v); err != nil {
				return fmt.Errorf("the schema is not JSON: %v", err)
			}
			return nil
		},
	},
	"./gpuslice catalog gpus                          # models, memory, SMs, MIG, confidence of each fact": {
		want: []string{"A100-40GB", "CONFIDENCE", "MIG"},
	},
	`./gpuslice catalog profiles "NVIDIA H100 80GB HBM3"`:                           {want: []string{"1g.10gb", "7g.80gb"}},
	"./gpuslice catalog instances --provider aws      # with prices and their date": {want: []string{"p4d.24xlarge"}},
	"./gpuslice mig layouts A100-40GB                 # the 38 maximal layouts": {
		want: []string{"38 maximal layouts on A100-40GB"},
		check: func(_ *walk, out string) error {
			n := 0
			for _, l := range strings.Split(out, "\n") {
				if f := strings.Fields(l); len(f) > 0 && f[0] != "#" && strings.Contains(l, "@") {
					n++
				}
			}
			if n != 38 {
				return fmt.Errorf("%d layouts listed, the README says 38", n)
			}
			return nil
		},
	},
	"./gpuslice mig fit A100-40GB 3g.20gb 2g.10gb 1g.5gb 1g.5gb": {want: []string{"capacity left 0"}},
	"./gpuslice mig evict A100-40GB --have 3g.20gb@0,1g.5gb@4,1g.5gb@5,1g.5gb@6 --in-use 3g.20gb@0 --want 3g.20gb": {
		want: []string{"1g.5gb@4,1g.5gb@5,1g.5gb@6", "3g.20gb@4"},
	},
	"./gpuslice bench packing                         # GPUs used vs lower bounds and today's baselines": {want: []string{"whole-gpu"}},
	"./gpuslice bench dra --gpus 10000                # decisions/s against the upstream DRA allocator": {
		want: []string{"10000 GPUs", "DECISIONS/S", "upstream"},
	},
	"./gpuslice bench dra-order --seeds 1 --claims 40 # the stock DRA allocator on our slices: device orders, shares vs whole GPUs": {
		want: []string{"whole-gpu-per-claim", "largest-first", "VS GPUSLICE ORDER"},
	},
	"./gpuslice bench plan --sizes 1000,10000         # seconds, memory and GPUs of plans of growing size": {
		want: []string{"REPLICAS", "PEAK HEAP", "growth exponent"},
	},
	"./gpuslice bench plan-quality --specs 50         # plan vs first-fit-decreasing heuristics and the lower bound": {
		want: []string{"HEURISTIC", "ffd-memory", "proved optimal"},
	},
	"./gpuslice dra slices --simulate dgx-a100 --node gpu-1 > out/slices.yaml   # 9 slices: 8 GPUs' devices + their counters": {
		check: func(w *walk, _ string) error {
			b, err := os.ReadFile(filepath.Join(w.work, "out", "slices.yaml"))
			if err != nil {
				return err
			}
			if n := strings.Count(string(b), "kind: ResourceSlice"); n != 9 {
				return fmt.Errorf("%d ResourceSlices, the README says 9", n)
			}
			for _, want := range []string{"driver: gpu.gpuslice.dev", "nodeName: gpu-1", "gpu-7-mig-7g-40gb-at-0", "allowMultipleAllocations: true"} {
				if !strings.Contains(string(b), want) {
					return fmt.Errorf("slices.yaml lacks %q", want)
				}
			}
			return nil
		},
	},
	"./gpuslice bench nodes                                    # nodes and $/h: counting slices vs whole GPUs": {
		want: []string{"WHOLE-GPU NODES", "4 notebooks, 4 GiB time-sliced", "75%"},
	},
	"./gpuslice render examples/gpuslice.yaml --target dra --dra-driver gpuslice > out/claims.yaml   # claims on gpu. shared. mig.gpuslice.dev": {
		check: func(w *walk, _ string) error {
			b, err := os.ReadFile(filepath.Join(w.work, "out", "claims.yaml"))
			if err != nil {
				return err
			}
			for _, want := range []string{"deviceClassName: shared.gpuslice.dev", "deviceClassName: mig.gpuslice.dev", "kind: SliceConfig", "driver: gpu.gpuslice.dev"} {
				if !strings.Contains(string(b), want) {
					return fmt.Errorf("claims.yaml lacks %q", want)
				}
			}
			if strings.Contains(string(b), "nvidia.com/v1") {
				return fmt.Errorf("claims.yaml names NVIDIA's configs")
			}
			return nil
		},
	},
	"./gpuslice dra classes > out/classes.yaml                              # gpu. shared. mig.gpuslice.dev": {
		check: func(w *walk, _ string) error {
			b, err := os.ReadFile(filepath.Join(w.work, "out", "classes.yaml"))
			if err != nil {
				return err
			}
			for _, want := range []string{"name: gpu.gpuslice.dev", "name: shared.gpuslice.dev", "name: mig.gpuslice.dev", "extendedResourceName: nvidia.com/gpu"} {
				if !strings.Contains(string(b), want) {
					return fmt.Errorf("classes.yaml lacks %q", want)
				}
			}
			return nil
		},
	},
	"./gpuslice serve --listen 0.0.0.0:7777 --tls-cert cert.pem --tls-key key.pem": {
		skip: "needs a certificate of the user's own; TestServeMissingCertificateFails and TestServeSelfSignedTLS cover serve with TLS",
	},
	"./gpuslice tokens create --role agent --node gpu-1   # on the server: one token per host": {want: []string{"gs_agent_", "(agent"}},
	"./gpuslice agent --server https://server:7777 --token gs_agent_… --node gpu-1   # on that GPU host": {
		skip: "runs on a second host; TestSimulatedSecondHostOnOneMachine and the sim-1 lines below cover agents",
	},
	"./gpuslice serve --listen 0.0.0.0:7777 --tls-self-signed   # prints: self-signed TLS certificate ~/.local/share/gpuslice/tls-cert.pem, SHA-256 …": {
		skip: "a second server on the same data directory; TestServeSelfSignedTLS runs it",
	},
	"./gpuslice agent --server https://server:7777 --ca tls-cert.pem --token gs_agent_… --node gpu-1": {
		skip: "runs on a second host against a TLS server; TestServeSelfSignedTLS covers --ca",
	},
	"./gpuslice nodes ls --server https://server:7777 --ca tls-cert.pem --token gs_…": {
		skip: "needs the TLS server above; TestServeSelfSignedTLS covers --ca",
	},
	"bin=$(scripts/gpuslice-scheduler.sh)      # builds cmd/gpuslice-scheduler (its own go.mod) into ~/.cache/gpuslice": {
		skip: "compiles kube-scheduler (minutes); scripts/test.sh builds it the same way before the tests, and internal/k8s/schedtest runs the binary",
	},
	"$bin --config sched.yaml --leader-elect=true": {
		skip: "needs a Kubernetes cluster; internal/k8s/schedtest runs the built binary against a real kube-apiserver with this profile",
	},
	"kubectl annotate namespace team-a gpuslice.dev/gpu-memory-quota=40Gi gpuslice.dev/gpu-compute-quota=250": {
		skip: "needs a Kubernetes cluster; internal/k8s/schedtest's TestNamespaceQuota sets these annotations on a real kube-apiserver",
	},
	"./gpuslice tokens create --role agent --node sim-1": {
		want: []string{"gs_agent_"},
		check: func(w *walk, out string) error {
			w.agentToken = agentTok.FindString(out)
			return nil
		},
	},
	"./gpuslice agent --token gs_agent_… --simulate l4x4 --node sim-1": {
		background: true,
		rewrite: func(w *walk, cmd string) string {
			if w.agentToken == "" {
				w.t.Fatal("no agent token from the line before")
			}
			return strings.Replace(strings.Replace(cmd, "gs_a_…", w.agentToken, 1), "gs_agent_…", w.agentToken, 1)
		},
		ready: func(w *walk) error {
			rows, err := nodeRows(w)
			if err != nil {
				return err
			}
			if rows["sim-1"] != "ready 4×L4" {
				return fmt.Errorf("sim-1 is %q, want ready with 4 L4s", rows["sim-1"])
			}
			return nil
		},
	},
	"./gpuslice nodes ls                 # this host and sim-1": {want: []string{"sim-1", "4×L4", "8×A100-40GB"}},
	"./gpuslice nodes rm sim-1           # after stopping its agent: deleted, its claims re-queued": {
		before: func(w *walk) {
			if w.agent == nil {
				w.t.Fatal("no agent running")
			}
			_ = w.agent.Process.Signal(syscall.SIGTERM)
			_ = w.agent.Wait()
		},
		check: func(w *walk, _ string) error {
			rows, err := nodeRows(w)
			if err != nil {
				return err
			}
			if _, ok := rows["sim-1"]; ok || len(rows) != 1 {
				return fmt.Errorf("after nodes rm sim-1 the nodes are %v, want only this host", rows)
			}
			return nil
		},
	},
	`scripts/sandbox.sh up       # build what is missing, start, wait for the chart, print how to use it`:  {skip: sandboxSkip},
	`scripts/sandbox.sh status   # running? (exit 0 ready, 2 starting, 3 not running) and the usage again`: {skip: sandboxSkip},
	`scripts/sandbox.sh down     # stop it; checks no namespace, veth or cgroup of its node is left`:       {skip: sandboxSkip},
	`export KUBECONFIG=/root/.cache/gpuslice/sandbox/kubeconfig`:                                           {skip: sandboxSkip},
	`KUBECTL=/root/.cache/gpuslice/node/v1.36.3-containerd-v2.4.2/kubectl   # kubectl v1.36.3`:             {skip: sandboxSkip},
	`$KUBECTL get nodes,deviceclasses,resourceslices`:                                                      {skip: sandboxSkip},
	`$KUBECTL apply -f /root/.cache/gpuslice/sandbox/example.yaml`:                                         {skip: sandboxSkip},
	`$KUBECTL wait --for=jsonpath='{.status.phase}'=Succeeded pod/gpuslice-example --timeout=2m`:           {skip: sandboxSkip},
	`$KUBECTL logs gpuslice-example`:                                                                       {skip: sandboxSkip},
	`scripts/controlplane.sh                       # v1.36.3: test/controlplane/go.mod, etcd v3.6.8`:       {skip: versionsSkip},
	`K8S_VERSION=v1.37.2 scripts/controlplane.sh   # v1.37.2: test/controlplane/go.1.37.mod, etcd v3.7.0`:  {skip: versionsSkip},
	`K8S_VERSION=v1.37.2 scripts/gpuslice-scheduler.sh   # cmd/gpuslice-scheduler/go.1.37.mod`:             {skip: versionsSkip},
	`GPUSLICE_K8S_VERSION=v1.37.2 go test ./internal/k8s/...`:                                              {skip: versionsSkip},
}

// sandboxSkip is why the walk does not run docs/sandbox.md: it needs root and
// minutes to start a real node; scripts/test.sh runs TestRealNode
// (test/helmchart/realnode), which installs the same chart on the same node
// harness (internal/k8s/nodetest) as scripts/sandbox.sh up.
const sandboxSkip = "a real node as root (minutes); TestRealNode installs the same chart on the same harness"

// versionsSkip is why the walk does not run docs/kubernetes-versions.md:
// scripts/test.sh runs these very commands (its control plane and
// "kubernetes v1.37.2" phases), which take minutes.
const versionsSkip = "builds Kubernetes (minutes); scripts/test.sh runs these commands in its control plane and v1.37.2 phases"
