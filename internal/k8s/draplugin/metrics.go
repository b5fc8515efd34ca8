package draplugin

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
	"github.com/gpuslice/gpuslice/internal/mig"
	"github.com/gpuslice/gpuslice/internal/node/watchdog"
	"github.com/gpuslice/gpuslice/internal/slicemetrics"
)

// claimUsage is what the watchdog measured for a claim: memory now, SM
// activity over the last interval and running totals.
type claimUsage struct {
	MemoryMiB        int64
	SMRatio          float64 // of a whole GPU, over the last interval; -1 when not measured
	GPUSeconds       float64
	MemoryMiBSeconds float64
}

// Watch runs the memory watchdog once over the prepared claims (the
// standalone agent's watchdog.Watcher and Enforcer): every process on a
// claim's devices is attributed to a claim, usage is accumulated for the
// metrics, and a claim over its memory is warned about, or under
// memoryPolicy kill has its largest processes killed after the grace
// period. It returns the events (also logged).
func (d *Driver) Watch(ctx context.Context) []api.Event {
	d.mu.Lock()
	defer d.mu.Unlock()
	claims := d.apiClaims()
	start := d.cfg.Clock()
	res := d.node.Watch(ctx, claims, d.cfg.Node)
	for _, err := range res.Errors {
		d.cfg.Log.Warn("watchdog", "err", err)
	}
	dt := d.lastWatchInterval(start)
	for _, u := range res.Usage {
		cu := d.usage[u.Claim]
		cu.MemoryMiB = u.MemoryMiB
		cu.GPUSeconds += u.GPUSeconds
		cu.MemoryMiBSeconds += u.MemoryMiBSeconds
		cu.SMRatio = -1
		if dt > 0 {
			cu.SMRatio = u.SMSeconds / dt
		}
		d.usage[u.Claim] = cu
	}
	events := append(res.Events, res.Enforced...)
	for _, ev := range events {
		d.cfg.Log.Warn("watchdog: "+ev.Kind, "claim", ev.Claim, "message", ev.Message)
	}
	return events
}

// lastWatchInterval is the time since the previous Watch (0 the first time).
func (d *Driver) lastWatchInterval(now time.Time) float64 {
	prev := d.lastWatch
	d.lastWatch = now
	if prev.IsZero() {
		return 0
	}
	return now.Sub(prev).Seconds()
}

// apiClaims turns the prepared claims into the watchdog's claims: the
// claim's uid as its id (GPUSLICE_CLAIM in the CDI environment), the
// namespace as its tenant, each device with the memory promised there.
func (d *Driver) apiClaims() []api.Claim {
	var out []api.Claim
	for _, r := range sortedRecords(d.claims) {
		if r.State != statePrepared {
			continue
		}
		c := api.Claim{ID: r.UID, Tenant: r.Namespace, State: api.Running, Allocation: &alloc.Allocation{Claim: r.UID, Tenant: r.Namespace}}
		for _, dev := range r.Devices {
			if dev.MemoryPolicy != "" {
				c.Spec.MemoryPolicy = dev.MemoryPolicy
			}
			c.Allocation.Devices = append(c.Allocation.Devices, alloc.Assigned{Request: dev.Request, Node: d.cfg.Node,
				GPU: dev.GPU, Device: dev.ID, Profile: dev.Profile, Start: dev.Start, Mode: dev.Mode, MemoryMiB: dev.PromisedMiB})
		}
		out = append(out, c)
	}
	return out
}

var claimLabels = []string{"namespace", "pod", "claim"}

// The per-device series are slicemetrics' (one declaration with the
// server's); these are the driver's per-claim ones.
var (
	descClaimMem = prometheus.NewDesc("gpuslice_slice_claim_memory_used_bytes",
		"GPU memory all processes of a claim use on this node.", claimLabels, nil)
	descGPUSeconds = prometheus.NewDesc("gpuslice_slice_claim_gpu_seconds_total",
		"Seconds a claim had a process on one of its devices, summed over its devices.", claimLabels, nil)
	descMiBSeconds = prometheus.NewDesc("gpuslice_slice_claim_memory_mib_seconds_total",
		"GPU memory a claim's processes held, integrated over time (MiB × seconds).", claimLabels, nil)
)

// Collector exports per-claim, per-device metrics of the prepared claims
// (gpuslice_slice_*), read at scrape time.
func (d *Driver) Collector() prometheus.Collector { return collector{d} }

type collector struct{ d *Driver }

func (collector) Describe(ch chan<- *prometheus.Desc) {
	slicemetrics.Describe(ch)
	for _, x := range []*prometheus.Desc{descClaimMem, descGPUSeconds, descMiBSeconds} {
		ch <- x
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	d := c.d
	d.mu.Lock()
	defer d.mu.Unlock()
	gpus, err := d.cfg.Device.GPUs(context.Background())
	giid := map[string]int{}
	if err == nil {
		for _, g := range gpus {
			for _, in := range g.Instances {
				giid[in.UUID] = in.GIID
			}
		}
	}
	for _, r := range sortedRecords(d.claims) {
		if r.State != statePrepared {
			continue
		}
		pod := strings.Join(r.Pods, ",")
		u, measured := d.usage[r.UID]
		for i, dev := range r.Devices {
			model := d.models[dev.GPUIndex]
			modelName := ""
			if model != nil {
				modelName = productName(model)
			}
			gi := ""
			if id, ok := giid[dev.ID]; ok && dev.Type == dranames.TypeMIG {
				gi = strconv.Itoa(id)
			}
			tenant := dev.Tenant
			if tenant == "" {
				tenant = r.Namespace
			}
			devShare := d.deviceShare(dev)
			limit := dev.MemoryMiB
			switch {
			case dev.PinnedMiB > 0:
				limit = dev.PinnedMiB
			case watchdog.Policy(dev.MemoryPolicy) == watchdog.PolicyKill:
				limit = dev.PromisedMiB
			}
			alloc := devShare
			if dev.Type == dranames.TypeShared {
				alloc = float64(dev.ComputePercent) / 100
			}
			climit := devShare
			if dev.ThreadPercent > 0 {
				climit = devShare * float64(dev.ThreadPercent) / 100
			}
			f := slicemetrics.Figures{MemoryAllocated: float64(dev.PromisedMiB) * mib, MemoryLimit: float64(limit) * mib,
				ComputeAllocated: alloc, ComputeLimit: climit}
			if measured && len(r.Devices) == 1 {
				mem := float64(u.MemoryMiB) * mib
				f.MemoryUsed = &mem
				if u.SMRatio >= 0 {
					sm := u.SMRatio
					f.ComputeUsed = &sm
				}
			}
			slicemetrics.Emit(ch, slicemetrics.Slice{UUID: dev.GPU, GPU: dev.GPUIndex, ModelName: modelName, Hostname: d.cfg.Node,
				Profile: dev.Profile, GIID: gi, Pod: pod, Namespace: r.Namespace, Tenant: tenant, Claim: r.Name,
				Request: dev.Request, Device: dev.Device, Index: i}, f)
		}
		if measured {
			cl := []string{r.Namespace, pod, r.Name}
			ch <- prometheus.MustNewConstMetric(descClaimMem, prometheus.GaugeValue, float64(u.MemoryMiB)*mib, cl...)
			ch <- prometheus.MustNewConstMetric(descGPUSeconds, prometheus.CounterValue, u.GPUSeconds, cl...)
			ch <- prometheus.MustNewConstMetric(descMiBSeconds, prometheus.CounterValue, u.MemoryMiBSeconds, cl...)
		}
	}
}

const mib = 1 << 20

// productName is the name NVIDIA's tools print for a model
// (dcgm-exporter's modelName).
func productName(m *catalog.GPU) string {
	if len(m.ProductNames) > 0 {
		return m.ProductNames[0]
	}
	return m.Name
}

// deviceShare is a device's share of its whole GPU: 1 for a whole GPU,
// the instance's compute slices over the GPU's for MIG.
func (d *Driver) deviceShare(dev preparedDevice) float64 {
	if dev.Type != dranames.TypeMIG {
		return 1
	}
	model := d.models[dev.GPUIndex]
	if model == nil || model.MIG == nil {
		return 0
	}
	geo, err := mig.New(model)
	if err != nil {
		return 0
	}
	p, err := geo.Profile(dev.Profile)
	if err != nil || geo.ComputeSlices == 0 {
		return 0
	}
	return float64(geo.Shapes[p].Compute) / float64(geo.ComputeSlices)
}

// String describes a claim's usage (for logs and tests).
func (u claimUsage) String() string {
	return fmt.Sprintf("%d MiB, %.0f GPU-s, %.0f MiB-s", u.MemoryMiB, u.GPUSeconds, u.MemoryMiBSeconds)
}
