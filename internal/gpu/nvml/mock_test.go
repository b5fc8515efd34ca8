//go:build cgo

package nvml

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
)

// mockMachine is go-nvml's stateful dgxa100 mock (eight
// "Mock NVIDIA A100-SXM4-40GB" GPUs that keep MIG mode and GPU/compute
// instances) with what it does not simulate filled in through its moq
// Func fields, the way the mock is meant to be extended:
//
//   - MIG device handles (GetMaxMigDeviceCount, GetMigDeviceHandleByIndex),
//     one per compute instance, each with a random MIG- uuid, because
//     NVML names MIG instances only through them;
//   - processes (GetComputeRunningProcesses on GPUs and MIG devices), a
//     table that StartProcess and StopProcess edit;
//   - compute mode, and utilization (25% per process; NOT_SUPPORTED in MIG
//     mode, as on real GPUs);
//   - event sets (EventSetCreate, RegisterEvents, Wait, Free) that
//     InjectXID feeds.
//
// Placement is left as the mock has it: CreateGpuInstanceWithPlacement
// takes any start and never checks overlaps or counts. With plain set, the
// last GPU is made an "NVIDIA L4" without MIG (GetMigMode and the MIG calls
// answer NOT_SUPPORTED).
//
// mockMachine implements gputest.Controls.
type mockMachine struct {
	srv *dgxa100.Server

	mu    sync.Mutex
	procs map[int]mockProc
	modes map[int]gonvml.ComputeMode
	migs  map[*dgxa100.ComputeInstance]*mockMIG
	sets  map[*mockEventSet]map[int]bool // registered GPU indexes
	// samples are the per-process utilization samples of each GPU, as
	// GetProcessUtilization returns them.
	samples map[int][]gonvml.ProcessUtilizationSample
	// GPM, which the A100 lacks (NOT_SUPPORTED) unless hopper is set:
	// then a MIG sample records the SM utilization set for its GPU
	// instance (migSM[gpu][gi]), GpmMetricsGet reports the later sample's
	// as the rate, and live counts samples allocated and not freed.
	hopper bool
	migSM  map[int]map[int]float64
	live   int
}

// mockGpmSample is a GPM sample of one GPU instance.
type mockGpmSample struct {
	mock.GpmSample
	m     *mockMachine
	taken bool
	gpu   int
	gi    int
	sm    float64
	freed bool
}

// mockProc is a simulated process.
type mockProc struct {
	gpu    int      // the GPU index
	mig    *mockMIG // nil on the whole GPU
	memMiB int64
}

// mockMIG is a MIG device handle.
type mockMIG struct {
	mock.Device
	parent int
	gi     *dgxa100.GpuInstance
	ci     *dgxa100.ComputeInstance
	uuid   string
}

// mockEventSet is an event set InjectXID writes to.
type mockEventSet struct {
	mock.EventSet
	ch   chan gonvml.EventData
	fail atomic.Int32 // a code the next Wait returns, 0 for none
}

func newMockMachine(plain bool) *mockMachine {
	m := &mockMachine{
		srv:     dgxa100.New(),
		procs:   map[int]mockProc{},
		modes:   map[int]gonvml.ComputeMode{},
		migs:    map[*dgxa100.ComputeInstance]*mockMIG{},
		sets:    map[*mockEventSet]map[int]bool{},
		samples: map[int][]gonvml.ProcessUtilizationSample{},
	}
	m.srv.EventSetCreateFunc = m.newEventSet
	m.gpmMock()
	for i, dev := range m.srv.Devices {
		d := dev.(*dgxa100.Device)
		m.extend(i, d)
		if plain && i == len(m.srv.Devices)-1 {
			makeL4(d)
		}
	}
	return m
}

// device is the dgxa100 device at index (under any recording wrapper).
func (m *mockMachine) device(index int) *dgxa100.Device {
	switch d := m.srv.Devices[index].(type) {
	case *dgxa100.Device:
		return d
	case *recorder:
		return d.Device.(*dgxa100.Device)
	}
	panic(fmt.Sprintf("device %d is a %T", index, m.srv.Devices[index]))
}

func (m *mockMachine) extend(index int, d *dgxa100.Device) {
	d.GetMaxMigDeviceCountFunc = func() (int, gonvml.Return) { return 7, gonvml.SUCCESS }
	d.GetMigDeviceHandleByIndexFunc = func(i int) (gonvml.Device, gonvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		migs := m.migList(index, d)
		if i < 0 || i >= len(migs) {
			return nil, gonvml.ERROR_NOT_FOUND
		}
		return migs[i], gonvml.SUCCESS
	}
	d.GetComputeRunningProcessesFunc = func() ([]gonvml.ProcessInfo, gonvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.processes(func(p mockProc) bool { return p.gpu == index }), gonvml.SUCCESS
	}
	// Like NVML: samples newer than the timestamp, ERROR_NOT_FOUND when
	// there are none, NOT_SUPPORTED in MIG mode.
	d.GetProcessUtilizationFunc = func(last uint64) ([]gonvml.ProcessUtilizationSample, gonvml.Return) {
		if cur, _, ret := d.GetMigMode(); ret == gonvml.SUCCESS && cur == gonvml.DEVICE_MIG_ENABLE {
			return nil, gonvml.ERROR_NOT_SUPPORTED
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		var out []gonvml.ProcessUtilizationSample
		for _, x := range m.samples[index] {
			if x.TimeStamp > last {
				out = append(out, x)
			}
		}
		if len(out) == 0 {
			return nil, gonvml.ERROR_NOT_FOUND
		}
		return out, gonvml.SUCCESS
	}
	d.GetComputeModeFunc = func() (gonvml.ComputeMode, gonvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.modes[index], gonvml.SUCCESS
	}
	d.SetComputeModeFunc = func(mode gonvml.ComputeMode) gonvml.Return {
		if mode < 0 || mode >= gonvml.COMPUTEMODE_COUNT {
			return gonvml.ERROR_INVALID_ARGUMENT
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		m.modes[index] = mode
		return gonvml.SUCCESS
	}
	d.GetUtilizationRatesFunc = func() (gonvml.Utilization, gonvml.Return) {
		if cur, _, ret := d.GetMigMode(); ret == gonvml.SUCCESS && cur == gonvml.DEVICE_MIG_ENABLE {
			return gonvml.Utilization{}, gonvml.ERROR_NOT_SUPPORTED
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		n := len(m.processes(func(p mockProc) bool { return p.gpu == index }))
		return gonvml.Utilization{Gpu: uint32(min(100, 25*n))}, gonvml.SUCCESS
	}
	d.RegisterEventsFunc = func(types uint64, set gonvml.EventSet) gonvml.Return {
		es, ok := set.(*mockEventSet)
		if !ok || types&^gonvml.EventTypeXidCriticalError != 0 {
			return gonvml.ERROR_INVALID_ARGUMENT
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.sets[es] == nil {
			return gonvml.ERROR_INVALID_ARGUMENT // freed
		}
		m.sets[es][index] = true
		return gonvml.SUCCESS
	}
}

// makeL4 turns a dgxa100 device into an L4 without MIG.
func makeL4(d *dgxa100.Device) {
	d.Name = "NVIDIA L4"
	d.MemoryInfo = gonvml.Memory{Total: 24576 << 20}
	d.GetPciInfoFunc = func() (gonvml.PciInfo, gonvml.Return) {
		return gonvml.PciInfo{PciDeviceId: 0x27B810DE}, gonvml.SUCCESS
	}
	d.GetMigModeFunc = func() (int, int, gonvml.Return) { return 0, 0, gonvml.ERROR_NOT_SUPPORTED }
	d.SetMigModeFunc = func(int) (gonvml.Return, gonvml.Return) {
		return gonvml.ERROR_NOT_SUPPORTED, gonvml.ERROR_NOT_SUPPORTED
	}
	d.GetGpuInstanceProfileInfoFunc = func(int) (gonvml.GpuInstanceProfileInfo, gonvml.Return) {
		return gonvml.GpuInstanceProfileInfo{}, gonvml.ERROR_NOT_SUPPORTED
	}
	d.GetMaxMigDeviceCountFunc = func() (int, gonvml.Return) { return 0, gonvml.ERROR_NOT_SUPPORTED }
	d.GetMigDeviceHandleByIndexFunc = func(int) (gonvml.Device, gonvml.Return) { return nil, gonvml.ERROR_NOT_SUPPORTED }
}

// migList lists a GPU's MIG devices by GPU instance id, then compute
// instance id, making handles for new compute instances. m.mu must be held.
func (m *mockMachine) migList(index int, d *dgxa100.Device) []gonvml.Device {
	d.RLock()
	gis := slices.Collect(maps.Keys(d.GpuInstances))
	d.RUnlock()
	slices.SortFunc(gis, func(a, b *dgxa100.GpuInstance) int { return cmp.Compare(a.Info.Id, b.Info.Id) })
	var out []gonvml.Device
	for _, gi := range gis {
		gi.RLock()
		cis := slices.Collect(maps.Keys(gi.ComputeInstances))
		gi.RUnlock()
		slices.SortFunc(cis, func(a, b *dgxa100.ComputeInstance) int { return cmp.Compare(a.Info.Id, b.Info.Id) })
		for _, ci := range cis {
			mg := m.migs[ci]
			if mg == nil {
				mg = m.newMIG(index, gi, ci)
				m.migs[ci] = mg
			}
			out = append(out, mg)
		}
	}
	return out
}

func (m *mockMachine) newMIG(index int, gi *dgxa100.GpuInstance, ci *dgxa100.ComputeInstance) *mockMIG {
	mg := &mockMIG{parent: index, gi: gi, ci: ci, uuid: m.newUUID()}
	mem := dgxa100.MIGProfiles.GpuInstanceProfiles[int(gi.Info.ProfileId)].MemorySizeMB
	mg.GetUUIDFunc = func() (string, gonvml.Return) { return mg.uuid, gonvml.SUCCESS }
	mg.GetGpuInstanceIdFunc = func() (int, gonvml.Return) { return int(gi.Info.Id), gonvml.SUCCESS }
	mg.GetComputeInstanceIdFunc = func() (int, gonvml.Return) { return int(ci.Info.Id), gonvml.SUCCESS }
	mg.IsMigDeviceHandleFunc = func() (bool, gonvml.Return) { return true, gonvml.SUCCESS }
	mg.GetMemoryInfoFunc = func() (gonvml.Memory, gonvml.Return) {
		return gonvml.Memory{Total: mem << 20}, gonvml.SUCCESS
	}
	mg.GetUtilizationRatesFunc = func() (gonvml.Utilization, gonvml.Return) {
		return gonvml.Utilization{}, gonvml.ERROR_NOT_SUPPORTED
	}
	mg.GetComputeRunningProcessesFunc = func() ([]gonvml.ProcessInfo, gonvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.processes(func(p mockProc) bool { return p.mig == mg }), gonvml.SUCCESS
	}
	return mg
}

// migSerial numbers the MIG uuids the mock machines hand out.
var migSerial atomic.Uint64

// newUUID makes a MIG uuid unique in the test binary.
func (m *mockMachine) newUUID() string {
	return fmt.Sprintf("MIG-00000000-0000-4000-8000-%012x", migSerial.Add(1))
}

// processes lists the processes keep selects. m.mu must be held.
func (m *mockMachine) processes(keep func(mockProc) bool) []gonvml.ProcessInfo {
	var out []gonvml.ProcessInfo
	for pid, p := range m.procs {
		if !keep(p) {
			continue
		}
		info := gonvml.ProcessInfo{Pid: uint32(pid), UsedGpuMemory: uint64(p.memMiB) << 20,
			GpuInstanceId: noInstance, ComputeInstanceId: noInstance}
		if p.mig != nil {
			info.GpuInstanceId, info.ComputeInstanceId = p.mig.gi.Info.Id, p.mig.ci.Info.Id
		}
		out = append(out, info)
	}
	return out
}

func (m *mockMachine) newEventSet() (gonvml.EventSet, gonvml.Return) {
	es := &mockEventSet{ch: make(chan gonvml.EventData, 64)}
	es.WaitFunc = func(ms uint32) (gonvml.EventData, gonvml.Return) {
		if ret := es.fail.Swap(0); ret != 0 {
			return gonvml.EventData{}, gonvml.Return(ret)
		}
		select {
		case data := <-es.ch:
			return data, gonvml.SUCCESS
		case <-time.After(time.Duration(ms) * time.Millisecond):
			return gonvml.EventData{}, gonvml.ERROR_TIMEOUT
		}
	}
	es.FreeFunc = func() gonvml.Return {
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.sets, es)
		return gonvml.SUCCESS
	}
	m.mu.Lock()
	m.sets[es] = map[int]bool{}
	m.mu.Unlock()
	return es, gonvml.SUCCESS
}

// failWaits makes the next Wait of every event set return ret.
func (m *mockMachine) failWaits(ret gonvml.Return) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for es := range m.sets {
		es.fail.Store(int32(ret))
	}
}

// openSets counts the event sets not freed yet.
func (m *mockMachine) openSets() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sets)
}

// sample records a per-process utilization sample on GPU index.
func (m *mockMachine) sample(index, pid int, ts uint64, sm uint32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.samples[index] = append(m.samples[index], gonvml.ProcessUtilizationSample{Pid: uint32(pid), TimeStamp: ts, SmUtil: sm})
}

// StartProcess starts a process on a GPU or MIG device by uuid.
func (m *mockMachine) StartProcess(id string, pid int, memoryMiB int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.procs[pid]; ok {
		return fmt.Errorf("pid %d already runs", pid)
	}
	for i := range m.srv.Devices {
		d := m.device(i)
		if d.UUID == id {
			m.procs[pid] = mockProc{gpu: i, memMiB: memoryMiB}
			return nil
		}
		for _, h := range m.migList(i, d) {
			if mg := h.(*mockMIG); mg.uuid == id {
				m.procs[pid] = mockProc{gpu: i, mig: mg, memMiB: memoryMiB}
				return nil
			}
		}
	}
	return fmt.Errorf("no device %q", id)
}

// StopProcess ends a process.
func (m *mockMachine) StopProcess(pid int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.procs[pid]; !ok {
		return fmt.Errorf("no pid %d", pid)
	}
	delete(m.procs, pid)
	return nil
}

// InjectXID raises an XID on a GPU in every event set registered for it.
func (m *mockMachine) InjectXID(index, xid int) error {
	return m.inject(index, xid, noInstance)
}

// inject raises an XID attributed to GPU instance giID (noInstance for
// the whole GPU).
func (m *mockMachine) inject(index, xid int, giID uint32) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if index < 0 || index >= len(m.srv.Devices) {
		return fmt.Errorf("no GPU %d", index)
	}
	n := 0
	for es, idx := range m.sets {
		if !idx[index] {
			continue
		}
		select {
		case es.ch <- gonvml.EventData{
			Device:            m.srv.Devices[index],
			EventType:         gonvml.EventTypeXidCriticalError,
			EventData:         uint64(xid),
			GpuInstanceId:     giID,
			ComputeInstanceId: noInstance,
		}:
			n++
		default:
			return errors.New("an event set is full")
		}
	}
	if n == 0 {
		return errors.New("no event set is registered for XIDs on that GPU")
	}
	return nil
}

// recorder is a hand-written wrapper around a mock GPU that records the
// calls that decide where a GPU instance goes.
type recorder struct {
	gonvml.Device
	mu    sync.Mutex
	calls []string
}

func (r *recorder) record(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, fmt.Sprintf(format, args...))
}

// take returns the calls recorded since the last take.
func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.calls
	r.calls = nil
	return out
}

func (r *recorder) GetGpuInstanceProfileInfo(p int) (gonvml.GpuInstanceProfileInfo, gonvml.Return) {
	r.record("GetGpuInstanceProfileInfo(%d)", p)
	return r.Device.GetGpuInstanceProfileInfo(p)
}

func (r *recorder) GetGpuInstancePossiblePlacements(info *gonvml.GpuInstanceProfileInfo) ([]gonvml.GpuInstancePlacement, gonvml.Return) {
	r.record("GetGpuInstancePossiblePlacements(profile %d)", info.Id)
	return r.Device.GetGpuInstancePossiblePlacements(info)
}

func (r *recorder) CreateGpuInstance(info *gonvml.GpuInstanceProfileInfo) (gonvml.GpuInstance, gonvml.Return) {
	r.record("CreateGpuInstance(profile %d)", info.Id)
	return r.Device.CreateGpuInstance(info)
}

func (r *recorder) CreateGpuInstanceWithPlacement(info *gonvml.GpuInstanceProfileInfo, p *gonvml.GpuInstancePlacement) (gonvml.GpuInstance, gonvml.Return) {
	r.record("CreateGpuInstanceWithPlacement(profile %d, start %d, size %d)", info.Id, p.Start, p.Size)
	return r.Device.CreateGpuInstanceWithPlacement(info, p)
}

// gpmMock fills in the GPM calls of the library mock.
func (m *mockMachine) gpmMock() {
	m.migSM = map[int]map[int]float64{}
	m.srv.GpmQueryDeviceSupportFunc = func(gonvml.Device) (gonvml.GpmSupport, gonvml.Return) {
		if !m.hopper {
			return gonvml.GpmSupport{}, gonvml.ERROR_NOT_SUPPORTED
		}
		return gonvml.GpmSupport{IsSupportedDevice: 1}, gonvml.SUCCESS
	}
	m.srv.GpmSampleAllocFunc = func() (gonvml.GpmSample, gonvml.Return) {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.live++
		smp := &mockGpmSample{m: m}
		smp.FreeFunc = func() gonvml.Return {
			m.mu.Lock()
			defer m.mu.Unlock()
			if smp.freed {
				return gonvml.ERROR_INVALID_ARGUMENT
			}
			smp.freed = true
			m.live--
			return gonvml.SUCCESS
		}
		return smp, gonvml.SUCCESS
	}
	m.srv.GpmMigSampleGetFunc = func(dev gonvml.Device, gi int, sample gonvml.GpmSample) gonvml.Return {
		smp, ok := sample.(*mockGpmSample)
		index := slices.Index(m.srv.Devices[:], dev)
		if !ok || index < 0 {
			return gonvml.ERROR_INVALID_ARGUMENT
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		smp.taken, smp.gpu, smp.gi, smp.sm = true, index, gi, m.migSM[index][gi]
		return gonvml.SUCCESS
	}
	m.srv.GpmMetricsGetFunc = func(mg *gonvml.GpmMetricsGetType) gonvml.Return {
		a, ok1 := mg.Sample1.(*mockGpmSample)
		b, ok2 := mg.Sample2.(*mockGpmSample)
		if !ok1 || !ok2 || !a.taken || !b.taken || a.freed || b.freed || a.gpu != b.gpu || a.gi != b.gi || mg.NumMetrics != 1 {
			return gonvml.ERROR_INVALID_ARGUMENT
		}
		if mg.Metrics[0].MetricId != uint32(gonvml.GPM_METRIC_SM_UTIL) {
			mg.Metrics[0].NvmlReturn = uint32(gonvml.ERROR_NOT_SUPPORTED)
			return gonvml.SUCCESS
		}
		mg.Metrics[0].Value, mg.Metrics[0].NvmlReturn = b.sm, uint32(gonvml.SUCCESS)
		return gonvml.SUCCESS
	}
}

// setMigSM sets the SM utilization GPM reports for a GPU instance.
func (m *mockMachine) setMigSM(index, gi int, pct float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.migSM[index] == nil {
		m.migSM[index] = map[int]float64{}
	}
	m.migSM[index][gi] = pct
}
