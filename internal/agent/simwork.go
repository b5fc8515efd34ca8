package agent

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/gpu"
)

// Workloads is what the agent needs of a simulated machine to stand in for
// the programs claims run; gpu/fake's Machine has it.
type Workloads interface {
	StartProcess(uuid string, pid int, memoryMiB int64) error
	StopProcess(pid int) error
}

// firstSimPID is the first pid given to a simulated program: above Linux's
// largest pid_max (2^22), so it never names a real process.
const firstSimPID = 1 << 22

// simulator gives each running claim on simulated GPUs one process per
// device, holding the memory promised there, so that usage, metrics and
// the memory watchdog have something to measure; it stops them when the
// claim stops running. A process the watchdog killed is started again at
// the next step while its claim still runs, as a supervisor would.
type simulator struct {
	w     Workloads
	mu    sync.Mutex
	next  int
	procs map[simKey]int // (claim, device) -> pid
	owner map[int]string // pid -> claim
}

type simKey struct{ claim, device string }

func newSimulator(w Workloads) *simulator {
	return &simulator{w: w, next: firstSimPID, procs: map[simKey]int{}, owner: map[int]string{}}
}

// Owner names the claim a simulated process runs for (a watchdog.PIDOwner).
func (s *simulator) Owner(pid int) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.owner[pid]
	return c, ok
}

// sync starts and stops simulated processes to match the running claims
// on node; dev shows which of them still run.
func (s *simulator) sync(ctx context.Context, dev gpu.Device, claims []api.Claim, node string) []error {
	want := map[simKey]int64{}
	for _, c := range claims {
		if c.State != api.Running || c.Allocation == nil {
			continue
		}
		for _, d := range c.Allocation.Devices {
			if d.Node == node && d.Device != "" && !alloc.IsPlanned(d.Device) {
				want[simKey{c.ID, d.Device}] += d.MemoryMiB
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	running := map[int]bool{}
	seen := map[string]bool{}
	for k := range s.procs {
		if seen[k.device] {
			continue
		}
		seen[k.device] = true
		ps, err := dev.Processes(ctx, k.device)
		if err != nil {
			continue // gone with its device: treated as not running
		}
		for _, p := range ps {
			running[p.PID] = true
		}
	}
	var errs []error
	for k, pid := range s.procs {
		if _, ok := want[k]; ok {
			continue
		}
		if running[pid] {
			if err := s.w.StopProcess(pid); err != nil {
				errs = append(errs, fmt.Errorf("stopping the simulated process of claim %s on %s: %w", k.claim, k.device, err))
				continue
			}
		}
		delete(s.procs, k)
		delete(s.owner, pid)
	}
	keys := make([]simKey, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b simKey) int { return cmp.Or(cmp.Compare(a.claim, b.claim), cmp.Compare(a.device, b.device)) })
	for _, k := range keys {
		pid, known := s.procs[k]
		if known && running[pid] {
			continue
		}
		if !known {
			pid = s.next
			s.next++
		}
		if err := s.w.StartProcess(k.device, pid, want[k]); err != nil {
			errs = append(errs, fmt.Errorf("starting a simulated process for claim %s on %s: %w", k.claim, k.device, err))
			continue
		}
		s.procs[k], s.owner[pid] = pid, k.claim
	}
	return errs
}
