package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/server"
	"github.com/gpuslice/gpuslice/internal/services"
	"github.com/gpuslice/gpuslice/internal/spec"
	"github.com/gpuslice/gpuslice/internal/state"
)

// serviceFile is gpuslice's service YAML: a name and tenant, and the spec.
type serviceFile struct {
	Name   string `json:"name"`
	Tenant string `json:"tenant,omitempty"`
	api.ServiceSpec
}

// readServices reads service definitions from a gpuslice service YAML or
// a compose file (each service with x-omnistrate-capabilities becomes
// one; compose names images, so the command to run comes from command).
func readServices(file string, data []byte, command []string) ([]serviceFile, error) {
	if f, ok := spec.Detect(data); ok && f == spec.FormatCompose {
		s, diags := spec.Read(file, data, spec.FormatCompose)
		if err := diags.Err(); err != nil {
			return nil, err
		}
		var out []serviceFile
		for _, w := range s.Workloads {
			if w.Autoscaling == nil {
				continue
			}
			if len(command) == 0 {
				return nil, fmt.Errorf("%s: service %s names an image (%s); gpuslice runs processes: give the command after --, e.g. gpuslice services put -f %s -- python serve.py",
					file, w.Name, w.Image, file)
			}
			sf := serviceFile{Name: w.Name, Tenant: w.Tenant}
			sf.Claim = api.ClaimSpec{Priority: w.Priority, Isolation: w.Isolation, Requests: w.Requests, Constraints: w.Constraints}
			sf.Command, sf.Env, sf.Autoscaling = command, w.Env, *w.Autoscaling
			sf.Metric, sf.TargetConcurrency = w.ScaleMetric, w.TargetConcurrency
			out = append(out, sf)
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("%s: no compose service has x-omnistrate-capabilities (autoscaling or serverlessConfiguration)", file)
		}
		return out, nil
	}
	var sf serviceFile
	if err := yaml.UnmarshalStrict(data, &sf); err != nil {
		return nil, fmt.Errorf("%s: %v (a service file has name, tenant, claim, command, env, autoscaling, metric, targetConcurrency, prometheusURL, prometheusQuery, wakeTimeoutSeconds)", file, err)
	}
	if sf.Name == "" {
		return nil, fmt.Errorf("%s: name: a service needs a name", file)
	}
	if len(command) > 0 {
		sf.Command = command
	}
	if err := server.ValidateServiceSpec(sf.ServiceSpec); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return []serviceFile{sf}, nil
}

func servicesCmd(e *env, c *conn) *cobra.Command {
	cmd := &cobra.Command{Use: "services", Short: "Autoscaled services: replicas of a claim and a command, scaled by slices (serve runs them)"}
	var file string
	put := &cobra.Command{Use: "put -f FILE [-- CMD ARGS...]", Short: "Create or replace services from a service YAML or a compose file",
		Example: "  gpuslice services put -f service.yaml\n  gpuslice services put -f compose.yaml -- python serve.py",
		RunE: func(cmd *cobra.Command, args []string) error {
			if file == "" {
				return fmt.Errorf("-f FILE is required")
			}
			data, err := os.ReadFile(file)
			if err != nil {
				return err
			}
			svcs, err := readServices(filepath.Base(file), data, args)
			if err != nil {
				return err
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			var out []api.Service
			for _, sf := range svcs {
				s, err := cl.PutService(cmd.Context(), sf.Name, sf.Tenant, sf.ServiceSpec)
				if ce := (*client.Error)(nil); err != nil && sf.Tenant == "" && errors.As(err, &ce) && ce.Field == "tenant" {
					// An admin token names a tenant: "default" when the file
					// names none (a tenant token puts its own).
					s, err = cl.PutService(cmd.Context(), sf.Name, "default", sf.ServiceSpec)
				}
				if ce := (*client.Error)(nil); err != nil && sf.Tenant != "" && errors.As(err, &ce) && ce.Field == "tenant" && strings.Contains(ce.Message, "does not exist") {
					// The file names a tenant that does not exist (a compose
					// file names its plan's): an admin token creates it,
					// with no quota, in the same transaction as the service.
					// Only an admin gets here: a tenant token's own tenant
					// exists, and the server refuses createTenant to it.
					if s, err = cl.PutServiceCreatingTenant(cmd.Context(), sf.Name, sf.Tenant, sf.ServiceSpec); err == nil {
						fmt.Fprintf(e.errOut, "created tenant %s (no quota, max priority 0); set one with: gpuslice tenants put %s --memory-mib MIB --compute PERCENT\n", sf.Tenant, sf.Tenant)
					}
				}
				if err != nil {
					return fmt.Errorf("service %s: %w", sf.Name, err)
				}
				out = append(out, s)
			}
			return e.render(servicesTable(out), out)
		}}
	put.Flags().StringVarP(&file, "file", "f", "", "service YAML or compose file")
	ls := &cobra.Command{Use: "ls", Short: "List services with their replicas", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			ss, err := cl.Services(cmd.Context())
			if err != nil {
				return err
			}
			return e.render(servicesTable(ss), ss)
		}}
	get := &cobra.Command{Use: "get NAME", Short: "Show a service with its decisions and their reasons", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			s, err := cl.Service(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			t := &table{header: []string{"TIME", "ACTION", "REPLICAS", "REASON"}}
			for _, d := range s.Status.Decisions {
				t.add(d.Time.Format("2006-01-02 15:04:05"), d.Action, fmt.Sprintf("%d→%d", d.From, d.To), d.Reason)
			}
			return e.render(t, s)
		}}
	rm := &cobra.Command{Use: "rm NAME", Short: "Delete a service (its replicas stop, their claims are released)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			_, err = cl.DeleteService(cmd.Context(), args[0])
			return err
		}}
	cmd.AddCommand(put, ls, get, rm)
	return cmd
}

func servicesTable(ss []api.Service) *table {
	t := &table{header: []string{"NAME", "TENANT", "REPLICAS", "READY", "RANGE", "PORT", "METRIC", "LAST DECISION"}}
	for _, s := range ss {
		a := s.Spec.Autoscaling
		last := "-"
		if n := len(s.Status.Decisions); n > 0 {
			last = short(s.Status.Decisions[n-1].String(), 60)
		}
		port := "-"
		if a.TargetPort > 0 {
			port = fmt.Sprint(a.TargetPort)
			if a.EnableAutoStop {
				port += " (auto-stop)"
			}
		}
		metric := s.Spec.Metric
		if metric == "" {
			metric = "gpu"
		}
		t.add(s.Name, s.Tenant, s.Status.Replicas, s.Status.Ready, fmt.Sprintf("%d..%d", a.MinReplicas, a.MaxReplicas), port, metric, last)
	}
	return t
}

// controllerToken reads or makes the services controller's admin token,
// kept in the data directory like the local agent's.
func controllerToken(ctx context.Context, srv *server.Server, store state.Store, dataDir string) (string, error) {
	path := filepath.Join(dataDir, "services.token")
	if b, err := os.ReadFile(path); err == nil {
		secret := strings.TrimSpace(string(b))
		ok := false
		_ = store.View(ctx, func(tx state.Tx) error {
			t, err := tx.TokenByHash(server.HashToken(secret))
			ok = err == nil && t.Role == api.RoleAdmin
			return nil
		})
		if ok {
			return secret, nil
		}
	}
	tok, err := srv.CreateToken(ctx, api.RoleAdmin, "")
	if err != nil {
		return "", err
	}
	return tok.Secret, os.WriteFile(path, []byte(tok.Secret+"\n"), 0o600)
}

// replicaUsers decides who serve's replicas run as: a named user
// (--replica-user), else each its own uid from --replica-uids; serve not
// running as root cannot switch users, so its replicas run as its own
// user (said in the log: they can then read the data directory).
func replicaUsers(name, uids string, uidsGiven bool, log *slog.Logger) (services.Users, error) {
	root := os.Geteuid() == 0
	switch {
	case name != "" && uidsGiven:
		return nil, fmt.Errorf("--replica-user and --replica-uids: give one")
	case !root && (name != "" || uidsGiven):
		return nil, fmt.Errorf("--replica-user/--replica-uids: serve runs as uid %d, not root, and cannot switch users; run it as root, or leave both out (replicas then run as this user)", os.Geteuid())
	case !root:
		log.Warn("serve is not root: service replicas run as this user and can read what it can, the data directory included; run serve as root so each replica gets a uid of its own (--replica-uids)")
		return services.SameUser{}, nil
	case name != "":
		return services.LookupUser(name)
	default:
		return services.ParseUIDRange(uids)
	}
}

// startServices runs the services controller of serve on the local node:
// it talks to the server in-process with its own admin token, measures
// each replica by its claim's usage (what the local agent attributes to
// the replica's own processes), and opens proxies on the host serve
// listens on.
// The channel it returns closes once the controller has stopped every
// replica after ctx ends.
func startServices(ctx context.Context, srv *server.Server, store state.Store, dataDir, node, listen string, users services.Users, workDir string, log *slog.Logger) (<-chan struct{}, error) {
	tok, err := controllerToken(ctx, srv, store, dataDir)
	if err != nil {
		return nil, err
	}
	cl, err := client.New("http://in-process", tok, &http.Client{Transport: handlerTransport{srv.Handler()}})
	if err != nil {
		return nil, err
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil || host == "" {
		host = "127.0.0.1"
	}
	ctl, err := services.New(services.Config{Client: cl, Node: node, Log: log.With("services", node), Host: host, Output: os.Stderr,
		Users: users, WorkDir: workDir, RecordDir: filepath.Join(dataDir, "replicas")})
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = ctl.Run(ctx) }()
	return done, nil
}
