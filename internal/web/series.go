package web

import (
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
