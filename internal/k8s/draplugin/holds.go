package draplugin

import (
	"context"
	"fmt"

	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
	"github.com/gpuslice/gpuslice/internal/node"
)

// holdOf is a prepared device as internal/node holds it: the claim by
// uid, named namespace/name; a MIG device at its placement (and its
// instance once made).
func holdOf(r *claimRecord, dev preparedDevice, make bool) node.Hold {
	h := node.Hold{Claim: r.UID, Name: r.Namespace + "/" + r.Name, GPU: dev.GPU, Mode: dev.Mode, Interval: dev.Interval, Make: make}
	if dev.Type == dranames.TypeMIG {
		h.Profile, h.Start, h.Instance = dev.Profile, dev.Start, dev.ID
	}
	return h
}

// want is what the checkpoint holds on the node's GPUs: every device of
// every record but rec's (uid skip), then rec's devices, those mk picks
// to be made (rec nil: none). It returns the hold index of each of rec's
// devices. d.mu is held.
func (d *Driver) want(skip string, rec *claimRecord, mk func(preparedDevice) bool) (node.Want, []int) {
	var w node.Want
	for _, r := range sortedRecords(d.claims) {
		if r.UID == skip {
			continue
		}
		for _, dev := range r.Devices {
			w.Holds = append(w.Holds, holdOf(r, dev, false))
		}
	}
	var idx []int
	if rec != nil {
		for _, dev := range rec.Devices {
			idx = append(idx, len(w.Holds))
			w.Holds = append(w.Holds, holdOf(rec, dev, mk(dev)))
		}
	}
	return w, idx
}

// makeDevices makes rec's devices that mk picks true on the GPUs through
// internal/node (node.Decide's rules: MIG mode and the instance at the
// placement, adopted when one is there, idle instances no claim holds
// destroyed where they are in the way; whole GPUs out of MIG mode, in
// their compute mode and time slice) and records each MIG instance's
// uuid in rec. The first device that could not be made is the error.
// d.mu is held.
func (d *Driver) makeDevices(ctx context.Context, rec *claimRecord, mk func(preparedDevice) bool) error {
	want, idx := d.want(rec.UID, rec, mk)
	rep, err := d.node.Realize(ctx, want)
	if err != nil {
		return err
	}
	if err := rep.ResetErr(); err != nil {
		d.cfg.Log.Warn("putting back a GPU nobody holds", "err", err)
	}
	created := false
	for i := range rec.Devices {
		dev, h := &rec.Devices[i], idx[i]
		if !want.Holds[h].Make {
			continue
		}
		if err := rep.Err(h); err != nil {
			return fmt.Errorf("claim %s/%s: device %s: %w", rec.Namespace, rec.Name, dev.Device, err)
		}
		if dev.Type != dranames.TypeMIG {
			continue
		}
		dev.ID = rep.Instance(h)
		if rep.Created(h) {
			created = true
		} else {
			d.cfg.Log.Info("adopted MIG instance", "gpu", dev.GPUIndex, "profile", dev.Profile, "start", dev.Start, "uuid", dev.ID, "claim", rec.UID)
		}
	}
	if created {
		d.cfg.Observe(StepMIGCreated, rec.UID)
	}
	return nil
}

// releaseDevices gives up rec's devices through internal/node: its MIG
// instances destroyed unless another claim holds the placement (found
// by uuid, or by placement when the uuid was never recorded; a GPU that
// is gone has nothing to destroy), its time-sliced GPUs back to the level
// the other claims name. why is added to the error ("" or e.g. " made
// before bind"). d.mu is held.
func (d *Driver) releaseDevices(ctx context.Context, uid string, rec *claimRecord, why string) error {
	want, _ := d.want(uid, nil, nil)
	for _, dev := range rec.Devices {
		want.Release = append(want.Release, holdOf(rec, dev, false))
	}
	rep, err := d.node.Realize(ctx, want)
	if err != nil {
		return err
	}
	if err := rep.ResetErr(); err != nil {
		d.cfg.Log.Warn("putting back a GPU's time slice or compute mode", "claim", rec.Namespace+"/"+rec.Name, "err", err)
	}
	if err := rep.ReleaseErr(); err != nil {
		return fmt.Errorf("claim %s/%s%s: %w", rec.Namespace, rec.Name, why, err)
	}
	return nil
}
