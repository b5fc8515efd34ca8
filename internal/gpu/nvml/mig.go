//go:build cgo

package nvml

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuslice/gpuslice/internal/gpu"
)

// profileEntry is a GPU-instance profile a GPU supports: its name and
// NVML's description (Id is the GI profile id).
type profileEntry struct {
	name      string
	nvmlConst int // the GPU_INSTANCE_PROFILE_* constant
	info      gonvml.GpuInstanceProfileInfo
}

// profiles reads the GPU-instance profiles a GPU supports by asking NVML
// for every GPU_INSTANCE_PROFILE_* constant, naming them through the
// catalog (profileName). NVML only answers with MIG on; the table is kept
// once it is read. d.mu must be held.
func (g *gpuDev) profiles() ([]profileEntry, error) {
	if g.table != nil {
		return g.table, nil
	}
	var table []profileEntry
	for c := range gonvml.GPU_INSTANCE_PROFILE_COUNT {
		info, ret := g.h.GetGpuInstanceProfileInfo(c)
		if absent(ret) {
			continue
		}
		if !ok(ret) {
			return nil, g.lose(ret, fail(ret, fmt.Sprintf("%s: reading GPU instance profile %d", g.label(), c), migCodes))
		}
		name := profileName(g.model, c, int(info.Id))
		if name == "" {
			name = unnamedProfile(int(info.Id))
		}
		table = append(table, profileEntry{name: name, nvmlConst: c, info: info})
	}
	if len(table) > 0 {
		g.table = table
	}
	return table, nil
}

// profile finds a profile by name, ignoring case. d.mu must be held.
func (g *gpuDev) profile(name string) (profileEntry, error) {
	table, err := g.profiles()
	if err != nil {
		return profileEntry{}, err
	}
	names := make([]string, 0, len(table))
	for _, e := range table {
		if strings.EqualFold(e.name, strings.TrimSpace(name)) {
			return e, nil
		}
		names = append(names, e.name)
	}
	return profileEntry{}, fmt.Errorf("nvml: %s: unknown MIG profile %q (this GPU has %s)", g.label(), name, strings.Join(names, ", "))
}

// migDevice is a MIG device handle: one compute instance of a GPU
// instance.
type migDevice struct {
	h          gonvml.Device
	uuid       string
	giID, ciID int
}

// migDevices lists a GPU's MIG device handles. d.mu must be held.
func (g *gpuDev) migDevices() ([]migDevice, error) {
	n, ret := g.h.GetMaxMigDeviceCount()
	if absent(ret) {
		return nil, nil
	}
	if !ok(ret) {
		return nil, g.lose(ret, fail(ret, g.label()+": counting MIG devices", migCodes))
	}
	var out []migDevice
	for i := range n {
		h, ret := g.h.GetMigDeviceHandleByIndex(i)
		if absent(ret) {
			continue
		}
		if !ok(ret) {
			return nil, g.lose(ret, fail(ret, fmt.Sprintf("%s: MIG device %d", g.label(), i), migCodes))
		}
		m := migDevice{h: h}
		var ret1, ret2, ret3 gonvml.Return
		m.uuid, ret1 = h.GetUUID()
		m.giID, ret2 = h.GetGpuInstanceId()
		m.ciID, ret3 = h.GetComputeInstanceId()
		for _, r := range []gonvml.Return{ret1, ret2, ret3} {
			if !ok(r) {
				return nil, g.lose(r, fail(r, fmt.Sprintf("%s: reading MIG device %d", g.label(), i), migCodes))
			}
		}
		out = append(out, m)
	}
	return out, nil
}

// instance is a GPU instance with its handles.
type instance struct {
	gpu.Instance
	gi  gonvml.GpuInstance
	mig *migDevice // nil when the GPU instance has no compute instance
}

// orphanUUID names a GPU instance without a compute instance, which has
// no MIG device and so no uuid of its own, in the form NVML used for MIG
// devices before R470: "MIG-<GPU uuid>/<GI id>". DestroyInstance accepts
// it.
func orphanUUID(gpuUUID string, giID int) string {
	return fmt.Sprintf("MIG-%s/%d", gpuUUID, giID)
}

// instances lists a GPU's GPU instances ordered by start slice: every
// profile's GetGpuInstances with the placement from GetInfo, the uuid and
// compute instance id of the GPU instance's MIG device (the lowest compute
// instance when there are several). d.mu must be held and MIG be on.
func (g *gpuDev) instances() ([]instance, error) {
	table, err := g.profiles()
	if err != nil {
		return nil, err
	}
	migs, err := g.migDevices()
	if err != nil {
		return nil, err
	}
	var out []instance
	for _, e := range table {
		info := e.info
		gis, ret := g.h.GetGpuInstances(&info)
		if absent(ret) {
			continue
		}
		if !ok(ret) {
			return nil, g.lose(ret, fail(ret, fmt.Sprintf("%s: listing %s GPU instances", g.label(), e.name), migCodes))
		}
		for _, gi := range gis {
			gii, ret := gi.GetInfo()
			if !ok(ret) {
				return nil, g.lose(ret, fail(ret, fmt.Sprintf("%s: reading a %s GPU instance", g.label(), e.name), migCodes))
			}
			in := instance{gi: gi, Instance: gpu.Instance{
				Profile:   e.name,
				Start:     int(gii.Placement.Start),
				Size:      int(gii.Placement.Size),
				GIID:      int(gii.Id),
				CIID:      -1,
				MemoryMiB: int64(e.info.MemorySizeMB),
			}}
			for i := range migs {
				m := &migs[i]
				if m.giID == in.GIID && (in.mig == nil || m.ciID < in.mig.ciID) {
					in.mig = m
				}
			}
			if in.mig != nil {
				in.UUID, in.CIID = in.mig.uuid, in.mig.ciID
			} else {
				in.UUID = orphanUUID(g.uuid, in.GIID)
			}
			out = append(out, in)
		}
	}
	slices.SortFunc(out, func(a, b instance) int {
		return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(a.GIID, b.GIID))
	})
	return out, nil
}

// migReady checks that a GPU can take MIG instances: MIG-capable (else
// ErrNoMIG) and in MIG mode (else ErrNoMIG). d.mu must be held.
func (g *gpuDev) migReady() error {
	capable, current, pending, err := g.migMode()
	switch {
	case err != nil:
		return err
	case !capable:
		return fmt.Errorf("nvml: %s does not support MIG: %w", g.label(), gpu.ErrNoMIG)
	case !current && pending:
		return fmt.Errorf("nvml: %s: MIG mode is off until the GPU is reset (%w): %w", g.label(), ErrResetPending, gpu.ErrNoMIG)
	case !current:
		return fmt.Errorf("nvml: %s: MIG mode is off: %w", g.label(), gpu.ErrNoMIG)
	}
	return nil
}

// SetMIGMode turns MIG on or off. Setting the current mode is a no-op (it
// cancels a change pending a reset). Changing it is refused with gpu.ErrInUse while the GPU has instances or
// runs processes (checked first, NVML's IN_USE otherwise); a GPU without
// MIG fails with gpu.ErrNoMIG. When NVML only records the change until the
// GPU is reset, SetMIGMode fails with an error wrapping ErrResetPending
// (and gpu.ErrInUse when NVML says something holds the GPU).
func (d *Device) SetMIGMode(ctx context.Context, index int, enabled bool) (err error) {
	defer guard(&err, fmt.Sprintf("GPU %d: setting MIG mode", index))
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.usable(ctx); err != nil {
		return err
	}
	g, err := d.gpu(index)
	if err != nil {
		return err
	}
	capable, current, pending, err := g.migMode()
	switch {
	case err != nil:
		return err
	case !capable:
		return fmt.Errorf("nvml: %s does not support MIG: %w", g.label(), gpu.ErrNoMIG)
	case current == enabled && pending == enabled:
		return nil
	}
	word := map[bool]string{true: "on", false: "off"}[enabled]
	if current != enabled && current {
		ins, err := g.instances()
		if err != nil {
			return err
		}
		if len(ins) > 0 {
			uuids := make([]string, len(ins))
			for i, in := range ins {
				uuids[i] = in.UUID
			}
			return fmt.Errorf("nvml: %s: turning MIG %s: the GPU has %d MIG instances (%s): %w", g.label(), word, len(ins), strings.Join(uuids, ", "), gpu.ErrInUse)
		}
	}
	if ps, ret := g.h.GetComputeRunningProcesses(); current != enabled && ok(ret) && len(ps) > 0 {
		return fmt.Errorf("nvml: %s: turning MIG %s: the GPU runs processes %v: %w", g.label(), word, pids(ps), gpu.ErrInUse)
	}
	mode := gonvml.DEVICE_MIG_DISABLE
	if enabled {
		mode = gonvml.DEVICE_MIG_ENABLE
	}
	// go-nvml returns the activation status first, then the return code.
	activation, ret := g.h.SetMigMode(mode)
	if !ok(ret) {
		return g.lose(ret, fail(ret, fmt.Sprintf("%s: turning MIG %s", g.label(), word), migCodes))
	}
	g.table = nil
	_, now, _, err := g.migMode()
	if err != nil {
		return err
	}
	if now != enabled || !ok(activation) {
		if activation == gonvml.ERROR_IN_USE {
			return fmt.Errorf("nvml: %s: MIG %s %w (something holds the GPU, %w; reset it with nvidia-smi -r -i %d or reboot): %w", g.label(), word, ErrResetPending, gpu.ErrInUse, g.index, activation)
		}
		return fmt.Errorf("nvml: %s: MIG %s %w (nvidia-smi -r -i %d or reboot; activation status %v)", g.label(), word, ErrResetPending, g.index, activation)
	}
	return nil
}

// pids lists the pids of NVML processes.
func pids(ps []gonvml.ProcessInfo) []int {
	out := make([]int, len(ps))
	for i, p := range ps {
		out[i] = int(p.Pid)
	}
	slices.Sort(out)
	return out
}

// CreateInstance creates a GPU instance of profile at start, explicitly
// placed, with one compute instance spanning it. A start outside NVML's
// possible placements for the profile, or one NVML refuses for lack of
// room (an overlap, a count limit), fails with gpu.ErrPlacement; a GPU
// without MIG or with MIG off with gpu.ErrNoMIG. When the compute instance
// cannot be made the GPU instance is destroyed again.
func (d *Device) CreateInstance(ctx context.Context, index int, profile string, start int) (out gpu.Instance, err error) {
	defer guard(&err, fmt.Sprintf("GPU %d: creating %s@%d", index, profile, start))
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.usable(ctx); err != nil {
		return gpu.Instance{}, err
	}
	g, err := d.gpu(index)
	if err != nil {
		return gpu.Instance{}, err
	}
	if err := g.migReady(); err != nil {
		return gpu.Instance{}, err
	}
	e, err := g.profile(profile)
	if err != nil {
		return gpu.Instance{}, err
	}
	what := fmt.Sprintf("%s: creating %s@%d", g.label(), e.name, start)
	size, err := g.placement(e, start, what)
	if err != nil {
		return gpu.Instance{}, err
	}
	info := e.info
	place := gonvml.GpuInstancePlacement{Start: uint32(start), Size: uint32(size)}
	gi, ret := g.h.CreateGpuInstanceWithPlacement(&info, &place)
	if !ok(ret) {
		err := g.lose(ret, fail(ret, what, createCodes))
		if createCodes[ret] == gpu.ErrPlacement {
			err = g.explain(err, start, size)
		}
		return gpu.Instance{}, err
	}
	in, err := g.computeInstance(gi, e, what)
	if err != nil {
		if ret := gi.Destroy(); !ok(ret) {
			err = fmt.Errorf("%w (and destroying the GPU instance again failed: %w)", err, ret)
		}
		return gpu.Instance{}, err
	}
	return in, nil
}

// placement checks start against NVML's possible placements for a profile
// and returns the instance's size in memory slices. When NVML does not
// list placements, the catalog's size (or the profile's slice count) is
// used and NVML judges the start.
func (g *gpuDev) placement(e profileEntry, start int, what string) (int, error) {
	if start < 0 {
		return 0, fmt.Errorf("nvml: %s: %w: negative start", what, gpu.ErrPlacement)
	}
	info := e.info
	ps, ret := g.h.GetGpuInstancePossiblePlacements(&info)
	if ok(ret) && len(ps) > 0 {
		starts := make([]string, len(ps))
		for i, p := range ps {
			if int(p.Start) == start {
				return int(p.Size), nil
			}
			starts[i] = fmt.Sprint(p.Start)
		}
		return 0, fmt.Errorf("nvml: %s: %w: %s may start at {%s}:%d", what, gpu.ErrPlacement, e.name, strings.Join(starts, ","), ps[0].Size)
	}
	if g.model != nil {
		if p, err := g.model.Profile(e.name); err == nil && p.Placement.Size > 0 {
			return p.Placement.Size, nil
		}
	}
	return int(e.info.SliceCount), nil
}

// explain adds to a placement error the instances that overlap
// [start, start+size).
func (g *gpuDev) explain(err error, start, size int) error {
	ins, lerr := g.instances()
	if lerr != nil {
		return err
	}
	var in []string
	for _, x := range ins {
		if x.Start < start+size && start < x.Start+x.Size {
			in = append(in, fmt.Sprintf("%s@%d (GI %d, %s)", x.Profile, x.Start, x.GIID, x.UUID))
		}
	}
	if len(in) == 0 {
		return err
	}
	return fmt.Errorf("%w; overlapping %s", err, strings.Join(in, ", "))
}

// computeInstance creates the compute instance spanning a new GPU instance
// (the compute-instance profile with the most slices) and returns the
// instance with its MIG device's uuid.
func (g *gpuDev) computeInstance(gi gonvml.GpuInstance, e profileEntry, what string) (gpu.Instance, error) {
	gii, ret := gi.GetInfo()
	if !ok(ret) {
		return gpu.Instance{}, g.lose(ret, fail(ret, what+": reading the new GPU instance", migCodes))
	}
	full, err := fullCIProfile(gi)
	if err != nil {
		return gpu.Instance{}, fmt.Errorf("nvml: %s: GPU instance %d: %w", what, gii.Id, err)
	}
	ci, ret := gi.CreateComputeInstance(&full)
	if !ok(ret) {
		return gpu.Instance{}, g.lose(ret, fail(ret, fmt.Sprintf("%s: creating the compute instance in GPU instance %d", what, gii.Id), migCodes))
	}
	cii, ret := ci.GetInfo()
	if !ok(ret) {
		ci.Destroy()
		return gpu.Instance{}, g.lose(ret, fail(ret, what+": reading the new compute instance", migCodes))
	}
	migs, err := g.migDevices()
	if err != nil {
		ci.Destroy()
		return gpu.Instance{}, err
	}
	for _, m := range migs {
		if m.giID == int(gii.Id) && m.ciID == int(cii.Id) {
			return gpu.Instance{
				UUID:      m.uuid,
				Profile:   e.name,
				Start:     int(gii.Placement.Start),
				Size:      int(gii.Placement.Size),
				GIID:      int(gii.Id),
				CIID:      int(cii.Id),
				MemoryMiB: int64(e.info.MemorySizeMB),
			}, nil
		}
	}
	ci.Destroy()
	return gpu.Instance{}, fmt.Errorf("nvml: %s: no MIG device appeared for GPU instance %d, compute instance %d", what, gii.Id, cii.Id)
}

// fullCIProfile is the compute-instance profile that spans a GPU instance:
// the supported one with the most slices.
func fullCIProfile(gi gonvml.GpuInstance) (gonvml.ComputeInstanceProfileInfo, error) {
	var best gonvml.ComputeInstanceProfileInfo
	found := false
	for c := range gonvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		info, ret := gi.GetComputeInstanceProfileInfo(c, gonvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if !ok(ret) {
			continue
		}
		if !found || info.SliceCount > best.SliceCount {
			best, found = info, true
		}
	}
	if !found {
		return best, fmt.Errorf("no compute-instance profile is supported")
	}
	return best, nil
}

// DestroyInstance destroys a GPU instance by the uuid GPUs lists: its
// compute instances first, then the GPU instance. An instance running
// processes (checked first, NVML's IN_USE otherwise) fails with
// gpu.ErrInUse; an unknown uuid with gpu.ErrNotFound.
func (d *Device) DestroyInstance(ctx context.Context, index int, uuid string) (err error) {
	defer guard(&err, fmt.Sprintf("GPU %d: destroying %s", index, uuid))
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.usable(ctx); err != nil {
		return err
	}
	g, err := d.gpu(index)
	if err != nil {
		return err
	}
	if err := g.migReady(); err != nil {
		return err
	}
	ins, err := g.instances()
	if err != nil {
		return err
	}
	i := slices.IndexFunc(ins, func(in instance) bool { return in.UUID == uuid })
	if i < 0 {
		return fmt.Errorf("nvml: %s: instance %q: %w", g.label(), uuid, gpu.ErrNotFound)
	}
	in := ins[i]
	what := fmt.Sprintf("%s: destroying %s@%d (GI %d, %s)", g.label(), in.Profile, in.Start, in.GIID, uuid)
	if in.mig != nil {
		if ps, ret := in.mig.h.GetComputeRunningProcesses(); ok(ret) && len(ps) > 0 {
			return fmt.Errorf("nvml: %s: runs processes %v: %w", what, pids(ps), gpu.ErrInUse)
		}
	}
	for c := range gonvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		info, ret := in.gi.GetComputeInstanceProfileInfo(c, gonvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if !ok(ret) {
			continue
		}
		cis, ret := in.gi.GetComputeInstances(&info)
		if absent(ret) {
			continue
		}
		if !ok(ret) {
			return g.lose(ret, fail(ret, what+": listing its compute instances", migCodes))
		}
		for _, ci := range cis {
			if ret := ci.Destroy(); !ok(ret) {
				return g.lose(ret, fail(ret, what+": destroying a compute instance", migCodes))
			}
		}
	}
	if ret := in.gi.Destroy(); !ok(ret) {
		return g.lose(ret, fail(ret, what, migCodes))
	}
	g.dropGPM(uuid)
	return nil
}
