//go:build cgo

package nvml

import (
	"errors"
	"fmt"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuslice/gpuslice/internal/gpu"
)

// guard turns a panic in go-nvml (a missing symbol, a mock method nobody
// set up) into an error. Defer it first so that it runs after any unlock.
func guard(err *error, what string) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("nvml: %s: NVML call panicked: %v", what, r)
	}
}

// codes maps NVML return codes to the gpu error they mean in a context.
type codes map[gonvml.Return]error

// common is what a code means anywhere.
var common = codes{
	gonvml.ERROR_IN_USE:            gpu.ErrInUse,
	gonvml.ERROR_NOT_FOUND:         gpu.ErrNotFound,
	gonvml.ERROR_GPU_IS_LOST:       gpu.ErrNotFound,
	gonvml.ERROR_UNINITIALIZED:     gpu.ErrNoDriver,
	gonvml.ERROR_DRIVER_NOT_LOADED: gpu.ErrNoDriver,
	gonvml.ERROR_LIBRARY_NOT_FOUND: gpu.ErrNoDriver,
}

// migCodes is what a code means on a MIG call.
var migCodes = codes{gonvml.ERROR_NOT_SUPPORTED: gpu.ErrNoMIG}

// createCodes is what a code means when creating a GPU instance.
var createCodes = codes{
	gonvml.ERROR_NOT_SUPPORTED:          gpu.ErrNoMIG,
	gonvml.ERROR_INSUFFICIENT_RESOURCES: gpu.ErrPlacement,
	gonvml.ERROR_INVALID_ARGUMENT:       gpu.ErrPlacement,
}

// unsupportedCodes is what a code means on an optional query.
var unsupportedCodes = codes{gonvml.ERROR_NOT_SUPPORTED: errors.ErrUnsupported}

// fail wraps a failed NVML call: "nvml: <what>: <meaning>: <NVML's
// message>", wrapping the gpu error the code means in this context (special
// first, then common) and the nvml.Return itself.
func fail(ret gonvml.Return, what string, special codes) error {
	sentinel := special[ret]
	if sentinel == nil {
		sentinel = common[ret]
	}
	if sentinel == nil {
		return fmt.Errorf("nvml: %s: %w", what, ret)
	}
	return fmt.Errorf("nvml: %s: %w: %w", what, sentinel, ret)
}

// ok reports whether a return code is SUCCESS.
func ok(ret gonvml.Return) bool { return ret == gonvml.SUCCESS }

// absent reports whether a query's code means "this device does not have
// it" rather than a failure.
func absent(ret gonvml.Return) bool {
	return ret == gonvml.ERROR_NOT_SUPPORTED || ret == gonvml.ERROR_INVALID_ARGUMENT || ret == gonvml.ERROR_NOT_FOUND
}
