package server

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/slicemetrics"
	"github.com/gpuslice/gpuslice/internal/state"
)

var descGPUMemTotal = prometheus.NewDesc("gpuslice_gpu_memory_total_bytes",
	"Memory of a GPU on a ready node, from the catalog.", slicemetrics.GPULabels, nil)

const mib = 1 << 20

// sliceCollector exports per-slice allocated, limit and used figures
// (slicemetrics), read from the store at scrape time.
type sliceCollector struct{ srv *Server }

func (sliceCollector) Describe(ch chan<- *prometheus.Desc) {
	slicemetrics.Describe(ch)
	ch <- descGPUMemTotal
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
			f := slicemetrics.Figures{MemoryAllocated: float64(d.MemoryMiB * mib), MemoryLimit: float64(memLimit * mib),
				ComputeAllocated: compAlloc, ComputeLimit: compLimit}
			if reported {
				// The agent reports per claim; a claim on several devices
				// is split equally among them.
				mem := float64(u.mib*mib) / float64(n)
				f.MemoryUsed = &mem
				sampled := d.Profile == "" || (gi.model != nil && gi.model.HasGPM())
				if u.hasSM && sampled {
					sm := u.smRatio / float64(n)
					f.ComputeUsed = &sm
				}
			}
			slicemetrics.Emit(ch, slicemetrics.Slice{UUID: gi.gpu.UUID, GPU: gi.gpu.Index, ModelName: modelName(gi), Hostname: gi.node,
				Profile: d.Profile, GIID: giID, Tenant: c.Tenant, Claim: c.ID, Request: d.Request, Device: d.Device, Index: i}, f)
		}
	}
}

// modelName is a GPU's product name as NVIDIA's tools print it (its
// catalog id when the catalog lacks the model).
func modelName(gi gpuInfo) string {
	if gi.model != nil && len(gi.model.ProductNames) > 0 {
		return gi.model.ProductNames[0]
	}
	return gi.gpu.Model
}

func gpuLabelValues(gi gpuInfo) []string {
	return []string{gi.gpu.UUID, strconv.Itoa(gi.gpu.Index), modelName(gi), gi.node}
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
