package apitest

import (
	"os"
	"testing"
)

// TestMain stops the package's shared control plane and scheduler; its
// tests mostly wait, so up to 8 run at once.
func TestMain(m *testing.M) {
	RaiseParallel(8)
	os.Exit(Main(m))
}
