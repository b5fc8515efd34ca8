package cli

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
	"github.com/gpuslice/gpuslice/internal/k8s/drawebhook"
)

// draWebhookCmd serves the validating admission webhook for claims.
func draWebhookCmd(e *env) *cobra.Command {
	var listen, certFile, keyFile, selfSignedDir, schedulerName, kubeconfig, tenants, noTenantNS string
	var dnsNames []string
	cmd := &cobra.Command{
		Use:   "dra-webhook",
		Short: "Serve the admission webhook that checks ResourceClaims' configs for gpu.gpuslice.dev",
		Long: `Serves a validating admission webhook (admission.k8s.io/v1, path ` + drawebhook.Path + `) for
resource.k8s.io/v1 ResourceClaims and ResourceClaimTemplates. Every opaque config for driver
gpu.gpuslice.dev (NVIDIA's GpuConfig / MigDeviceConfig, gpuslice's SliceConfig) is decoded by the
same strict decoders the kubelet plugin runs at prepare; a claim prepare would refuse is denied
when it is created, with the field's path and what would be valid:

  spec.devices.config[0].opaque.parameters.sharing.strategy "Fair": valid are TimeSlicing, MPS

TLS is required by the API server: --tls-cert/--tls-key (e.g. from a cert-manager Secret), or
--tls-self-signed DIR, which writes a self-signed certificate for --dns-name (the webhook
Service's name, e.g. gpuslice-webhook.gpuslice.svc) and prints its caBundle.

On ` + drawebhook.PodPath + ` it is also a mutating webhook for pods: a pod that asks for GPUs (resource
claims, or nvidia.com/gpu) and names no scheduler of its own gets spec.schedulerName
--scheduler-name. Register it with a namespaceSelector (e.g. gpuslice.dev/scheduler:
gpuslice-scheduler) so only the namespaces that opt in move to gpuslice-scheduler.

On ` + drawebhook.ClaimPath + ` it is a mutating webhook for ResourceClaims and ResourceClaimTemplates
(CREATE) that makes tenant isolation hold with the stock kube-scheduler: every request gets the
toleration of its tenant's copies of the shared GPUs (gpuslice.dev/tenant=<tenant>:NoSchedule,
published by "gpuslice dra-driver --tenants"), and a claim that tolerates another tenant's taint
is refused. The tenant is the namespace's gpuslice.dev/tenant label, read from the API server
with --kubeconfig ("in-cluster" for the pod's ServiceAccount); without it, the namespace's name.
A claim asking for the shared class in a namespace without tenant copies (kube-system,
kube-public, kube-node-lease, --no-tenant-namespaces, or labelled gpuslice.dev/tenant-copies=false,
unless its tenant is in --tenants or it is labelled gpuslice.dev/tenant-copies=true) is refused:
no driver publishes shared GPUs for it. Give --tenants and --no-tenant-namespaces the values the
drivers have (the chart does).`,
		Example: "  gpuslice dra-webhook --tls-cert /tls/tls.crt --tls-key /tls/tls.key\n  gpuslice dra-webhook --tls-self-signed /tmp/wh --dns-name gpuslice-webhook.gpuslice.svc --listen 127.0.0.1:8443",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := slog.New(slog.NewTextHandler(e.errOut, &slog.HandlerOptions{Level: slog.LevelInfo}))
			switch {
			case selfSignedDir != "" && (certFile != "" || keyFile != ""):
				return errors.New("--tls-self-signed and --tls-cert/--tls-key: give one or the other")
			case selfSignedDir != "":
				if err := os.MkdirAll(selfSignedDir, 0o700); err != nil {
					return fmt.Errorf("--tls-self-signed %s: %w", selfSignedDir, err)
				}
				certFile, keyFile = filepath.Join(selfSignedDir, "tls.crt"), filepath.Join(selfSignedDir, "tls.key")
				if err := ensureSelfSignedFor(certFile, keyFile, "gpuslice dra-webhook", dnsNames); err != nil {
					return err
				}
				pemBytes, err := os.ReadFile(certFile)
				if err != nil {
					return err
				}
				log.Info("self-signed certificate", "cert", certFile, "caBundle", base64.StdEncoding.EncodeToString(pemBytes))
			case certFile == "" || keyFile == "":
				return errors.New("--tls-cert and --tls-key are required (the API server calls webhooks over TLS), or --tls-self-signed DIR")
			}
			cert, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return fmt.Errorf("--tls-cert %s / --tls-key %s: %w", certFile, keyFile, err)
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("--listen %s: %w", listen, err)
			}
			var copies drawebhook.Copies
			if copies.Tenants, err = dradriver.ParseTenants(tenants); err != nil {
				return fmt.Errorf("--tenants: %w", err)
			}
			if copies.NoTenantNamespaces, err = dradriver.ParseNamespaces(noTenantNS); err != nil {
				return fmt.Errorf("--no-tenant-namespaces: %w", err)
			}
			var namespace drawebhook.NamespaceFunc
			if kubeconfig != "" {
				if namespace, err = drawebhook.KubeconfigNamespace(kubeconfig); err != nil {
					return fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
				}
			}
			srv := &http.Server{Handler: drawebhook.Handler(log, schedulerName, namespace, copies), ReadHeaderTimeout: 10 * time.Second,
				TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			go func() {
				<-ctx.Done()
				sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = srv.Shutdown(sctx)
			}()
			log.Info("dra-webhook serving", "listen", ln.Addr().String(), "path", drawebhook.Path)
			if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&listen, "listen", ":8443", "address to serve HTTPS on")
	cmd.Flags().StringVar(&certFile, "tls-cert", "", "PEM certificate for the webhook's Service name")
	cmd.Flags().StringVar(&keyFile, "tls-key", "", "PEM private key of --tls-cert")
	cmd.Flags().StringVar(&selfSignedDir, "tls-self-signed", "", "write (once) and use a self-signed certificate in this directory")
	cmd.Flags().StringVar(&schedulerName, "scheduler-name", "gpuslice-scheduler", "schedulerName set on GPU pods by "+drawebhook.PodPath+` ("" serves claims only)`)
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", `read namespaces' gpuslice.dev/tenant label through this kubeconfig ("in-cluster": the pod's ServiceAccount); empty: the tenant is the namespace's name`)
	cmd.Flags().StringVar(&tenants, "tenants", "", "the drivers' --tenants: a namespace of one of these tenants may claim shared GPUs whatever its name or labels")
	cmd.Flags().StringVar(&noTenantNS, "no-tenant-namespaces", "", "the drivers' --no-tenant-namespaces: claims for shared GPUs in these namespaces are refused (as in kube-system, kube-public, kube-node-lease)")
	cmd.Flags().StringSliceVar(&dnsNames, "dns-name", nil, "DNS names for the self-signed certificate (the Service: NAME.NAMESPACE.svc)")
	return cmd
}
