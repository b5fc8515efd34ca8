// Package slicemetrics declares gpuslice's per-slice Prometheus metrics,
// gpuslice_slice_*, once, with one label set: the server's /metrics
// (standalone, read from the store) and the DRA driver's (Kubernetes,
// read from the prepared claims) export the same series under the same
// names, help and labels. The labels are dcgm-exporter's names for the
// device and its Kubernetes owner, so the series join DCGM's, then
// gpuslice's own for the claim (docs/dashboard.md lists them).
package slicemetrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// GPULabels are dcgm-exporter's labels of a whole GPU: its uuid, its
// index on the node, its product name and the node.
var GPULabels = []string{"UUID", "gpu", "modelName", "Hostname"}

// Labels are the labels of every gpuslice_slice_* series: GPULabels,
// dcgm-exporter's MIG instance labels (GPU_I_PROFILE, GPU_I_ID; empty
// outside MIG) and Kubernetes identity (pod, namespace, container), then
// the claim's tenant, the claim, its request, the device as the slice's
// allocator names it, and the slice: "<claim>/<n>", the claim's n-th
// device, which tells apart two slices of one claim on one device.
var Labels = append(append([]string{}, GPULabels...),
	"GPU_I_PROFILE", "GPU_I_ID", "pod", "namespace", "container", "tenant", "claim", "request", "device", "slice")

// Slice is one slice's label values.
type Slice struct {
	// UUID is the GPU's uuid (a MIG instance's parent's, as DCGM labels
	// it), GPU its index on the node.
	UUID      string
	GPU       int
	ModelName string // the product name NVIDIA's tools print
	Hostname  string // the node
	// Profile and GIID are the MIG instance's profile and GPU instance
	// id ("" outside MIG, and GIID until the instance is known).
	Profile, GIID string
	// Pod, Namespace and Container are the Kubernetes identity ("" in
	// serve, whose claims carry none; Pod is namespace/name, several
	// comma-separated when the claim serves several pods).
	Pod, Namespace, Container string
	Tenant                    string
	// Claim is the claim's id (serve) or ResourceClaim name
	// (Kubernetes); Request the request the device serves.
	Claim, Request string
	// Device is the device's id (serve: the GPU or MIG instance uuid)
	// or DRA device name (Kubernetes: gpu-0-mig-3g-20gb-at-4).
	Device string
	// Index is the device's place among the claim's devices.
	Index int
}

func (s Slice) values() []string {
	return []string{s.UUID, strconv.Itoa(s.GPU), s.ModelName, s.Hostname, s.Profile, s.GIID, s.Pod, s.Namespace, s.Container,
		s.Tenant, s.Claim, s.Request, s.Device, s.Claim + "/" + strconv.Itoa(s.Index)}
}

var (
	memAllocated = prometheus.NewDesc("gpuslice_slice_memory_allocated_bytes",
		"GPU memory promised to a claim on one device (a slice): what it was allocated (on Kubernetes its consumed capacity on a shared GPU, or its config's tighter memory), else the device's memory.", Labels, nil)
	memLimit = prometheus.NewDesc("gpuslice_slice_memory_limit_bytes",
		"The most GPU memory a slice's processes can hold: the MPS pinned-memory limit, the promise under memoryPolicy kill, else the device's memory (MIG instance or GPU).", Labels, nil)
	memUsed = prometheus.NewDesc("gpuslice_slice_memory_used_bytes",
		"GPU memory a slice's processes use, as last measured (the agent's report, split equally among a claim's devices; on Kubernetes the watchdog's last pass, for claims with one device on the node).", Labels, nil)
	compAllocated = prometheus.NewDesc("gpuslice_slice_compute_allocated_ratio",
		"Compute promised to a slice, as a fraction of its whole GPU: its compute share on a shared GPU, the instance's compute slices for MIG, 1 for a whole GPU.", Labels, nil)
	compLimit = prometheus.NewDesc("gpuslice_slice_compute_limit_ratio",
		"The most compute a slice can use, as a fraction of its whole GPU: the MPS active-thread limit of its device, else the device (MIG instance or GPU).", Labels, nil)
	compUsed = prometheus.NewDesc("gpuslice_slice_compute_used_ratio",
		"SM activity of a slice's processes over the last interval, as a fraction of its whole GPU (absent where nothing is sampled: A100 MIG instances).", Labels, nil)
)

// Describe sends the descriptions of the gpuslice_slice_* series Emit
// writes.
func Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{memAllocated, memLimit, memUsed, compAllocated, compLimit, compUsed} {
		ch <- d
	}
}

// Figures are one slice's values: memory in bytes, compute as fractions
// of the whole GPU. The used figures are sent only when measured.
type Figures struct {
	MemoryAllocated, MemoryLimit   float64
	ComputeAllocated, ComputeLimit float64
	MemoryUsed                     *float64
	ComputeUsed                    *float64
}

// Emit sends one slice's series.
func Emit(ch chan<- prometheus.Metric, s Slice, f Figures) {
	lv := s.values()
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lv...)
	}
	gauge(memAllocated, f.MemoryAllocated)
	gauge(memLimit, f.MemoryLimit)
	gauge(compAllocated, f.ComputeAllocated)
	gauge(compLimit, f.ComputeLimit)
	if f.MemoryUsed != nil {
		gauge(memUsed, *f.MemoryUsed)
	}
	if f.ComputeUsed != nil {
		gauge(compUsed, *f.ComputeUsed)
	}
}
