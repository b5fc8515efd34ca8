//go:build unix

package mps

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"syscall"
)

// processAlive reports whether pid runs. A zombie (exited, not yet reaped
// by its parent) counts as gone.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true // no procfs (macOS): trust kill(0)
	}
	// "pid (comm) S ...": the state follows the last ')'.
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'Z' {
		return false
	}
	return true
}

// killProcess kills pid with SIGKILL.
func killProcess(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }
