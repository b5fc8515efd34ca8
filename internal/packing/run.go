package packing

import (
	"fmt"
	"sort"
	"strings"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
)

// Method names a way of placing claims.
type Method string

// The methods a Report compares. GPUSlicePlan and FirstFitDecreasing know
// every claim in advance (a capacity plan); the others take the claims one
// by one in arrival order (a running cluster).
const (
	GPUSlicePlan       Method = "gpuslice-plan"
	GPUSlice           Method = "gpuslice"
	WholeGPU           Method = "whole-gpu"
	TimeSlice          Method = "timeslice"
	StaticMIG          Method = "static-mig"
	FirstFit           Method = "first-fit"
	FirstFitDecreasing Method = "ffd"
)

// Methods lists the methods in report order.
var Methods = []Method{GPUSlicePlan, GPUSlice, WholeGPU, TimeSlice, StaticMIG, FirstFit, FirstFitDecreasing}

// Result is how one method placed a mix.
type Result struct {
	Method Method
	// Applicable is false when the method cannot serve the mix at all
	// (static MIG on a model without MIG); GPUs is then 0.
	Applicable bool
	GPUs       int
	// Ratio is GPUs ÷ LowerBound and IsolationRatio GPUs ÷
	// IsolationLowerBound (0 when not applicable).
	Ratio          float64
	IsolationRatio float64
	// Overcommitted counts devices promised more memory than they have.
	Overcommitted int
	Note          string
}

// Report is the outcome of one mix and seed.
type Report struct {
	Mix     string
	GPU     string
	Seed    uint64
	Claims  int
	Tenants int
	// ByKind counts the claims of each kind.
	ByKind map[Kind]int
	Bounds Bounds
	// LowerBound and IsolationLowerBound repeat Bounds' for convenience.
	LowerBound          int
	IsolationLowerBound int
	Results             []Result
	// Online and Planned are how gpuslice used the GPUs: claims in arrival
	// order with Allocate, and as a plan (see Passes).
	Online, Planned Detail
}

// Detail is where one gpuslice run put the claims.
type Detail struct {
	// Fleet is how many GPUs the simulated fleet had.
	Fleet int
	// Devices summarises the devices in use by shape and mode.
	Devices []DeviceStats
	// Usage is how full the GPUs are.
	Usage Usage
	// Check is the allocator's State.Check after the last claim (nil: no
	// rule broken); Violation is its text, for JSON.
	Check     error  `json:"-"`
	Violation string `json:"violation,omitempty"`
}

// DeviceStats summarises gpuslice's devices of one shape ("whole" or a MIG
// profile) and mode: how many, how many claims they serve, and how much of
// their memory and compute is promised (Fill, 0..1, over all of them).
type DeviceStats struct {
	Shape    string
	Mode     alloc.Mode
	Devices  int
	Claims   int
	MemFill  float64
	CompFill float64
}

// Usage is where gpuslice's GPUs go. On MIG models MemorySlices and
// ComputeSlices are the slices held by instances in use out of GPUs × S
// and GPUs × C (a whole-GPU device holds all of them); PromisedMiB and
// PromisedCompute are what the claims were promised, DeviceMiB and
// DeviceCompute what their devices have (the difference is rounding to
// device sizes and unused shares of shared devices).
type Usage struct {
	GPUs                           int
	MemorySlices, ComputeSlices    int
	TotalSlices, TotalCompute      int
	PromisedMiB, DeviceMiB         int64
	PromisedCompute, DeviceCompute int
}

// Result returns the result of method m.
func (r *Report) Result(m Method) Result {
	for _, x := range r.Results {
		if x.Method == m {
			return x
		}
	}
	return Result{Method: m}
}

// Run expands a mix for a seed and places it with gpuslice (online and
// planned) and every baseline. It fails when a claim cannot be placed by
// gpuslice on a fleet twice the size of the whole-GPU baseline, or when
// the mix is invalid; a broken allocator rule is reported in the Detail's
// Check (and as overcommitted devices), not as an error.
func Run(mix Mix, seed uint64) (Report, error) {
	model, err := catalog.Default().GPU(mix.GPU)
	if err != nil {
		return Report{}, fmt.Errorf("mix %s: %w", mix.Name, err)
	}
	claims, err := mix.Claims(seed)
	if err != nil {
		return Report{}, err
	}
	rep := Report{Mix: mix.Name, GPU: model.ID, Seed: seed, Claims: len(claims), ByKind: map[Kind]int{}}
	tenants := map[string]bool{}
	for i := range claims {
		tenants[claims[i].Tenant] = true
		rep.ByKind[kindOf(&claims[i])]++
	}
	rep.Tenants = len(tenants)
	rep.Bounds = LowerBounds(model, claims)
	rep.LowerBound, rep.IsolationLowerBound = rep.Bounds.LowerBound, rep.Bounds.IsolationLowerBound

	planned, err := runGPUSlice(model, claims, true, &rep.Planned)
	if err != nil {
		return rep, fmt.Errorf("mix %s seed %d: %w", mix.Name, seed, err)
	}
	online, err := runGPUSlice(model, claims, false, &rep.Online)
	if err != nil {
		return rep, fmt.Errorf("mix %s seed %d: %w", mix.Name, seed, err)
	}
	sm, err := staticMIG(model, claims, mix.StaticMIG)
	if err != nil {
		return rep, fmt.Errorf("mix %s: %w", mix.Name, err)
	}
	sorted := append([]alloc.Claim(nil), claims...)
	alloc.SortForPlacement(sorted)
	ffd := firstFit(model, sorted)
	ffd.Method, ffd.Note = FirstFitDecreasing, "first-fit over the claims sorted biggest first (a plan)"
	rep.Results = []Result{planned, online, wholeGPU(claims), timeSlicing(model, claims, mix.Replicas()), sm,
		firstFit(model, claims), ffd}
	for i := range rep.Results {
		x := &rep.Results[i]
		if x.Applicable && rep.LowerBound > 0 {
			x.Ratio = float64(x.GPUs) / float64(rep.LowerBound)
			x.IsolationRatio = float64(x.GPUs) / float64(rep.IsolationLowerBound)
		}
	}
	return rep, nil
}

func kindOf(c *alloc.Claim) Kind {
	r := &c.Requests[0]
	switch {
	case r.Profile != "":
		return MIGRequest
	case r.Workload == alloc.WorkloadInference:
		return Inference
	case r.Workload == alloc.WorkloadBatch:
		return Batch
	}
	return Notebook
}

// fleetFor builds a fleet of n GPUs of model m, eight per node, every GPU
// dynamically shared and, when the model has MIG, in dynamic MIG mode.
func fleetFor(m *catalog.GPU, n int) alloc.Fleet {
	const perNode = 8
	var f alloc.Fleet
	f.Policy = alloc.Policy{Placement: "binpack"}
	for ni := 0; ni*perNode < n; ni++ {
		node := alloc.Node{Name: fmt.Sprintf("node-%03d", ni)}
		for gi := 0; gi < perNode && ni*perNode+gi < n; gi++ {
			g := alloc.GPU{UUID: fmt.Sprintf("GPU-%03d-%d", ni, gi), Index: gi, Model: m.ID, Healthy: true,
				Sharing: alloc.Sharing{Mode: alloc.Dynamic}}
			if m.MIG != nil {
				g.MIGEnabled, g.DynamicMIG = true, true
			}
			node.GPUs = append(node.GPUs, g)
		}
		f.Nodes = append(f.Nodes, node)
	}
	return f
}

// Passes is how many passes gpuslice-plan makes: the first in
// SortForPlacement order, each next in the RefineOrder of the one before;
// the pass using the fewest GPUs is kept (the first on ties).
const Passes = 4

// runGPUSlice places the claims with the real allocator: online, one by
// one in arrival order with Allocate; planned, as a plan does (see Passes
// and alloc.State.PlaceAll).
func runGPUSlice(m *catalog.GPU, claims []alloc.Claim, planned bool, det *Detail) (Result, error) {
	det.Fleet = max(2*len(claims), 8)
	fresh := func() (*alloc.State, error) { return alloc.NewState(fleetFor(m, det.Fleet), nil, alloc.Options{}) }
	var s *alloc.State
	if planned {
		order := append([]alloc.Claim(nil), claims...)
		alloc.SortForPlacement(order)
		best := -1
		for pass := range Passes {
			st, err := fresh()
			if err != nil {
				return Result{}, err
			}
			if _, err := st.PlaceAll(order); err != nil {
				return Result{}, fmt.Errorf("gpuslice-plan pass %d: %w", pass+1, err)
			}
			if n := st.GPUsUsed(); best < 0 || n < best {
				s, best = st, n
			}
			order = st.RefineOrder(order)
		}
	} else {
		var err error
		if s, err = fresh(); err != nil {
			return Result{}, err
		}
		for i := range claims {
			a, err := s.Allocate(&claims[i])
			if err != nil {
				return Result{}, fmt.Errorf("gpuslice: %w", err)
			}
			if err := s.Apply(a); err != nil {
				return Result{}, fmt.Errorf("gpuslice: apply %s: %w", claims[i].Name, err)
			}
		}
	}
	if det.Check = s.Check(); det.Check != nil {
		det.Violation = det.Check.Error()
	}
	res, err := summarise(m, s, det)
	if planned {
		res.Method = GPUSlicePlan
	}
	return res, err
}

// summarise counts the GPUs gpuslice used, re-adds every device's
// promises from the allocations (a second check, independent of
// State.Check) and fills the report's device statistics.
func summarise(m *catalog.GPU, s *alloc.State, det *Detail) (Result, error) {
	slices, cslices, _ := geometryOf(m)
	type dev struct {
		shape      string
		mode       alloc.Mode
		mem, cap   int64
		comp, ccap int
		ms, cs     int
		claims     int
	}
	used := map[string]bool{}
	devs := map[string]*dev{}
	names := make([]string, 0, len(s.Allocations()))
	for name := range s.Allocations() {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		for _, d := range s.Allocations()[name].Devices {
			used[d.GPU] = true
			u := devs[d.Device]
			if u == nil {
				u = &dev{shape: "whole", mode: d.Mode, cap: m.MemoryMiB, ccap: 100, ms: int(slices), cs: int(cslices)}
				if d.Profile != "" {
					p, err := m.Profile(d.Profile)
					if err != nil {
						return Result{}, err
					}
					u.shape, u.cap, u.ccap = p.Name, p.MemoryMiB, p.ComputeSlices*100/m.MIG.ComputeSlices
					u.ms, u.cs = p.MemorySlices, p.ComputeSlices
				}
				devs[d.Device] = u
			}
			u.mem += d.MemoryMiB
			u.comp += d.ComputePercent
			u.claims++
		}
	}
	over := 0
	type key struct {
		shape string
		mode  alloc.Mode
	}
	stats := map[key]*DeviceStats{}
	fill := map[key]*[4]float64{}
	us := Usage{GPUs: len(used), TotalSlices: len(used) * int(slices), TotalCompute: len(used) * int(cslices)}
	for _, u := range devs {
		if u.mem > u.cap || u.comp > u.ccap {
			over++
		}
		k := key{u.shape, u.mode}
		st := stats[k]
		if st == nil {
			st = &DeviceStats{Shape: u.shape, Mode: u.mode}
			stats[k], fill[k] = st, &[4]float64{}
		}
		st.Devices++
		st.Claims += u.claims
		f := fill[k]
		f[0] += float64(u.mem)
		f[1] += float64(u.cap)
		f[2] += float64(u.comp)
		f[3] += float64(u.ccap)
		us.MemorySlices += u.ms
		us.ComputeSlices += u.cs
		us.PromisedMiB += u.mem
		us.DeviceMiB += u.cap
		us.PromisedCompute += u.comp
		us.DeviceCompute += u.ccap
	}
	if det.Check != nil && over == 0 {
		over = -1 // a rule broke that the recount cannot see; never report 0
	}
	det.Devices = det.Devices[:0]
	for k, st := range stats {
		f := fill[k]
		st.MemFill, st.CompFill = f[0]/f[1], f[2]/max(f[3], 1)
		det.Devices = append(det.Devices, *st)
	}
	sort.Slice(det.Devices, func(i, j int) bool {
		a, b := det.Devices[i], det.Devices[j]
		if a.Shape != b.Shape {
			return a.Shape < b.Shape
		}
		return a.Mode < b.Mode
	})
	det.Usage = us
	return Result{Method: GPUSlice, Applicable: true, GPUs: len(used), Overcommitted: over,
		Note: fmt.Sprintf("%d devices on a %d-GPU fleet", len(devs), det.Fleet)}, nil
}

// Table renders the report as a fixed-width text table.
func (r *Report) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "mix %s (%s), seed %d: %d claims from %d tenants (%s)\n", r.Mix, r.GPU, r.Seed, r.Claims, r.Tenants, r.kinds())
	bd := r.Bounds
	fmt.Fprintf(&b, "lower bound %d (memory %d MiB → %d, compute %d%% → %d, MIG slices %d → %d); isolation-aware %d (%d groups)\n",
		r.LowerBound, bd.MemoryMiB, bd.ByMemory, bd.ComputePercent, bd.ByCompute, bd.MIGSlices, bd.BySlices,
		r.IsolationLowerBound, bd.Groups)
	fmt.Fprintf(&b, "%-12s %5s %7s %7s %6s  %s\n", "method", "GPUs", "÷LB", "÷isoLB", "over", "note")
	for _, x := range r.Results {
		if !x.Applicable {
			fmt.Fprintf(&b, "%-12s %5s %7s %7s %6s  %s\n", x.Method, "n/a", "", "", "", x.Note)
			continue
		}
		fmt.Fprintf(&b, "%-12s %5d %7.2f %7.2f %6d  %s\n", x.Method, x.GPUs, x.Ratio, x.IsolationRatio, x.Overcommitted, x.Note)
	}
	for _, x := range []struct {
		name string
		d    *Detail
	}{{"gpuslice-plan", &r.Planned}, {"gpuslice", &r.Online}} {
		x.d.table(&b, x.name)
	}
	return b.String()
}

func (r *Detail) table(b *strings.Builder, name string) {
	if len(r.Devices) > 0 {
		u := r.Usage
		fmt.Fprintf(b, "%s usage: %d/%d memory slices, %d/%d compute slices; promised %d of %d MiB (%.0f%%), %d%% of %d%% compute (%.0f%%)\n", name,
			u.MemorySlices, u.TotalSlices, u.ComputeSlices, u.TotalCompute, u.PromisedMiB, u.DeviceMiB,
			100*float64(u.PromisedMiB)/float64(max(u.DeviceMiB, 1)), u.PromisedCompute, u.DeviceCompute,
			100*float64(u.PromisedCompute)/float64(max(u.DeviceCompute, 1)))
		fmt.Fprintf(b, "  %-10s %-10s %7s %6s %8s %8s\n", "shape", "mode", "devices", "claims", "mem fill", "cmp fill")
		for _, d := range r.Devices {
			fmt.Fprintf(b, "  %-10s %-10s %7d %6d %7.0f%% %7.0f%%\n", d.Shape, d.Mode, d.Devices, d.Claims, 100*d.MemFill, 100*d.CompFill)
		}
	}
	if r.Check != nil {
		fmt.Fprintf(b, "%s CHECK FAILED: %v\n", name, r.Check)
	}
}

func (r *Report) kinds() string {
	var parts []string
	for _, k := range []Kind{Inference, Notebook, Batch, MIGRequest} {
		if r.ByKind[k] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", r.ByKind[k], k))
		}
	}
	return strings.Join(parts, ", ")
}

// Summary renders one line per report: GPUs per method and the bounds.
func Summary(reports []Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-16s %4s %6s %3s %5s", "mix", "seed", "claims", "LB", "isoLB")
	for _, m := range Methods {
		fmt.Fprintf(&b, " %*s", width(m), m)
	}
	b.WriteByte('\n')
	for i := range reports {
		r := &reports[i]
		fmt.Fprintf(&b, "%-16s %4d %6d %3d %5d", r.Mix, r.Seed, r.Claims, r.LowerBound, r.IsolationLowerBound)
		for _, m := range Methods {
			x := r.Result(m)
			cell := fmt.Sprint(x.GPUs)
			switch {
			case !x.Applicable:
				cell = "n/a"
			case x.Overcommitted != 0:
				cell = fmt.Sprintf("%d(%d over)", x.GPUs, x.Overcommitted)
			}
			fmt.Fprintf(&b, " %*s", width(m), cell)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// SummaryLegend explains every column of Summary, one line each: the
// notes printed under its table.
func SummaryLegend() []string {
	return []string{
		"Columns (from gpuslice-plan on, each is the GPUs a method used for the mix; fewer is better):",
		"  mix            the workload mix (gpuslice bench packing --mix NAME runs one)",
		"  seed           the seed the mix's claims were drawn with (same mix and seed, same claims)",
		"  claims         how many claims the mix gave for that seed",
		"  LB             lower bound: the largest of total memory, compute or MIG slices ÷ one GPU's; no method can beat it",
		"  isoLB          isolation-aware lower bound: LB that also gives every isolation group at least one device",
		"  gpuslice-plan  gpuslice's allocator as a capacity plan uses it: knows every claim, biggest first",
		"  gpuslice       the same allocator online: one claim at a time in arrival order, no look-ahead",
		"  whole-gpu      one claim per GPU (a plain nvidia.com/gpu: 1)",
		"  timeslice      the device plugin's time-slicing: N replicas per GPU, memory unchecked, tenants mixed;",
		"                 \"N(k over)\": N GPUs, k of them promised more memory than they have",
		"  static-mig     every GPU pre-partitioned into one fixed MIG layout; n/a on GPUs without MIG",
		"  first-fit      whole-GPU first-fit on memory and compute, one tenant per GPU, arrival order",
		"  ffd            first-fit decreasing: first-fit over the claims sorted as gpuslice-plan sorts them",
	}
}

// width is a method's column width: its name, and room for "NN(N over)".
func width(m Method) int { return max(len(m), 10) }
