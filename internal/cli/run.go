package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuslice/gpuslice/internal/agent"
	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/services"
	"github.com/gpuslice/gpuslice/internal/spec"
)

// ExitError carries a command's exit code through cobra to main.
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

func runCmd(e *env, c *conn) *cobra.Command {
	var memory, mode, profile, isolation, tenant, node, workload, policy, faultPolicy string
	var compute, priority, gpus int
	var timeout, leaseFor time.Duration
	var waitForNodes, sameGPU bool
	var devices []string
	cmd := &cobra.Command{
		Use:   "run [flags] -- CMD [ARGS...]",
		Short: "Claim a GPU slice, run a command with it, release it when the command exits",
		Long: `Creates a claim, waits for it (showing the queue position and why), runs CMD on
this host with the allocation's environment (CUDA_VISIBLE_DEVICES, CUDA_MPS_*), streams its
output, releases the claim when CMD exits, and exits with CMD's exit code. Ctrl-C or SIGTERM
(pending, waiting for devices, or while CMD runs: CMD gets the signal first) releases the claim
and exits 130 or 143 (128+signal). --timeout bounds the wait for the claim: past it the claim is
released and run fails.`,
		Example: "  gpuslice run --memory 10GiB --compute 25 -- nvidia-smi\n  gpuslice run --mode mig --profile 3g.20gb -- python train.py",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			req := alloc.Request{Name: "gpu", Mode: alloc.Mode(mode), Profile: profile, ComputePercent: compute, Workload: alloc.Workload(workload)}
			if memory != "" {
				if req.MemoryMiB, err = flagMemoryMiB(memory); err != nil {
					return fmt.Errorf("--memory: %w", err)
				}
			}
			if gpus < 1 || gpus > alloc.MaxDevicesPerClaim {
				return fmt.Errorf("--gpus %d: want 1..%d", gpus, alloc.MaxDevicesPerClaim)
			}
			cs := api.ClaimSpec{Priority: priority, Isolation: alloc.Isolation(isolation), Requests: []alloc.Request{req}, MemoryPolicy: policy, FaultPolicy: faultPolicy}
			if len(devices) > 0 {
				// Devices of different shapes (a 4g.20gb and a 3g.20gb):
				// one request each.
				for _, f := range []string{"memory", "compute", "mode", "profile", "workload", "gpus"} {
					if cmd.Flags().Changed(f) {
						return fmt.Errorf("--%s: with --device, give it inside each --device (e.g. --device profile=3g.20gb,mode=mig)", f)
					}
				}
				cs.Requests = nil
				for i, d := range devices {
					r, err := parseDevice(d, i)
					if err != nil {
						return fmt.Errorf("--device %q: %w", d, err)
					}
					cs.Requests = append(cs.Requests, r)
				}
				gpus = len(devices)
				if gpus > alloc.MaxDevicesPerClaim {
					return fmt.Errorf("--device given %d times: at most %d devices", gpus, alloc.MaxDevicesPerClaim)
				}
			}
			if sameGPU && gpus < 2 {
				return fmt.Errorf("--same-gpu: needs --gpus 2 or more, or two --device (one device is always on one GPU)")
			}
			if gpus > 1 {
				// CMD runs on one host: every device on one node, and with
				// --same-gpu on one physical GPU (MIG instances or shares
				// of it).
				if len(devices) == 0 {
					cs.Requests[0].Count = gpus
				}
				cs.Constraints = []alloc.Constraint{{Match: "node"}}
				if sameGPU {
					cs.Constraints = []alloc.Constraint{{Match: "gpu"}}
				}
			}
			if node == "" {
				// Run here when this host is a node of the server.
				if err := cl.Do(cmd.Context(), http.MethodGet, "/v1/nodes/"+url.PathEscape(hostName()), nil, nil); err == nil {
					node = hostName()
				}
			} else if err := runsHere(cmd.Context(), cl, node); err != nil {
				// CMD would run here with another machine's GPU ids.
				return err
			}
			cs.Node = node
			cs.WaitForNodes = waitForNodes
			if leaseFor < time.Second || leaseFor > api.MaxLeaseSeconds*time.Second {
				return fmt.Errorf("--lease %s: want 1s..%s", leaseFor, api.MaxLeaseSeconds*time.Second)
			}
			cs.LeaseSeconds = int(leaseFor / time.Second)
			// Ctrl-C and SIGTERM cancel ctx (and are remembered, for the
			// exit code and to pass on to CMD); the claim is released on
			// every way out once it exists.
			sigc := make(chan os.Signal, 1)
			signal.Notify(sigc, os.Interrupt, syscall.SIGTERM)
			defer signal.Stop(sigc)
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			var got atomic.Value // the os.Signal received
			go func() {
				select {
				case s := <-sigc:
					got.Store(s)
					cancel()
				case <-ctx.Done():
				}
			}()
			// The claim's lease is renewed while run lives; when the server
			// says the claim is over (an admin released it, or it expired
			// while the server was out of reach), CMD is stopped.
			var lostClaim atomic.Value // the error that ended the claim
			signalled := func() (syscall.Signal, bool) {
				s, ok := got.Load().(os.Signal)
				if !ok {
					return 0, false
				}
				ss, _ := s.(syscall.Signal)
				return ss, true
			}
			// Exiting on a signal: 128+signal, as a shell does.
			interrupted := func(id string) error {
				s, ok := signalled()
				if !ok {
					if err, lost := lostClaim.Load().(error); lost {
						return fmt.Errorf("claim %s is over, so CMD was stopped: %w", id, err)
					}
					return ctx.Err()
				}
				fmt.Fprintf(e.errOut, "gpuslice: %s: %s, releasing the claim\n", id, s)
				return &ExitError{Code: 128 + int(s)}
			}
			// A signal does not cut the POST short at once (a cancelled POST
			// could leave a claim nobody knows the id of): it is acted on
			// once the id is known, or 10s later against a server that
			// does not answer.
			createCtx, createCancel := context.WithCancel(context.WithoutCancel(cmd.Context()))
			defer createCancel()
			defer context.AfterFunc(ctx, func() { time.AfterFunc(10*time.Second, createCancel) })()
			tenantName := tenant
			if !cmd.Flags().Changed("tenant") {
				// A tenant token claims for its own tenant; only an admin
				// token must name one, and gets "default".
				tenantName = ""
			}
			claim, err := cl.CreateClaim(createCtx, tenantName, cs)
			if ce := (*client.Error)(nil); err != nil && tenantName == "" && errors.As(err, &ce) && ce.Field == "tenant" && ce.Status == http.StatusUnprocessableEntity {
				tenantName = tenant
				claim, err = cl.CreateClaim(createCtx, tenantName, cs)
			}
			if err != nil {
				if s, ok := signalled(); ok {
					fmt.Fprintf(e.errOut, "gpuslice: %s while creating the claim: %v\n", s, err)
					return &ExitError{Code: 128 + int(s)}
				}
				return err
			}
			// The id is kept apart from the polled claim: a failed poll
			// answers a zero claim.
			id := claim.ID
			release := func() {
				rc, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if _, err := cl.Release(rc, id); err != nil {
					var ce *client.Error
					if errors.As(err, &ce) && ce.Status == http.StatusConflict && ce.State == api.Failed {
						// Its GPU failed under it (or its node was removed):
						// over already, nothing to give back; said already
						// when the lease found it over.
						if _, said := lostClaim.Load().(error); !said {
							fmt.Fprintf(e.errOut, "gpuslice: claim %s had failed: %s\n", id, ce.Message)
						}
						return
					}
					fmt.Fprintf(e.errOut, "gpuslice: releasing %s: %v\n", id, err)
				}
			}
			defer release()
			lost := cl.HoldLease(ctx, id, client.LeaseInterval(cs.LeaseSeconds))
			go func() {
				if err, ok := <-lost; ok {
					lostClaim.Store(err)
					why := err.Error()
					if ce := (*client.Error)(nil); errors.As(err, &ce) && ce.Message != "" {
						why = ce.Message
					}
					fmt.Fprintf(e.errOut, "gpuslice: %s is over: %s; stopping CMD (SIGTERM, then SIGKILL after 10s)\n", id, why)
					cancel()
				}
			}()
			deadline := time.Now().Add(timeout)
			timedOut := func(what string) error {
				return fmt.Errorf("claim %s %s after --timeout %s; released it", id, what, timeout)
			}
			shown := ""
			for claim.State == api.Pending {
				if line := fmt.Sprintf("gpuslice: %s pending, queue position %d: %s", id, claim.QueuePosition, claim.Reason); line != shown {
					fmt.Fprintln(e.errOut, line)
					shown = line
				}
				if ctx.Err() != nil {
					return interrupted(id)
				}
				// The long poll never outlasts the time left.
				wait, pctx, pcancel := 20*time.Second, ctx, context.CancelFunc(func() {})
				if timeout > 0 {
					left := time.Until(deadline)
					if left <= 0 {
						return timedOut(fmt.Sprintf("still pending (%s)", claim.Reason))
					}
					wait = min(wait, left)
					// A little past the server's own wait, in case it
					// answers late.
					pctx, pcancel = context.WithDeadline(ctx, deadline.Add(2*time.Second))
				}
				next, err := cl.Claim(pctx, id, api.Pending, wait)
				pcancel()
				if err != nil {
					if ctx.Err() != nil {
						return interrupted(id)
					}
					if timeout > 0 && time.Now().After(deadline) {
						return timedOut(fmt.Sprintf("still pending (%s)", claim.Reason))
					}
					return err
				}
				claim = next
			}
			if claim.State != api.Allocated {
				return fmt.Errorf("claim %s is %s: %s", claim.ID, claim.State, claim.Reason)
			}
			// Wait until the agent made the devices real (MIG instances
			// created and adopted).
			for claim.Planned() {
				select {
				case <-ctx.Done():
					return interrupted(id)
				case <-time.After(200 * time.Millisecond):
				}
				next, err := cl.Claim(ctx, id, "", 0)
				if err != nil {
					if ctx.Err() != nil {
						return interrupted(id)
					}
					return err
				}
				claim = next
				if timeout > 0 && time.Now().After(deadline) {
					return timedOut("has no devices yet: the node has not created them")
				}
			}
			if ctx.Err() != nil {
				return interrupted(id)
			}
			a := claim.Allocation
			checked := map[string]bool{node: node != ""} // --node was checked before the claim was made
			for _, d := range a.Devices {
				if checked[d.Node] {
					continue
				}
				checked[d.Node] = true
				if err := runsHere(ctx, cl, d.Node); err != nil {
					return fmt.Errorf("claim %s was placed on node %s: %w; released it", claim.ID, d.Node, err)
				}
			}
			// Only what valid device ids and pipe directories produce
			// reaches CMD (or the terminal): no newline, NUL or shell
			// syntax, no pipe directory outside alloc.MPSPipeRoot.
			if err := alloc.CheckProcessEnv(a.Env); err != nil {
				return fmt.Errorf("claim %s: refusing to start %s with this environment: %w", claim.ID, args[0], err)
			}
			fmt.Fprintf(e.errOut, "gpuslice: %s allocated: %s\n", claim.ID, devicesText(claim))
			for _, note := range a.Notes {
				fmt.Fprintf(e.errOut, "gpuslice: %s note: %s\n", claim.ID, note)
			}
			child := exec.Command(args[0], args[1:]...)
			child.Stdin, child.Stdout, child.Stderr = os.Stdin, e.out, e.errOut
			child.Env = os.Environ()
			for _, k := range sortedKeys(a.Env) {
				child.Env = append(child.Env, k+"="+a.Env[k])
			}
			// CMD dies with run (kill -9 included): its claim is released
			// by the lease then, and no process outlives it.
			done, err := services.StartTied(child)
			if err != nil {
				return err
			}
			_ = cl.Do(ctx, http.MethodPost, "/v1/claims/"+claim.ID+"/running", nil, nil)
			select {
			case err = <-done:
			case <-ctx.Done():
				// CMD gets the signal first; the claim is released once
				// it has exited (or been killed 10s later).
				s, ok := signalled()
				if !ok {
					s = syscall.SIGINT
					if _, lost := lostClaim.Load().(error); lost {
						s = syscall.SIGTERM
					}
				}
				_ = child.Process.Signal(s)
				select {
				case err = <-done:
				case <-time.After(10 * time.Second):
					_ = child.Process.Kill()
					err = <-done
				}
			}
			if lerr, lost := lostClaim.Load().(error); lost {
				return fmt.Errorf("claim %s is over, so CMD was stopped: %w", id, lerr)
			}
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					// CMD ended by a signal: 128+the signal we passed on
					// (if any), else 128+its own, as a shell reports it.
					if s, ok := signalled(); ok {
						return &ExitError{Code: 128 + int(s)}
					}
					return &ExitError{Code: 128 + int(ws.Signal())}
				}
				return &ExitError{Code: ee.ExitCode()}
			}
			// CMD that handled the signal and exited keeps its own code.
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&memory, "memory", "", "GPU memory, e.g. 10GiB (default: shared modes 1/16 of the GPU's memory, exclusive and MIG the whole device)")
	f.IntVar(&compute, "compute", 0, "percent of a GPU's SMs (MPS enforces it)")
	f.StringVar(&mode, "mode", "auto", "auto, exclusive, timeslice, mps or mig")
	f.StringVar(&profile, "profile", "", "a MIG profile such as 1g.10gb")
	f.StringVar(&isolation, "isolation", "", "none, tenant (default) or hardware")
	f.StringVar(&workload, "workload", "", "inference, interactive, batch or training (guides auto)")
	f.StringVar(&tenant, "tenant", "default", "the tenant to claim for (admin tokens; a tenant token claims for its own when this is not given)")
	f.StringVar(&node, "node", "", "claim on this node, which must be this host's (default: this host when it is a node); CMD runs here, so a node of another host is refused")
	f.IntVar(&gpus, "gpus", 1, "how many devices, each with --memory, --compute, --mode and --profile, all on one node (CUDA_VISIBLE_DEVICES lists them all)")
	f.BoolVar(&sameGPU, "same-gpu", false, "with --gpus or several --device: all the devices on one physical GPU (MIG instances or shares of it)")
	f.StringArrayVar(&devices, "device", nil, "one device of its own shape, repeatable, all on one node: memory=10GiB,compute=30,mode=mps,profile=3g.20gb,workload=inference (instead of --memory, --compute, --mode, --profile, --workload and --gpus)")
	f.StringVar(&policy, "memory-policy", "warn", "when a process exceeds its memory: warn or kill")
	f.StringVar(&faultPolicy, "fault-policy", "fail", "when the GPU fails while CMD runs: fail or requeue")
	f.IntVar(&priority, "priority", 0, "higher goes first in the queue; at most the tenant's max priority, which an admin sets (gpuslice tenants put NAME --max-priority N; default 0)")
	f.DurationVar(&timeout, "timeout", 0, "give up waiting after this long, releasing the claim (0 = wait)")
	f.DurationVar(&leaseFor, "lease", 30*time.Second, "the claim's lease, renewed while run lives: if run dies (kill -9 included), the server releases the claim this long (plus its --lease-grace) after the last renewal")
	f.BoolVar(&waitForNodes, "wait-for-nodes", false, "queue a claim no registered node could ever hold, for nodes that may join (else the server refuses it)")
	return cmd
}

func agentCmd(e *env, c *conn) *cobra.Command {
	var name, simulate, cdiDir, faultDir string
	var interval time.Duration
	cmd := &cobra.Command{
		Use:     "agent",
		Short:   "Run a node agent that joins a gpuslice server (an agent token)",
		Example: "  gpuslice agent --server https://gpus.example:7777 --token gs_agent_…",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			log := slog.New(slog.NewTextHandler(e.errOut, nil))
			// Real GPUs, or simulated ones only when --simulate says so: an
			// agent that joined a real fleet on fake GPUs would hand real
			// jobs fake uuids.
			dev, why, err := openDeviceFor(simulate, name, false, log) // simulated GPUs seeded from the node name
			if err != nil {
				return err
			}
			log.Info(why)
			cl, err := c.client()
			if err != nil {
				return err
			}
			if err := watchFaults(ctx, dev, faultDir, faultDir != "", log); err != nil {
				return err
			}
			acfg := agent.Config{Name: name, Host: hostName(), Client: cl, Device: dev, Log: log, Interval: interval}
			agentDuties(&acfg, dev, log, cdiDir)
			a, err := agent.New(acfg)
			if err != nil {
				return err
			}
			log.Info("agent joining", "server", c.server, "node", name)
			if err := a.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "node", hostName(), "node name (as serve's --node and run's --node)")
	cmd.Flags().StringVar(&name, "name", hostName(), "node name")
	_ = cmd.Flags().MarkDeprecated("name", "use --node")
	cmd.Flags().StringVar(&simulate, "simulate", "", "simulate GPUs: a preset or a YAML file (without it the agent drives the real GPUs through NVML, and exits saying what to check when NVML does not load)")
	cmd.Flags().DurationVar(&interval, "interval", 5*time.Second, "heartbeat interval")
	cmd.Flags().StringVar(&cdiDir, "cdi-dir", "", "write a CDI spec per claim here for container runtimes (e.g. /var/run/cdi)")
	cmd.Flags().StringVar(&faultDir, "fault-dir", "", "simulated GPUs only: apply the fault requests written here (gpuslice dra simulate-fault --fault-dir)")
	return cmd
}

// flagMemoryMiB reads --memory: a size with its unit (10GiB, 512MiB,
// 1.5Gi). A bare number is refused rather than guessed: "--memory 10"
// meant as 10 GiB would silently ask for 10 MiB.
func flagMemoryMiB(v string) (int64, error) {
	t := strings.TrimSpace(v)
	if _, err := strconv.ParseFloat(t, 64); err == nil {
		return 0, fmt.Errorf("%q has no unit: write %sGiB or %sMiB", v, t, t)
	}
	return spec.ParseMemoryMiB(v)
}

// runsHere says whether a node's GPUs are on this host, where run starts
// CMD: the node's agent reports the machine it runs on (a node of an
// older agent, which does not, counts as this host's only when it is
// named after it). An error says what to do instead.
func runsHere(ctx context.Context, cl *client.Client, node string) error {
	var n api.Node
	if err := cl.Do(ctx, http.MethodGet, "/v1/nodes/"+url.PathEscape(node), nil, &n); err != nil {
		var ce *client.Error
		if errors.As(err, &ce) && ce.Status == http.StatusNotFound {
			return fmt.Errorf("--node %s: no such node (gpuslice nodes ls lists them; leave --node out to claim on this host's)", node)
		}
		return fmt.Errorf("--node %s: %w", node, err)
	}
	host := n.Host
	if host == "" {
		host = n.Name
	}
	if host != hostName() {
		return fmt.Errorf("node %s is on host %s, not this one (%s): gpuslice run starts CMD here, where that node's GPUs are not; run it on %s, or leave --node out", node, host, hostName(), host)
	}
	return nil
}

// parseDevice reads one --device: comma-separated key=value pairs
// (memory, compute, mode, profile, workload), each at most once; the
// request is named dev<i>. The values are checked by the server as any
// claim's are; what is read here (units, numbers, keys) is checked here.
func parseDevice(v string, i int) (alloc.Request, error) {
	r := alloc.Request{Name: "dev" + strconv.Itoa(i)}
	if strings.TrimSpace(v) == "" {
		return r, fmt.Errorf("empty: want key=value pairs such as memory=10GiB,mode=mps")
	}
	seen := map[string]bool{}
	for _, kv := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
		k, val = strings.TrimSpace(k), strings.TrimSpace(val)
		if !ok || k == "" || val == "" {
			return r, fmt.Errorf("%q: want key=value (keys: memory, compute, mode, profile, workload)", kv)
		}
		if seen[k] {
			return r, fmt.Errorf("%s given twice", k)
		}
		seen[k] = true
		switch k {
		case "memory":
			mib, err := flagMemoryMiB(val)
			if err != nil {
				return r, fmt.Errorf("memory: %w", err)
			}
			r.MemoryMiB = mib
		case "compute":
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 || n > 100 {
				return r, fmt.Errorf("compute %q: want a whole percent 0..100", val)
			}
			r.ComputePercent = n
		case "mode":
			r.Mode = alloc.Mode(val)
		case "profile":
			r.Profile = val
		case "workload":
			r.Workload = alloc.Workload(val)
		default:
			return r, fmt.Errorf("unknown key %q: want memory, compute, mode, profile or workload", k)
		}
	}
	return r, nil
}
