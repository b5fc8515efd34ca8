package mps

import (
	"cmp"
	"path/filepath"
	"slices"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/gpu"
)

// Daemon is one MPS control daemon the node should run.
type Daemon struct {
	// Device is the GPU or MIG uuid the daemon serves; it is the only
	// device in the daemon's CUDA_VISIBLE_DEVICES.
	Device string `json:"device"`
	// GPU is the parent GPU's uuid (the Device itself for a whole GPU).
	GPU string `json:"gpu,omitempty"`
	// GPUIndex is the parent GPU's NVML index, needed to set the compute
	// mode of a whole GPU; -1 until Resolve fills it in.
	GPUIndex int  `json:"gpuIndex"`
	MIG      bool `json:"mig,omitempty"`
	// PipeDir is CUDA_MPS_PIPE_DIRECTORY (the allocation's
	// MPS.PipeDirectory); LogDir is CUDA_MPS_LOG_DIRECTORY (PipeDir/log
	// when empty, as in the allocation's process environment).
	PipeDir string `json:"pipeDir"`
	LogDir  string `json:"logDir"`
	// DefaultThreadPercent and DefaultPinnedMiB are the daemon's defaults
	// for clients that set no limit of their own (0 = not set).
	DefaultThreadPercent int   `json:"defaultThreadPercent,omitempty"`
	DefaultPinnedMiB     int64 `json:"defaultPinnedMiB,omitempty"`
}

// WantFromClaims lists the daemons the claims need on node: one per MPS
// device, in device order. The pipe directory is the allocation's
// MPS.PipeDirectory and the log directory the one the allocation's process
// environment names (PipeDir/log). The defaults come from the device's
// sharing as the allocator configured it: the Sharing of the change that
// configured the device (configure-sharing or create-instance on it,
// disable-mig on its GPU), taken from the oldest claim (lowest Seq) that
// carries one; without one the defaults stay unset. Devices not created
// yet (planned ids, "<gpu>/<profile>@<start>") are left out until the
// server renames them to their uuid. GPUIndex is -1: see Resolve.
func WantFromClaims(claims []api.Claim, node string) []Daemon {
	ordered := slices.Clone(claims)
	slices.SortStableFunc(ordered, func(a, b api.Claim) int {
		return cmp.Or(cmp.Compare(a.Seq, b.Seq), cmp.Compare(a.ID, b.ID))
	})
	byDevice := map[string]*Daemon{}
	configured := map[string]bool{}
	for _, c := range ordered {
		if c.Allocation == nil || c.State.Final() {
			continue
		}
		for _, d := range c.Allocation.Devices {
			if d.Node != node || d.Mode != alloc.MPS || d.MPS == nil || d.Device == "" || alloc.IsPlanned(d.Device) {
				continue
			}
			dm, ok := byDevice[d.Device]
			if !ok {
				pipe := d.MPS.PipeDirectory
				if pipe == "" {
					// "" when the id cannot name a directory: Reconcile
					// then refuses the daemon rather than guess a place.
					pipe, _ = alloc.PipeDirectory(d.Device)
				}
				logDir := ""
				if pipe != "" {
					logDir = filepath.Join(pipe, "log")
				}
				gpuID := cmp.Or(d.GPU, d.Device)
				dm = &Daemon{Device: d.Device, GPU: gpuID, GPUIndex: -1, MIG: d.Device != gpuID,
					PipeDir: pipe, LogDir: logDir}
				byDevice[d.Device] = dm
			}
			if configured[d.Device] {
				continue
			}
			if sh := sharingOf(c.Allocation, node, dm); sh != nil {
				dm.DefaultThreadPercent, dm.DefaultPinnedMiB = sh.DefaultThreadPercent, sh.DefaultPinnedMiB
				configured[d.Device] = true
			}
		}
	}
	out := make([]Daemon, 0, len(byDevice))
	for _, d := range byDevice {
		out = append(out, *d)
	}
	slices.SortFunc(out, func(a, b Daemon) int { return cmp.Compare(a.Device, b.Device) })
	return out
}

// sharingOf finds the MPS sharing an allocation configured the daemon's
// device with, or nil.
func sharingOf(a *alloc.Allocation, node string, d *Daemon) *alloc.Sharing {
	for _, ch := range a.Changes {
		if ch.Node != node || ch.Sharing == nil || ch.Sharing.Mode != alloc.MPS {
			continue
		}
		switch ch.Kind {
		case alloc.ConfigureShare, alloc.CreateInstance:
			if ch.Device == d.Device {
				return ch.Sharing
			}
		case alloc.DisableMIG:
			if !d.MIG && ch.GPU == d.Device {
				return ch.Sharing
			}
		}
	}
	return nil
}

// Resolve fills in each daemon's GPUIndex from the hardware and splits off
// the daemons whose device is not there (yet): a MIG instance that does
// not exist, a whole GPU that is in MIG mode or absent. Those are
// returned in missing; starting a daemon on them would serve nothing.
func Resolve(want []Daemon, gpus []gpu.GPU) (ready []Daemon, missing []string) {
	for _, d := range want {
		idx := -1
		for _, g := range gpus {
			if !d.MIG {
				if g.UUID == d.Device && !g.MIGEnabled {
					idx = g.Index
				}
				continue
			}
			if !g.MIGEnabled {
				continue
			}
			for _, in := range g.Instances {
				if in.UUID == d.Device {
					idx = g.Index
				}
			}
		}
		if idx < 0 {
			missing = append(missing, d.Device)
			continue
		}
		d.GPUIndex = idx
		ready = append(ready, d)
	}
	return ready, missing
}
