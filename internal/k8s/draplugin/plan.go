package draplugin

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/k8s/draconfig"
	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// deviceInfo is what the published ResourceSlices say about one device
// name: its type and where it lies.
type deviceInfo struct {
	Type      string `json:"type"` // dranames.TypeGPU, TypeShared or TypeMIG
	GPUIndex  int    `json:"gpuIndex"`
	GPU       string `json:"gpu"`               // the GPU's uuid
	Profile   string `json:"profile,omitempty"` // MIG only
	Start     int    `json:"start"`             // MIG only
	MemoryMiB int64  `json:"memoryMiB"`
	// Tenant is the tenant a shared GPU's copy is for (dradriver's
	// tenant attribute; "" without tenant isolation). Optional, so
	// checkpoints written before it existed read the same.
	Tenant string `json:"tenant,omitempty"`
}

// deviceTable maps the device names of a node's slices (dradriver.Slices)
// to what they are, read back (dradriver.ReadDevice) from the names and
// the attributes the slices carry, so that prepare understands exactly
// the names the scheduler allocated.
func deviceTable(slices []resourceapi.ResourceSlice) (map[string]deviceInfo, error) {
	out := map[string]deviceInfo{}
	for _, s := range slices {
		for i := range s.Spec.Devices {
			d, err := dradriver.ReadDevice(&s.Spec.Devices[i])
			if err != nil {
				return nil, err
			}
			out[d.Name] = deviceInfo{Type: d.Type, GPUIndex: d.Index, GPU: d.GPU, Profile: d.Profile, Start: d.Start,
				MemoryMiB: d.MemoryMiB, Tenant: d.Tenant}
		}
	}
	return out, nil
}

// Claim states in the checkpoint.
const (
	// statePreparing: prepare began; the devices are the plan, some of
	// its effects may exist (a MIG instance created before a crash).
	statePreparing = "preparing"
	// statePrepared: every effect exists and the CDI spec is written.
	statePrepared = "prepared"
)

// claimRecord is one claim as prepared on this node: what prepare decided
// and what it made, kept in the checkpoint so that unprepare (and a
// restarted driver) can undo it without the ResourceClaim.
type claimRecord struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Pods are the pods the claim was reserved for when it was prepared
	// (namespace/name), for the metrics' pod label.
	Pods    []string         `json:"pods,omitempty"`
	State   string           `json:"state"`
	Devices []preparedDevice `json:"devices"`
}

// preparedDevice is one allocated device of a claim.
type preparedDevice struct {
	Request string `json:"request"`
	Pool    string `json:"pool"`
	// Device is the DRA device name ("gpu-0-shared", "gpu-1-mig-1g-5gb-at-6").
	Device  string `json:"device"`
	ShareID string `json:"shareID,omitempty"`
	deviceInfo
	// ID is the GPU uuid, or the MIG instance's uuid once it exists.
	ID string `json:"id,omitempty"`
	// Mode is exclusive, timeslice or mps.
	Mode alloc.Mode `json:"mode"`
	// MemoryMiB is the memory promised (consumed capacity on a shared
	// GPU, else the device's); ComputePercent the compute share asked
	// for on a shared GPU (0: none).
	PromisedMiB    int64 `json:"promisedMiB"`
	ComputePercent int   `json:"computePercent,omitempty"`
	// MPS client limits (0: unset) and the daemon's pipe directory on
	// the host.
	ThreadPercent int    `json:"threadPercent,omitempty"`
	PinnedMiB     int64  `json:"pinnedMiB,omitempty"`
	PipeDir       string `json:"pipeDir,omitempty"`
	Interval      string `json:"interval,omitempty"`
	Replicas      int    `json:"replicas,omitempty"`
	MemoryPolicy  string `json:"memoryPolicy,omitempty"`
}

// key names the hardware a device occupies: the GPU for whole and shared
// GPUs, the placement for a MIG device.
func (d preparedDevice) key() string {
	if d.Type == dranames.TypeMIG {
		return fmt.Sprintf("%s/%s@%d", d.GPU, d.Profile, d.Start)
	}
	return d.GPU
}

// planClaim decides what preparing claim on node means: every device
// allocated to this driver in node's pool, what it is (from table) and how
// it is shared (from the opaque configs that apply to its request, decoded
// by dec). It is pure: nothing is made, and a claim it refuses has an
// error naming the field.
func planClaim(claim *resourceapi.ResourceClaim, node string, table map[string]deviceInfo, dec SharingDecoder) (claimRecord, error) {
	rec := claimRecord{UID: string(claim.UID), Namespace: claim.Namespace, Name: claim.Name, State: statePreparing}
	for _, r := range claim.Status.ReservedFor {
		if r.Resource == "pods" {
			rec.Pods = append(rec.Pods, claim.Namespace+"/"+r.Name)
		}
	}
	a := claim.Status.Allocation
	if a == nil {
		return rec, fmt.Errorf("claim %s/%s: status.allocation: not allocated", claim.Namespace, claim.Name)
	}
	for i, r := range a.Devices.Results {
		field := fmt.Sprintf("status.allocation.devices.results[%d]", i)
		if r.Driver != dranames.DriverName {
			continue
		}
		if r.Pool != node {
			return rec, fmt.Errorf("claim %s/%s: %s.pool %q: this driver serves node %q", claim.Namespace, claim.Name, field, r.Pool, node)
		}
		info, ok := table[r.Device]
		if !ok {
			return rec, fmt.Errorf("claim %s/%s: %s.device %q: node %s publishes no such device", claim.Namespace, claim.Name, field, r.Device, node)
		}
		sh, err := sharingFor(a.Devices.Config, r.Request, dec)
		if err != nil {
			return rec, fmt.Errorf("claim %s/%s: %w", claim.Namespace, claim.Name, err)
		}
		d := preparedDevice{Request: r.Request, Pool: r.Pool, Device: r.Device, deviceInfo: info,
			Interval: sh.Interval, Replicas: sh.Replicas, MemoryPolicy: sh.MemoryPolicy}
		if r.ShareID != nil {
			d.ShareID = string(*r.ShareID)
		}
		if info.Type != dranames.TypeMIG {
			d.ID = info.GPU
		}
		d.PromisedMiB = info.MemoryMiB
		if m, ok := r.ConsumedCapacity[dranames.CapacityMemory]; ok {
			d.PromisedMiB = m.Value() >> 20
		}
		if c, ok := r.ConsumedCapacity[dranames.CapacityCompute]; ok {
			d.ComputePercent = int(c.Value())
		}
		if sh.MemoryMiB > 0 {
			// The config's memory is a tighter limit for the watchdog,
			// never more than the claim was allocated.
			if sh.MemoryMiB > d.PromisedMiB {
				return rec, fmt.Errorf("claim %s/%s: request %q: config memory %d MiB is more than the %d MiB the claim was allocated on %s",
					claim.Namespace, claim.Name, r.Request, sh.MemoryMiB, d.PromisedMiB, r.Device)
			}
			d.PromisedMiB = sh.MemoryMiB
		}
		if d.ComputePercent == 0 {
			d.ComputePercent = sh.ComputePercent
		}
		switch sh.Mode {
		case "":
			d.Mode = alloc.Exclusive
			if info.Type == dranames.TypeShared {
				d.Mode = alloc.TimeSlice
			}
		case alloc.Exclusive:
			if info.Type == dranames.TypeShared {
				return rec, fmt.Errorf("claim %s/%s: request %q: mode exclusive on shared device %s: use device class %s for a GPU alone",
					claim.Namespace, claim.Name, r.Request, r.Device, dranames.ClassGPU)
			}
			d.Mode = alloc.Exclusive
		default:
			d.Mode = sh.Mode
		}
		if d.Mode == alloc.MPS {
			d.ThreadPercent, d.PinnedMiB = sh.ThreadPercent, sh.PinnedMemoryMiB
			if d.ThreadPercent == 0 && d.ComputePercent > 0 {
				d.ThreadPercent = d.ComputePercent
			}
			if d.PinnedMiB == 0 && info.Type == dranames.TypeShared {
				d.PinnedMiB = d.PromisedMiB
			}
			if d.PinnedMiB > 0 && info.Type == dranames.TypeShared && d.PinnedMiB > d.PromisedMiB {
				return rec, fmt.Errorf("claim %s/%s: request %q: pinned memory limit %d MiB is more than the %d MiB the claim was allocated on %s",
					claim.Namespace, claim.Name, r.Request, d.PinnedMiB, d.PromisedMiB, r.Device)
			}
		}
		rec.Devices = append(rec.Devices, d)
	}
	if len(rec.Devices) == 0 {
		return rec, fmt.Errorf("claim %s/%s: status.allocation.devices.results: no device of driver %s", claim.Namespace, claim.Name, dranames.DriverName)
	}
	// One MPS pipe directory per process: a claim may use MPS on one
	// device only.
	var mpsDevs []string
	for _, d := range rec.Devices {
		if d.Mode == alloc.MPS && !slices.Contains(mpsDevs, d.key()) {
			mpsDevs = append(mpsDevs, d.key())
		}
	}
	if len(mpsDevs) > 1 {
		return rec, fmt.Errorf("claim %s/%s: MPS on %d devices (%s): a process reaches one MPS daemon, so a claim may use MPS on one device",
			claim.Namespace, claim.Name, len(mpsDevs), strings.Join(mpsDevs, ", "))
	}
	return rec, nil
}

// sharingFor decodes the opaque config of this driver that applies to
// request (draconfig.Pick: the last entry naming it or naming no request,
// class configs before claim configs as the allocation lists them).
func sharingFor(configs []resourceapi.DeviceAllocationConfiguration, request string, dec SharingDecoder) (ClaimSharing, error) {
	pick := draconfig.Pick(configs, request)
	if pick < 0 {
		return ClaimSharing{}, nil
	}
	field := fmt.Sprintf("status.allocation.devices.config[%d].opaque.parameters", pick)
	return dec.DecodeSharing(field, configs[pick].Opaque.Parameters.Raw)
}

// pipeDirs are an MPS device's pipe directory on the host (under root)
// and inside containers (alloc.PipeDirectory: under alloc.MPSPipeRoot).
func pipeDirs(root, deviceID string) (host, container string, err error) {
	container, err = alloc.PipeDirectory(deviceID)
	if err != nil {
		return "", "", err
	}
	host, err = alloc.SafeJoin(root, filepath.Base(container))
	return host, container, err
}

// conflict reports why rec cannot be prepared beside the claims already
// prepared: a device another claim holds alone (the last line of defense
// should the scheduler have allocated it twice), a shared GPU set up
// for another mode (time-slicing and MPS cannot share a GPU: MPS needs it
// in EXCLUSIVE_PROCESS compute mode), or a time-sliced GPU whose interval
// another claim set otherwise (see timeSliceLevels).
func conflict(rec claimRecord, others map[string]*claimRecord) error {
	for _, d := range rec.Devices {
		if holder, interval := intervalConflict(rec, d, others); holder != "" {
			return fmt.Errorf("claim %s/%s: GPU %s (%s) is time-sliced with interval %s for claim %s; this claim asks for %s: one GPU has one time-slice length (leave the interval out to take the GPU's)",
				rec.Namespace, rec.Name, d.Device, d.GPU, interval, holder, d.Interval)
		}
		for _, o := range sortedRecords(others) {
			if o.UID == rec.UID {
				continue
			}
			for _, od := range o.Devices {
				if !overlaps(d, od) {
					continue
				}
				if d.Type != dranames.TypeShared || od.Type != dranames.TypeShared {
					return fmt.Errorf("claim %s/%s: device %s is held by claim %s/%s (%s)", rec.Namespace, rec.Name, d.Device, o.Namespace, o.Name, od.Device)
				}
				if d.Tenant != od.Tenant {
					return fmt.Errorf("claim %s/%s: shared GPU %s (%s) serves tenant %q through claim %s/%s; this claim is tenant %q's: tenants never share a GPU",
						rec.Namespace, rec.Name, d.Device, d.GPU, od.Tenant, o.Namespace, o.Name, d.Tenant)
				}
				if d.Mode != od.Mode {
					return fmt.Errorf("claim %s/%s: shared GPU %s (%s) is set up for %s by claim %s/%s; this claim asks for %s: time-slicing and MPS cannot share a GPU",
						rec.Namespace, rec.Name, d.Device, d.GPU, od.Mode, o.Namespace, o.Name, d.Mode)
				}
			}
		}
	}
	return nil
}

// overlaps reports whether two devices use the same hardware: the same
// GPU as a whole, or the same MIG placement. (Two MIG placements that
// overlap in memory slices cannot both be allocated: the counters forbid
// it.)
func overlaps(a, b preparedDevice) bool {
	if a.GPU != b.GPU {
		return false
	}
	aMIG, bMIG := a.Type == dranames.TypeMIG, b.Type == dranames.TypeMIG
	if aMIG != bMIG {
		return true // a whole GPU and an instance on it
	}
	return !aMIG || (a.Profile == b.Profile && a.Start == b.Start)
}

func sortedRecords(m map[string]*claimRecord) []*claimRecord {
	out := make([]*claimRecord, 0, len(m))
	for _, r := range m {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *claimRecord) int { return strings.Compare(a.UID, b.UID) })
	return out
}
