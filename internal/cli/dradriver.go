package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuslice/gpuslice/internal/gpu/fake"
	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
	"github.com/gpuslice/gpuslice/internal/k8s/draplugin"
	"github.com/gpuslice/gpuslice/internal/k8s/scalezero"
	"github.com/gpuslice/gpuslice/internal/node/cdi"
	"github.com/gpuslice/gpuslice/internal/node/mps"
	"github.com/gpuslice/gpuslice/internal/node/mps/mpssim"
	"github.com/gpuslice/gpuslice/internal/node/watchdog"
)

// draDriverCmd runs the node side of the DRA driver: the kubelet plugin.
func draDriverCmd(e *env) *cobra.Command {
	var (
		node, simulate, kubeconfig, cdiDir, stateDir, registrarDir, mpsRoot, mpsControl, migMinors, metricsListen, xidNoSchedule, tenants, noTenantNS, migProfilesFlag string
		watchInterval, memoryGrace                                                                                                                                     time.Duration
		tenantIsolation, watchNamespaces, migBinding                                                                                                                   bool
	)
	cmd := &cobra.Command{
		Use:   "dra-driver",
		Short: "Run the DRA kubelet plugin of " + dranames.DriverName + " on this node (prepare claims: MIG, MPS, CDI)",
		Long: `Runs gpuslice's DRA driver on one Kubernetes node, as a DaemonSet pod would: it registers
with the kubelet through the plugin registration socket, serves the DRA gRPC service, and
publishes the node's GPUs as ResourceSlices (what "gpuslice dra slices" prints). When the
kubelet prepares a claim the stock scheduler allocated, it creates the MIG instance at the
allocated placement (turning MIG on or off as the device needs), starts or joins the MPS control
daemon of an MPS device, and writes a CDI spec whose edits carry the device nodes,
CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES, the MPS pipe directory and CUDA_MPS_* limits;
unprepare undoes it. Opaque parameters for ` + dranames.DriverName + ` may be NVIDIA's GpuConfig /
MigDeviceConfig (sharing.strategy TimeSlicing or MPS) or gpuslice's SliceConfig.

With --mig-binding-conditions (the default) MIG devices are published with binding conditions
(KEP-5007): the stock scheduler binds a pod whose claim got a MIG device only once the driver
has created the instance at the allocated placement and set gpuslice.dev/mig-ready in the
claim's status.devices; if the instance cannot be made it sets gpuslice.dev/mig-failed and the
scheduler allocates again. Prepare then adopts the instance. Time-sliced GPUs get the claims'
time-slice interval (nvidia-smi compute-policy --set-timeslice), Default when the last leaves.

Every prepare is recorded in a checkpoint in --state-dir before the hardware changes and after;
a driver restarted mid-prepare adopts the MIG instance and MPS daemon it finds. The memory
watchdog of "gpuslice agent" runs over the prepared claims, and /metrics on --metrics-listen
exports gpuslice_slice_* per claim with namespace, pod and claim labels.

GPU health becomes device taints on the published slices (key ` + dranames.TaintKey + `, value
the XID): a fatal XID (48, 79, 94, 95, 119, 120) or a lost GPU taints every device of the GPU
NoExecute, so Kubernetes evicts the pods using it (the device-taint-eviction controller of
kube-controller-manager) and schedules nothing there; the XIDs in --xid-noschedule taint
NoSchedule (running pods stay); others are ignored. An XID NVML attributes to a MIG instance
taints that instance's placement only. Taints live in the driver's memory: restarting the driver
(after the GPU was reset) clears them, except on GPUs the device layer still lists unhealthy.
The same faults reach the kubelet's DRAResourceHealth stream (feature gate ResourceHealthStatus,
on by default from Kubernetes 1.36), which shows them in the pod's
status.containerStatuses[].allocatedResourcesStatus: NoExecute devices Unhealthy, a lost GPU's
Unknown, NoSchedule ones Healthy with the taint in the message; untainted ones Unknown when the
device layer gives no health events. The list is sent again every 10s (timeout 30s).

Tenant isolation with the stock kube-scheduler (--tenant-isolation, on by default): each GPU's
shared device is published once per tenant, tainted gpuslice.dev/tenant=<tenant>:NoSchedule,
all copies consuming the whole GPU's counters, so one GPU never serves two tenants while claims
of one tenant share it; "gpuslice dra-webhook" (/mutate-claims) gives each claim its tenant's
toleration. The tenants are --tenants and, with --watch-namespaces, every namespace's (its
gpuslice.dev/tenant label, else its name), at most 128 per node, except namespaces without
copies: kube-system, kube-public, kube-node-lease, those in --no-tenant-namespaces and those
labelled gpuslice.dev/tenant-copies=false (a namespace labelled gpuslice.dev/tenant-copies=true,
or whose tenant is in --tenants, always has copies; a copy an allocated claim holds stays until
it is released). --tenant-isolation=false publishes one untainted shared device per GPU.

With --simulate it runs on simulated GPUs whose MIG layout is kept
in --state-dir. Their MPS devices get gpuslice's simulated control daemon (<state-dir>/bin/
nvidia-cuda-mps-control, a link to this binary: a control socket, pid file and log in each pipe
directory, the defaults it was given in its ` + mpssim.LimitsFile + ` file, no MPS server;
--mps-control '' starts none, or name another binary). Faults are injected into simulated GPUs from
outside the process by writing requests to <state-dir>/` + FaultDirName + ` ("gpuslice dra simulate-fault").`,
		Example: "  gpuslice dra-driver --node $NODE_NAME\n  gpuslice dra-driver --simulate dgx-a100 --node gpu-1 --kubeconfig ~/.kube/config --state-dir /tmp/dra --registrar-dir /tmp/dra/reg --cdi-dir /tmp/dra/cdi",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if node == "" {
				return errors.New("--node: the Kubernetes node name is required (in a pod: the downward API's spec.nodeName)")
			}
			noSchedule, err := dradriver.ParseXIDList(xidNoSchedule)
			if err != nil {
				return fmt.Errorf("--%w", err)
			}
			if watchInterval <= 0 {
				return fmt.Errorf("--watch-interval %s: want a positive duration, e.g. 10s", watchInterval)
			}
			static, err := dradriver.ParseTenants(tenants)
			if err != nil {
				return fmt.Errorf("--tenants: %w", err)
			}
			migProfiles, err := dradriver.ParseMIGProfiles(migProfilesFlag, nil)
			if err != nil {
				return fmt.Errorf("--mig-profiles: %w", err)
			}
			noCopies, err := dradriver.ParseNamespaces(noTenantNS)
			if err != nil {
				return fmt.Errorf("--no-tenant-namespaces: %w", err)
			}
			if !tenantIsolation && (static != nil || cmd.Flags().Changed("watch-namespaces") && watchNamespaces) {
				return errors.New("--tenants and --watch-namespaces need --tenant-isolation")
			}
			log := slog.New(slog.NewTextHandler(e.errOut, &slog.HandlerOptions{Level: slog.LevelInfo}))
			rest, _, err := scalezero.KubeConfig(kubeconfig)
			if err != nil {
				return err
			}
			dev, why, err := openDeviceFor(simulate, node, false, log, filepath.Join(stateDir, "simulated-gpus.json"))
			if err != nil {
				return err
			}
			log.Info(why)
			cfg := draplugin.Config{Node: node, Device: dev, CDIDir: cdiDir, StateDir: stateDir, RegistrarDir: registrarDir,
				MPSRoot: mpsRoot, MPSControl: mpsControl, Log: log, MemoryGrace: memoryGrace, MIGBindingConditions: migBinding,
				Health:    &dradriver.HealthPolicy{NoSchedule: noSchedule},
				Isolation: dradriver.Options{TenantIsolation: tenantIsolation, Tenants: static, MIGProfiles: migProfiles}}
			if m, ok := dev.(*fake.Machine); ok {
				cfg.Kill = m.StopProcess
				if !cmd.Flags().Changed("mps-control") {
					if cfg.MPSControl, err = simulatedMPSControl(stateDir); err != nil {
						return fmt.Errorf("the simulated MPS control daemon: %w", err)
					}
					log.Info("MPS: the simulated control daemon", "binary", cfg.MPSControl)
				}
			} else {
				if !cmd.Flags().Changed("mps-control") {
					cfg.MPSControl = mps.ControlBinary
				}
				cfg.Owner = watchdog.EnvOwner("")
				cfg.Kill = func(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }
				if mm, err := cdi.ReadMIGMinors(migMinors); err == nil {
					cfg.MIGMinors = mm
				} else if migMinors != "" || !errors.Is(err, os.ErrNotExist) {
					return fmt.Errorf("--mig-minors: %w", err)
				}
			}
			opts := draplugin.RunOptions{REST: rest, WatchInterval: watchInterval, WatchNamespaces: watchNamespaces, NoTenantNamespaces: noCopies}
			if metricsListen != "" {
				ln, err := net.Listen("tcp", metricsListen)
				if err != nil {
					return fmt.Errorf("--metrics-listen %s: %w", metricsListen, err)
				}
				opts.Metrics = ln
				log.Info("metrics", "addr", ln.Addr().String())
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := watchFaults(ctx, dev, filepath.Join(stateDir, FaultDirName), false, log); err != nil {
				return err
			}
			return draplugin.Run(ctx, cfg, opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&node, "node", os.Getenv("NODE_NAME"), "the Kubernetes node name (default $NODE_NAME)")
	f.StringVar(&simulate, "simulate", "", "a simulated machine (preset or YAML file) instead of the real GPUs")
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster, else $KUBECONFIG or ~/.kube/config)")
	f.StringVar(&cdiDir, "cdi-dir", draplugin.DefaultCDIDir, "where CDI specs of prepared claims are written")
	f.StringVar(&stateDir, "state-dir", draplugin.DefaultStateDir, "the plugin's directory: DRA socket, checkpoint, simulated GPUs' state")
	f.StringVar(&registrarDir, "registrar-dir", draplugin.DefaultRegistrarDir, "the kubelet's plugin registration directory")
	f.StringVar(&mpsRoot, "mps-root", "/run/gpuslice/mps", "host directory of the MPS pipe directories (containers see /run/gpuslice/mps/<device>)")
	f.StringVar(&mpsControl, "mps-control", "", "the MPS control binary (default "+mps.ControlBinary+" on real GPUs, the simulated one on simulated GPUs; '' for none)")
	f.StringVar(&migMinors, "mig-minors", "", "the nvidia-caps mig-minors table (default "+cdi.DefaultMIGMinorsPath+" when present)")
	f.StringVar(&metricsListen, "metrics-listen", ":9464", "address of /metrics (empty: none)")
	f.DurationVar(&watchInterval, "watch-interval", 10*time.Second, "how often the memory watchdog reads the GPUs' processes")
	f.BoolVar(&tenantIsolation, "tenant-isolation", true, "publish each shared GPU once per tenant, tainted with the tenant (false: one untainted shared device per GPU)")
	f.StringVar(&tenants, "tenants", "", "comma-separated tenants to publish shared GPUs for (with --tenant-isolation)")
	f.BoolVar(&watchNamespaces, "watch-namespaces", true, "also publish shared GPUs for every namespace's tenant (gpuslice.dev/tenant label, else its name)")
	f.StringVar(&noTenantNS, "no-tenant-namespaces", "", "comma-separated namespaces whose tenant gets no shared GPUs from --watch-namespaces, beside kube-system, kube-public, kube-node-lease (a namespace labelled "+dranames.TenantCopiesKey+"=true still gets them)")
	f.StringVar(&xidNoSchedule, "xid-noschedule", joinXIDs(dradriver.DefaultNoScheduleXIDs),
		"non-fatal XIDs that taint the GPU's devices NoSchedule (comma-separated, or none); fatal XIDs always taint NoExecute")
	f.BoolVar(&migBinding, "mig-binding-conditions", true, "publish MIG devices with binding conditions and create their instances before the pod binds (needs Kubernetes 1.36: DRADeviceBindingConditions; false: created at prepare)")
	f.StringVar(&migProfilesFlag, "mig-profiles", "all", "MIG profiles published at every placement: all, none (MIG-capable GPUs as whole and shared GPUs only) or a list such as 1g.5gb,3g.20gb,7g.40gb; fewer devices per node make every kube-scheduler Filter cheaper")
	f.DurationVar(&memoryGrace, "memory-grace", 30*time.Second, "how long a claim under memoryPolicy kill may stay over its memory")
	return cmd
}

func joinXIDs(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}
