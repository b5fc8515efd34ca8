package agent

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/gpu"
)

// Action is one hardware step the agent takes.
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

// apply makes one action true if it is not already (idempotent): the
// hardware is read first, so a restarted agent adopts what exists.
func (a *Agent) apply(ctx context.Context, act Action) error {
	gpus, err := a.cfg.Device.GPUs(ctx)
	if err != nil {
		return err
	}
	var g *gpu.GPU
	for i := range gpus {
		if gpus[i].UUID == act.GPU {
			g = &gpus[i]
		}
	}
	if g == nil {
		return fmt.Errorf("%s on GPU %s: %w", act.Kind, act.GPU, gpu.ErrNotFound)
	}
	// Creates match by placement (the planned id is not a uuid yet);
	// destroys match by uuid only.
	find := func(byPlacement bool) *gpu.Instance {
		for i := range g.Instances {
			in := &g.Instances[i]
			if in.UUID == act.Device || (byPlacement && in.Profile == act.Profile && in.Start == act.Start) {
				return in
			}
		}
		return nil
	}
	switch act.Kind {
	case alloc.EnableMIG, alloc.DisableMIG:
		want := act.Kind == alloc.EnableMIG
		if g.MIGEnabled == want {
			return nil
		}
		return a.cfg.Device.SetMIGMode(ctx, g.Index, want)
	case alloc.CreateInstance:
		if !g.MIGEnabled {
			return fmt.Errorf("creating %s@%d on GPU %d: MIG is off: %w", act.Profile, act.Start, g.Index, gpu.ErrNoMIG)
		}
		if find(true) != nil {
			return nil
		}
		in, err := a.cfg.Device.CreateInstance(ctx, g.Index, act.Profile, act.Start)
		if err != nil {
			return fmt.Errorf("creating %s@%d on GPU %d: %w", act.Profile, act.Start, g.Index, err)
		}
		a.cfg.Log.Info("created MIG instance", "gpu", g.Index, "profile", act.Profile, "start", act.Start, "uuid", in.UUID)
		return nil
	case alloc.DestroyInstance:
		in := find(false)
		if in == nil {
			return nil
		}
		if err := a.cfg.Device.DestroyInstance(ctx, g.Index, in.UUID); err != nil {
			if errors.Is(err, gpu.ErrInUse) {
				return fmt.Errorf("not destroying %s on GPU %d: a process uses it: %w", in.UUID, g.Index, err)
			}
			return err
		}
		a.cfg.Log.Info("destroyed MIG instance", "gpu", g.Index, "uuid", in.UUID)
	}
	return nil
}
