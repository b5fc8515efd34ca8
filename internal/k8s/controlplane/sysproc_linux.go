package controlplane

import "syscall"

// Supported reports whether Start can run the control plane on this OS.
const Supported = true

// sysProcAttr puts each binary in its own process group, so stopping it kills
// everything it started, and has the kernel kill it if the test binary dies
// without running its cleanups (a panic or a -timeout).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// signalGroup sends sig to the process group led by pid.
func signalGroup(pid int, sig syscall.Signal) error {
	return syscall.Kill(-pid, sig)
}
