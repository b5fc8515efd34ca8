//go:build unix

package draplugin_test

import (
	"flag"
	"os"
	"strconv"
	"testing"

	"github.com/gpuslice/gpuslice/internal/k8s/apitest"
	"github.com/gpuslice/gpuslice/internal/node/mps/mpssim"
)

// parallel is how many of the package's parallel tests run at once
// unless -test.parallel says: they spend their time waiting on the API
// server, the scheduler (which re-reads a claim's binding conditions
// every 5 s) and the drivers' gRPC, not on the CPU, so more than
// GOMAXPROCS of them overlap well on a small machine.
const parallel = 16

// TestMain makes the test binary a multicall binary, as the gpuslice
// binary is: called as nvidia-cuda-mps-control it is the simulated MPS
// control daemon (mpssim), which a simulated dra-driver runs by default.
// Otherwise it runs the tests on the package's one control plane and
// stops it (and its scheduler) when they end.
func TestMain(m *testing.M) {
	if mpssim.IsControlBinary(os.Args[0]) {
		os.Exit(mpssim.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", strconv.Itoa(parallel))
	}
	os.Exit(apitest.Main(m))
}
