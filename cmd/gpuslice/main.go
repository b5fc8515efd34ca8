// Command gpuslice is the gpuslice binary. It only wires the command tree
// in internal/cli to the process: arguments, output streams, exit code.
package main

import (
	"fmt"
	"os"

	"github.com/gpuslice/gpuslice/internal/cli"
)

func main() {
	cmd := cli.New(os.Stdout, os.Stderr)
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
