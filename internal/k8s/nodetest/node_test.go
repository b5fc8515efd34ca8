package nodetest_test

import (
	"testing"

	"github.com/gpuslice/gpuslice/internal/k8s/nodetest"
)

func TestNodeBecomesReady(t *testing.T) {
	c := nodetest.StartCluster(t, nodetest.Options{SandboxImage: "gpuslice.dev/test/pause:dev"})
	t.Logf("node %s ready at %s", c.Node.Name, c.Node.IP)
}
