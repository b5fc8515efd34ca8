package drabench

import (
	"fmt"
	"runtime/debug"
	"time"
)

// UpstreamModule is the module path of the upstream allocator, and
// upstreamPinned the version go.mod requires (a test keeps them in step);
// UpstreamVersion reports it where the binary has no module information.
const (
	UpstreamModule = "k8s.io/dynamic-resource-allocation"
	upstreamPinned = "v0.37.2"
)

// Side is one allocator's measurement.
type Side struct {
	// Decisions is how many claims were decided (all of them fit).
	Decisions int `json:"decisions"`
	// Elapsed is the time spent deciding, fixture building and the
	// emptying of the fleet between fills excluded.
	Elapsed         time.Duration `json:"elapsed"`
	PerDecision     time.Duration `json:"perDecision"`
	DecisionsPerSec float64       `json:"decisionsPerSec"`
}

// Result is the outcome of Compare.
type Result struct {
	GPUs  int `json:"gpus"`
	Nodes int `json:"nodes"`
	// Claims is the number of decisions each side made; the fleet is
	// emptied (untimed) whenever a fill of FillFraction of it is done.
	Claims   int  `json:"claims"`
	GPUSlice Side `json:"gpuslice"`
	Upstream Side `json:"upstream"`
	// Ratio is gpuslice's decisions/s over upstream's.
	Ratio float64 `json:"ratio"`
	// UpstreamNodeCalls is the mean number of per-node Allocate calls one
	// upstream decision made (first-fit over nodes).
	UpstreamNodeCalls float64 `json:"upstreamNodeCalls"`
	// UpstreamPerNodeCall is the upstream time per per-node Allocate call
	// (NewAllocator and the commit spread over them).
	UpstreamPerNodeCall time.Duration `json:"upstreamPerNodeCall"`
	// UpstreamVersion is the version of UpstreamModule linked in.
	UpstreamVersion string `json:"upstreamVersion"`
}

// Compare builds a fleet of gpus GPUs (a multiple of GPUsPerNode) for both
// allocators and has each decide the same sequence of one-GPU claims,
// in one process. claims <= 0 means one fill (FillFraction of the
// GPUs); more than a fill empties the fleet and starts the sequence again.
func Compare(gpus int, claims int) (Result, error) {
	f, err := newFleetSpec(gpus, 0)
	if err != nil {
		return Result{}, err
	}
	if claims <= 0 {
		claims = len(f.claims)
	}
	// Enough claims to ask for every model at least once.
	warm := 0
	for seen := map[string]bool{}; warm < len(f.claims) && len(seen) < len(uniqueModels()); warm++ {
		seen[f.claims[warm]] = true
	}
	r := Result{GPUs: gpus, Nodes: len(f.nodes), Claims: claims, UpstreamVersion: UpstreamVersion()}
	g, err := newGPUSliceSide(f)
	if err != nil {
		return Result{}, fmt.Errorf("gpuslice fleet: %w", err)
	}
	if err := warmUp(g, warm); err != nil {
		return Result{}, fmt.Errorf("gpuslice: %w", err)
	}
	if r.GPUSlice, err = measure(g, len(f.claims), claims); err != nil {
		return Result{}, fmt.Errorf("gpuslice: %w", err)
	}
	u, err := newUpstreamSide(f)
	if err != nil {
		return Result{}, fmt.Errorf("upstream fleet: %w", err)
	}
	if err := warmUp(u, warm); err != nil {
		return Result{}, fmt.Errorf("upstream: %w", err)
	}
	calls0 := u.calls
	if r.Upstream, err = measure(u, len(f.claims), claims); err != nil {
		return Result{}, fmt.Errorf("upstream: %w", err)
	}
	calls := u.calls - calls0
	r.UpstreamNodeCalls = float64(calls) / float64(claims)
	if calls > 0 {
		r.UpstreamPerNodeCall = r.Upstream.Elapsed / time.Duration(calls)
	}
	if r.Upstream.DecisionsPerSec > 0 {
		r.Ratio = r.GPUSlice.DecisionsPerSec / r.Upstream.DecisionsPerSec
	}
	return r, nil
}

// warmUp decides the first n claims (compiling each selector once), then
// empties the fleet.
func warmUp(d decider, n int) error {
	for i := range n {
		if _, err := d.decide(i); err != nil {
			return err
		}
	}
	return d.reset()
}

// measure makes n decisions, cycling through a sequence of fill claims and
// emptying the fleet between cycles; only the decisions are timed.
func measure(d decider, fill, n int) (Side, error) {
	var s Side
	pos := 0
	start := time.Now()
	for range n {
		if pos == fill {
			s.Elapsed += time.Since(start)
			if err := d.reset(); err != nil {
				return s, err
			}
			pos = 0
			start = time.Now()
		}
		ok, err := d.decide(pos)
		if err != nil {
			return s, err
		}
		if !ok {
			return s, fmt.Errorf("claim %d of a fill did not fit", pos)
		}
		pos++
		s.Decisions++
	}
	s.Elapsed += time.Since(start)
	if err := d.reset(); err != nil {
		return s, err
	}
	if s.Decisions > 0 {
		s.PerDecision = s.Elapsed / time.Duration(s.Decisions)
		s.DecisionsPerSec = float64(s.Decisions) / s.Elapsed.Seconds()
	}
	return s, nil
}

// UpstreamVersion is the version of UpstreamModule in this binary's build
// information (test binaries have none: then the version go.mod pins).
func UpstreamVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == UpstreamModule {
				if m.Replace != nil {
					return m.Replace.Version
				}
				return m.Version
			}
		}
	}
	return upstreamPinned
}
