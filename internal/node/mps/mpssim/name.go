package mpssim

import (
	"path/filepath"

	"github.com/gpuslice/gpuslice/internal/node/mps"
)

// IsControlBinary reports whether a program name (os.Args[0]) calls for
// the simulator: its base name is mps.ControlBinary.
func IsControlBinary(argv0 string) bool { return filepath.Base(argv0) == mps.ControlBinary }
