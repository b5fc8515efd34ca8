package nodetest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// SlotOf returns the slot last taken by process pid (whose lock file
// records it), or 0. A process that outlives its cluster's stop, or one
// killed before it learnt its slot, leaves this trail for SweepSlot.
func SlotOf(pid int) int {
	for n := 1; n <= maxSlots; n++ {
		data, err := os.ReadFile(filepath.Join(slotDir, "slot-"+strconv.Itoa(n)+".lock"))
		if err != nil {
			continue
		}
		if strings.TrimSpace(string(data)) == strconv.Itoa(pid) {
			return n
		}
	}
	return 0
}

// SweepSlot does for slot n what the next start does (acquireSlot sweeps
// every free slot with leftovers), without starting anything: it kills
// every process a dead holder left there (containers, containerd, the
// kubelet) and removes its cgroups, veth and network namespace. It fails,
// touching nothing, while a live process holds the slot.
func SweepSlot(n int) error {
	if n < 1 || n > maxSlots {
		return fmt.Errorf("slot %d: out of range 1..%d", n, maxSlots)
	}
	path := filepath.Join(slotDir, "slot-"+strconv.Itoa(n)+".lock")
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if os.IsNotExist(err) {
		return nil // never taken on this boot: nothing to sweep
	}
	if err != nil {
		return err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		return fmt.Errorf("slot %d is in use (held by pid %s)", n, strings.TrimSpace(string(holder)))
	}
	s := &slot{n: n, lock: f}
	defer s.release()
	return s.sweep()
}
