//go:build !unix

package mpssim

import (
	"errors"
	"fmt"
	"io"
)

var errUnsupported = errors.New("the simulated MPS control daemon needs a Unix system")

// Main reports that the simulator needs Unix.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, errUnsupported)
	return 1
}

// Install reports that the simulator needs Unix.
func Install(dir string) (string, error) { return "", errUnsupported }
