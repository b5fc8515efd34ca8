//go:build !linux

package controlplane

import (
	"errors"
	"syscall"
)

// Supported reports whether Start can run the control plane on this OS: the
// cached binaries are Linux builds, so elsewhere Start skips.
const Supported = false

func sysProcAttr() *syscall.SysProcAttr { return nil }

func signalGroup(int, syscall.Signal) error { return errors.New("apitest: unsupported OS") }
