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
	if code, ok := cli.Multicall(os.Args, os.Stdin, os.Stdout, os.Stderr); ok {
		os.Exit(code)
	}
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
