package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/client"
)

// conn holds how remote commands reach the server.
type conn struct {
	server, token, ca string
}

func (c *conn) flags(cmd *cobra.Command) {
	def := os.Getenv("GPUSLICE_SERVER")
	if def == "" {
		def = "http://127.0.0.1:7777"
	}
	cmd.PersistentFlags().StringVar(&c.server, "server", def, "server URL (env GPUSLICE_SERVER)")
	cmd.PersistentFlags().StringVar(&c.token, "token", "", "API token (env GPUSLICE_TOKEN; default: the admin token serve wrote to its data directory)")
	cmd.PersistentFlags().StringVar(&c.ca, "ca", os.Getenv("GPUSLICE_CA"), "trust the PEM CA certificates in this file for an https server, e.g. serve --tls-self-signed's tls-cert.pem (env GPUSLICE_CA)")
}

// client builds the API client; the token comes from the flag, the
// environment, or the local serve's admin token file.
func (c *conn) client() (*client.Client, error) {
	tok := c.token
	if tok == "" {
		tok = os.Getenv("GPUSLICE_TOKEN")
	}
	if tok == "" {
		if b, err := os.ReadFile(filepath.Join(defaultDataDir(), "admin.token")); err == nil {
			tok = strings.TrimSpace(string(b))
		}
	}
	if tok == "" {
		return nil, fmt.Errorf("no token: pass --token, set GPUSLICE_TOKEN, or run gpuslice serve on this machine first")
	}
	if c.ca == "" {
		return client.New(c.server, tok, nil)
	}
	hc, err := httpClientWithCA(c.ca)
	if err != nil {
		return nil, err
	}
	return client.New(c.server, tok, hc)
}

func remoteCmds(e *env) []*cobra.Command {
	c := &conn{}
	claims := &cobra.Command{Use: "claims", Short: "List, show and release claims"}
	nodes := &cobra.Command{Use: "nodes", Short: "List nodes and their GPUs"}
	tenants := &cobra.Command{Use: "tenants", Short: "Manage tenants and their quotas (admin)"}
	tokens := &cobra.Command{Use: "tokens", Short: "Manage API tokens (admin)"}
	usage := &cobra.Command{Use: "usage", Short: "What tenants hold and have used", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var us []api.Usage
			if err := listAll(cmd.Context(), c, "/v1/usage", &us); err != nil {
				return err
			}
			t := &table{header: []string{"TENANT", "CLAIMS", "MEMORY", "COMPUTE", "GPU-SECONDS", "SM-SECONDS", "MIB-SECONDS"}}
			for _, u := range us {
				t.add(u.Tenant, u.Claims, mib(u.MemoryMiB), fmt.Sprintf("%d%%", u.ComputePercent), fmt.Sprintf("%.0f", u.GPUSeconds), fmt.Sprintf("%.1f", u.SMSeconds), fmt.Sprintf("%.0f", u.MemoryMiBSec))
			}
			return e.render(t, us)
		}}
	var state string
	claims.AddCommand(&cobra.Command{Use: "ls", Short: "List claims", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			path := "/v1/claims"
			if state != "" {
				path += "?state=" + url.QueryEscape(state)
			}
			var cs []api.Claim
			if err := listAll(cmd.Context(), c, path, &cs); err != nil {
				return err
			}
			t := &table{header: []string{"ID", "TENANT", "STATE", "DEVICES", "REASON"}}
			for _, cl := range cs {
				t.add(cl.ID, cl.Tenant, cl.State, devicesText(cl), short(reasonText(cl), 70))
			}
			return e.render(t, cs)
		}})
	claims.Commands()[0].Flags().StringVar(&state, "state", "", "only claims in this state")
	claims.AddCommand(&cobra.Command{Use: "get ID", Short: "Show a claim with its allocation and environment", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var cl api.Claim
			if err := call(cmd.Context(), c, http.MethodGet, "/v1/claims/"+url.PathEscape(args[0]), nil, &cl); err != nil {
				return err
			}
			return e.render(claimTable(cl), cl)
		}})
	claims.AddCommand(&cobra.Command{Use: "rm ID...", Short: "Release claims", Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, id := range args {
				if err := call(cmd.Context(), c, http.MethodDelete, "/v1/claims/"+url.PathEscape(id), nil, nil); err != nil {
					return err
				}
				fmt.Fprintln(e.out, "released", id)
			}
			return nil
		}})
	nodes.AddCommand(&cobra.Command{Use: "ls", Short: "List nodes", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var ns []api.Node
			if err := listAll(cmd.Context(), c, "/v1/nodes", &ns); err != nil {
				return err
			}
			t := &table{header: []string{"NODE", "STATE", "GPUS", "MIG", "DRIVER", "LAST HEARTBEAT"}}
			for _, n := range ns {
				models, migs := map[string]int{}, 0
				for _, g := range n.Inventory.GPUs {
					models[g.Model]++
					if g.MIGEnabled {
						migs++
					}
				}
				var parts []string
				for m, k := range models {
					parts = append(parts, fmt.Sprintf("%d×%s", k, m))
				}
				driver := n.Driver
				if n.Simulated {
					driver += " (simulated)"
				}
				t.add(n.Name, n.State, strings.Join(parts, " "), migs, driver, n.LastHeartbeat.Format("15:04:05"))
			}
			return e.render(t, ns)
		}})
	nodes.AddCommand(&cobra.Command{Use: "rm NAME...", Short: "Delete nodes (admin); their claims are re-queued",
		Long: `Deletes nodes from the server: their claims are re-queued and placed elsewhere.
Stop a node's agent first: a running agent registers its node again.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, name := range args {
				if err := call(cmd.Context(), c, http.MethodDelete, "/v1/nodes/"+url.PathEscape(name), nil, nil); err != nil {
					return fmt.Errorf("node %s: %w", name, err)
				}
				fmt.Fprintln(e.out, "deleted node", name)
			}
			return nil
		}})
	var quotaMem, quotaComp, maxPrio int
	var allowCmds, allowEnv []string
	var noCommands bool
	tput := &cobra.Command{Use: "put NAME", Short: "Create or update a tenant: quotas, and the commands its services may run",
		Long: `Creates a tenant, or changes the settings given as flags and keeps the others.

A tenant token may put a service only with a command its tenant is allowed: each
--allow-command is one whole command line (split at spaces; matched exactly, every
argument), and --allow-env names the variables the tenant's services may set on
them. Replicas run as an unprivileged user of their own (see serve --replica-uids).`,
		Example: "  gpuslice tenants put acme --memory-mib 40960\n  gpuslice tenants put acme --allow-command 'python3 /srv/vllm/serve.py' --allow-env MODEL",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := "/v1/tenants/" + url.PathEscape(args[0])
			var body api.Tenant
			if err := call(cmd.Context(), c, http.MethodGet, path, nil, &body); err != nil {
				var ce *client.Error
				if !errors.As(err, &ce) || ce.Status != http.StatusNotFound {
					return err
				}
				body = api.Tenant{}
			}
			f := cmd.Flags()
			if f.Changed("memory-mib") {
				body.MemoryMiB = int64(quotaMem)
			}
			if f.Changed("compute") {
				body.ComputePercent = quotaComp
			}
			if f.Changed("max-priority") {
				body.MaxPriority = maxPrio
			}
			if noCommands {
				body.Commands = nil
			}
			if f.Changed("allow-env") && !f.Changed("allow-command") {
				return fmt.Errorf("--allow-env applies to the commands given with --allow-command in the same call")
			}
			for _, line := range allowCmds {
				argv := strings.Fields(line)
				if len(argv) == 0 {
					return fmt.Errorf("--allow-command %q: give a command line", line)
				}
				body.Commands = slices.DeleteFunc(body.Commands, func(a api.AllowedCommand) bool { return slices.Equal(a.Command, argv) })
				body.Commands = append(body.Commands, api.AllowedCommand{Command: argv, Env: allowEnv})
			}
			var t api.Tenant
			if err := call(cmd.Context(), c, http.MethodPut, path, body, &t); err != nil {
				return err
			}
			notes := []string{fmt.Sprintf("tenant %s: memory quota %s, compute quota %s, max priority %d", t.Name, memQuota(t.MemoryMiB), computeQuota(t.ComputePercent), t.MaxPriority)}
			for _, a := range t.Commands {
				n := fmt.Sprintf("  may run %q", a.Command)
				if len(a.Env) > 0 {
					n += fmt.Sprintf(" setting %s", strings.Join(a.Env, ", "))
				}
				notes = append(notes, n)
			}
			return e.render(&table{notes: notes}, t)
		}}
	tput.Flags().IntVar(&quotaMem, "memory-mib", 0, "GPU memory quota in MiB (0 = none)")
	tput.Flags().IntVar(&quotaComp, "compute", 0, "compute quota in percent of a GPU (0 = none)")
	tput.Flags().StringArrayVar(&allowCmds, "allow-command", nil, "a command line the tenant's services may run (repeatable; split at spaces, matched exactly)")
	tput.Flags().StringArrayVar(&allowEnv, "allow-env", nil, "a variable the tenant's services may set on the commands of this call (repeatable)")
	tput.Flags().BoolVar(&noCommands, "no-commands", false, "drop every allowed command first (its services stop)")
	tput.Flags().IntVar(&maxPrio, "max-priority", 0, fmt.Sprintf("the highest claim priority the tenant may ask for, %d..%d (0: it outranks no tenant left at the default; lowering it lowers its waiting claims)", api.LowestPriority, api.HighestPriority))
	tenants.AddCommand(tput, &cobra.Command{Use: "ls", Short: "List tenants", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var ts []api.Tenant
			if err := listAll(cmd.Context(), c, "/v1/tenants", &ts); err != nil {
				return err
			}
			t := &table{header: []string{"TENANT", "MEMORY QUOTA", "COMPUTE QUOTA", "MAX PRIORITY"}}
			for _, x := range ts {
				t.add(x.Name, memQuota(x.MemoryMiB), computeQuota(x.ComputePercent), x.MaxPriority)
			}
			return e.render(t, ts)
		}}, &cobra.Command{Use: "rm NAME", Short: "Delete a tenant without live claims", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(cmd.Context(), c, http.MethodDelete, "/v1/tenants/"+url.PathEscape(args[0]), nil, nil)
		}})
	var role, tenant, tokNode string
	tcreate := &cobra.Command{Use: "create", Short: "Create a token (its secret is shown once)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var t api.Token
			if err := call(cmd.Context(), c, http.MethodPost, "/v1/tokens", api.CreateTokenRequest{Role: api.Role(role), Tenant: tenant, Node: tokNode}, &t); err != nil {
				return err
			}
			return e.render(&table{notes: []string{fmt.Sprintf("token %s (%s %s%s); secret, shown once:\n  %s", t.ID, t.Role, t.Tenant, t.Node, t.Secret)}}, t)
		}}
	tcreate.Flags().StringVar(&role, "role", "tenant", "admin, tenant or agent")
	tcreate.Flags().StringVar(&tenant, "tenant", "", "the tenant of a tenant token")
	tcreate.Flags().StringVar(&tokNode, "node", "", "bind an agent token to this node (default: the first node it registers)")
	tokens.AddCommand(tcreate, &cobra.Command{Use: "ls", Short: "List tokens", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var ts []api.Token
			if err := listAll(cmd.Context(), c, "/v1/tokens", &ts); err != nil {
				return err
			}
			t := &table{header: []string{"ID", "ROLE", "TENANT", "NODE", "CREATED"}}
			for _, x := range ts {
				t.add(x.ID, x.Role, orDashS(x.Tenant), orDashS(x.Node), x.Created.Format("2006-01-02 15:04"))
			}
			return e.render(t, ts)
		}}, &cobra.Command{Use: "rm ID", Short: "Delete a token", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(cmd.Context(), c, http.MethodDelete, "/v1/tokens/"+url.PathEscape(args[0]), nil, nil)
		}})
	out := []*cobra.Command{claims, nodes, tenants, tokens, usage, runCmd(e, c), agentCmd(e, c), servicesCmd(e, c)}
	for _, cmd := range out {
		c.flags(cmd)
	}
	return out
}

func call(ctx context.Context, c *conn, method, path string, body, out any) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	return cl.Do(ctx, method, path, body, out)
}

// listAll gets every page of a list.
func listAll[T any](ctx context.Context, c *conn, path string, out *[]T) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	*out, err = client.ListAll[T](ctx, cl, path)
	return err
}

func devicesText(c api.Claim) string {
	if c.Allocation == nil {
		return "-"
	}
	var parts []string
	for _, d := range c.Allocation.Devices {
		parts = append(parts, fmt.Sprintf("%s:%s %s %dMiB", d.Node, d.Device, d.Mode, d.MemoryMiB))
	}
	return strings.Join(parts, ", ")
}

// reasonText is a claim's REASON column: why it waits or failed. Other
// states' reasons only repeat the state ("released", "allocated: GPU-…
// on host"), so they show as "-".
func reasonText(c api.Claim) string {
	if c.State != api.Pending && c.State != api.Failed {
		return "-"
	}
	r := strings.TrimSpace(strings.TrimPrefix(c.Reason, string(c.State)+":"))
	if r == "" || r == string(c.State) {
		return "-"
	}
	return r
}

// memQuota and computeQuota show a tenant's quota; 0 means no limit.
func memQuota(m int64) string {
	if m <= 0 {
		return "no limit"
	}
	return mib(m)
}

func computeQuota(p int) string {
	if p <= 0 {
		return "no limit"
	}
	return fmt.Sprintf("%d%%", p)
}

func short(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

func claimTable(c api.Claim) *table {
	t := &table{header: []string{"REQUEST", "NODE", "DEVICE", "MODE", "MEMORY", "COMPUTE"}}
	if c.Allocation != nil {
		for _, d := range c.Allocation.Devices {
			t.add(d.Request, d.Node, d.Device, d.Mode, mib(d.MemoryMiB), fmt.Sprintf("%d%%", d.ComputePercent))
		}
	}
	t.notes = append(t.notes, fmt.Sprintf("claim %s (tenant %s): %s", c.ID, c.Tenant, c.State))
	if c.Reason != "" {
		t.notes = append(t.notes, "reason: "+c.Reason)
	}
	if c.QueuePosition > 0 {
		t.notes = append(t.notes, fmt.Sprintf("queue position: %d", c.QueuePosition))
	}
	if u := c.Used; u != nil {
		t.notes = append(t.notes, fmt.Sprintf("used: %.0f GPU-seconds, %.1f SM-seconds, %.0f MiB-seconds", u.GPUSeconds, u.SMSeconds, u.MemoryMiBSeconds))
	}
	if c.Allocation != nil {
		for _, k := range sortedKeys(c.Allocation.Env) {
			t.notes = append(t.notes, fmt.Sprintf("env %s=%s", k, c.Allocation.Env[k]))
		}
		for _, w := range c.Allocation.Why {
			t.notes = append(t.notes, "why: "+w)
		}
	}
	return t
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}
