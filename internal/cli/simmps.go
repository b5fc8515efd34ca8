package cli

import (
	"io"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/gpuslice/gpuslice/internal/node/mps/mpssim"
)

// Multicall runs the program a multicall name calls for and reports
// whether there was one: called as nvidia-cuda-mps-control (the link
// dra-driver --simulate makes in its state directory), gpuslice is the
// simulated MPS control daemon (package mpssim). args is os.Args.
func Multicall(args []string, stdin io.Reader, stdout, stderr io.Writer) (int, bool) {
	if len(args) == 0 || !mpssim.IsControlBinary(args[0]) {
		return 0, false
	}
	return mpssim.Main(args[1:], stdin, stdout, stderr), true
}

// simMPSControlCmd is the simulated nvidia-cuda-mps-control as a hidden
// subcommand, for trying it by hand.
func simMPSControlCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:    "sim-mps-control [-d | -f]",
		Short:  "A simulated nvidia-cuda-mps-control (what dra-driver --simulate runs)",
		Hidden: true,
		Long: `Behaves as nvidia-cuda-mps-control does where gpuslice uses it, for simulated GPUs: -d starts
a control daemon in the background (control socket and pid file in $CUDA_MPS_PIPE_DIRECTORY, log in
$CUDA_MPS_LOG_DIRECTORY), -f runs it in the foreground, and with no argument it sends each line of
standard input to the daemon (quit, get_server_list, set_default_active_thread_percentage P,
set_default_device_pinned_mem_limit 0 NM, ...). The defaults it is given are kept in
$CUDA_MPS_PIPE_DIRECTORY/` + mpssim.LimitsFile + ` (JSON). No MPS server ever starts.

"gpuslice dra-driver --simulate" runs it through a link named nvidia-cuda-mps-control in its
state directory (the gpuslice binary called by that name is the simulator).`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if code := mpssim.Main(args, cmd.InOrStdin(), e.out, e.errOut); code != 0 {
				return &ExitError{Code: code}
			}
			return nil
		},
	}
}

// simulatedMPSControl installs the simulated control binary for a
// simulated dra-driver: <state-dir>/bin/nvidia-cuda-mps-control, a link
// to this executable.
func simulatedMPSControl(stateDir string) (string, error) {
	return mpssim.Install(filepath.Join(stateDir, "bin"))
}
