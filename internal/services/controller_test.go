package services

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/agent"
	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/autoscale"
	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/gpu/fake"
	"github.com/gpuslice/gpuslice/internal/model"
	"github.com/gpuslice/gpuslice/internal/server"
	"github.com/gpuslice/gpuslice/internal/server/servertest"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// The replica command in these tests is this test binary, re-executed as
// a tiny HTTP server on $PORT that answers with its replica and devices;
// /slow answers after 300ms.
func TestMain(m *testing.M) {
	if os.Getenv("GPUSLICE_TEST_REPLICA") == "1" {
		mux := http.NewServeMux()
		mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				time.Sleep(300 * time.Millisecond)
			}
			if r.URL.Path == "/env" {
				fmt.Fprintln(w, strings.Join(os.Environ(), "\n"))
				return
			}
			fmt.Fprintf(w, "replica %s devices %s\n", os.Getenv("GPUSLICE_REPLICA"), os.Getenv("CUDA_VISIBLE_DEVICES"))
		})
		_ = http.ListenAndServe("127.0.0.1:"+os.Getenv("PORT"), mux)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type env struct {
	t     *testing.T
	ctx   context.Context
	admin *client.Client
	ctl   *Controller
	m     *fake.Machine
	url   string // the server's
}

// newEnv runs a real server on a memory store with an in-process agent on
// a simulated dgx-a100, and a controller with 200ms minutes.
func newEnv(t *testing.T) *env { return newEnvOn(t, "dgx-a100") }

// newEnvOn is newEnv on a simulated machine of another preset.
func newEnvOn(t *testing.T, preset string) *env {
	t.Helper()
	h := servertest.New(t, servertest.Options{RealClock: true, Configure: func(c *server.Config) {
		c.Simulated, c.Policy = true, alloc.Policy{AllowModeSwitch: true}
	}})
	ctx := h.Ctx
	if err := h.Server().EnsureTenant(ctx, "default"); err != nil {
		t.Fatal(err)
	}
	spec, err := fake.Preset(preset)
	if err != nil {
		t.Fatal(err)
	}
	m := h.Machine("node-a", spec, func(c *agent.Config, _ *fake.Machine) { c.Interval = 50 * time.Millisecond })
	admin := h.Client(h.Admin)
	ctl, err := New(Config{Client: admin, Node: "node-a", Interval: 50 * time.Millisecond, Minute: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	ctlDone := make(chan struct{})
	go func() { _ = ctl.Run(ctx); close(ctlDone) }()
	t.Cleanup(func() {
		cancel()
		<-ctlDone
	})
	return &env{t: t, ctx: ctx, admin: admin, ctl: ctl, m: m, url: h.URL}
}

func replicaSpec(port int, as model.Autoscaling) api.ServiceSpec {
	exe, _ := os.Executable()
	as.TargetPort = port
	return api.ServiceSpec{
		Claim:       api.ClaimSpec{Requests: []alloc.Request{{Name: "gpu", MemoryMiB: 4096, Mode: alloc.TimeSlice}}},
		Command:     []string{exe, "-test.run=^$"},
		Env:         map[string]string{"GPUSLICE_TEST_REPLICA": "1"},
		Autoscaling: as,
	}
}

// waitFor polls the service until ok or 10s.
func (e *env) waitFor(name, what string, ok func(api.Service) bool) api.Service {
	e.t.Helper()
	var s api.Service
	testkit.Eventually(e.t, 10*time.Second, "service "+name+" "+what, func() (bool, string) {
		var err error
		s, err = e.admin.Service(e.ctx, name)
		return err == nil && ok(s), fmt.Sprintf("%+v (%v)", s.Status, err)
	})
	return s
}

func port(t *testing.T) int {
	p, err := freePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// An idle service with auto-stop drops to zero and releases its claim; a
// request at zero wakes a replica (a new claim, a new process) and is
// answered by it.
func TestIdleStopsAndARequestWakes(t *testing.T) {
	e := newEnv(t)
	p := port(t)
	_, err := e.admin.PutService(e.ctx, "hello", "default", replicaSpec(p, model.Autoscaling{MinReplicas: 1, MaxReplicas: 2,
		IdleMinutesBeforeScalingDown: 2, EnableAutoStop: true}))
	if err != nil {
		t.Fatal(err)
	}
	url := "http://127.0.0.1:" + strconv.Itoa(p) + "/"
	s := e.waitFor("hello", "ready", func(s api.Service) bool { return s.Status.Ready == 1 })
	first := s.Status.Claims[0]
	if code, body := get(t, url); code != 200 || !strings.Contains(body, "replica hello-") {
		t.Fatalf("%d %s", code, body)
	}
	s = e.waitFor("hello", "stopped", func(s api.Service) bool { return s.Status.Replicas == 0 && len(s.Status.Claims) == 0 })
	last := s.Status.Decisions[len(s.Status.Decisions)-1]
	if last.Action != autoscale.Stop || !strings.Contains(last.Reason, "no request") {
		t.Fatalf("last decision %+v", last)
	}
	c, err := e.admin.Claim(e.ctx, first, "", 0)
	if err != nil || c.State != api.Released {
		t.Fatalf("the stopped replica's claim is %s (%v)", c.State, err)
	}
	start := time.Now()
	code, body := get(t, url)
	if code != 200 || !strings.Contains(body, "replica hello-") || !strings.Contains(body, "devices ") {
		t.Fatalf("request at zero: %d %s", code, body)
	}
	t.Logf("wake from zero to the answer: %s", time.Since(start))
	s = e.waitFor("hello", "awake", func(s api.Service) bool { return s.Status.Ready == 1 })
	if s.Status.Claims[0] == first {
		t.Fatalf("woke with the released claim %s", first)
	}
	var wake bool
	for _, d := range s.Status.Decisions {
		wake = wake || d.Action == autoscale.Wake
	}
	if !wake {
		t.Fatalf("no wake decision: %+v", s.Status.Decisions)
	}
}

// A request waits a bounded time: a replica that never listens gives a
// clear 503 after the wake timeout.
func TestWakeTimeoutIs503(t *testing.T) {
	e := newEnv(t)
	p := port(t)
	spec := replicaSpec(p, model.Autoscaling{MinReplicas: 1, MaxReplicas: 1})
	spec.Command, spec.Env = []string{"sleep", "30"}, nil
	spec.WakeTimeoutSeconds = 1
	if _, err := e.admin.PutService(e.ctx, "mute", "default", spec); err != nil {
		t.Fatal(err)
	}
	e.waitFor("mute", "seen by the controller", func(s api.Service) bool { return !s.Status.Since.IsZero() })
	start := time.Now()
	code, body := get(t, "http://127.0.0.1:"+strconv.Itoa(p)+"/")
	if code != 503 || !strings.Contains(body, "no ready replica after 1s") {
		t.Fatalf("%d %s", code, body)
	}
	if d := time.Since(start); d < time.Second || d > 5*time.Second {
		t.Fatalf("answered after %s", d)
	}
}

// Scaling down takes a replica out of rotation and lets its requests
// finish before stopping it: every request in flight is answered.
func TestScaleDownLosesNoRequest(t *testing.T) {
	e := newEnv(t)
	p := port(t)
	spec := replicaSpec(p, model.Autoscaling{MinReplicas: 3, MaxReplicas: 3})
	if _, err := e.admin.PutService(e.ctx, "busy", "default", spec); err != nil {
		t.Fatal(err)
	}
	e.waitFor("busy", "ready", func(s api.Service) bool { return s.Status.Ready == 3 })
	url := "http://127.0.0.1:" + strconv.Itoa(p) + "/slow"
	var wg sync.WaitGroup
	errs := make(chan string, 100)
	stopAt := time.Now().Add(1500 * time.Millisecond)
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stopAt) {
				resp, err := http.Get(url)
				if err != nil {
					errs <- err.Error()
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					errs <- fmt.Sprintf("%d %s", resp.StatusCode, b)
					return
				}
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	spec.Autoscaling.MinReplicas, spec.Autoscaling.MaxReplicas = 1, 1
	if _, err := e.admin.PutService(e.ctx, "busy", "default", spec); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error("request lost while scaling down:", e)
	}
	s := e.waitFor("busy", "scaled down", func(s api.Service) bool { return s.Status.Ready == 1 && len(s.Status.Claims) == 1 })
	if d := s.Status.Decisions[len(s.Status.Decisions)-1]; d.Action != autoscale.Clamp || d.To != 1 {
		t.Fatalf("decision %+v", d)
	}
}

// The gpu metric is the replicas' own SM activity: each replica's
// simulated process pinned busy, the service grows one replica at a time
// to its maximum.
func TestBusyReplicasScaleUpOneStepAtATime(t *testing.T) {
	e := newEnv(t)
	spec := replicaSpec(port(t), model.Autoscaling{MinReplicas: 1, MaxReplicas: 3, OverUtilizedMinutesBeforeScalingUp: 1})
	if _, err := e.admin.PutService(e.ctx, "hot", "default", spec); err != nil {
		t.Fatal(err)
	}
	e.waitFor("hot", "ready", func(s api.Service) bool { return s.Status.Ready >= 1 })
	e.keepBusy("hot", 95)
	s := e.waitFor("hot", "at 3", func(s api.Service) bool { return s.Status.Ready == 3 })
	var ups []autoscale.Decision
	for _, d := range s.Status.Decisions {
		if d.Action == autoscale.Up {
			ups = append(ups, d)
		}
	}
	if len(ups) != 2 || ups[0].To != 2 || ups[1].To != 3 || !strings.Contains(ups[0].Reason, "gpu above 80%") {
		t.Fatalf("want 1→2→3 on gpu: %+v", s.Status.Decisions)
	}
	if gap := ups[1].Time.Sub(ups[0].Time); gap < 200*time.Millisecond {
		t.Fatalf("second step %s after the first: less than the 1-minute (200ms) period", gap)
	}
}

// keepBusy pins, until the test ends, the SM utilization of every
// simulated process of the service's replicas (new ones included) to sm
// percent of their device.
func (e *env) keepBusy(service string, sm int) {
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	e.t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if s, err := e.admin.Service(ctx, service); err == nil {
				for _, id := range s.Status.Claims {
					for _, pid := range e.claimPIDs(ctx, id) {
						_ = e.m.SetProcessUtilization(pid, sm)
					}
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
}

// claimPIDs are the simulated processes the agent runs for a claim: on
// each of its devices, the one holding the memory promised there (the
// tests give services different memory).
func (e *env) claimPIDs(ctx context.Context, id string) []int {
	c, err := e.admin.Claim(ctx, id, "", 0)
	if err != nil || c.Allocation == nil {
		return nil
	}
	var out []int
	for _, d := range c.Allocation.Devices {
		ps, err := e.m.Processes(ctx, d.Device)
		if err != nil {
			continue
		}
		for _, p := range ps {
			if p.MemoryMiB == d.MemoryMiB {
				out = append(out, p.PID)
			}
		}
	}
	return out
}

// An idle service sharing a GPU with a busy one (its own process at 100%,
// the whole GPU pinned at 100% as nvidia-smi would show it) neither scales
// up with no request nor is kept from stopping: its gpu metric counts its
// own processes only.
func TestBusyNeighbourNeitherScalesNorBlocksStop(t *testing.T) {
	e := newEnv(t)
	busy := replicaSpec(port(t), model.Autoscaling{MinReplicas: 1, MaxReplicas: 1})
	busy.Claim.Requests[0].MemoryMiB = 6144
	if _, err := e.admin.PutService(e.ctx, "busy", "default", busy); err != nil {
		t.Fatal(err)
	}
	b := e.waitFor("busy", "ready", func(s api.Service) bool { return s.Status.Ready == 1 })
	e.keepBusy("busy", 100)
	bc, err := e.admin.Claim(e.ctx, b.Status.Claims[0], "", 0)
	if err != nil {
		t.Fatal(err)
	}
	dev := bc.Allocation.Devices[0].Device
	if err := e.m.SetUtilization(dev, 100, -1); err != nil {
		t.Fatal(err)
	}
	// The idle service's replica on the same GPU (binpack).
	idle := replicaSpec(port(t), model.Autoscaling{MinReplicas: 1, MaxReplicas: 2, OverUtilizedMinutesBeforeScalingUp: 1,
		IdleMinutesBeforeScalingDown: 3, EnableAutoStop: true})
	if _, err := e.admin.PutService(e.ctx, "idle", "default", idle); err != nil {
		t.Fatal(err)
	}
	s := e.waitFor("idle", "ready", func(s api.Service) bool { return s.Status.Ready == 1 })
	ic, err := e.admin.Claim(e.ctx, s.Status.Claims[0], "", 0)
	if err != nil || ic.Allocation.Devices[0].Device != dev {
		t.Fatalf("the idle replica is on %v, want the busy one's device %s (%v)", ic.Allocation, dev, err)
	}
	s = e.waitFor("idle", "stopped by auto-stop", func(s api.Service) bool { return s.Status.Replicas == 0 })
	for _, d := range s.Status.Decisions {
		if d.Action == autoscale.Up {
			t.Errorf("the idle service scaled up with no request beside a busy neighbour: %s", d)
		}
	}
	if last := s.Status.Decisions[len(s.Status.Decisions)-1]; last.Action != autoscale.Stop {
		t.Errorf("last decision %s, want the auto-stop", last)
	}
	if b, _ = e.admin.Service(e.ctx, "busy"); b.Status.Replicas != 1 {
		t.Errorf("busy service at %d replicas", b.Status.Replicas)
	}
}

// On MIG instances of a GPU with GPM (H100), the gpu metric is the
// instance's activity over the instance's own compute: a busy 1g.10gb
// replica is 100% of what it can use and the service scales up.
func TestBusyMIGReplicaIsMeasured(t *testing.T) {
	e := newEnvOn(t, "dgx-h100")
	spec := replicaSpec(port(t), model.Autoscaling{MinReplicas: 1, MaxReplicas: 2, OverUtilizedMinutesBeforeScalingUp: 1})
	spec.Claim.Requests[0] = alloc.Request{Name: "gpu", Mode: alloc.MIG, Profile: "1g.10gb"}
	if _, err := e.admin.PutService(e.ctx, "mig", "default", spec); err != nil {
		t.Fatal(err)
	}
	e.waitFor("mig", "ready", func(s api.Service) bool { return s.Status.Ready == 1 })
	e.keepBusy("mig", 100)
	s := e.waitFor("mig", "at 2", func(s api.Service) bool { return s.Status.Ready == 2 })
	up := false
	for _, d := range s.Status.Decisions {
		up = up || (d.Action == autoscale.Up && strings.Contains(d.Reason, "gpu above 80%"))
	}
	if !up {
		t.Fatalf("no scale-up on the MIG replica's gpu: %+v", s.Status.Decisions)
	}
}

// On A100 MIG instances nothing samples SM activity (no per-process
// samples in MIG mode, no GPM): the gpu metric is never read as idle; a
// service with a proxy scales on its requests instead and says why.
func TestUnsampledMIGScalesOnRequests(t *testing.T) {
	e := newEnv(t)
	p := port(t)
	spec := replicaSpec(p, model.Autoscaling{MinReplicas: 1, MaxReplicas: 2, OverUtilizedMinutesBeforeScalingUp: 1, IdleMinutesBeforeScalingDown: 1})
	spec.Claim.Requests[0] = alloc.Request{Name: "gpu", Mode: alloc.MIG, Profile: "1g.5gb"}
	spec.TargetConcurrency = 1
	if _, err := e.admin.PutService(e.ctx, "a100mig", "default", spec); err != nil {
		t.Fatal(err)
	}
	e.waitFor("a100mig", "ready", func(s api.Service) bool { return s.Status.Ready == 1 })
	e.keepBusy("a100mig", 100) // nothing measures it
	s := e.waitFor("a100mig", "says why", func(s api.Service) bool {
		return strings.Contains(s.Status.Message, "not measured on A100-40GB MIG instances") && strings.Contains(s.Status.Message, "scaling on requests")
	})
	for _, d := range s.Status.Decisions {
		if d.Action == autoscale.Up || d.Action == autoscale.Down {
			t.Fatalf("decided on an unmeasured metric: %s", d)
		}
	}
	// Requests in flight at the proxy: over 1 per replica scales it up.
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	for range 3 {
		go func() {
			for ctx.Err() == nil {
				if resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(p) + "/slow"); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}()
	}
	s = e.waitFor("a100mig", "at 2 on requests", func(s api.Service) bool { return s.Status.Ready == 2 })
	up := false
	for _, d := range s.Status.Decisions {
		up = up || (d.Action == autoscale.Up && strings.Contains(d.Reason, "requests above"))
	}
	if !up {
		t.Fatalf("no scale-up on requests: %+v", s.Status.Decisions)
	}
}

func (e *env) gpuUUID(i int) string {
	gs, err := e.m.GPUs(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return gs[i].UUID
}

// A tenant's service runs only while the admin allows its command: taken
// back, its replicas stop and their claims are released; a replica's
// claim names its service and holds a lease; the replica sees none of
// the controller's environment.
func TestWithdrawnCommandStopsTheTenantsService(t *testing.T) {
	t.Setenv("GPUSLICE_CONTROLLER_SECRET", "not for replicas")
	e := newEnv(t)
	p := port(t)
	spec := replicaSpec(p, model.Autoscaling{MinReplicas: 1, MaxReplicas: 1})
	allow := api.Tenant{Commands: []api.AllowedCommand{{Command: spec.Command, Env: []string{"GPUSLICE_TEST_REPLICA"}}}}
	if err := e.admin.Do(e.ctx, "PUT", "/v1/tenants/default", allow, nil); err != nil {
		t.Fatal(err)
	}
	var tok api.Token
	if err := e.admin.Do(e.ctx, "POST", "/v1/tokens", api.CreateTokenRequest{Role: api.RoleTenant, Tenant: "default"}, &tok); err != nil {
		t.Fatal(err)
	}
	tenant, _ := client.New(e.url, tok.Secret, nil)
	if _, err := tenant.PutService(e.ctx, "web", "", spec); err != nil {
		t.Fatal(err)
	}
	s := e.waitFor("web", "ready", func(s api.Service) bool { return s.Status.Ready == 1 })
	c, err := e.admin.Claim(e.ctx, s.Status.Claims[0], "", 0)
	if err != nil || c.Spec.Service != "web" || c.Spec.LeaseSeconds <= 0 || c.LeaseExpires == nil {
		t.Fatalf("replica claim: service %q lease %d expires %v (%v)", c.Spec.Service, c.Spec.LeaseSeconds, c.LeaseExpires, err)
	}
	if code, body := get(t, "http://127.0.0.1:"+strconv.Itoa(p)+"/env"); code != 200 || strings.Contains(body, "GPUSLICE_CONTROLLER_SECRET") || !strings.Contains(body, "GPUSLICE_SERVICE=web") {
		t.Fatalf("replica environment: %d %s", code, body)
	}
	if err := e.admin.Do(e.ctx, "PUT", "/v1/tenants/default", api.Tenant{}, nil); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the replica of a withdrawn command to release its claim", func() (bool, string) {
		c, err = e.admin.Claim(e.ctx, c.ID, "", 0)
		return err == nil && c.State == api.Released, fmt.Sprintf("%s (%v)", c.State, err)
	})
	if resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(p) + "/"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("the proxy of a withdrawn service still answers")
		}
	}
}
