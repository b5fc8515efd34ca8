// Command pause is the sandbox ("pause") image's program for gpuslice's
// real-node tests, where no registry is reachable to pull
// registry.k8s.io/pause: containerd runs it as every pod's first process
// (its pinned_images.sandbox). It sleeps until SIGTERM or SIGINT and then
// exits 0; as PID 1 of a pod's shared PID namespace it reaps the zombies
// reparented to it. scripts/images.sh --test-images builds it statically
// (CGO_ENABLED=0) into gpuslice.dev/test/pause.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	// Children may have ended before the handler was installed.
	reap()
	for s := range sigs {
		if s == syscall.SIGCHLD {
			reap()
			continue
		}
		os.Exit(0)
	}
}

// reap collects every child that has exited, without waiting for those
// still running.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
	}
}
