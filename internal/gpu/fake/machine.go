package fake

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/mig"
)

// Backend is the name Info reports.
const Backend = "fake"

// Option configures a Machine.
type Option func(*config)

type config struct {
	seed      int64
	clock     func() time.Time
	stateFile string
}

// WithSeed sets the seed the GPU uuids derive from (default 0). Two machines
// with the same seed and spec have the same uuids.
func WithSeed(seed int64) Option { return func(c *config) { c.seed = seed } }

// WithClock sets the clock events and utilization samples are stamped with
// (default time.Now; nil keeps it).
func WithClock(now func() time.Time) Option {
	return func(c *config) {
		if now != nil {
			c.clock = now
		}
	}
}

// Machine is a simulated host with GPUs. It implements gpu.Device and adds
// the knobs a test or a demo turns: processes, utilization and faults.
type Machine struct {
	now    func() time.Time
	driver string

	mu         sync.Mutex
	gpus       []*device
	procs      map[int]*process
	failCreate []error
	subs       map[*subscriber]struct{}
	// stateFile keeps the hardware state across restarts (WithStateFile);
	// saveErr is the last error writing it.
	stateFile string
	saveErr   error
}

var _ gpu.Device = (*Machine)(nil)

// device is one simulated GPU.
type device struct {
	index   int
	uuid    string
	name    string
	model   *catalog.GPU
	geo     *mig.Geometry // nil when the model cannot be partitioned
	memMiB  int64
	migOn   bool
	mode    gpu.ComputeMode
	slice   gpu.TimeSlice // the time-slice level last set
	healthy bool
	lastXID int // the fatal XID that made it unhealthy
	busy    bool
	lost    bool
	occ     mig.Occupancy
	insts   []*instance // by start slice
	util    map[string]utilization
	// gpmRead lists the MIG instances whose processes were listed once:
	// like NVML's GPM, a second read is needed for a rate.
	gpmRead map[string]bool
}

// instance is a MIG GPU instance with its profile's index in the geometry.
type instance struct {
	gpu.Instance
	shape int
}

// utilization is a pinned sample; -1 fields are derived.
type utilization struct{ sm, mem int }

// New builds a machine. Every GPU model must be in the catalog, MIG may only
// be enabled on models that support it and the initial instances must obey
// the model's placement rules; errors name the GPU.
func New(spec MachineSpec, opts ...Option) (*Machine, error) {
	cfg := config{clock: time.Now}
	for _, o := range opts {
		o(&cfg)
	}
	if len(spec.GPUs) > MaxGPUs {
		return nil, fmt.Errorf("fake: %d GPUs; a machine holds at most %d", len(spec.GPUs), MaxGPUs)
	}
	m := &Machine{
		now:    cfg.clock,
		driver: cmp.Or(spec.DriverVersion, DefaultDriverVersion),
		procs:  map[int]*process{},
		subs:   map[*subscriber]struct{}{},
	}
	for i, s := range spec.GPUs {
		model, product, geo, layout, err := checkGPUSpec(s)
		if err != nil {
			var ie *itemError
			if errors.As(err, &ie) {
				if mig.IsLayoutError(ie.err) || mig.IsNoFit(ie.err) {
					return nil, fmt.Errorf("fake: GPU %d (%s): instance %q: %w: %w", i, s.Model, s.Instances[ie.item], gpu.ErrPlacement, ie.err)
				}
				return nil, fmt.Errorf("fake: GPU %d (%s): instance %q: %w", i, s.Model, s.Instances[ie.item], ie.err)
			}
			return nil, fmt.Errorf("fake: GPU %d: %w", i, err)
		}
		d := &device{
			index:   i,
			uuid:    gpuUUID(cfg.seed, i),
			name:    product,
			model:   model,
			geo:     geo,
			memMiB:  model.MemoryMiB,
			migOn:   s.MIGEnabled,
			healthy: s.Healthy == nil || *s.Healthy,
			util:    map[string]utilization{},
		}
		for _, in := range layout {
			if _, err := m.create(d, in.Profile, in.Start); err != nil {
				return nil, fmt.Errorf("fake: GPU %d (%s): instance %s: %w", i, s.Model, in, err)
			}
		}
		m.gpus = append(m.gpus, d)
	}
	if cfg.stateFile != "" {
		if err := m.restore(cfg.stateFile); err != nil {
			// A state the spec cannot hold (edited or damaged): start
			// from the spec; the first change overwrites the file.
			fresh, ferr := New(spec, append(opts, WithStateFile(""))...)
			if ferr != nil {
				return nil, ferr
			}
			m = fresh
		}
		m.stateFile = cfg.stateFile
	}
	return m, nil
}

// Info reports the fake backend.
func (m *Machine) Info() gpu.BackendInfo {
	return gpu.BackendInfo{Backend: Backend, DriverVersion: m.driver, Simulated: true}
}

// GPUs lists the GPUs that have not been removed, in index order, with
// their instances ordered by start slice. The result is a deep copy.
func (m *Machine) GPUs(ctx context.Context) ([]gpu.GPU, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]gpu.GPU, 0, len(m.gpus))
	for _, d := range m.gpus {
		if d.lost {
			continue
		}
		g := gpu.GPU{
			Index:       d.index,
			UUID:        d.uuid,
			Name:        d.name,
			Model:       d.model.ID,
			MemoryMiB:   d.memMiB,
			MIGEnabled:  d.migOn,
			MIGCapable:  d.geo != nil,
			ComputeMode: d.mode,
			Healthy:     d.healthy,
		}
		for _, in := range d.insts {
			g.Instances = append(g.Instances, in.Instance)
		}
		out = append(out, g)
	}
	return out, nil
}

// SetMIGMode turns MIG on or off. Setting the current mode is a no-op.
// Changing it needs a MIG-capable GPU (ErrNoMIG) with no instances, no
// processes and no busy flag (ErrInUse).
func (m *Machine) SetMIGMode(ctx context.Context, index int, enabled bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.device(index)
	if err != nil {
		return err
	}
	if d.migOn == enabled {
		return nil
	}
	if d.geo == nil {
		return fmt.Errorf("GPU %d (%s): %w", index, d.model.ID, gpu.ErrNoMIG)
	}
	if d.busy {
		return fmt.Errorf("GPU %d is busy: %w", index, gpu.ErrInUse)
	}
	if n := len(d.insts); n > 0 {
		return fmt.Errorf("GPU %d has %d MIG instances: %w", index, n, gpu.ErrInUse)
	}
	if pids := m.pidsOn(d, ""); len(pids) > 0 {
		return fmt.Errorf("GPU %d runs processes %v: %w", index, pids, gpu.ErrInUse)
	}
	d.migOn = enabled
	m.save()
	return nil
}

// CreateInstance creates a GPU instance of profile at start with one
// compute instance spanning it. A start the profile does not allow, an
// overlap with another instance (named with its uuid) or a count limit
// fails with ErrPlacement; a GPU without MIG enabled with ErrNoMIG; a busy
// GPU with ErrInUse. A failure queued by FailNextCreate comes first.
func (m *Machine) CreateInstance(ctx context.Context, index int, profile string, start int) (gpu.Instance, error) {
	if err := ctx.Err(); err != nil {
		return gpu.Instance{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.failCreate) > 0 {
		err := m.failCreate[0]
		m.failCreate = m.failCreate[1:]
		return gpu.Instance{}, err
	}
	d, err := m.device(index)
	if err != nil {
		return gpu.Instance{}, err
	}
	in, err := m.create(d, profile, start)
	if err == nil {
		m.save()
	}
	return in, err
}

func (m *Machine) create(d *device, profile string, start int) (gpu.Instance, error) {
	return m.createAs(d, profile, start, 0)
}

// createAs is create with a given GPU-instance id (0: the lowest free).
func (m *Machine) createAs(d *device, profile string, start, giid int) (gpu.Instance, error) {
	if d.geo == nil {
		return gpu.Instance{}, fmt.Errorf("GPU %d (%s): %w", d.index, d.model.ID, gpu.ErrNoMIG)
	}
	if !d.migOn {
		return gpu.Instance{}, fmt.Errorf("GPU %d: MIG mode is off: %w", d.index, gpu.ErrNoMIG)
	}
	if d.busy {
		return gpu.Instance{}, fmt.Errorf("GPU %d is busy: %w", d.index, gpu.ErrInUse)
	}
	p, err := d.geo.Profile(profile)
	if err != nil {
		return gpu.Instance{}, fmt.Errorf("GPU %d: %w", d.index, err)
	}
	shape := &d.geo.Shapes[p]
	layout := make(mig.Layout, 0, len(d.insts)+1)
	for _, in := range d.insts {
		layout = append(layout, mig.Instance{Profile: in.Profile, Start: in.Start})
	}
	layout = append(layout, mig.Instance{Profile: shape.Name, Start: start})
	occ, err := d.geo.Occupancy(layout)
	if err != nil {
		return gpu.Instance{}, d.placementError(err)
	}
	gi := d.freeGIID()
	if giid > 0 && !slices.ContainsFunc(d.insts, func(in *instance) bool { return in.GIID == giid }) {
		gi = giid
	}
	in := &instance{shape: p, Instance: gpu.Instance{
		UUID:      migUUID(d.uuid, gi),
		Profile:   shape.Name,
		Start:     start,
		Size:      shape.Size,
		GIID:      gi,
		CIID:      0,
		MemoryMiB: shape.MemoryMiB,
	}}
	d.insts = append(d.insts, in)
	slices.SortFunc(d.insts, func(a, b *instance) int {
		return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(a.GIID, b.GIID))
	})
	d.occ = occ
	return in.Instance, nil
}

// placementError turns a layout error about a new instance into
// ErrPlacement, naming the instances it conflicts with.
func (d *device) placementError(err error) error {
	var le *mig.LayoutError
	if !errors.As(err, &le) {
		return fmt.Errorf("GPU %d: %w: %w", d.index, gpu.ErrPlacement, err)
	}
	msgs := make([]string, 0, len(le.Problems))
	for _, p := range le.Problems {
		msg := p.Message
		if p.Other >= 0 && p.Other < len(d.insts) {
			o := d.insts[p.Other]
			msg += fmt.Sprintf(" (existing instance %s, GI %d)", o.UUID, o.GIID)
		}
		msgs = append(msgs, msg)
	}
	return fmt.Errorf("GPU %d (%s): %w: %s", d.index, d.model.ID, gpu.ErrPlacement, strings.Join(msgs, "; "))
}

// freeGIID returns the lowest GPU-instance id not in use, from 1.
func (d *device) freeGIID() int {
	for id := 1; ; id++ {
		if !slices.ContainsFunc(d.insts, func(in *instance) bool { return in.GIID == id }) {
			return id
		}
	}
}

// DestroyInstance destroys a GPU instance by uuid. It refuses an instance
// with processes and a busy GPU (ErrInUse); an unknown uuid is ErrNotFound.
func (m *Machine) DestroyInstance(ctx context.Context, index int, uuid string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.device(index)
	if err != nil {
		return err
	}
	if d.geo == nil || !d.migOn {
		return fmt.Errorf("GPU %d: MIG mode is off: %w", index, gpu.ErrNoMIG)
	}
	if d.busy {
		return fmt.Errorf("GPU %d is busy: %w", index, gpu.ErrInUse)
	}
	i := slices.IndexFunc(d.insts, func(in *instance) bool { return in.UUID == uuid })
	if i < 0 {
		return fmt.Errorf("GPU %d: instance %q: %w", index, uuid, gpu.ErrNotFound)
	}
	if pids := m.pidsOn(d, uuid); len(pids) > 0 {
		return fmt.Errorf("GPU %d: instance %s runs processes %v: %w", index, uuid, pids, gpu.ErrInUse)
	}
	in := d.insts[i]
	d.occ = d.geo.Remove(d.occ, in.shape, in.Start)
	d.insts = slices.Delete(d.insts, i, i+1)
	delete(d.gpmRead, uuid)
	delete(d.util, uuid)
	m.save()
	return nil
}

// SetComputeMode sets a GPU's compute mode. ComputeProhibited refuses new
// processes; ExclusiveProcess is recorded but not enforced (MPS clients run
// as several processes behind one server).
func (m *Machine) SetComputeMode(ctx context.Context, index int, mode gpu.ComputeMode) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	switch mode {
	case gpu.ComputeDefault, gpu.ComputeExclusiveProcess, gpu.ComputeProhibited:
	default:
		return fmt.Errorf("GPU %d: unknown compute mode %d", index, mode)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.device(index)
	if err != nil {
		return err
	}
	d.mode = mode
	m.save()
	return nil
}

// SetTimeSlice records a GPU's time-slice level (TimeSlice reads it back;
// it is kept in the state file). Like nvidia-smi it needs MIG off.
func (m *Machine) SetTimeSlice(ctx context.Context, index int, level gpu.TimeSlice) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !level.Valid() {
		return fmt.Errorf("GPU %d: time-slice level %d: valid are 0 (Default) to 3 (Long)", index, int(level))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.device(index)
	if err != nil {
		return err
	}
	if d.migOn {
		return fmt.Errorf("GPU %d: time-slicing is set on a GPU outside MIG mode: %w", index, gpu.ErrInUse)
	}
	d.slice = level
	m.save()
	return nil
}

// TimeSlice is a GPU's time-slice level as last set by SetTimeSlice
// (Default on a new machine).
func (m *Machine) TimeSlice(index int) (gpu.TimeSlice, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.device(index)
	if err != nil {
		return 0, err
	}
	return d.slice, nil
}

// Processes lists the processes on a GPU or a MIG instance by pid. A GPU's
// uuid lists the processes of all its instances too. Processes on a GPU
// outside MIG mode carry an SM utilization (see SetProcessUtilization);
// in MIG mode only a MIG instance's processes on a Hopper or newer GPU do,
// from the second read on, as gpu/nvml gets them from GPM (gpmSample).
func (m *Machine) Processes(ctx context.Context, uuid string) ([]gpu.Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	d, in, err := m.lookup(uuid)
	if err != nil {
		return nil, err
	}
	procs := m.procsOn(d, in)
	out := make([]gpu.Process, len(procs))
	if d.migOn {
		for i, p := range procs {
			out[i] = gpu.Process{PID: p.pid, MemoryMiB: p.memMiB}
		}
		if in != nil && d.model != nil && d.model.HasGPM() {
			m.gpmSample(d, in, procs, out)
		}
		return out, nil
	}
	for i, p := range procs {
		out[i] = gpu.Process{PID: p.pid, MemoryMiB: p.memMiB}
		sm := p.sm
		if sm < 0 {
			sm = min(smPerProcess, 100/len(procs))
		}
		out[i].SMPercent = &sm
	}
	return out, nil
}

// gpmSample gives a MIG instance's processes their SM utilization the way
// gpu/nvml does with GPM: nothing on the first read of the instance, then
// the instance's utilization (the sum of its processes' — each 25% of the
// instance unless set — at most 100) scaled by its share of the GPU's
// compute slices and shared equally. m.mu must be held.
func (m *Machine) gpmSample(d *device, in *instance, procs []*process, out []gpu.Process) {
	if d.gpmRead == nil {
		d.gpmRead = map[string]bool{}
	}
	if !d.gpmRead[in.UUID] {
		d.gpmRead[in.UUID] = true
		return
	}
	if len(procs) == 0 || d.geo == nil {
		return
	}
	busy := 0
	for _, p := range procs {
		if p.sm >= 0 {
			busy += p.sm
		} else {
			busy += smPerProcess
		}
	}
	share := float64(d.geo.Shapes[in.shape].Compute) / float64(d.geo.ComputeSlices)
	each := int(math.Round(float64(min(busy, 100)) * share / float64(len(procs))))
	for i := range out {
		v := each
		out[i].SMPercent = &v
	}
}

// Utilization samples a GPU or MIG instance. Unless pinned with
// SetUtilization, SMPercent is 25 points per running process (capped at
// 100) and MemoryPercent is the share of the device's memory the processes
// hold.
func (m *Machine) Utilization(ctx context.Context, uuid string) (gpu.Utilization, error) {
	if err := ctx.Err(); err != nil {
		return gpu.Utilization{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	d, in, err := m.lookup(uuid)
	if err != nil {
		return gpu.Utilization{}, err
	}
	procs := m.procsOn(d, in)
	limit := d.memMiB
	if in != nil {
		limit = in.MemoryMiB
	}
	var used int64
	for _, p := range procs {
		used += p.memMiB
	}
	u := gpu.Utilization{
		SMPercent:     min(100, smPerProcess*len(procs)),
		MemoryPercent: int(min(100, used*100/max(limit, 1))),
		Time:          m.now(),
	}
	if pin, ok := d.util[uuid]; ok {
		if pin.sm >= 0 {
			u.SMPercent = pin.sm
		}
		if pin.mem >= 0 {
			u.MemoryPercent = pin.mem
		}
	}
	return u, nil
}

// smPerProcess is the SM utilization each running process adds.
const smPerProcess = 25

// device returns the GPU at index, or ErrNotFound when there is none or it
// was removed. m.mu must be held.
func (m *Machine) device(index int) (*device, error) {
	if index < 0 || index >= len(m.gpus) {
		return nil, fmt.Errorf("GPU %d: %w", index, gpu.ErrNotFound)
	}
	d := m.gpus[index]
	if d.lost {
		return nil, fmt.Errorf("GPU %d is lost: %w", index, gpu.ErrNotFound)
	}
	return d, nil
}

// lookup resolves a GPU or MIG uuid; in is nil for a GPU. m.mu must be
// held.
func (m *Machine) lookup(uuid string) (*device, *instance, error) {
	for _, d := range m.gpus {
		if d.lost {
			continue
		}
		if d.uuid == uuid {
			return d, nil, nil
		}
		for _, in := range d.insts {
			if in.UUID == uuid {
				return d, in, nil
			}
		}
	}
	return nil, nil, fmt.Errorf("device %q: %w", uuid, gpu.ErrNotFound)
}
