package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpu/fake"
	"github.com/gpuslice/gpuslice/internal/k8s/draplugin"
)

// FaultDirName is the fault directory of a simulated dra-driver, in its
// --state-dir.
const FaultDirName = "faults"

// faultPoll is how often a simulated machine looks for fault requests.
const faultPoll = 500 * time.Millisecond

// watchFaults applies the fault requests written to dir (fake.FaultWatcher)
// to a simulated machine until ctx ends. explicit says the user named dir:
// then real GPUs are an error; otherwise they just have no fault directory.
func watchFaults(ctx context.Context, dev gpu.Device, dir string, explicit bool, log *slog.Logger) error {
	m, ok := dev.(*fake.Machine)
	if !ok {
		if explicit {
			return fmt.Errorf("--fault-dir %s: faults are injected into simulated GPUs only (--simulate)", dir)
		}
		return nil
	}
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("fault directory: %w", err)
	}
	tick := time.NewTicker(faultPoll)
	w := &fake.FaultWatcher{Dir: dir, Machine: m, Tick: tick.C, Log: log, AwaitSubscriber: true}
	go func() {
		defer tick.Stop()
		_ = w.Run(ctx)
	}()
	log.Info("simulated faults: write requests to the fault directory (gpuslice dra simulate-fault)", "dir", dir)
	return nil
}

// draSimulateFaultCmd writes a fault request for a running simulated
// machine and waits for its outcome.
func draSimulateFaultCmd(e *env) *cobra.Command {
	var (
		stateDir, faultDir, instance string
		gpuIndex, xid                int
		lost, recover                bool
		timeout                      time.Duration
	)
	cmd := &cobra.Command{
		Use:     "simulate-fault",
		Aliases: []string{"simulate-xid"},
		Short:   "Inject an XID, a lost GPU or a recovery into a running simulated dra-driver or agent",
		Long: `Tells a running simulated machine — "gpuslice dra-driver --simulate", or "gpuslice agent
--simulate … --fault-dir DIR", or "gpuslice serve" on simulated GPUs — that a GPU just had an XID,
fell off the bus, or was reset, as if NVML had reported it; the driver then taints the GPU's
devices (a fatal XID or a lost GPU: NoExecute, so Kubernetes evicts the pods using them) and
reports the device health to the kubelet, as it would on real GPUs.

It writes one request to the fault directory — <state-dir>/` + FaultDirName + ` of the driver, or --fault-dir —
and waits for the machine's answer. A request is a small JSON file, which a script can write
itself (write .NAME.tmp, then rename it to NAME.json):

  {"gpu": 0, "xid": 79}                            XID 79 on GPU 0
  {"instance": "MIG-<uuid>", "xid": 94}            XID 94 on a MIG instance (or a GPU) by uuid
  {"gpu": 1, "lost": true}                         GPU 1 falls off the bus
  {"gpu": 1, "recover": true}                      GPU 1 is reset and healthy again

The machine polls the directory every ` + faultPoll.String() + `, applies each request once, in name order,
and replaces NAME.json by NAME.done (what happened) or NAME.error (why not: the field and what
is valid); this command prints the one and fails with the other, and removes it. Fatal XIDs:
48, 79, 94, 95, 119, 120; others (13, 31, 43, 63, …) are not. Real GPUs have no fault directory.

Security: the fault directory is the driver's own state directory, a root-only hostPath
(` + draplugin.DefaultStateDir + ` on the node); whoever can write there is root on the
node already. In the driver's pod: kubectl exec -n NS DRIVER-POD -- /gpuslice dra simulate-fault …`,
		Example: "  gpuslice dra simulate-fault --gpu 0 --xid 79\n" +
			"  gpuslice dra simulate-fault --state-dir /tmp/dra --instance MIG-4f1c… --xid 94\n" +
			"  gpuslice dra simulate-fault --gpu 1 --lost\n" +
			"  gpuslice dra simulate-fault --gpu 1 --recover\n" +
			"  gpuslice dra simulate-fault --fault-dir /tmp/agent-faults --gpu 2 --xid 48   # gpuslice agent --fault-dir",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var r fake.FaultRequest
			if cmd.Flags().Changed("gpu") {
				r.GPU = &gpuIndex
			}
			r.Instance = instance
			if cmd.Flags().Changed("xid") {
				r.XID = &xid
			}
			r.Lost, r.Recover = lost, recover
			if err := r.Validate(); err != nil {
				return flagWords(err)
			}
			if timeout <= 0 {
				return fmt.Errorf("--timeout %s: want a positive duration, e.g. 30s", timeout)
			}
			dir := faultDir
			if dir == "" {
				dir = filepath.Join(stateDir, FaultDirName)
			}
			if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
				return fmt.Errorf("no fault directory %s: is a simulated driver running with --state-dir %s (or an agent with --fault-dir)? Real GPUs have none", dir, filepath.Dir(dir))
			}
			name, err := fake.WriteFaultRequest(dir, r, time.Now())
			if err != nil {
				return err
			}
			o, err := waitFaultOutcome(cmd.Context(), dir, name, timeout)
			if err != nil {
				return err
			}
			done, failed := fake.FaultOutcomeFiles(name)
			_ = os.Remove(filepath.Join(dir, done))
			_ = os.Remove(filepath.Join(dir, failed))
			if o.Err != nil {
				return fmt.Errorf("the simulated machine refused %s: %w", r, o.Err)
			}
			fmt.Fprintln(e.out, o.Done)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&stateDir, "state-dir", draplugin.DefaultStateDir, "the simulated dra-driver's --state-dir (its fault directory is <state-dir>/"+FaultDirName+")")
	f.StringVar(&faultDir, "fault-dir", "", "the fault directory itself (an agent's or serve's --fault-dir); overrides --state-dir")
	f.IntVar(&gpuIndex, "gpu", 0, "the GPU's index")
	f.StringVar(&instance, "instance", "", "a MIG instance's (or GPU's) uuid, instead of --gpu")
	f.IntVar(&xid, "xid", 0, "raise this XID (fatal: 48, 79, 94, 95, 119, 120)")
	f.BoolVar(&lost, "lost", false, "the GPU falls off the bus (stays lost until the simulated machine restarts)")
	f.BoolVar(&recover, "recover", false, "the GPU is reset and healthy again")
	f.DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for the machine's answer")
	return cmd
}

// flagWords says a fault request's problems in this command's flags.
func flagWords(err error) error {
	return errors.New(strings.NewReplacer(
		`"xid" (a number)`, "--xid N", `"lost": true`, "--lost", `"recover": true`, "--recover",
		`"gpu" (an index)`, "--gpu N", `"instance" (a MIG or GPU uuid)`, "--instance UUID",
		`"gpu"`, "--gpu", `"instance"`, "--instance", `"xid"`, "--xid", `"lost"`, "--lost", `"recover"`, "--recover",
	).Replace(err.Error()))
}

// waitFaultOutcome polls for a request's outcome. On timeout the request
// is withdrawn when the machine has not taken it yet.
func waitFaultOutcome(ctx context.Context, dir, name string, timeout time.Duration) (fake.FaultOutcome, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		o, ok, err := fake.ReadFaultOutcome(dir, name)
		if err != nil || ok {
			return o, err
		}
		select {
		case <-ctx.Done():
			return o, ctx.Err()
		case <-tick.C:
			continue
		case <-deadline.C:
		}
		if err := os.Remove(filepath.Join(dir, name)); err == nil {
			return o, fmt.Errorf("no answer in %s from a simulated machine watching %s (request withdrawn): is it running?", timeout, dir)
		} else if !errors.Is(err, os.ErrNotExist) {
			return o, err
		}
		// Taken as the time ran out: the answer is on its way.
		if o, ok, err := fake.ReadFaultOutcome(dir, name); err != nil || ok {
			return o, err
		}
		return o, fmt.Errorf("the simulated machine took %s from %s but gave no answer in %s", name, dir, timeout)
	}
}
