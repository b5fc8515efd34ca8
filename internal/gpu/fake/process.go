package fake

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/gpuslice/gpuslice/internal/gpu"
)

// ErrOutOfMemory is what a simulated process gets when its device cannot
// hand out the memory it asks for (CUDA's out-of-memory error).
var ErrOutOfMemory = errors.New("CUDA out of memory")

// ErrNoProcess reports a pid the machine does not run.
var ErrNoProcess = errors.New("no such process")

// process is a simulated process holding memory on one device.
type process struct {
	pid    int
	index  int    // the GPU
	uuid   string // the GPU's uuid or a MIG instance's
	memMiB int64
	sm     int // pinned SM utilization, or -1 to derive it
}

// StartProcess starts a simulated process with pid on the GPU or MIG
// instance uuid, holding memoryMiB. A pid runs on one device at a time. It
// fails with ErrOutOfMemory when the device's memory (the instance's on
// MIG, the GPU's otherwise) would be exceeded, with ErrNotFound for an
// unknown uuid, with gpu.ErrFault on an unhealthy GPU, and when the GPU is
// in MIG mode (processes run on its instances) or its compute mode is
// ComputeProhibited.
func (m *Machine) StartProcess(uuid string, pid int, memoryMiB int64) error {
	if pid <= 0 {
		return fmt.Errorf("pid %d: want a positive pid", pid)
	}
	if memoryMiB < 0 {
		return fmt.Errorf("pid %d: negative memory %d MiB", pid, memoryMiB)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if p, ok := m.procs[pid]; ok {
		return fmt.Errorf("pid %d already runs on %s", pid, p.uuid)
	}
	d, in, err := m.lookup(uuid)
	if err != nil {
		return err
	}
	switch {
	case in == nil && d.migOn:
		return fmt.Errorf("GPU %d is in MIG mode; start pid %d on one of its MIG instances", d.index, pid)
	case !d.healthy && d.lastXID > 0:
		return fmt.Errorf("GPU %d is unhealthy after XID %d: %w", d.index, d.lastXID, gpu.ErrFault)
	case !d.healthy:
		return fmt.Errorf("GPU %d is unhealthy: %w", d.index, gpu.ErrFault)
	case d.mode == gpu.ComputeProhibited:
		return fmt.Errorf("GPU %d: compute mode is prohibited", d.index)
	}
	if err := m.checkMemory(d, in, 0, memoryMiB); err != nil {
		return fmt.Errorf("pid %d: %w", pid, err)
	}
	m.procs[pid] = &process{pid: pid, index: d.index, uuid: uuid, memMiB: memoryMiB, sm: -1}
	return nil
}

// SetProcessMemory changes how much memory a running process holds, under
// the same limit as StartProcess.
func (m *Machine) SetProcessMemory(pid int, memoryMiB int64) error {
	if memoryMiB < 0 {
		return fmt.Errorf("pid %d: negative memory %d MiB", pid, memoryMiB)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	p, err := m.process(pid)
	if err != nil {
		return err
	}
	d, in, err := m.lookup(p.uuid)
	if err != nil {
		return err
	}
	if err := m.checkMemory(d, in, p.memMiB, memoryMiB); err != nil {
		return fmt.Errorf("pid %d: %w", pid, err)
	}
	p.memMiB = memoryMiB
	return nil
}

// StopProcess ends a simulated process and frees its memory.
func (m *Machine) StopProcess(pid int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.process(pid); err != nil {
		return err
	}
	delete(m.procs, pid)
	return nil
}

// process finds a running process. m.mu must be held.
func (m *Machine) process(pid int) (*process, error) {
	p, ok := m.procs[pid]
	if !ok {
		return nil, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
	}
	return p, nil
}

// SetProcessUtilization pins the SM utilization Processes reports for a
// process on a whole GPU, in percent of the GPU, or -1 to derive it again
// (25 points per process on the GPU, at most an equal share of 100).
func (m *Machine) SetProcessUtilization(pid, smPercent int) error {
	if smPercent < -1 || smPercent > 100 {
		return fmt.Errorf("pid %d: utilization %d: want 0..100, or -1 to derive it", pid, smPercent)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	p, err := m.process(pid)
	if err != nil {
		return err
	}
	p.sm = smPercent
	return nil
}

// SetUtilization pins the utilization Utilization reports for a GPU or MIG
// instance. Each value is a percentage, or -1 to derive it from the
// processes again.
func (m *Machine) SetUtilization(uuid string, smPercent, memoryPercent int) error {
	for _, v := range []int{smPercent, memoryPercent} {
		if v < -1 || v > 100 {
			return fmt.Errorf("utilization %d: want 0..100, or -1 to derive it", v)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	d, _, err := m.lookup(uuid)
	if err != nil {
		return err
	}
	if smPercent < 0 && memoryPercent < 0 {
		delete(d.util, uuid)
		return nil
	}
	d.util[uuid] = utilization{sm: smPercent, mem: memoryPercent}
	return nil
}

// checkMemory checks that a process holding old MiB on a device may hold
// want instead. m.mu must be held.
func (m *Machine) checkMemory(d *device, in *instance, old, want int64) error {
	limit, name := d.memMiB, fmt.Sprintf("GPU %d", d.index)
	if in != nil {
		limit, name = in.MemoryMiB, fmt.Sprintf("MIG instance %s (%s)", in.UUID, in.Profile)
	}
	var used int64
	for _, p := range m.procsOn(d, in) {
		used += p.memMiB
	}
	if free := limit - (used - old); want > free {
		return fmt.Errorf("%w: %d MiB requested, %d of %d MiB free on %s", ErrOutOfMemory, want, free, limit, name)
	}
	return nil
}

// procsOn lists, by pid, the processes on a GPU (in == nil: every process
// on it and its instances) or on one instance. m.mu must be held.
func (m *Machine) procsOn(d *device, in *instance) []*process {
	var out []*process
	for _, p := range m.procs {
		if p.index == d.index && (in == nil || p.uuid == in.UUID) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b *process) int { return cmp.Compare(a.pid, b.pid) })
	return out
}

// pidsOn lists the pids on a GPU (uuid "") or one of its instances.
func (m *Machine) pidsOn(d *device, uuid string) []int {
	var in *instance
	if uuid != "" {
		for _, i := range d.insts {
			if i.UUID == uuid {
				in = i
			}
		}
		if in == nil {
			return nil
		}
	}
	procs := m.procsOn(d, in)
	pids := make([]int, len(procs))
	for i, p := range procs {
		pids[i] = p.pid
	}
	return pids
}
