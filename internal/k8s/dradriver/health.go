package dradriver

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// Taint values other than an XID number.
const (
	ValueLost      = "lost"
	ValueUnhealthy = "unhealthy"
)

// DefaultNoScheduleXIDs are the non-fatal XIDs that taint a GPU's devices
// NoSchedule unless --xid-noschedule says otherwise: the memory is
// degrading (63/64 row remapping recorded or failed, 92 high single-bit
// ECC rate), so running pods stay and no new one comes. Application
// faults (13, 31, 43) are the application's, not the GPU's, and taint
// nothing.
var DefaultNoScheduleXIDs = []int{63, 64, 92}

// HealthPolicy decides which health events taint devices: every fatal XID
// (gpu.XIDs) and a lost GPU taint NoExecute, so the stock
// kube-controller-manager evicts the pods using them; the XIDs in
// NoSchedule taint NoSchedule; any other event is ignored.
type HealthPolicy struct {
	NoSchedule []int
}

// DefaultHealthPolicy taints NoSchedule on DefaultNoScheduleXIDs.
func DefaultHealthPolicy() HealthPolicy {
	return HealthPolicy{NoSchedule: slices.Clone(DefaultNoScheduleXIDs)}
}

// Validate refuses a NoSchedule list naming a fatal XID (it taints
// NoExecute whatever the list says) or a number that is not an XID.
func (p HealthPolicy) Validate() error {
	for _, x := range p.NoSchedule {
		if x <= 0 {
			return fmt.Errorf("xid-noschedule: %d is not an XID (want a positive number)", x)
		}
		if gpu.FatalXID(x) {
			return fmt.Errorf("xid-noschedule: XID %d (%s) is fatal and always taints NoExecute; fatal XIDs are %s", x, gpu.XIDName(x), fatalList())
		}
	}
	return nil
}

func fatalList() string {
	var xs []int
	for x, info := range gpu.XIDs {
		if info.Fatal {
			xs = append(xs, x)
		}
	}
	sort.Ints(xs)
	return joinInts(xs)
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// ParseXIDList reads a comma-separated list of XIDs ("63,64,92"); "" and
// "none" are the empty list. Every entry must be a positive decimal
// number, and not a fatal XID (HealthPolicy.Validate).
func ParseXIDList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "none" {
		return []int{}, nil
	}
	var out []int
	for i, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		n, err := strconv.Atoi(part)
		if err != nil || n <= 0 || n > 1<<16 {
			return nil, fmt.Errorf("xid-noschedule: entry %d %q: want a positive XID number such as 92, or \"none\"", i+1, part)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	if err := (HealthPolicy{NoSchedule: out}).Validate(); err != nil {
		return nil, err
	}
	return out, nil
}

// Fault is one unhealthy GPU, or one unhealthy MIG instance of it (the
// placement Profile at Start, when the event named the instance).
type Fault struct {
	GPU     string // the GPU's uuid
	Profile string // "" for the whole GPU
	Start   int
	Value   string // the taint's value
	Effect  resourceapi.DeviceTaintEffect
	Time    time.Time
}

func (f Fault) key() string {
	if f.Profile == "" {
		return f.GPU
	}
	return fmt.Sprintf("%s/%s@%d", f.GPU, f.Profile, f.Start)
}

// Health is the faults of a node's GPUs, at most one per GPU or MIG
// placement (the worst). The zero value is healthy. It is a value: its
// methods return a changed copy.
type Health struct {
	faults map[string]Fault
}

// Faults lists the faults, by GPU and placement.
func (h Health) Faults() []Fault {
	out := make([]Fault, 0, len(h.faults))
	for _, f := range h.faults {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key() < out[j].key() })
	return out
}

func severity(e resourceapi.DeviceTaintEffect) int {
	switch e {
	case resourceapi.DeviceTaintEffectNoExecute:
		return 2
	case resourceapi.DeviceTaintEffectNoSchedule:
		return 1
	}
	return 0
}

// With records a fault. A GPU or placement keeps its worst fault; of two
// as bad, the first (the root cause, and the time eviction counts from).
// It reports whether anything changed.
func (h Health) With(f Fault) (Health, bool) {
	k := f.key()
	if old, ok := h.faults[k]; ok && severity(old.Effect) >= severity(f.Effect) {
		return h, false
	}
	out := Health{faults: map[string]Fault{}}
	for kk, v := range h.faults {
		out.faults[kk] = v
	}
	out.faults[k] = f
	return out, true
}

// Without forgets every fault of a GPU (its instances' too): it recovered.
// It reports whether anything changed.
func (h Health) Without(gpuUUID string) (Health, bool) {
	out := Health{faults: map[string]Fault{}}
	changed := false
	for k, v := range h.faults {
		if v.GPU == gpuUUID {
			changed = true
			continue
		}
		out.faults[k] = v
	}
	if !changed {
		return h, false
	}
	return out, true
}

// InitialHealth is the faults a driver starts with: every GPU the device
// layer lists unhealthy is tainted NoExecute with the value "unhealthy"
// (the XID that made it so was seen by an earlier process).
func InitialHealth(gpus []gpu.GPU, now time.Time) Health {
	var h Health
	for _, g := range gpus {
		if !g.Healthy {
			h, _ = h.With(Fault{GPU: g.UUID, Value: ValueUnhealthy, Effect: resourceapi.DeviceTaintEffectNoExecute, Time: now})
		}
	}
	return h
}

// Apply is the decision for one health event on the GPUs gpus lists:
//   - EventRecovered forgets the GPU's faults;
//   - EventLost and a fatal XID (gpu.FatalXID, or the event says fatal)
//     record a NoExecute fault;
//   - an XID in p.NoSchedule records a NoSchedule fault;
//   - anything else changes nothing.
//
// An XID whose uuid is one of the GPU's MIG instances faults that
// instance's placement only; otherwise (the GPU's uuid, or an instance
// that no longer exists) the whole GPU. An event naming no GPU of gpus is
// an error. The fault is stamped with the event's time. It reports
// whether the health changed.
func (p HealthPolicy) Apply(h Health, ev gpu.Event, gpus []gpu.GPU) (Health, bool, error) {
	var g *gpu.GPU
	for i := range gpus {
		if gpus[i].Index == ev.Index || (ev.UUID != "" && gpus[i].UUID == ev.UUID) {
			g = &gpus[i]
			break
		}
	}
	if g == nil {
		return h, false, fmt.Errorf("health event %s on GPU %d (%s): no such GPU on this node", ev.Kind, ev.Index, ev.UUID)
	}
	f := Fault{GPU: g.UUID, Time: ev.Time}
	switch ev.Kind {
	case gpu.EventRecovered:
		out, changed := h.Without(g.UUID)
		return out, changed, nil
	case gpu.EventLost:
		f.Value, f.Effect = ValueLost, resourceapi.DeviceTaintEffectNoExecute
	case gpu.EventXID:
		f.Value = strconv.Itoa(ev.XID)
		switch {
		case ev.Fatal || gpu.FatalXID(ev.XID):
			f.Effect = resourceapi.DeviceTaintEffectNoExecute
		case slices.Contains(p.NoSchedule, ev.XID):
			f.Effect = resourceapi.DeviceTaintEffectNoSchedule
		default:
			return h, false, nil
		}
		if ev.UUID != "" && ev.UUID != g.UUID {
			for _, in := range g.Instances {
				if in.UUID == ev.UUID {
					f.Profile, f.Start = in.Profile, in.Start
				}
			}
		}
	default:
		return h, false, nil
	}
	out, changed := h.With(f)
	return out, changed, nil
}

// TaintSlices returns slices (dradriver.Slices' output) with the faults as
// device taints, leaving slices unchanged: a whole-GPU fault taints every
// device of the GPU (whole, shared and every MIG placement), a placement
// fault the MIG device of that placement. A device under several faults
// carries the worst. Each taint is TaintKey=value:effect, added at the
// fault's time.
func TaintSlices(in []resourceapi.ResourceSlice, h Health) []resourceapi.ResourceSlice {
	out := make([]resourceapi.ResourceSlice, len(in))
	for i := range in {
		out[i] = *in[i].DeepCopy()
		for j := range out[i].Spec.Devices {
			d := &out[i].Spec.Devices[j]
			// Health taints are replaced; the slices' own (a tenant's
			// copy of a shared GPU) stay, a fault's taint beside them.
			d.Taints = slices.DeleteFunc(d.Taints, func(t resourceapi.DeviceTaint) bool { return t.Key == dranames.TaintKey })
			if len(d.Taints) == 0 {
				d.Taints = nil
			}
			if f, ok := h.faultOf(*d); ok {
				t := metav1.NewTime(f.Time.Truncate(time.Second))
				d.Taints = append(d.Taints, resourceapi.DeviceTaint{Key: dranames.TaintKey, Value: f.Value, Effect: f.Effect, TimeAdded: &t})
			}
		}
	}
	return out
}

// faultOf is the worst fault that applies to a device.
func (h Health) faultOf(d resourceapi.Device) (Fault, bool) {
	dev, err := ReadDevice(&d)
	if err != nil {
		return Fault{}, false
	}
	gpuUUID, profile, start := dev.GPU, dev.Profile, dev.Start
	var best Fault
	found := false
	consider := func(f Fault, ok bool) {
		if ok && (!found || severity(f.Effect) > severity(best.Effect)) {
			best, found = f, true
		}
	}
	f, ok := h.faults[gpuUUID]
	consider(f, ok)
	if profile != "" {
		f, ok = h.faults[Fault{GPU: gpuUUID, Profile: profile, Start: start}.key()]
		consider(f, ok)
	}
	return best, found
}

// DeviceStatus is a device's health as the kubelet shows it in a pod's
// allocatedResourcesStatus (KEP-4680).
type DeviceStatus string

// The kubelet's three health states.
const (
	StatusHealthy   DeviceStatus = "Healthy"
	StatusUnhealthy DeviceStatus = "Unhealthy"
	StatusUnknown   DeviceStatus = "Unknown"
)

// DeviceHealth is the health of one published device, for the kubelet.
type DeviceHealth struct {
	Pool, Device string
	Status       DeviceStatus
	// Message says why (the fault and its taint); "" when healthy.
	Message string
}

// StatusOf is the kubelet's view of a device's fault, the one rule, read
// off the fault its taint is made of (so status and taint cannot
// disagree):
//   - a lost GPU (ValueLost) is Unknown: the device layer cannot reach
//     it, so its health cannot be determined (it is tainted NoExecute all
//     the same);
//   - any other NoExecute fault (a fatal XID, a GPU listed unhealthy at
//     start) is Unhealthy: its pods are being evicted;
//   - a NoSchedule fault (the --xid-noschedule XIDs: the memory is
//     degrading) is Healthy, with a message: the GPU still runs the pods
//     it has, which the driver deliberately leaves running, and the
//     kubelet's Unhealthy would tell their owners otherwise;
//   - no fault: Healthy when the driver receives health events
//     (watching), Unknown when it does not: it could not know.
func StatusOf(f Fault, faulted, watching bool) (DeviceStatus, string) {
	if !faulted {
		if !watching {
			return StatusUnknown, "gpuslice receives no health events from the device layer: health cannot be determined"
		}
		return StatusHealthy, ""
	}
	taint := fmt.Sprintf("tainted %s=%s:%s", dranames.TaintKey, f.Value, f.Effect)
	var what string
	switch f.Value {
	case ValueLost:
		return StatusUnknown, fmt.Sprintf("GPU %s is lost (fell off the bus or unreachable) since %s; %s", f.GPU, stamp(f.Time), taint)
	case ValueUnhealthy:
		what = fmt.Sprintf("GPU %s was listed unhealthy by the device layer at driver start", f.GPU)
	default:
		x, _ := strconv.Atoi(f.Value)
		what = fmt.Sprintf("XID %s (%s) on GPU %s", f.Value, gpu.XIDName(x), f.GPU)
		if f.Profile != "" {
			what = fmt.Sprintf("XID %s (%s) on MIG %s@%d of GPU %s", f.Value, gpu.XIDName(x), f.Profile, f.Start, f.GPU)
		}
		what += " at " + stamp(f.Time)
	}
	if f.Effect == resourceapi.DeviceTaintEffectNoExecute {
		return StatusUnhealthy, what + "; " + taint
	}
	return StatusHealthy, what + "; " + taint + " (running pods stay, no new ones come)"
}

func stamp(t time.Time) string { return t.UTC().Truncate(time.Second).Format(time.RFC3339) }

// DeviceHealths is the health of every device of slices (TaintSlices'
// input), in their order, each device judged by StatusOf on the worst
// fault that applies to it: the fault TaintSlices taints it with.
// watching says whether health events arrive.
func DeviceHealths(in []resourceapi.ResourceSlice, h Health, watching bool) []DeviceHealth {
	var out []DeviceHealth
	for _, s := range in {
		for _, d := range s.Spec.Devices {
			f, ok := h.faultOf(d)
			st, msg := StatusOf(f, ok, watching)
			out = append(out, DeviceHealth{Pool: s.Spec.Pool.Name, Device: d.Name, Status: st, Message: msg})
		}
	}
	return out
}
