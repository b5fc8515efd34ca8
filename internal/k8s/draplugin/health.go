package draplugin

import (
	"context"
	"sync"
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
)

// DefaultHealthResend is how often the kubelet's health watchers get the
// full list again when nothing changed (Config.HealthResend).
const DefaultHealthResend = 10 * time.Second

// healthTimeout is the health_check_timeout each device is sent with: three
// resends, in whole seconds (the wire's unit), so the kubelet turns a
// device Unknown only when two resends in a row went missing (a wedged
// driver), never between two on time.
func healthTimeout(resend time.Duration) time.Duration {
	return max(time.Second, (3*resend + time.Second - 1).Truncate(time.Second))
}

// healthHub wakes the kubelet's health watchers (WatchHealthStatus) when the
// devices' health may have changed. A wake-up is a flag, not a message:
// each watcher has a one-slot channel that notify fills without blocking,
// and the watcher reads the current health when it wakes. A watcher that
// does not keep up (a kubelet that stopped reading) so holds up nobody and
// sends the latest health once it moves again, never a backlog.
type healthHub struct {
	mu   sync.Mutex
	subs map[chan struct{}]struct{}
}

// subscribe adds a watcher; cancel removes it.
func (h *healthHub) subscribe() (wake <-chan struct{}, cancel func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	if h.subs == nil {
		h.subs = map[chan struct{}]struct{}{}
	}
	h.subs[ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		delete(h.subs, ch)
		h.mu.Unlock()
	}
}

// notify wakes every watcher; it never blocks.
func (h *healthHub) notify() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs {
		select {
		case ch <- struct{}{}:
		default: // already woken: it will read the latest health
		}
	}
}

// watchers is how many kubelet health streams are open.
func (h *healthHub) watchers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// HealthWatchers reports how many kubelet health streams
// (WatchHealthStatus) are open.
func (d *Driver) HealthWatchers() int { return d.hub.watchers() }

// DeviceHealth is the health of every device the driver publishes, as it
// sends it to the kubelet: dradriver.DeviceHealths over the slices and the
// faults their taints are made of.
func (d *Driver) DeviceHealth() []dradriver.DeviceHealth {
	d.hmu.Lock()
	defer d.hmu.Unlock()
	return dradriver.DeviceHealths(d.slices, d.health, d.watching)
}

// healthReport is DeviceHealth for the kubelet.
func (d *Driver) healthReport() kubeletplugin.DeviceHealthReport {
	now := d.cfg.Clock()
	timeout := healthTimeout(d.cfg.HealthResend)
	hs := d.DeviceHealth()
	rep := kubeletplugin.DeviceHealthReport{Devices: make([]kubeletplugin.DeviceHealth, 0, len(hs))}
	for _, h := range hs {
		rep.Devices = append(rep.Devices, kubeletplugin.DeviceHealth{PoolName: h.Pool, DeviceName: h.Device,
			Health: kubeletplugin.HealthStatus(h.Status), LastUpdated: now, HealthCheckTimeout: timeout, Message: h.Message})
	}
	return rep
}

// WatchHealthStatus serves one kubelet health stream (DRAResourceHealth
// NodeWatchResources, KEP-4680; the helper serves v1 and v1alpha1 from
// it): the full list of the pool's devices (DeviceHealth) at once, again
// whenever the faults, the published devices or the health-event feed
// change, and every Config.HealthResend when nothing does, each device with
// a health_check_timeout of three resends. It returns nil when ctx ends.
// Each stream has its own goroutine and wake-up (healthHub); while the
// kubelet does not take a report, a change replaces it with the latest.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	wake, cancel := d.hub.subscribe()
	defer cancel()
	resend := time.NewTimer(d.cfg.HealthResend)
	defer resend.Stop()
	for {
		rep := d.healthReport()
	send:
		for {
			select {
			case reports <- rep:
				break send
			case <-wake:
				rep = d.healthReport() // drop the stale one for the latest
			case <-ctx.Done():
				return nil
			}
		}
		resend.Reset(d.cfg.HealthResend)
		select {
		case <-wake:
		case <-resend.C:
		case <-ctx.Done():
			return nil
		}
	}
}
