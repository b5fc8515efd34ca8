//go:build cgo

package nvml

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuslice/gpuslice/internal/gpu"
)

// noInstance is the GPU/compute instance id NVML reports for an event
// that belongs to no MIG instance.
const noInstance = 0xFFFFFFFF

// Events watches critical XIDs on every GPU: it creates an NVML event set,
// registers each GPU for EventTypeXidCriticalError (GPUs that cannot
// report them are left out; when none can, it fails with an error
// wrapping errors.ErrUnsupported) and polls the set in a goroutine until
// ctx ends or d is closed, then closes the channel. A fatal XID
// (FatalXID) marks its GPU unhealthy. An XID NVML attributes to a MIG
// instance carries that instance's uuid.
func (d *Device) Events(ctx context.Context) (_ <-chan gpu.Event, err error) {
	defer guard(&err, "watching events")
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.usable(ctx); err != nil {
		return nil, err
	}
	set, ret := d.lib.EventSetCreate()
	if !ok(ret) {
		return nil, fail(ret, "creating an event set", unsupportedCodes)
	}
	registered := false
	var skipped []string
	for _, g := range d.gpus {
		if g.lost != nil {
			continue
		}
		ret := g.h.RegisterEvents(gonvml.EventTypeXidCriticalError, set)
		switch {
		case ok(ret):
			registered = true
		case ret == gonvml.ERROR_NOT_SUPPORTED || ret == gonvml.ERROR_GPU_IS_LOST:
			skipped = append(skipped, fmt.Sprintf("%s: %v", g.label(), ret))
		default:
			set.Free()
			return nil, g.lose(ret, fail(ret, g.label()+": registering for XID events", nil))
		}
	}
	if !registered {
		set.Free()
		return nil, fmt.Errorf("nvml: no GPU reports XID events (%s): %w", strings.Join(skipped, "; "), errors.ErrUnsupported)
	}
	ch := make(chan gpu.Event)
	d.watchers.Add(1)
	go d.watch(ctx, set, ch)
	return ch, nil
}

// watch polls an event set until ctx ends or d closes, then frees it and
// closes ch.
func (d *Device) watch(ctx context.Context, set gonvml.EventSet, ch chan<- gpu.Event) {
	defer d.watchers.Done()
	defer close(ch)
	defer func() {
		defer func() { _ = recover() }() // freeing is best effort
		set.Free()
	}()
	ms := uint32(max(d.poll/time.Millisecond, 1))
	stop := func() bool {
		select {
		case <-ctx.Done():
			return true
		case <-d.done:
			return true
		default:
			return false
		}
	}
	announced := map[int]bool{} // lost GPUs this watcher reported
	for !stop() {
		data, ret, err := wait(set, ms)
		switch {
		case err != nil:
			return // a panicking event set will not get better
		case ok(ret):
			ev, ok := d.event(data)
			if !ok {
				continue
			}
			select {
			case ch <- ev:
			case <-ctx.Done():
				return
			case <-d.done:
				return
			}
		case ret == gonvml.ERROR_TIMEOUT:
		case ret == gonvml.ERROR_GPU_IS_LOST:
			// NVML does not say which GPU: every watcher probes them
			// and announces each lost one once.
			for _, ev := range d.lostGPUs() {
				if announced[ev.Index] {
					continue
				}
				announced[ev.Index] = true
				select {
				case ch <- ev:
				case <-ctx.Done():
					return
				case <-d.done:
					return
				}
			}
			fallthrough
		default:
			// Back off so that a broken set does not spin.
			select {
			case <-time.After(d.poll):
			case <-ctx.Done():
				return
			case <-d.done:
				return
			}
		}
	}
}

// wait waits on an event set, turning a panic into an error.
func wait(set gonvml.EventSet, ms uint32) (data gonvml.EventData, ret gonvml.Return, err error) {
	defer guard(&err, "waiting for events")
	data, ret = set.Wait(ms)
	return data, ret, nil
}

// event turns NVML event data into a gpu event and records a fatal XID.
func (d *Device) event(data gonvml.EventData) (ev gpu.Event, found bool) {
	var err error
	defer func() {
		if err != nil {
			found = false
		}
	}()
	defer guard(&err, "reading an event")
	if data.EventType&gonvml.EventTypeXidCriticalError == 0 || data.Device == nil {
		return gpu.Event{}, false
	}
	uuid, ret := data.Device.GetUUID()
	if !ok(ret) {
		return gpu.Event{}, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var g *gpuDev
	for _, x := range d.gpus {
		if x.lost == nil && x.uuid == uuid {
			g = x
		}
	}
	if g == nil {
		return gpu.Event{}, false
	}
	xid := int(data.EventData)
	ev = gpu.Event{
		Kind:    gpu.EventXID,
		Index:   g.index,
		UUID:    g.uuid,
		XID:     xid,
		Time:    d.now(),
		Fatal:   FatalXID(xid),
		Message: xidMessage(xid),
	}
	if data.GpuInstanceId != noInstance {
		if ins, err := g.instances(); err == nil {
			for _, in := range ins {
				if in.GIID == int(data.GpuInstanceId) {
					ev.UUID = in.UUID
					ev.Message += fmt.Sprintf(" (MIG instance %s@%d, GI %d)", in.Profile, in.Start, in.GIID)
				}
			}
		}
	}
	if ev.Fatal {
		g.healthy = false
	}
	return ev, true
}

// lostGPUs probes the GPUs after NVML reported one lost, marks those that
// answer ERROR_GPU_IS_LOST and returns an EventLost for every GPU that fell
// off the bus so far.
func (d *Device) lostGPUs() (evs []gpu.Event) {
	defer func() { _ = recover() }() // a probe that panics finds nothing
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, g := range d.gpus {
		if g.lost == nil {
			if _, ret := g.h.GetMemoryInfo(); ret == gonvml.ERROR_GPU_IS_LOST {
				g.lose(ret, fail(ret, g.label(), nil))
			}
		}
		if g.fell {
			evs = append(evs, gpu.Event{
				Kind:    gpu.EventLost,
				Index:   g.index,
				UUID:    g.uuid,
				Time:    d.now(),
				Fatal:   true,
				Message: fmt.Sprintf("%s fell off the bus (NVML: GPU is lost)", g.label()),
			})
		}
	}
	return evs
}
