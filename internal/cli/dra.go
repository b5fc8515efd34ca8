package cli

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/gpuslice/gpuslice/internal/agent"
	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
)

// draCmd is gpuslice on Kubernetes as a DRA driver: what it publishes.
func draCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dra",
		Short: "gpuslice as a Kubernetes DRA driver (" + dradriver.DriverName + ")",
	}
	var simulate, node, tenants string
	slices := &cobra.Command{
		Use:   "slices",
		Short: "Print the ResourceSlices this host's GPUs are published as",
		Long: `Prints, as YAML documents, the resource.k8s.io/v1 ResourceSlices the DRA driver
publishes for this host's GPUs (the real ones through NVML, else simulated):
every whole GPU, the whole GPU shared by memory (consumable capacity), and
every MIG profile at every start as partitionable devices whose shared
counters allow exactly NVIDIA's layouts. The stock kube-scheduler allocates
from them; "gpuslice dra-driver" publishes them itself and prepares the
devices pods are given. With --tenants, the shared GPUs are published as
dra-driver's tenant isolation does: one tainted copy per tenant.`,
		Example: "  gpuslice dra slices --simulate dgx-a100 --node gpu-1 | kubectl apply -f -\n  gpuslice dra slices --simulate dgx-a100 --node gpu-1 --tenants team-a,team-b",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ts, err := dradriver.ParseTenants(tenants)
			if err != nil {
				return fmt.Errorf("--tenants: %w", err)
			}
			dev, _, err := openDeviceFor(simulate, node, slog.New(slog.NewTextHandler(e.errOut, nil)))
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
			out, err := dradriver.SlicesFor(inv, 1, dev.Info().DriverVersion, nil, dradriver.Options{TenantIsolation: len(ts) > 0, Tenants: ts})
			if err != nil {
				return err
			}
			for _, s := range out {
				s.APIVersion, s.Kind = "resource.k8s.io/v1", "ResourceSlice"
				b, err := yaml.Marshal(s)
				if err != nil {
					return err
				}
				fmt.Fprintf(e.out, "---\n%s", b)
			}
			return nil
		},
	}
	host, _ := os.Hostname()
	slices.Flags().StringVar(&simulate, "simulate", "", "a simulated machine (preset or YAML file) instead of the real GPUs")
	slices.Flags().StringVar(&node, "node", host, "the Kubernetes node name the slices are for")
	slices.Flags().StringVar(&tenants, "tenants", "", "comma-separated tenants: publish each shared GPU once per tenant, tainted (dra-driver's tenant isolation)")
	classes := &cobra.Command{
		Use:   "classes",
		Short: "Print the DeviceClasses claims name: " + dradriver.ClassGPU + " (also nvidia.com/gpu), " + dradriver.ClassShared + ", " + dradriver.ClassMIG,
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
	cmd.AddCommand(slices, classes)
	return cmd
}
