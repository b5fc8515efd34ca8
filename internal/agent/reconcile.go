package agent

import (
	"sort"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/node"
)

// Action is one layout change the server decided for this node.
type Action struct {
	Kind    alloc.ChangeKind
	GPU     string // GPU uuid
	Device  string // instance uuid or planned id
	Profile string
	Start   int
}

// Plan lists the layout changes of the claims on this node in a safe
// order: destroy before create (room first), switch MIG on before creating
// on it. A destroy is dropped when any live claim holds that device (an
// old claim's change must never hit a newer claim's instance). Pure: no
// hardware is read.
func Plan(claims []api.Claim, node string) []Action {
	held := map[string]bool{}
	for _, c := range claims {
		if c.Allocation != nil {
			for _, d := range c.Allocation.Devices {
				held[d.Device] = true
			}
		}
	}
	var out []Action
	for _, c := range claims {
		if c.Allocation == nil {
			continue
		}
		for _, ch := range c.Allocation.Changes {
			if ch.Node != node || ch.Kind == alloc.ConfigureShare || (ch.Kind == alloc.DestroyInstance && held[ch.Device]) {
				continue
			}
			// A running claim's instance was made once; if it is gone, a
			// fresh one would not hold the process's state: report drift
			// (Agent.drift) instead of re-creating it.
			if ch.Kind == alloc.CreateInstance && c.State == api.Running && !alloc.IsPlanned(ch.Device) {
				continue
			}
			out = append(out, Action{Kind: ch.Kind, GPU: ch.GPU, Device: ch.Device, Profile: ch.Profile, Start: ch.Start})
		}
	}
	rank := map[alloc.ChangeKind]int{alloc.DestroyInstance: 0, alloc.DisableMIG: 1, alloc.EnableMIG: 2, alloc.CreateInstance: 3}
	sort.SliceStable(out, func(i, j int) bool { return rank[out[i].Kind] < rank[out[j].Kind] })
	return out
}

// wantOf is what the claims on node decide for its GPUs (node.Want):
// every device a live claim holds, with the layout changes of Plan — a
// MIG instance its claim creates (by plan) is made, a destroyed one is
// released. A whole GPU is made whatever the claim's state (out of MIG
// mode, its compute mode, its time slice); a MIG instance no change
// creates is only held (never re-created: Agent.drift reports it). The
// interval of a time-sliced GPU is the one the change configuring it
// names. Pure.
func wantOf(claims []api.Claim, nodeName string) node.Want {
	actions := Plan(claims, nodeName)
	creates := map[string]bool{}
	var w node.Want
	for _, a := range actions {
		switch a.Kind {
		case alloc.CreateInstance:
			creates[a.Device] = true
		case alloc.DestroyInstance:
			w.Release = append(w.Release, node.Hold{GPU: a.GPU, Instance: a.Device, Profile: a.Profile, Start: a.Start})
		}
	}
	for _, c := range claims {
		if c.Allocation == nil || c.State.Final() {
			continue
		}
		for _, d := range c.Allocation.Devices {
			if d.Node != nodeName {
				continue
			}
			h := node.Hold{Claim: c.ID, GPU: d.GPU, Mode: d.Mode, Make: true}
			if d.Device != d.GPU {
				h.Profile, h.Start, h.Make = d.Profile, d.Start, creates[d.Device]
				if !alloc.IsPlanned(d.Device) {
					h.Instance = d.Device
				}
			} else if d.Mode == alloc.TimeSlice {
				h.Interval = intervalOf(c.Allocation, d)
			}
			w.Holds = append(w.Holds, h)
		}
	}
	// A destroy is its claim's release: claims are told apart by the
	// claim whose change it is.
	for i := range w.Release {
		w.Release[i].Claim = releaser(claims, nodeName, w.Release[i].Instance)
	}
	return w
}

// intervalOf is the time-slice interval the allocation configured its
// whole GPU with ("" when no change of it names one).
func intervalOf(a *alloc.Allocation, d alloc.Assigned) string {
	for _, ch := range a.Changes {
		if ch.Sharing == nil || ch.GPU != d.GPU || (ch.Kind != alloc.ConfigureShare && ch.Kind != alloc.DisableMIG) {
			continue
		}
		if ch.Kind == alloc.ConfigureShare && ch.Device != d.Device {
			continue
		}
		return ch.Sharing.Interval
	}
	return ""
}

// releaser is the claim whose change destroys the instance.
func releaser(claims []api.Claim, nodeName, instance string) string {
	for _, c := range claims {
		if c.Allocation == nil {
			continue
		}
		for _, ch := range c.Allocation.Changes {
			if ch.Kind == alloc.DestroyInstance && ch.Node == nodeName && ch.Device == instance {
				return c.ID
			}
		}
	}
	return ""
}
