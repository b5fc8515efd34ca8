//go:build cgo

package nvml

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/gpu"
)

// config is what the options set.
type config struct {
	lib  gonvml.Interface
	path string
	now  func() time.Time
	poll time.Duration
	run  Runner
	smi  string
}

// WithInterface makes Open use lib instead of go-nvml's real library: a
// go-nvml mock in tests.
func WithInterface(lib gonvml.Interface) Option {
	return func(c *config) { c.lib = lib }
}

// Device is a gpu.Device over NVML. Open it, Close it when done.
type Device struct {
	lib    gonvml.Interface
	now    func() time.Time
	poll   time.Duration
	driver string
	run    Runner // runs nvidia-smi (SetTimeSlice)
	smi    string

	mu     sync.Mutex // serialises NVML calls and guards the fields below
	gpus   []*gpuDev
	closed bool

	done     chan struct{}  // closed by Close
	watchers sync.WaitGroup // the Events goroutines
}

var _ gpu.Device = (*Device)(nil)

// gpuDev is one GPU as Open found it.
type gpuDev struct {
	index  int
	h      gonvml.Device
	uuid   string
	name   string
	model  *catalog.GPU // nil when the catalog does not know it
	memMiB int64

	// guarded by Device.mu
	healthy bool
	lost    error          // why the GPU is unusable, nil when it is fine
	fell    bool           // lost because NVML said ERROR_GPU_IS_LOST
	table   []profileEntry // the GPU-instance profiles, read once MIG is on
	// sampled is the newest per-process utilization sample read (NVML's
	// CPU timestamp, µs); the next read asks only for newer ones.
	sampled uint64
	// gpm holds each MIG device's last GPM sample, by MIG uuid: the next
	// read measures SM utilization between the two (see sampleMIG).
	// gpmSupport caches whether the GPU has GPM (nil: not asked yet).
	gpm        map[string]gonvml.GpmSample
	gpmSupport *bool
}

// mib is a mebibyte.
const mib = 1 << 20

// Open initialises NVML and enumerates the GPUs. Without the NVIDIA
// library or kernel driver it fails with an error wrapping gpu.ErrNoDriver;
// it never panics.
func Open(opts ...Option) (*Device, error) {
	cfg := config{now: time.Now, poll: defaultPoll, run: ExecRunner, smi: NvidiaSMI}
	for _, o := range opts {
		o(&cfg)
	}
	lib := cfg.lib
	if lib == nil {
		if cfg.path != "" {
			lib = gonvml.New(gonvml.WithLibraryPath(cfg.path))
		} else {
			lib = gonvml.New()
		}
	}
	if err := initialise(lib); err != nil {
		return nil, err
	}
	d := &Device{lib: lib, now: cfg.now, poll: cfg.poll, run: cfg.run, smi: cfg.smi, done: make(chan struct{})}
	if err := d.enumerate(); err != nil {
		func() {
			defer func() { _ = recover() }() // best effort
			lib.Shutdown()
		}()
		return nil, err
	}
	return d, nil
}

// initialise calls nvml.Init, turning its failures (and panics) into
// errors; those that mean there is no usable driver wrap gpu.ErrNoDriver.
func initialise(lib gonvml.Interface) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w (initialising NVML panicked: %v): use --simulate", gpu.ErrNoDriver, r)
		}
	}()
	switch ret := lib.Init(); ret {
	case gonvml.SUCCESS:
		return nil
	case gonvml.ERROR_LIBRARY_NOT_FOUND:
		return fmt.Errorf("%w %s", gpu.ErrNoDriver, noDriverHint)
	case gonvml.ERROR_DRIVER_NOT_LOADED:
		return fmt.Errorf("%w (the NVIDIA kernel driver is not loaded: %w): use --simulate", gpu.ErrNoDriver, ret)
	case gonvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return fmt.Errorf("%w (libnvidia-ml does not match the loaded kernel driver, reboot after a driver upgrade: %w): use --simulate", gpu.ErrNoDriver, ret)
	case gonvml.ERROR_NO_PERMISSION:
		return fmt.Errorf("nvml: initialising NVML: no permission to use the GPUs: %w", ret)
	default:
		return fmt.Errorf("nvml: initialising NVML: %w", ret)
	}
}

// enumerate reads the GPUs' identities, which do not change while NVML is
// initialised. A GPU NVML cannot talk to is kept as lost: it is left out of
// GPUs and calls naming it fail with gpu.ErrNotFound.
func (d *Device) enumerate() (err error) {
	defer guard(&err, "enumerating GPUs")
	if v, ret := d.lib.SystemGetDriverVersion(); ok(ret) {
		d.driver = v
	}
	n, ret := d.lib.DeviceGetCount()
	if !ok(ret) {
		return fail(ret, "counting GPUs", nil)
	}
	cat := catalog.Default()
	for i := range n {
		g := &gpuDev{index: i, healthy: true}
		d.gpus = append(d.gpus, g)
		h, ret := d.lib.DeviceGetHandleByIndex(i)
		if !ok(ret) {
			g.healthy, g.lost = false, fail(ret, fmt.Sprintf("GPU %d: getting its handle", i), nil)
			continue
		}
		g.h = h
		if g.uuid, ret = h.GetUUID(); !ok(ret) {
			g.healthy, g.lost = false, fail(ret, fmt.Sprintf("GPU %d: reading its uuid", i), nil)
			continue
		}
		if g.name, ret = h.GetName(); !ok(ret) {
			return fail(ret, fmt.Sprintf("GPU %d (%s): reading its name", i, g.uuid), nil)
		}
		var pciID uint32
		if pci, ret := h.GetPciInfo(); ok(ret) {
			pciID = pci.PciDeviceId
		}
		g.model = resolveModel(cat, g.name, pciID)
		mem, ret := h.GetMemoryInfo()
		if !ok(ret) {
			return fail(ret, fmt.Sprintf("GPU %d (%s): reading its memory", i, g.uuid), nil)
		}
		g.memMiB = int64(mem.Total / mib)
	}
	return nil
}

// Close stops the event watchers and shuts NVML down. Later calls on d
// fail with ErrClosed; closing twice is a no-op.
func (d *Device) Close() (err error) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	close(d.done)
	d.mu.Unlock()
	d.watchers.Wait() // no event wait may outlive the library
	defer guard(&err, "shutting down")
	for _, g := range d.gpus {
		g.dropGPM("")
	}
	if ret := d.lib.Shutdown(); !ok(ret) {
		return fail(ret, "shutting down", nil)
	}
	return nil
}

// Info reports the NVML backend and the driver version.
func (d *Device) Info() gpu.BackendInfo {
	return gpu.BackendInfo{Backend: Backend, DriverVersion: d.driver}
}

// usable checks the context and that d is open. d.mu must be held.
func (d *Device) usable(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d.closed {
		return ErrClosed
	}
	return nil
}

// gpu returns the GPU at index. d.mu must be held.
func (d *Device) gpu(index int) (*gpuDev, error) {
	if index < 0 || index >= len(d.gpus) {
		return nil, fmt.Errorf("nvml: GPU %d: %w (%d GPUs)", index, gpu.ErrNotFound, len(d.gpus))
	}
	g := d.gpus[index]
	if g.lost != nil {
		return nil, fmt.Errorf("nvml: GPU %d is unusable: %w: %w", index, gpu.ErrNotFound, g.lost)
	}
	return g, nil
}

// lose marks a GPU lost when ret says it fell off the bus. d.mu must be
// held.
func (g *gpuDev) lose(ret gonvml.Return, err error) error {
	if ret == gonvml.ERROR_GPU_IS_LOST {
		g.healthy = false
		g.lost = err
		g.fell = true
	}
	return err
}

// label names a GPU in errors: "GPU 0 (A100-40GB)".
func (g *gpuDev) label() string {
	if g.model != nil {
		return fmt.Sprintf("GPU %d (%s)", g.index, g.model.ID)
	}
	return fmt.Sprintf("GPU %d (%s)", g.index, g.name)
}

// migMode reads a GPU's MIG mode: capable is false when NVML does not
// support MIG on it.
func (g *gpuDev) migMode() (capable, current, pending bool, err error) {
	cur, pend, ret := g.h.GetMigMode()
	switch {
	case ok(ret):
		return true, cur == gonvml.DEVICE_MIG_ENABLE, pend == gonvml.DEVICE_MIG_ENABLE, nil
	case ret == gonvml.ERROR_NOT_SUPPORTED:
		return false, false, false, nil
	}
	return false, false, false, g.lose(ret, fail(ret, g.label()+": reading MIG mode", migCodes))
}

// GPUs lists the GPUs NVML can talk to, in index order, with their MIG
// instances ordered by start slice. A GPU that falls off the bus is left
// out from then on.
func (d *Device) GPUs(ctx context.Context) (out []gpu.GPU, err error) {
	defer guard(&err, "listing GPUs")
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.usable(ctx); err != nil {
		return nil, err
	}
	out = make([]gpu.GPU, 0, len(d.gpus))
	for _, g := range d.gpus {
		if g.lost != nil {
			continue
		}
		x, err := d.describe(g)
		if err != nil {
			if g.lost != nil {
				continue
			}
			return nil, err
		}
		out = append(out, x)
	}
	return out, nil
}

// describe reads one GPU. d.mu must be held.
func (d *Device) describe(g *gpuDev) (gpu.GPU, error) {
	x := gpu.GPU{
		Index:     g.index,
		UUID:      g.uuid,
		Name:      g.name,
		MemoryMiB: g.memMiB,
		Healthy:   g.healthy,
	}
	if g.model != nil {
		x.Model = g.model.ID
	}
	capable, current, _, err := g.migMode()
	if err != nil {
		return gpu.GPU{}, err
	}
	x.MIGCapable, x.MIGEnabled = capable, current
	mode, ret := g.h.GetComputeMode()
	switch {
	case ok(ret):
		x.ComputeMode = gpu.ComputeMode(mode)
	case ret != gonvml.ERROR_NOT_SUPPORTED:
		return gpu.GPU{}, g.lose(ret, fail(ret, g.label()+": reading compute mode", nil))
	}
	if current {
		ins, err := g.instances()
		if err != nil {
			return gpu.GPU{}, err
		}
		for _, in := range ins {
			x.Instances = append(x.Instances, in.Instance)
		}
	}
	return x, nil
}

// SetComputeMode sets a whole GPU's compute mode.
func (d *Device) SetComputeMode(ctx context.Context, index int, mode gpu.ComputeMode) (err error) {
	defer guard(&err, fmt.Sprintf("GPU %d: setting compute mode", index))
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.usable(ctx); err != nil {
		return err
	}
	g, err := d.gpu(index)
	if err != nil {
		return err
	}
	switch mode {
	case gpu.ComputeDefault, gpu.ComputeExclusiveProcess, gpu.ComputeProhibited:
	default:
		return fmt.Errorf("nvml: %s: unknown compute mode %d", g.label(), mode)
	}
	if ret := g.h.SetComputeMode(gonvml.ComputeMode(mode)); !ok(ret) {
		return g.lose(ret, fail(ret, fmt.Sprintf("%s: setting compute mode %d", g.label(), mode), unsupportedCodes))
	}
	return nil
}

// SetTimeSlice sets a whole GPU's time-slice level with nvidia-smi
// (compute-policy -i <uuid> --set-timeslice=<level>): NVML has no setter.
// The command runs without the device lock held.
func (d *Device) SetTimeSlice(ctx context.Context, index int, level gpu.TimeSlice) error {
	if !level.Valid() {
		_, err := timeSliceArgs("", level)
		return fmt.Errorf("nvml: GPU %d: %w", index, err)
	}
	d.mu.Lock()
	if err := d.usable(ctx); err != nil {
		d.mu.Unlock()
		return err
	}
	g, err := d.gpu(index)
	if err != nil {
		d.mu.Unlock()
		return err
	}
	label, uuid := g.label(), g.uuid
	d.mu.Unlock()
	return runTimeSlice(ctx, d.run, d.smi, "setting the time slice of "+label, uuid, level)
}

// target is a device a uuid names: a GPU, or one of its MIG devices.
type target struct {
	lib  gonvml.Interface
	g    *gpuDev
	h    gonvml.Device // the GPU's handle or the MIG device's
	mig  bool
	uuid string // the MIG device's
	giID int    // the MIG device's GPU instance
}

// resolve finds the GPU or MIG device with uuid. d.mu must be held.
func (d *Device) resolve(uuid string) (target, error) {
	for _, g := range d.gpus {
		if g.lost == nil && g.uuid == uuid {
			return target{lib: d.lib, g: g, h: g.h}, nil
		}
	}
	for _, g := range d.gpus {
		if g.lost != nil {
			continue
		}
		capable, current, _, err := g.migMode()
		if err != nil {
			return target{}, err
		}
		if !capable || !current {
			continue
		}
		migs, err := g.migDevices()
		if err != nil {
			return target{}, err
		}
		for _, m := range migs {
			if m.uuid == uuid {
				return target{lib: d.lib, g: g, h: m.h, mig: true, uuid: uuid, giID: m.giID}, nil
			}
		}
	}
	return target{}, fmt.Errorf("nvml: device %q: %w", uuid, gpu.ErrNotFound)
}

// Processes lists the compute processes on a GPU or a MIG device. Memory
// NVML cannot attribute (a MIG parent's view without privileges) reads 0.
func (d *Device) Processes(ctx context.Context, uuid string) (out []gpu.Process, err error) {
	defer guard(&err, fmt.Sprintf("listing processes on %s", uuid))
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.usable(ctx); err != nil {
		return nil, err
	}
	t, err := d.resolve(uuid)
	if err != nil {
		return nil, err
	}
	return t.processes()
}

// processes lists the compute processes on a target.
func (t target) processes() ([]gpu.Process, error) {
	ps, ret := t.h.GetComputeRunningProcesses()
	if !ok(ret) {
		return nil, t.g.lose(ret, fail(ret, fmt.Sprintf("%s: listing processes", t.g.label()), unsupportedCodes))
	}
	out := make([]gpu.Process, 0, len(ps))
	for _, p := range ps {
		var used int64
		if p.UsedGpuMemory != ^uint64(0) { // NVML_VALUE_NOT_AVAILABLE
			used = int64(p.UsedGpuMemory / mib)
		}
		out = append(out, gpu.Process{PID: int(p.Pid), MemoryMiB: used})
	}
	if sm := t.sampleSM(); sm != nil {
		for i := range out {
			v := sm[out[i].PID] // no sample since the last read: idle
			out[i].SMPercent = &v
		}
	} else if pct, ok := t.sampleMIG(); ok && len(out) > 0 {
		// GPM measures the instance, not its processes: each of them is
		// given an equal share, so the instance's total is right.
		for i := range out {
			v := int(math.Round(pct / float64(len(out))))
			out[i].SMPercent = &v
		}
	}
	slices.SortFunc(out, func(a, b gpu.Process) int { return a.PID - b.PID })
	return out, nil
}

// sampleSM reads the per-process SM utilization samples NVML took on a
// whole GPU since the previous read, averaged per pid. It returns nil when
// there are none to be had: MIG devices and GPUs in MIG mode keep no
// per-process samples (NOT_SUPPORTED), and a failed read is left to the
// process listing to report. ERROR_NOT_FOUND means no sample is newer than
// the last read: every process was idle.
func (t target) sampleSM() map[int]int {
	if t.mig {
		return nil
	}
	samples, ret := t.h.GetProcessUtilization(t.g.sampled)
	if ret == gonvml.ERROR_NOT_FOUND {
		return map[int]int{}
	}
	if !ok(ret) {
		return nil
	}
	sum, n := map[int]int{}, map[int]int{}
	for _, x := range samples {
		t.g.sampled = max(t.g.sampled, x.TimeStamp)
		sum[int(x.Pid)] += int(min(x.SmUtil, 100))
		n[int(x.Pid)]++
	}
	for pid := range sum {
		sum[pid] /= n[pid]
	}
	return sum
}

// sampleMIG measures a MIG device's SM utilization with GPM (GPU
// Performance Monitoring, Hopper and newer): a sample of the device's GPU
// instance now, against the one kept from the previous read, in percent
// of the whole GPU (GPM's percent of the instance's busy SMs, scaled by
// the instance's share of the SMs). It reports false when there is no
// measure: a whole GPU, a GPU without GPM (A100 and older answer
// NOT_SUPPORTED), a failed call, or the first read of a device (one
// sample is not a rate).
func (t target) sampleMIG() (float64, bool) {
	if !t.mig || !t.g.hasGPM(t.lib) {
		return 0, false
	}
	now, ret := t.lib.GpmSampleAlloc()
	if !ok(ret) {
		return 0, false
	}
	if ret := t.lib.GpmMigSampleGet(t.g.h, t.giID, now); !ok(ret) {
		now.Free()
		t.g.dropGPM(t.uuid)
		return 0, false
	}
	if t.g.gpm == nil {
		t.g.gpm = map[string]gonvml.GpmSample{}
	}
	prev := t.g.gpm[t.uuid]
	t.g.gpm[t.uuid] = now
	if prev == nil {
		return 0, false
	}
	defer prev.Free()
	mg := gonvml.GpmMetricsGetType{NumMetrics: 1, Sample1: prev, Sample2: now}
	mg.Metrics[0].MetricId = uint32(gonvml.GPM_METRIC_SM_UTIL)
	if ret := t.lib.GpmMetricsGet(&mg); !ok(ret) || gonvml.Return(mg.Metrics[0].NvmlReturn) != gonvml.SUCCESS {
		return 0, false
	}
	share, known := t.g.smShare(t.giID)
	if !known {
		return 0, false
	}
	return min(max(mg.Metrics[0].Value, 0), 100) * share, true
}

// smShare is the fraction of the GPU's SMs a GPU instance has (its
// profile's multiprocessor count over the largest profile's): GPM measures
// a MIG instance against its own SMs, and gpu.Process wants percent of the
// whole GPU.
func (g *gpuDev) smShare(giID int) (float64, bool) {
	ins, err := g.instances()
	if err != nil {
		return 0, false
	}
	i := slices.IndexFunc(ins, func(in instance) bool { return in.GIID == giID })
	if i < 0 {
		return 0, false
	}
	table, err := g.profiles()
	if err != nil {
		return 0, false
	}
	var mine, all uint32
	for _, e := range table {
		all = max(all, e.info.MultiprocessorCount)
		if e.name == ins[i].Profile {
			mine = e.info.MultiprocessorCount
		}
	}
	if mine == 0 || all == 0 {
		return 0, false
	}
	return float64(mine) / float64(all), true
}

// hasGPM asks once whether the GPU supports GPM.
func (g *gpuDev) hasGPM(lib gonvml.Interface) bool {
	if g.gpmSupport == nil {
		sup, ret := lib.GpmQueryDeviceSupport(g.h)
		v := ok(ret) && sup.IsSupportedDevice != 0
		g.gpmSupport = &v
	}
	return *g.gpmSupport
}

// dropGPM frees the GPM sample kept for a MIG device ("": every one).
func (g *gpuDev) dropGPM(uuid string) {
	for id, smp := range g.gpm {
		if uuid == "" || id == uuid {
			smp.Free()
			delete(g.gpm, id)
		}
	}
}

// Utilization samples a GPU: SMPercent is NVML's GPU utilization and
// MemoryPercent the share of its memory in use (like gpu/fake's, not
// NVML's memory-controller activity). NVML cannot sample a MIG device or
// a GPU in MIG mode: those fail with an error wrapping
// errors.ErrUnsupported.
func (d *Device) Utilization(ctx context.Context, uuid string) (u gpu.Utilization, err error) {
	defer guard(&err, fmt.Sprintf("sampling %s", uuid))
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.usable(ctx); err != nil {
		return gpu.Utilization{}, err
	}
	t, err := d.resolve(uuid)
	if err != nil {
		return gpu.Utilization{}, err
	}
	if t.mig {
		return gpu.Utilization{}, fmt.Errorf("nvml: %s: MIG device %s: NVML cannot sample utilization in MIG mode: %w", t.g.label(), uuid, errors.ErrUnsupported)
	}
	r, ret := t.h.GetUtilizationRates()
	if !ok(ret) {
		return gpu.Utilization{}, t.g.lose(ret, fail(ret, t.g.label()+": sampling utilization", unsupportedCodes))
	}
	mem, ret := t.h.GetMemoryInfo()
	if !ok(ret) {
		return gpu.Utilization{}, t.g.lose(ret, fail(ret, t.g.label()+": reading memory use", nil))
	}
	u = gpu.Utilization{SMPercent: int(min(r.Gpu, 100)), Time: d.now()}
	if mem.Total > 0 {
		u.MemoryPercent = int(min(mem.Used*100/mem.Total, 100))
	}
	return u, nil
}
