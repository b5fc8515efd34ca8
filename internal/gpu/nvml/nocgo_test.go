//go:build !cgo

package nvml

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/gpu"
)

func TestOpenWithoutCgo(t *testing.T) {
	d, err := Open(WithLibraryPath("/nowhere"))
	if d != nil || !errors.Is(err, gpu.ErrNoDriver) || !strings.Contains(err.Error(), "built without cgo") || !strings.Contains(err.Error(), "use --simulate") {
		t.Fatalf("Open without cgo = %v, %v", d, err)
	}
	var dev gpu.Device = &Device{}
	if _, err := dev.GPUs(t.Context()); !errors.Is(err, gpu.ErrNoDriver) {
		t.Errorf("GPUs = %v", err)
	}
}
