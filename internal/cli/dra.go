package cli

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/gpuslice/gpuslice/internal/agent"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// draCmd is gpuslice on Kubernetes as a DRA driver: what it publishes.
func draCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dra",
		Short: "gpuslice as a Kubernetes DRA driver (" + dranames.DriverName + ")",
	}
	var simulate, node, tenants, provider, migProfiles string
	var instanceTypes []string
	slices := &cobra.Command{
		Use:   "slices",
		Short: "Print the ResourceSlices this host's GPUs are published as",
		Long: `Prints, as YAML documents, the resource.k8s.io/v1 ResourceSlices the DRA driver
publishes for this host's GPUs (the real ones through NVML; with --simulate a simulated
machine — without an NVIDIA driver it says what to check and never simulates on its own):
every whole GPU, the whole GPU shared by memory (consumable capacity), and
every MIG profile at every start as partitionable devices whose shared
counters allow exactly NVIDIA's layouts. The stock kube-scheduler allocates
from them; "gpuslice dra-driver" publishes them itself and prepares the
devices pods are given. With --tenants, the shared GPUs are published as
dra-driver's tenant isolation does: one tainted copy per tenant.

With --instance-type (or --provider, for every GPU instance type of a
cloud) it prints what the driver will publish on a node of that catalog
instance type before the node exists, for a node autoscaler to simulate
claims on: Karpenter's cloud provider loads them as the instance type's
ResourceSliceTemplates (Go providers: package pkg/karpenterdra). Each
slice is labelled gpuslice.dev/instance-type; the pool is named after the
instance type (or --node); uuid and parentUUID, known only on a running
node, are left out; every counter is scaled by the most shares a GPU holds,
so that Karpenter, which charges a shared device's counters on every
allocation, decides as Kubernetes does.`,
		Example: "  gpuslice dra slices --simulate dgx-a100 --node gpu-1 | kubectl apply -f -\n" +
			"  gpuslice dra slices --simulate dgx-a100 --node gpu-1 --tenants team-a,team-b\n" +
			"  gpuslice dra slices --instance-type p4d.24xlarge\n" +
			"  gpuslice dra slices --provider aws > gpuslice-templates.yaml",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(instanceTypes) > 0 || provider != "" {
				if simulate != "" {
					return fmt.Errorf("--simulate describes a host, --instance-type and --provider a future node: give one of them")
				}
				if tenants != "" {
					return fmt.Errorf("--tenants: the tenants' copies are published by a running node's driver; a future node's templates carry the untainted shared GPUs")
				}
				return printInstanceTypeSlices(e, cmd, instanceTypes, provider, node)
			}
			ts, err := dradriver.ParseTenants(tenants)
			if err != nil {
				return fmt.Errorf("--tenants: %w", err)
			}
			dev, _, err := openDeviceFor(simulate, node, false, slog.New(slog.NewTextHandler(e.errOut, nil)))
			if err != nil {
				return err
			}
			gpus, err := dev.GPUs(cmd.Context())
			if err != nil {
				return err
			}
			inv, err := agent.Inventory(node, gpus)
			if err != nil {
				return err
			}
			mp, err := dradriver.ParseMIGProfiles(migProfiles, nil)
			if err != nil {
				return fmt.Errorf("--mig-profiles: %w", err)
			}
			out, err := dradriver.SlicesFor(inv, 1, dev.Info().DriverVersion, nil, dradriver.Options{TenantIsolation: len(ts) > 0, Tenants: ts, MIGProfiles: mp})
			if err != nil {
				return err
			}
			for i := range out {
				out[i].APIVersion, out[i].Kind = "resource.k8s.io/v1", "ResourceSlice"
			}
			return printSlices(e, out)
		},
	}
	host, _ := os.Hostname()
	slices.Flags().StringVar(&simulate, "simulate", "", "a simulated machine (preset or YAML file) instead of the real GPUs")
	slices.Flags().StringVar(&node, "node", host, "the Kubernetes node name the slices are for (with --instance-type: the pool name, default the instance type's)")
	slices.Flags().StringSliceVar(&instanceTypes, "instance-type", nil, "print the slices of a future node of these catalog instance types (comma-separated or repeated; gpuslice catalog instances lists them)")
	slices.Flags().StringVar(&provider, "provider", "", "print the slices of every GPU instance type of this cloud (aws, azure, gcp)")
	slices.Flags().StringVar(&tenants, "tenants", "", "comma-separated tenants: publish each shared GPU once per tenant, tainted (dra-driver's tenant isolation)")
	slices.Flags().StringVar(&migProfiles, "mig-profiles", "all", "MIG profiles published (dra-driver's --mig-profiles): all, none or a list such as 1g.5gb,3g.20gb")
	classes := &cobra.Command{
		Use:   "classes",
		Short: "Print the DeviceClasses claims name: " + dranames.ClassGPU + " (also nvidia.com/gpu), " + dranames.ClassShared + ", " + dranames.ClassMIG,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, c := range dradriver.DeviceClasses() {
				b, err := yaml.Marshal(c)
				if err != nil {
					return err
				}
				fmt.Fprintf(e.out, "---\n%s", b)
			}
			return nil
		},
	}
	cmd.AddCommand(slices, classes, draSimulateFaultCmd(e))
	return cmd
}

// printSlices writes YAML documents; the callers set the slices' kind
// (internal/cli stays free of Kubernetes packages).
func printSlices[T any](e *env, out []T) error {
	for _, s := range out {
		b, err := yaml.Marshal(s)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.out, "---\n%s", b)
	}
	return nil
}

// printInstanceTypeSlices prints the slices of future nodes of the named
// instance types, or of every GPU instance type of provider.
func printInstanceTypeSlices(e *env, cmd *cobra.Command, names []string, provider, node string) error {
	if provider != "" {
		if len(names) > 0 {
			return fmt.Errorf("give --instance-type or --provider, not both")
		}
		its, err := e.catalog.InstanceTypes(provider)
		if err != nil {
			return fmt.Errorf("--provider: %w", err)
		}
		for _, it := range its {
			if it.GPUCount > 0 && it.GPU != "" {
				names = append(names, it.Name)
			}
		}
	}
	if !cmd.Flags().Changed("node") || len(names) > 1 {
		if cmd.Flags().Changed("node") {
			return fmt.Errorf("--node names one pool: give it with one --instance-type")
		}
		node = ""
	}
	for _, name := range names {
		out, err := dradriver.InstanceTypeSlices(name, node, e.catalog)
		if catalog.IsNotFound(err) {
			return fmt.Errorf("--instance-type: %w (gpuslice catalog instances lists them all)", err)
		}
		if err != nil {
			return fmt.Errorf("--instance-type: %w", err)
		}
		for i := range out {
			out[i].APIVersion, out[i].Kind = "resource.k8s.io/v1", "ResourceSlice"
		}
		if err := printSlices(e, out); err != nil {
			return err
		}
	}
	return nil
}
