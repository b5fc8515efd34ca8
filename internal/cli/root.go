package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"

	"github.com/gpuslice/gpuslice/internal/catalog"
)

// Version is set at build time with -ldflags "-X ...cli.Version=v1.2.3".
var Version = "dev"

// env is what every command needs: where to write and which facts to use.
type env struct {
	out, errOut io.Writer
	format      string
	catalog     *catalog.Catalog
}

func (e *env) render(t *table, v any) error { return render(e.out, e.format, t, v) }

// New builds the gpuslice command tree writing to out and errOut.
func New(out, errOut io.Writer) *cobra.Command {
	e := &env{out: out, errOut: errOut, catalog: catalog.Default()}
	// compose-go logs its own warnings through logrus; gpuslice reports
	// problems itself, with positions, so keep only logrus errors.
	logrus.SetLevel(logrus.ErrorLevel)
	root := &cobra.Command{
		Use:   "gpuslice",
		Short: "Share GPUs safely: time-slicing, MPS and MIG behind one request model",
		Long: `gpuslice lets many workloads and tenants share NVIDIA GPUs through
time-slicing, CUDA MPS and MIG, alone or layered, behind one request model.

Start with: gpuslice serve (then gpuslice run -- CMD), or gpuslice plan FILE.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       Version,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if !slices.Contains(outputFormats, e.format) {
				return fmt.Errorf("-o %q: unknown output format%s valid: %s", e.format, suggestSep(e.format, outputFormats), strings.Join(outputFormats, ", "))
			}
			return nil
		},
	}
	root.SetOut(out)
	root.SetErr(errOut)
	root.PersistentFlags().StringVarP(&e.format, "output", "o", "table", "output format: "+strings.Join(outputFormats, "|"))
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(outputFormats, cobra.ShellCompDirectiveNoFileComp))
	root.AddCommand(catalogCmd(e), migCmd(e), planCmd(e), renderCmd(e), schemaCmd(e), serveCmd(e), benchCmd(e), draCmd(e), draDriverCmd(e), draWebhookCmd(e), proxyCmd(e), adviseCmd(e), simulateCmd(e), imageArchiveCmd(e), simMPSControlCmd(e))
	root.AddCommand(remoteCmds(e)...)
	// Every command: an unknown flag gets a did-you-mean; every command
	// group: an unknown subcommand is an error, not its help.
	root.SetFlagErrorFunc(flagError)
	requireSubcommand(root)
	return root
}

// completeModels completes GPU model ids; onlyMIG limits them to
// MIG-capable models.
func completeModels(e *env, onlyMIG bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var ids []string
		for _, g := range e.catalog.GPUs() {
			if !onlyMIG || g.MIG != nil {
				ids = append(ids, g.ID)
			}
		}
		return ids, cobra.ShellCompDirectiveNoFileComp
	}
}
