// Command gpuslice is the gpuslice binary. It only wires the command tree
// in internal/cli to the process: arguments, output streams, exit code.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/gpuslice/gpuslice/internal/cli"
)

func main() {
	cmd := cli.New(os.Stdout, os.Stderr)
	if err := cmd.Execute(); err != nil {
		var exit *cli.ExitError
		if errors.As(err, &exit) {
			os.Exit(exit.Code)
		}
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
