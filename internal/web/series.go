package web

import (
	"math"
	"sync"
	"time"
)

// Sample is the fleet at one moment, for the dashboard's charts.
type Sample struct {
	Time time.Time `json:"time"`
	// GPUs and GPUsInUse count healthy GPUs on ready nodes, and those of
	// them with at least one live claim.
	GPUs      int `json:"gpus"`
	GPUsInUse int `json:"gpusInUse"`
	// MemoryMiB is the memory of those GPUs; MemoryPromisedMiB what live
	// claims were promised; MemoryUsedMiB what their processes use, as
	// agents last reported.
	MemoryMiB         int64 `json:"memoryMiB"`
	MemoryPromisedMiB int64 `json:"memoryPromisedMiB"`
	MemoryUsedMiB     int64 `json:"memoryUsedMiB"`
	// ComputePromised is the compute promised to live claims in whole GPUs.
	ComputePromised float64 `json:"computePromised"`
	Pending         int     `json:"pending"`
	// Tenants holds each tenant's figures.
	Tenants map[string]TenantSample `json:"tenants"`
}

// TenantSample is one tenant's figures in a Sample; the usage counters are
// cumulative, as the store keeps them.
type TenantSample struct {
	GPUSeconds       float64 `json:"gpuSeconds"`
	MemoryMiBSeconds float64 `json:"memoryMiBSeconds"`
	MemoryMiB        int64   `json:"memoryMiB"`
	Pending          int     `json:"pending"`
	Running          int     `json:"running"`
}

// Series keeps the last samples in a ring of fixed size: memory stays
// bounded however long the server runs. Safe for concurrent use.
type Series struct {
	mu   sync.Mutex
	buf  []Sample
	next int
	full bool
}

// NewSeries keeps the last n samples (n ≥ 1).
func NewSeries(n int) *Series {
	return &Series{buf: make([]Sample, max(n, 1))}
}

// Add records a sample, dropping the oldest when the ring is full.
func (s *Series) Add(x Sample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf[s.next] = x
	s.next++
	if s.next == len(s.buf) {
		s.next, s.full = 0, true
	}
}

// Len is how many samples are kept.
func (s *Series) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.full {
		return len(s.buf)
	}
	return s.next
}

// Since returns the samples taken after t, oldest first, each passed
// through view (which may drop what the viewer must not see).
func (s *Series) Since(t time.Time, view func(Sample) Sample) []Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []Sample{}
	add := func(x Sample) {
		if x.Time.After(t) {
			if view != nil {
				x = view(x)
			}
			out = append(out, x)
		}
	}
	if s.full {
		for _, x := range s.buf[s.next:] {
			add(x)
		}
	}
	for _, x := range s.buf[:s.next] {
		add(x)
	}
	return out
}

// ForTenant is the view a tenant gets of a sample: fleet-wide totals
// (no other tenant is named in them) with its own figures only, and its
// own pending claims as the pending count.
func ForTenant(tenant string) func(Sample) Sample {
	return func(x Sample) Sample {
		own, ok := x.Tenants[tenant]
		x.Tenants = map[string]TenantSample{}
		x.Pending = 0
		if ok {
			x.Tenants[tenant] = own
			x.Pending = own.Pending
		}
		return x
	}
}

// Thin keeps at most n of samples, evenly spaced, always the newest: a
// chart has no use for more points than it has pixels. Cumulative
// counters stay exact at the points kept.
func Thin(samples []Sample, n int) []Sample {
	if n <= 0 || len(samples) <= n {
		return samples
	}
	out := make([]Sample, 0, n)
	step := float64(len(samples)-1) / float64(n-1)
	for i := 0; i < n; i++ {
		out = append(out, samples[int(math.Round(float64(i)*step))])
	}
	return out
}

// OnlyTenants is the view of a sample that keeps the named tenants'
// figures and the fleet-wide totals.
func OnlyTenants(names []string) func(Sample) Sample {
	return func(x Sample) Sample {
		keep := make(map[string]TenantSample, len(names))
		for _, n := range names {
			if t, ok := x.Tenants[n]; ok {
				keep[n] = t
			}
		}
		x.Tenants = keep
		return x
	}
}

// GPUPoint is one GPU at one sample: memory promised to its live claims
// and used by their processes (-1: not reported).
type GPUPoint struct {
	Time        time.Time `json:"time"`
	PromisedMiB int64     `json:"promisedMiB"`
	UsedMiB     int64     `json:"usedMiB"`
}

// GPUHistory keeps the last points of every GPU in rings of fixed size
// (a GPU that leaves the fleet is forgotten at the next Record): memory
// stays bounded by GPUs × length. Safe for concurrent use.
type GPUHistory struct {
	mu   sync.Mutex
	n    int
	gpus map[string]*gpuRing
}

type gpuRing struct {
	t              []int64 // unix ms
	promised, used []int32 // MiB
	next           int
	full           bool
}

// NewGPUHistory keeps the last n points of each GPU (n ≥ 1).
func NewGPUHistory(n int) *GPUHistory {
	return &GPUHistory{n: max(n, 1), gpus: map[string]*gpuRing{}}
}

// Record adds a point for every GPU of the fleet at t.
func (h *GPUHistory) Record(t time.Time, f Fleet) {
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := make(map[string]bool, len(h.gpus))
	for _, n := range f.Nodes {
		for _, g := range n.GPUs {
			seen[g.UUID] = true
			r := h.gpus[g.UUID]
			if r == nil {
				r = &gpuRing{t: make([]int64, h.n), promised: make([]int32, h.n), used: make([]int32, h.n)}
				h.gpus[g.UUID] = r
			}
			u := Use(g)
			r.t[r.next], r.promised[r.next], r.used[r.next] = t.UnixMilli(), clamp32(u.PromisedMiB), clamp32(u.UsedMiB)
			if r.next++; r.next == h.n {
				r.next, r.full = 0, true
			}
		}
	}
	for uuid := range h.gpus {
		if !seen[uuid] {
			delete(h.gpus, uuid)
		}
	}
}

func clamp32(v int64) int32 { return int32(max(min(v, math.MaxInt32), math.MinInt32)) }

// Of returns a GPU's points, oldest first (none for an unknown GPU).
func (h *GPUHistory) Of(uuid string) []GPUPoint {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := []GPUPoint{}
	r := h.gpus[uuid]
	if r == nil {
		return out
	}
	add := func(i int) {
		out = append(out, GPUPoint{Time: time.UnixMilli(r.t[i]).UTC(), PromisedMiB: int64(r.promised[i]), UsedMiB: int64(r.used[i])})
	}
	if r.full {
		for i := r.next; i < h.n; i++ {
			add(i)
		}
	}
	for i := 0; i < r.next; i++ {
		add(i)
	}
	return out
}
