package server

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/state"
)

// sliceLabels are dcgm-exporter's label names, so a query can join these
// series with DCGM_FI_* ones (on UUID, GPU_I_ID), plus the claim's tenant
// and slice ("<claim>/<device index>"). pod, namespace and container are
// empty: a gpuslice claim carries no Kubernetes identity yet.
var sliceLabels = []string{"UUID", "gpu", "modelName", "Hostname", "GPU_I_PROFILE", "GPU_I_ID", "pod", "namespace", "container", "tenant", "slice"}

// gpuLabels are the dcgm-exporter labels of a whole GPU.
var gpuLabels = []string{"UUID", "gpu", "modelName", "Hostname"}

var (
	descSliceMemAlloc = prometheus.NewDesc("gpuslice_slice_memory_allocated_bytes",
		"GPU memory promised to a claim on one device (a slice).", sliceLabels, nil)
	descSliceMemLimit = prometheus.NewDesc("gpuslice_slice_memory_limit_bytes",
		"The most GPU memory a slice's processes can hold: the MPS pinned-memory limit, the promise under memoryPolicy kill, else the device's memory (MIG instance or GPU).", sliceLabels, nil)
	descSliceMemUsed = prometheus.NewDesc("gpuslice_slice_memory_used_bytes",
		"GPU memory a slice's processes use, as its agent last reported.", sliceLabels, nil)
	descSliceCompAlloc = prometheus.NewDesc("gpuslice_slice_compute_allocated_ratio",
		"Compute promised to a slice, as a fraction of its whole GPU (a whole device for exclusive and MIG claims).", sliceLabels, nil)
	descSliceCompLimit = prometheus.NewDesc("gpuslice_slice_compute_limit_ratio",
		"The most compute a slice can use, as a fraction of its whole GPU: the MPS active-thread limit of its device, else the device (MIG instance or GPU).", sliceLabels, nil)
	descSliceCompUsed = prometheus.NewDesc("gpuslice_slice_compute_used_ratio",
		"SM activity of a slice's processes over the last heartbeat interval, as a fraction of its whole GPU (absent where nothing is sampled: A100 MIG instances).", sliceLabels, nil)
	descGPUMemTotal = prometheus.NewDesc("gpuslice_gpu_memory_total_bytes",
		"Memory of a GPU on a ready node, from the catalog.", gpuLabels, nil)
)

const mib = 1 << 20

// sliceCollector exports per-slice allocated, limit and used figures, read
// from the store at scrape time.
type sliceCollector struct{ srv *Server }

func (sliceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSliceMemAlloc, descSliceMemLimit, descSliceMemUsed, descSliceCompAlloc, descSliceCompLimit, descSliceCompUsed, descGPUMemTotal} {
		ch <- d
	}
}

type gpuInfo struct {
	node  string
	gpu   alloc.GPU
	model *catalog.GPU
	gis   map[string]*int // MIG uuid -> GPU instance id, when reported
}

func (sc sliceCollector) Collect(ch chan<- prometheus.Metric) {
	srv := sc.srv
	var claims []api.Claim
	var nodes []api.Node
	err := srv.store.View(srv.ctxForScrape(), func(tx state.Tx) error {
		var err error
		if claims, err = tx.ListClaims(state.ClaimFilter{States: []api.ClaimState{api.Allocated, api.Running}}); err != nil {
			return err
		}
		nodes, err = tx.ListNodes()
		return err
	})
	if err != nil {
		return
	}
	cat := catalog.Default()
	gpus := map[string]gpuInfo{}
	for _, n := range nodes {
		for _, g := range n.Inventory.GPUs {
			gi := gpuInfo{node: n.Name, gpu: g, gis: map[string]*int{}}
			gi.model, _ = cat.GPU(g.Model)
			for _, in := range g.Instances {
				gi.gis[in.UUID] = in.GIID
			}
			gpus[g.UUID] = gi
			if n.State == api.NodeReady && gi.model != nil {
				ch <- prometheus.MustNewConstMetric(descGPUMemTotal, prometheus.GaugeValue, float64(gi.model.MemoryMiB*mib), gpuLabelValues(gi)...)
			}
		}
	}
	used := srv.metrics.usedEntries()
	for _, c := range claims {
		u, reported := used[c.ID]
		n := len(c.Allocation.Devices)
		for i, d := range c.Allocation.Devices {
			gi, ok := gpus[d.GPU]
			if !ok {
				continue
			}
			giID := ""
			if id := gi.gis[d.Device]; id != nil {
				giID = strconv.Itoa(*id)
			}
			lv := append(gpuLabelValues(gi), d.Profile, giID, "", "", "", c.Tenant, c.ID+"/"+strconv.Itoa(i))
			devMiB, devCompute := deviceSize(gi.model, d.Profile)
			memLimit := devMiB
			compLimit := devCompute
			if d.MPS != nil {
				if d.MPS.PinnedMemoryMiB > 0 {
					memLimit = min(memLimit, d.MPS.PinnedMemoryMiB)
				}
				if d.MPS.ActiveThreadPercent > 0 {
					compLimit = devCompute * float64(d.MPS.ActiveThreadPercent) / 100
				}
			}
			if c.Spec.MemoryPolicy == "kill" && d.MemoryMiB > 0 {
				memLimit = min(memLimit, d.MemoryMiB)
			}
			compAlloc := float64(d.ComputePercent) / 100
			if d.Mode == alloc.Exclusive || d.Mode == alloc.MIG {
				compAlloc = devCompute
			}
			gauge := func(desc *prometheus.Desc, v float64) {
				ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, lv...)
			}
			gauge(descSliceMemAlloc, float64(d.MemoryMiB*mib))
			gauge(descSliceMemLimit, float64(memLimit*mib))
			gauge(descSliceCompAlloc, compAlloc)
			gauge(descSliceCompLimit, compLimit)
			if reported {
				// The agent reports per claim; a claim on several devices
				// is split equally among them.
				gauge(descSliceMemUsed, float64(u.mib*mib)/float64(n))
				sampled := d.Profile == "" || (gi.model != nil && gi.model.HasGPM())
				if u.hasSM && sampled {
					gauge(descSliceCompUsed, u.smRatio/float64(n))
				}
			}
		}
	}
}

func gpuLabelValues(gi gpuInfo) []string {
	name := gi.gpu.Model
	if gi.model != nil && len(gi.model.ProductNames) > 0 {
		name = gi.model.ProductNames[0]
	}
	return []string{gi.gpu.UUID, strconv.Itoa(gi.gpu.Index), name, gi.node}
}

// deviceSize is a device's memory (MiB) and compute (fraction of its GPU):
// a MIG instance of profile, or the whole GPU.
func deviceSize(model *catalog.GPU, profile string) (int64, float64) {
	if model == nil {
		return 0, 1
	}
	if profile != "" && model.MIG != nil && model.MIG.ComputeSlices > 0 {
		if p, err := model.Profile(profile); err == nil {
			return p.MemoryMiB, float64(p.ComputeSlices) / float64(model.MIG.ComputeSlices)
		}
	}
	return model.MemoryMiB, 1
}
