package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuslice/gpuslice/internal/k8s/controlplane"
	"github.com/gpuslice/gpuslice/internal/k8s/schedbench"
)

func benchSchedulerCmd(e *env) *cobra.Command {
	var nodes, kube, cases []string
	var pods, tenants, workers, profileSeconds int
	var timeout time.Duration
	var allGates bool
	var profileDir string
	cmd := &cobra.Command{
		Use:   "scheduler",
		Short: "Pods/s of the stock kube-scheduler on gpuslice's ResourceSlices and on NVIDIA-shaped ones, on a real control plane",
		Long: `Starts, for each Kubernetes version and each case, a fresh etcd and kube-apiserver
(the control plane scripts/controlplane.sh builds; the same directories apitest uses),
creates the nodes (simulated 8×A100-40GB DGX nodes, ready, no kubelet) with the case's
ResourceSlices and the pods, each with its own ResourceClaim, from several goroutines,
then starts the stock kube-scheduler and times every bind. PODS/S is the steady state:
the binds from the 10th to the 90th percentile over the time between them; CPU MS/POD is
kube-scheduler's CPU time per bound pod (a figure other load on the machine changes less).

Cases are SHAPE/WORKLOAD[/copies][/mig=PROFILES]:
  gpuslice              what gpuslice's DRA driver publishes (whole GPU, shared GPU, MIG
                        placements; MIG devices with binding conditions, as by default);
                        /copies: one tainted copy of each shared GPU per tenant (the
                        driver's default --tenant-isolation), claims tolerating their own;
                        /mig=none or /mig=1g.5gb:3g.20gb: the driver's --mig-profiles
  nvidia-shares         one device per GPU shared by memory (consumable capacity)
  nvidia-partitionable  NVIDIA's 1.35+ shape without MIG: a per-node counter slice, one
                        counter set per GPU, the whole GPU consuming all of it
  nvidia-dynamic-mig    the same with every MIG profile at every placement
WORKLOAD is share (a 4Gi memory share) or whole (a whole GPU).`,
		Example: `  gpuslice bench scheduler --nodes 50,200,500 --kubernetes v1.36.3,v1.37.2
  gpuslice bench scheduler --nodes 200 --cases gpuslice/share/copies,nvidia-shares/share --profile-dir /tmp/prof`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var ns []int
			for _, s := range nodes {
				n, err := strconv.Atoi(strings.TrimSpace(s))
				if err != nil || n < 1 {
					return fmt.Errorf("--nodes %q: want node counts such as 50,200,500", s)
				}
				ns = append(ns, n)
			}
			var dirs []string
			if len(kube) == 0 {
				dirs = append(dirs, controlplane.BinDir())
			}
			for _, k := range kube {
				dir := k
				if !strings.Contains(k, string(os.PathSeparator)) {
					if !strings.HasPrefix(k, "v1.") {
						return fmt.Errorf("--kubernetes %q: want a version such as v1.37.2 (built by scripts/controlplane.sh) or a directory holding its binaries", k)
					}
					dir = controlplane.BinDirFor(k)
				}
				if err := controlplane.Built(dir); err != nil {
					return fmt.Errorf("--kubernetes %s: %w (build it with scripts/controlplane.sh)", k, err)
				}
				dirs = append(dirs, dir)
			}
			if err := controlplane.Built(dirs[0]); err != nil {
				return fmt.Errorf("%w: build the control plane with scripts/controlplane.sh, or set %s", err, controlplane.EnvBinDir)
			}
			var cs []schedbench.Case
			for _, c := range cases {
				k, err := schedbench.ParseCase(strings.TrimSpace(c))
				if err != nil {
					return fmt.Errorf("--cases: %w", err)
				}
				cs = append(cs, k)
			}
			tmp, err := os.MkdirTemp("", "gpuslice-bench-scheduler-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(tmp)
			if profileDir != "" {
				if profileDir, err = filepath.Abs(profileDir); err != nil {
					return err
				}
			}
			var all []schedbench.Result
			for _, n := range ns {
				res, err := schedbench.Run(cmd.Context(), schedbench.Config{Nodes: n, Kubernetes: dirs, Cases: cs, Pods: pods,
					Tenants: tenants, Timeout: timeout, Workers: workers, ProfileDir: profileDir, ProfileSeconds: profileSeconds,
					AllGates: allGates, Tmp: tmp, Log: e.errOut})
				all = append(all, res...)
				if err != nil {
					return err
				}
			}
			t := &table{header: []string{"NODES", "KUBERNETES", "GATES", "SHAPE", "MIG PROFILES", "WORKLOAD", "TENANT COPIES", "DEVICES/NODE", "SLICES/NODE", "COUNTERS/NODE", "BOUND", "PODS/S", "CPU MS/POD"}}
			for _, r := range all {
				rate := fmt.Sprintf("%.2f", r.PodsPerSec)
				if r.Error != "" {
					rate = "error"
				} else if r.PodsPerSec == 0 {
					rate = "<5 binds"
				}
				mig := r.MIGProfiles
				if mig == "" {
					mig = "-"
				}
				t.add(r.Nodes, r.Kubernetes, r.Gates, r.Shape, mig, r.Workload, r.TenantCopies, r.Devices, r.Slices, r.Counters,
					fmt.Sprintf("%d/%d", r.Bound, r.Pods), rate, fmt.Sprintf("%.1f", r.CPUPerPod))
			}
			t.notes = append(t.notes, "PODS/S: binds from the 10th to the 90th percentile; COUNTERS/NODE: counter consumptions summed over a node's devices; TENANT COPIES: tenants each shared GPU is published for",
				fmt.Sprintf("load average when done: %s", loadAvg()))
			return e.render(t, all)
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&nodes, "nodes", []string{"50"}, "node counts, each a run of every case (e.g. 50,200,500)")
	f.StringSliceVar(&kube, "kubernetes", nil, "Kubernetes releases (v1.36.3, v1.37.2: scripts/controlplane.sh VERSION builds them into the cache) or directories of binaries (default: apitest's: $"+controlplane.EnvBinDir+", else the cache's $"+controlplane.EnvVersion+", else "+controlplane.DefaultKubernetesVersion+")")
	f.StringSliceVar(&cases, "cases", nil, "SHAPE/WORKLOAD[/copies] cases (default: all, see above)")
	f.IntVar(&pods, "pods", 500, "pods per case (capped at what the nodes hold)")
	f.IntVar(&tenants, "tenants", 10, "namespaces the pods come from (and tenants with copies)")
	f.IntVar(&workers, "workers", 16, "goroutines creating nodes, slices, claims and pods")
	f.DurationVar(&timeout, "timeout", 3*time.Minute, "longest a case schedules; what is bound by then is measured")
	f.StringVar(&profileDir, "profile-dir", "", "save a CPU profile of kube-scheduler for each case here (from the 10th bind)")
	f.IntVar(&profileSeconds, "profile-seconds", 20, "length of each profile")
	f.BoolVar(&allGates, "all-gates", false, "run with apitest's feature gates (every DRA gate, alpha too) instead of each release's defaults")
	return cmd
}

// loadAvg is /proc/loadavg's first three fields ("" elsewhere).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
