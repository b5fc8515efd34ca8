package cli

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// runErr runs the command tree and returns its error text ("" when none).
func runErr(t *testing.T, args ...string) string {
	t.Helper()
	out := run(args...)
	i := strings.LastIndex(out, "error: ")
	if i < 0 {
		return ""
	}
	return out[i:]
}

func TestUnknownFlagDidYouMean(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"run", "--memroy", "1GiB", "--", "true"}, `unknown flag: --memroy; did you mean --memory?`},
		{[]string{"plan", "--outptu", "json", "x.yaml"}, `unknown flag: --outptu; did you mean --output?`},
		{[]string{"render", "x.yaml", "--targte", "dra"}, `unknown flag: --targte; did you mean --target?`},
		{[]string{"catalog", "gpus", "--zzzzzz"}, `unknown flag: --zzzzzz (see gpuslice catalog gpus --help)`},
	}
	for _, c := range cases {
		if got := runErr(t, c.args...); !strings.Contains(got, c.want) {
			t.Errorf("gpuslice %s: got %q, want it to contain %q", strings.Join(c.args, " "), got, c.want)
		}
	}
}

func TestEnumFlagDidYouMean(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"render", "x.yaml", "--target", "karpentr"}, `--target "karpentr": unknown render target; did you mean "karpenter"? valid: dra, hpa, karpenter, keda, kubernetes, mig-parted, nvidia-device-plugin, serverless`},
		{[]string{"render", "x.yaml"}, `--target is required: the render target; valid: dra, hpa, karpenter, keda, kubernetes, mig-parted, nvidia-device-plugin, serverless`},
		{[]string{"catalog", "gpus", "-o", "jsno"}, `-o "jsno": unknown output format; did you mean "json"? valid: table, json, yaml`},
	}
	for _, c := range cases {
		if got := runErr(t, c.args...); !strings.Contains(got, c.want) {
			t.Errorf("gpuslice %s: got %q, want it to contain %q", strings.Join(c.args, " "), got, c.want)
		}
	}
}

func TestUnknownSubcommand(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"nodes", "lss"}, `unknown command "lss" for "gpuslice nodes"; did you mean "ls"? valid: ls, rm`},
		{[]string{"catalog", "gpu"}, `unknown command "gpu" for "gpuslice catalog"; did you mean "gpus"?`},
		{[]string{"mig", "zzzzzz"}, `unknown command "zzzzzz" for "gpuslice mig"; valid: `},
	}
	for _, c := range cases {
		if got := runErr(t, c.args...); !strings.Contains(got, c.want) {
			t.Errorf("gpuslice %s: got %q, want it to contain %q", strings.Join(c.args, " "), got, c.want)
		}
	}
	// A group with no argument still shows its help, and succeeds.
	if got := run("nodes"); strings.Contains(got, "error: ") || !strings.Contains(got, "Available Commands:") {
		t.Errorf("gpuslice nodes: got %q, want its help", got)
	}
}

// Every command group in the tree refuses an unknown subcommand.
func TestEveryGroupRefusesUnknownSubcommand(t *testing.T) {
	var groups [][]string
	var walk func(path []string, c *cobra.Command)
	walk = func(path []string, c *cobra.Command) {
		if c.HasSubCommands() && c.HasParent() {
			groups = append(groups, path)
		}
		for _, sub := range c.Commands() {
			walk(append(append([]string{}, path...), sub.Name()), sub)
		}
	}
	walk(nil, New(new(strings.Builder), new(strings.Builder)))
	if len(groups) < 3 {
		t.Fatalf("found only %d command groups: %v", len(groups), groups)
	}
	for _, g := range groups {
		args := append(append([]string{}, g...), "no-such-subcommand")
		if got := runErr(t, args...); !strings.Contains(got, `unknown command "no-such-subcommand"`) {
			t.Errorf("gpuslice %s: got %q, want an unknown command error", strings.Join(args, " "), got)
		}
	}
}
