package server

import (
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/slicemetrics"
	"github.com/gpuslice/gpuslice/internal/state"
)

// metrics are the server's Prometheus metrics, in a registry of its own
// (no global state). Gauges are computed from the store at scrape time.
type metrics struct {
	srv     *Server
	reg     *prometheus.Registry
	latency prometheus.Histogram
	mu      sync.Mutex
	// usedMiB is what each claim's processes use, as its agent last
	// reported; entries of claims no longer live are dropped at the next
	// scrape.
	usedMiB map[string]usedEntry
	handler http.Handler
	// dropped counts agent events dropped by the rate limit, per node;
	// pruned the events and claims removed past their retention.
	dropped *prometheus.CounterVec
	pruned  *prometheus.CounterVec
}

var (
	descClaims   = prometheus.NewDesc("gpuslice_claims", "Claims by state and tenant.", []string{"state", "tenant"}, nil)
	descPromised = prometheus.NewDesc("gpuslice_device_memory_promised_mib", "GPU memory promised to claims, per device.", []string{"node", "device", "mode"}, nil)
	descCompute  = prometheus.NewDesc("gpuslice_device_compute_promised_percent", "Compute promised to claims, per device (percent of a whole GPU).", []string{"node", "device", "mode"}, nil)
	descUsed     = prometheus.NewDesc("gpuslice_device_memory_used_mib", "GPU memory the claims' processes use, as agents report it.", []string{"node", "device", "tenant"}, nil)
	descTenant   = prometheus.NewDesc("gpuslice_tenant_memory_mib", "GPU memory held by a tenant's live claims.", []string{"tenant"}, nil)
	descTenantC  = prometheus.NewDesc("gpuslice_tenant_compute_percent", "Compute held by a tenant's live claims.", []string{"tenant"}, nil)
	descGPUSec   = prometheus.NewDesc("gpuslice_tenant_gpu_seconds_total", "GPU-seconds used by a tenant (agent samples).", []string{"tenant"}, nil)
	descSMSec    = prometheus.NewDesc("gpuslice_tenant_sm_seconds_total", "SM activity of a tenant's processes in whole-GPU seconds (per-process samples; none on MIG instances).", []string{"tenant"}, nil)
	descMemSec   = prometheus.NewDesc("gpuslice_tenant_memory_mib_seconds_total", "GPU memory held by a tenant's processes, MiB × seconds (agent samples).", []string{"tenant"}, nil)
	descPending  = prometheus.NewDesc("gpuslice_pending_claims", "Pending claims by the first reason the allocator gave.", []string{"reason"}, nil)
	descNodes    = prometheus.NewDesc("gpuslice_nodes", "Nodes by state.", []string{"state"}, nil)
	// One meaning per label name across /metrics: UUID is a GPU's uuid,
	// gpu its index on the node (dcgm-exporter's names, as the slice
	// series use them), Hostname its node.
	descHealthy = prometheus.NewDesc("gpuslice_gpu_healthy", "1 when a GPU is healthy, 0 after a fatal XID or loss, as its agent reports.", slicemetrics.GPULabels, nil)
)

type usedEntry struct {
	node, device, tenant string
	mib                  int64
	// smRatio is the claim's SM activity over the last heartbeat's
	// interval, in whole GPUs; hasSM is false when none was measured.
	smRatio float64
	hasSM   bool
}

func newMetrics(srv *Server) *metrics {
	m := &metrics{srv: srv, reg: prometheus.NewRegistry(), usedMiB: map[string]usedEntry{}}
	m.latency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gpuslice_allocation_latency_seconds",
		Help: "Time to decide and reserve an allocation.", Buckets: prometheus.ExponentialBuckets(1e-5, 4, 10)})
	m.dropped = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpuslice_agent_events_dropped_total",
		Help: "Events from a node's agent dropped by the per-node rate limit."}, []string{"node"})
	m.pruned = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpuslice_pruned_total",
		Help: "Events and final claims removed past their retention (age or count)."}, []string{"kind"})
	m.reg.MustRegister(m.latency, m.dropped, m.pruned, m, sliceCollector{srv}, prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	return m
}

func (m *metrics) observeAllocation(d time.Duration) { m.latency.Observe(d.Seconds()) }

func (m *metrics) observeDropped(node string, n int) { m.dropped.WithLabelValues(node).Add(float64(n)) }

func (m *metrics) observePruned(p Pruned) {
	m.pruned.WithLabelValues("events").Add(float64(p.Events))
	m.pruned.WithLabelValues("claims").Add(float64(p.Claims))
}

func (m *metrics) observeUsed(node string, c api.Claim, mib int64, used api.Consumption, elapsed time.Duration) {
	if c.Allocation == nil || len(c.Allocation.Devices) == 0 {
		return
	}
	e := usedEntry{node: node, device: c.Allocation.Devices[0].Device, tenant: c.Tenant, mib: mib}
	if used.GPUSeconds > 0 && elapsed > 0 {
		e.smRatio, e.hasSM = used.SMSeconds/elapsed.Seconds(), true
	}
	m.mu.Lock()
	m.usedMiB[c.ID] = e
	m.mu.Unlock()
}

// usedByClaim is each claim's memory in use as its agent last reported
// (claims released since may still be there until the next scrape).
func (m *metrics) usedByClaim() map[string]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]int64, len(m.usedMiB))
	for id, u := range m.usedMiB {
		out[id] = u.mib
	}
	return out
}

// usedEntries copies what agents last reported, by claim.
func (m *metrics) usedEntries() map[string]usedEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]usedEntry, len(m.usedMiB))
	for id, u := range m.usedMiB {
		out[id] = u
	}
	return out
}

func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descClaims, descPromised, descCompute, descUsed, descTenant, descTenantC, descGPUSec, descSMSec, descMemSec, descPending, descNodes, descHealthy} {
		ch <- d
	}
}

// Collect reads the store once per scrape.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	var claims []api.Claim
	var nodes []api.Node
	var tenants []api.Tenant
	usage := map[string]api.Usage{}
	err := m.srv.store.View(m.srv.ctxForScrape(), func(tx state.Tx) error {
		var err error
		if claims, err = tx.ListClaims(state.ClaimFilter{States: []api.ClaimState{api.Pending, api.Allocated, api.Running}}); err != nil {
			return err
		}
		if nodes, err = tx.ListNodes(); err != nil {
			return err
		}
		if tenants, err = tx.ListTenants(); err != nil {
			return err
		}
		for _, t := range tenants {
			if usage[t.Name], err = tx.Usage(t.Name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return
	}
	byState := map[[2]string]int{}
	type dev struct{ node, device, mode string }
	mem, comp := map[dev]float64{}, map[dev]float64{}
	tmem, tcomp := map[string]float64{}, map[string]float64{}
	for _, c := range claims {
		byState[[2]string{string(c.State), c.Tenant}]++
		if c.Allocation == nil {
			continue
		}
		for _, d := range c.Allocation.Devices {
			k := dev{d.Node, d.Device, string(d.Mode)}
			mem[k] += float64(d.MemoryMiB)
			comp[k] += float64(d.ComputePercent)
			tmem[c.Tenant] += float64(d.MemoryMiB)
			tcomp[c.Tenant] += float64(d.ComputePercent)
		}
	}
	for k, n := range byState {
		ch <- prometheus.MustNewConstMetric(descClaims, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
	for k, v := range mem {
		ch <- prometheus.MustNewConstMetric(descPromised, prometheus.GaugeValue, v, k.node, k.device, k.mode)
		ch <- prometheus.MustNewConstMetric(descCompute, prometheus.GaugeValue, comp[k], k.node, k.device, k.mode)
	}
	for _, t := range tenants {
		ch <- prometheus.MustNewConstMetric(descTenant, prometheus.GaugeValue, tmem[t.Name], t.Name)
		ch <- prometheus.MustNewConstMetric(descTenantC, prometheus.GaugeValue, tcomp[t.Name], t.Name)
		ch <- prometheus.MustNewConstMetric(descGPUSec, prometheus.CounterValue, usage[t.Name].GPUSeconds, t.Name)
		ch <- prometheus.MustNewConstMetric(descSMSec, prometheus.CounterValue, usage[t.Name].SMSeconds, t.Name)
		ch <- prometheus.MustNewConstMetric(descMemSec, prometheus.CounterValue, usage[t.Name].MemoryMiBSec, t.Name)
	}
	live := map[string]bool{}
	for _, c := range claims {
		live[c.ID] = c.State == api.Allocated || c.State == api.Running
	}
	used := map[[3]string]int64{}
	m.mu.Lock()
	for id, u := range m.usedMiB {
		if !live[id] { // released or failed since: its memory is free
			delete(m.usedMiB, id)
			continue
		}
		used[[3]string{u.node, u.device, u.tenant}] += u.mib
	}
	m.mu.Unlock()
	for k, v := range used {
		ch <- prometheus.MustNewConstMetric(descUsed, prometheus.GaugeValue, float64(v), k[0], k[1], k[2])
	}
	reasons := map[string]int{}
	m.srv.sched.mu.Lock()
	for _, c := range m.srv.sched.pending {
		reasons[firstReason(m.srv.sched.reasons[c.ID])]++
	}
	m.srv.sched.mu.Unlock()
	for r, n := range reasons {
		ch <- prometheus.MustNewConstMetric(descPending, prometheus.GaugeValue, float64(n), r)
	}
	ns := map[api.NodeState]int{}
	for _, n := range nodes {
		ns[n.State]++
		for _, g := range n.Inventory.GPUs {
			v := 0.0
			if g.Healthy {
				v = 1
			}
			gi := gpuInfo{node: n.Name, gpu: g}
			gi.model, _ = catalog.Default().GPU(g.Model)
			ch <- prometheus.MustNewConstMetric(descHealthy, prometheus.GaugeValue, v, gpuLabelValues(gi)...)
		}
	}
	for s, n := range ns {
		ch <- prometheus.MustNewConstMetric(descNodes, prometheus.GaugeValue, float64(n), string(s))
	}
}

// firstReason keeps the most frequent reason of a no-fit message
// ("0/3 nodes are available: 2 insufficient GPU memory, 1 ...").
func firstReason(msg string) string {
	const marker = "nodes are available: "
	for i := 0; i+len(marker) <= len(msg); i++ {
		if msg[i:i+len(marker)] == marker {
			rest := msg[i+len(marker):]
			for j := 0; j < len(rest); j++ {
				if rest[j] == ',' {
					rest = rest[:j]
					break
				}
			}
			// drop the leading count
			for j := 0; j < len(rest); j++ {
				if rest[j] == ' ' {
					return rest[j+1:]
				}
			}
			return rest
		}
	}
	if msg == "" {
		return "not tried yet"
	}
	return "other"
}

func (srv *Server) serveMetrics(w http.ResponseWriter, r *http.Request, p principal) {
	srv.metrics.handler.ServeHTTP(w, r)
}
