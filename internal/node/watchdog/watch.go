package watchdog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/gpu"
)

// Memory policies (api.ClaimSpec.MemoryPolicy).
const (
	PolicyWarn = "warn"
	PolicyKill = "kill"
)

// Event kinds the watchdog emits.
const (
	EventUnknownProcess = "unknown-process"
	EventOverLimit      = "memory-over-limit"
	EventKilled         = "memory-killed"
	EventKillFailed     = "memory-kill-failed"
)

// PIDOwner names the claim a process was launched for.
type PIDOwner func(pid int) (claimID string, ok bool)

// Config configures a Watcher. Every field is optional.
type Config struct {
	Clock func() time.Time
	// Owner attributes processes on shared devices (nil: none known).
	Owner PIDOwner
	// Ignore skips processes that belong to no claim, such as MPS servers
	// (their memory is their clients'); nil skips none.
	Ignore func(pid int) bool
}

// Watcher watches the memory of the node's claims. It is not safe for
// concurrent use.
type Watcher struct {
	cfg      Config
	last     time.Time
	reported map[procKey]bool // unknown processes already reported
}

type procKey struct {
	device string
	pid    int
}

// New builds a Watcher.
func New(cfg Config) *Watcher {
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Owner == nil {
		cfg.Owner = func(int) (string, bool) { return "", false }
	}
	if cfg.Ignore == nil {
		cfg.Ignore = func(int) bool { return false }
	}
	return &Watcher{cfg: cfg, reported: map[procKey]bool{}}
}

// Violation is a claim holding more memory on one device than it was
// promised there.
type Violation struct {
	Claim  string
	Tenant string
	Node   string
	Device string
	// PID is the claim's largest process on the device.
	PID         int
	UsedMiB     int64
	PromisedMiB int64
	// Policy is PolicyWarn or PolicyKill.
	Policy string
	// Processes are the claim's processes on the device, largest first.
	Processes []gpu.Process
}

// Usage is what one claim used since the previous Watch. Its fields match
// api.UsageSample's, so api.UsageSample(u) converts it.
type Usage struct {
	Claim string
	// GPUSeconds counts, for each of the claim's devices on which one of
	// its processes ran at the sample, the time since the previous Watch.
	GPUSeconds float64
	// SMSeconds is SM activity in whole-GPU seconds: each process's
	// sampled SM utilization (a share of the whole GPU) times the time
	// since the previous Watch. Devices without per-process samples (MIG
	// instances) add nothing.
	SMSeconds float64
	// MemoryMiBSeconds is the memory the claim's processes hold now times
	// the time since the previous Watch.
	MemoryMiBSeconds float64
	// MemoryMiB is what the claim's processes hold now, on all devices.
	MemoryMiB int64
}

// Result is one Watch.
type Result struct {
	Violations []Violation
	// Usage has one entry per claim with a device on the node, by claim id.
	Usage []Usage
	// Events report processes no claim owns.
	Events []api.Event
	// Errors are devices whose processes could not be read; their claims'
	// usage leaves them out.
	Errors []error
}

// Err joins the result's errors.
func (r Result) Err() error { return errors.Join(r.Errors...) }

// holder is a claim's share of one device.
type holder struct {
	claim    *api.Claim
	promised int64
}

// Watch reads the processes of every device the claims hold on node,
// attributes them and compares each claim's memory with its promise.
// The first call measures no time (it starts the clock).
func (w *Watcher) Watch(ctx context.Context, dev gpu.Device, claims []api.Claim, node string) Result {
	now := w.cfg.Clock()
	var dt float64
	if !w.last.IsZero() {
		dt = max(0, now.Sub(w.last).Seconds())
	}
	w.last = now

	var res Result
	holders := map[string][]holder{}
	var devices []string
	usage := map[string]*Usage{}
	var ids []string
	for i := range claims {
		c := &claims[i]
		if c.Allocation == nil || c.State.Final() {
			continue
		}
		for _, d := range c.Allocation.Devices {
			if d.Node != node || d.Device == "" || alloc.IsPlanned(d.Device) {
				continue
			}
			hs := holders[d.Device]
			if len(hs) == 0 {
				devices = append(devices, d.Device)
			}
			if j := slices.IndexFunc(hs, func(h holder) bool { return h.claim.ID == c.ID }); j >= 0 {
				hs[j].promised += d.MemoryMiB // two slots of one device
			} else {
				hs = append(hs, holder{claim: c, promised: d.MemoryMiB})
			}
			holders[d.Device] = hs
			if usage[c.ID] == nil {
				usage[c.ID] = &Usage{Claim: c.ID}
				ids = append(ids, c.ID)
			}
		}
	}
	slices.Sort(devices)

	seen := map[procKey]bool{}
	for _, device := range devices {
		procs, err := dev.Processes(ctx, device)
		if err != nil {
			res.Errors = append(res.Errors, fmt.Errorf("processes on %s: %w", device, err))
			continue
		}
		hs := holders[device]
		mine := map[string][]gpu.Process{}
		for _, p := range procs {
			if w.cfg.Ignore(p.PID) {
				continue
			}
			id, known := w.cfg.Owner(p.PID)
			switch {
			case known && slices.ContainsFunc(hs, func(h holder) bool { return h.claim.ID == id }):
				mine[id] = append(mine[id], p)
			case !known && len(hs) == 1:
				mine[hs[0].claim.ID] = append(mine[hs[0].claim.ID], p)
			default:
				k := procKey{device, p.PID}
				seen[k] = true
				if w.reported[k] {
					continue
				}
				ev := api.Event{Time: now, Kind: EventUnknownProcess, Node: node}
				if known {
					ev.Claim = id
					ev.Message = fmt.Sprintf("pid %d (%d MiB) on %s was launched for claim %s, which does not hold %s", p.PID, p.MemoryMiB, device, id, device)
				} else {
					ev.Message = fmt.Sprintf("pid %d (%d MiB) on %s belongs to no claim; %s is shared by %s", p.PID, p.MemoryMiB, device, device, claimList(hs))
				}
				res.Events = append(res.Events, ev)
			}
		}
		for _, h := range hs {
			ps := mine[h.claim.ID]
			slices.SortFunc(ps, func(a, b gpu.Process) int {
				return cmp.Or(cmp.Compare(b.MemoryMiB, a.MemoryMiB), cmp.Compare(a.PID, b.PID))
			})
			var used int64
			sm := 0
			for _, p := range ps {
				used += p.MemoryMiB
				if p.SMPercent != nil {
					sm += *p.SMPercent
				}
			}
			u := usage[h.claim.ID]
			u.MemoryMiB += used
			u.MemoryMiBSeconds += float64(used) * dt
			u.SMSeconds += float64(min(sm, 100)) / 100 * dt
			if len(ps) > 0 {
				u.GPUSeconds += dt
			}
			if h.promised > 0 && used > h.promised {
				res.Violations = append(res.Violations, Violation{
					Claim: h.claim.ID, Tenant: h.claim.Tenant, Node: node, Device: device,
					PID: ps[0].PID, UsedMiB: used, PromisedMiB: h.promised,
					Policy: Policy(h.claim.Spec.MemoryPolicy), Processes: ps,
				})
			}
		}
	}
	w.reported = seen // a pid that leaves and comes back is reported again

	slices.Sort(ids)
	for _, id := range ids {
		res.Usage = append(res.Usage, *usage[id])
	}
	slices.SortFunc(res.Violations, func(a, b Violation) int {
		return cmp.Or(cmp.Compare(a.Claim, b.Claim), cmp.Compare(a.Device, b.Device))
	})
	return res
}

// Policy normalizes a claim's memory policy: kill, or warn for anything
// else (the default).
func Policy(p string) string {
	if p == PolicyKill {
		return PolicyKill
	}
	return PolicyWarn
}

func claimList(hs []holder) string {
	s := ""
	for i, h := range hs {
		if i > 0 {
			s += ", "
		}
		s += h.claim.ID
	}
	return s
}
