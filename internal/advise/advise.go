package advise

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/model"
	"github.com/gpuslice/gpuslice/internal/plan"
)

// Mechanism is a way of sharing a GPU, or not sharing it.
type Mechanism string

// The mechanisms advise chooses among. MPS always comes with per-client
// limits: gpuslice sets the thread percentage and pinned memory of every
// client (the study's "MPS with limits"; without them MPS has no
// performance isolation).
const (
	TimeSlicing Mechanism = "time-slicing"
	MPS         Mechanism = "mps"
	MIG         Mechanism = "mig"
	Dedicated   Mechanism = "dedicated"
)

// Mechanisms lists them in the order the reports give them.
var Mechanisms = []Mechanism{TimeSlicing, MPS, MIG, Dedicated}

// Comparison is the study's high-level comparison of the mechanisms
// ("A High Level Comparison of GPU Sharing Strategies").
var Comparison = []string{
	"performance isolation: MIG > MPS > time-slicing",
	"fault isolation: MIG > time-slicing > MPS",
	"resource efficiency: MPS > time-slicing",
	"partitioning flexibility: MPS > MIG",
	"easy to configure: time-slicing > MPS > MIG",
}

// Options configure Advise.
type Options struct {
	Catalog     *catalog.Catalog
	Calibration *Calibration
	// Quality tunes the planner; the zero value turns its time-bounded
	// exact search off so that the advice is the same on every machine.
	Quality *plan.QualityOptions
	// NoPlan gives the per-workload advice only (the simulator plans for
	// itself).
	NoPlan bool
}

// Report is the advice for a set of profiles.
type Report struct {
	Fleet      Fleet      `json:"fleet"`
	Workloads  []Advice   `json:"workloads"`
	Strategies []Strategy `json:"strategies"`
	// Best names the cheapest strategy that places every replica.
	Best       string   `json:"best"`
	Comparison []string `json:"comparison"`
	Warnings   []string `json:"warnings,omitempty"`
}

// Fleet is the GPUs the advice is for.
type Fleet struct {
	GPU          string `json:"gpu"`
	GPUMemoryMiB int64  `json:"gpuMemoryMiB"`
	MIG          bool   `json:"mig"`
	InstanceType string `json:"instanceType,omitempty"`
	GPUsPerNode  int    `json:"gpusPerNode"`
	// PricePerNodeHour is nil when no price is known.
	PricePerNodeHour *float64 `json:"pricePerNodeHour,omitempty"`
	// PriceFrom says where the price comes from when the profiles named
	// a GPU and advise chose the instance type.
	PriceFrom string `json:"priceFrom,omitempty"`
}

// Advice is the recommendation for one workload.
type Advice struct {
	Name             string             `json:"name"`
	Kind             model.WorkloadKind `json:"kind"`
	Tenant           string             `json:"tenant"`
	Replicas         int                `json:"replicas"`
	MemoryMiB        int64              `json:"memoryMiB"`
	Utilization      int                `json:"utilization"`
	Occupancy        int                `json:"smOccupancy"`
	LatencySensitive bool               `json:"latencySensitive"`
	// SizedFrom says where memory and utilization come from.
	SizedFrom string    `json:"sizedFrom"`
	Mechanism Mechanism `json:"mechanism"`
	Sizing    Sizing    `json:"sizing"`
	// Slowdown is the expected run time against a whole GPU alone, where
	// the mix's plan puts its replicas (filled from the "advised" plan).
	Slowdown  float64  `json:"expectedSlowdown"`
	Reasons   []string `json:"reasons"`
	TradeOffs []string `json:"tradeOffs"`
	Warnings  []string `json:"warnings,omitempty"`
	// Alternatives is each mechanism's sizing, or why it cannot serve.
	Alternatives []Alternative `json:"alternatives"`
}

// Sizing is how a mechanism is set up for a workload.
type Sizing struct {
	MIGProfile string `json:"migProfile,omitempty"`
	// ThreadPercent and PinnedMemoryMiB are the MPS client's limits
	// (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT).
	ThreadPercent   int   `json:"threadPercent,omitempty"`
	PinnedMemoryMiB int64 `json:"pinnedMemoryMiB,omitempty"`
	// TimeSliceReplicas is how many such replicas one GPU takes.
	TimeSliceReplicas int `json:"timeSliceReplicas,omitempty"`
	// ComputePercent is the compute the plan promises each replica.
	ComputePercent int `json:"computePercent,omitempty"`
	// Text is the sizing in words.
	Text string `json:"text"`
}

// Alternative is one mechanism for a workload.
type Alternative struct {
	Mechanism Mechanism `json:"mechanism"`
	Possible  bool      `json:"possible"`
	// Dedicated is set when the mechanism, sized for the workload, would
	// give it a whole GPU (time-slicing with one replica per GPU, an MPS
	// client with 100% of the threads): a dedicated GPU under another
	// name, so it is advised and planned as dedicated; Note says why.
	Dedicated bool   `json:"dedicated,omitempty"`
	Sizing    Sizing `json:"sizing"`
	Note      string `json:"note,omitempty"`
}

// Strategy is the whole mix planned one way.
type Strategy struct {
	// Name is "advised" (each workload as advised) or a mechanism used
	// for every workload.
	Name        string  `json:"name"`
	GPUs        int     `json:"gpus"`
	Nodes       int     `json:"nodes"`
	PerHour     float64 `json:"perHour"`
	PriceKnown  bool    `json:"priceKnown"`
	Unplaced    int     `json:"unplaced"`
	UnplacedWhy string  `json:"unplacedWhy,omitempty"`
	// MeanSlowdown and WorstSlowdown are over the placed replicas, from
	// the performance model on the plan's actual co-locations.
	MeanSlowdown  float64 `json:"meanSlowdown"`
	WorstSlowdown float64 `json:"worstSlowdown"`
	// VsDedicated is GPUs against the dedicated strategy's (0.5: half).
	VsDedicated float64 `json:"vsDedicated"`
	// Placed counts the placed replicas by how their device is shared
	// ("mps", "time-slicing", "mig", "dedicated"; "mps on mig" and
	// "time-slicing on mig" for layered sharing).
	Placed map[string]int `json:"placed,omitempty"`
	// Plan is the planner's answer (not in JSON: `gpuslice plan` shows it).
	Plan *plan.Plan `json:"-"`
}

// usesOwnMechanism reports whether a strategy named after a sharing
// mechanism places a replica with it ("advised" and "dedicated" always
// do).
func (s Strategy) usesOwnMechanism() bool {
	if s.Name == "advised" || s.Name == string(Dedicated) {
		return true
	}
	for kind, n := range s.Placed {
		if n > 0 && (kind == s.Name || strings.HasPrefix(kind, s.Name+" ")) {
			return true
		}
	}
	return false
}

// ErrNoWorkloads is returned for profiles with nothing to advise on.
var ErrNoWorkloads = errors.New("advise: no workloads")

// Advise recommends a mechanism per workload and plans the mix under
// every strategy.
func Advise(p *model.Profiles, opts Options) (*Report, error) {
	if len(p.Workloads) == 0 {
		return nil, ErrNoWorkloads
	}
	cat := opts.Catalog
	if cat == nil {
		cat = catalog.Default()
	}
	cal := opts.Calibration
	if cal == nil {
		cal = &Default
	}
	fl, gpu, err := ResolveFleet(cat, p.Fleet)
	if err != nil {
		return nil, err
	}
	r := &Report{Fleet: fl, Comparison: Comparison}
	ctx := newMix(p, gpu, cal)
	for i := range p.Workloads {
		r.Workloads = append(r.Workloads, ctx.advise(&p.Workloads[i]))
	}
	if opts.NoPlan {
		return r, nil
	}
	q := plan.QualityOptions{ExactBudget: -1}
	if opts.Quality != nil {
		q = *opts.Quality
	}
	names := Strategies()
	for _, name := range names {
		st, err := ctx.planStrategy(name, p, fl, cat, q, func(i int) (Mechanism, Sizing, bool) { return r.Pick(name, i) })
		if err != nil {
			return nil, fmt.Errorf("advise: planning %s: %w", name, err)
		}
		r.Strategies = append(r.Strategies, *st)
	}
	ded := r.Strategies[len(r.Strategies)-1]
	for i := range r.Strategies {
		if ded.GPUs > 0 {
			r.Strategies[i].VsDedicated = float64(r.Strategies[i].GPUs) / float64(ded.GPUs)
		}
	}
	// The advised plan's co-locations give each workload's slowdown.
	for i := range r.Workloads {
		r.Workloads[i].Slowdown = ctx.slowdownOf[r.Workloads[i].Name]
	}
	r.Best = bestStrategy(r.Strategies)
	r.Warnings = ctx.mixWarnings(r)
	return r, nil
}

// bestStrategy is the cheapest (then fewest GPUs, then least slowdown)
// strategy that places every replica; "advised" wins ties. A strategy
// named after a sharing mechanism that shares no replica that way (every
// workload sized to a whole GPU: time-slicing one replica per GPU) is the
// dedicated strategy under another name, and not a candidate.
func bestStrategy(ss []Strategy) string {
	best := -1
	for i, s := range ss {
		if s.Unplaced > 0 || !s.usesOwnMechanism() {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		b := ss[best]
		switch {
		case s.PriceKnown && b.PriceKnown && math.Abs(s.PerHour-b.PerHour) > 1e-9:
			if s.PerHour < b.PerHour {
				best = i
			}
		case s.GPUs != b.GPUs:
			if s.GPUs < b.GPUs {
				best = i
			}
		case s.MeanSlowdown < b.MeanSlowdown-1e-9:
			best = i
		}
	}
	if best < 0 {
		return ""
	}
	return ss[best].Name
}

// ResolveFleet reads the fleet against the catalog: its GPU model, and an
// instance type for prices (the profile's, or the cheapest priced one
// with that GPU and count).
func ResolveFleet(cat *catalog.Catalog, pf model.ProfileFleet) (Fleet, *catalog.GPU, error) {
	fl := Fleet{InstanceType: pf.InstanceType, GPUsPerNode: pf.GPUsPerNode}
	name := pf.GPU
	if pf.InstanceType != "" {
		it, err := cat.InstanceType(pf.InstanceType)
		if err != nil {
			return fl, nil, fmt.Errorf("fleet.instanceType: %w", err)
		}
		name, fl.GPUsPerNode = it.GPU, it.GPUCount
		if it.Price != nil {
			v := it.Price.USDPerHour
			fl.PricePerNodeHour = &v
		}
	}
	if name == "" {
		return fl, nil, errors.New("fleet: give instanceType or gpu")
	}
	g, err := cat.GPU(name)
	if err != nil {
		return fl, nil, fmt.Errorf("fleet.gpu: %w", err)
	}
	fl.GPU, fl.GPUMemoryMiB, fl.MIG = g.ID, g.MemoryMiB, g.MIG != nil
	if fl.GPUsPerNode <= 0 {
		fl.GPUsPerNode = 1
	}
	if fl.InstanceType == "" {
		var best *catalog.InstanceType
		for _, it := range cat.InstanceTypesWithGPU(func(x *catalog.GPU) bool { return x.ID == g.ID }) {
			if it.GPUCount != fl.GPUsPerNode || it.Price == nil {
				continue
			}
			if best == nil || it.Price.USDPerHour < best.Price.USDPerHour {
				it := it
				best = &it
			}
		}
		if best != nil {
			fl.InstanceType = best.Name
			v := best.Price.USDPerHour
			fl.PricePerNodeHour = &v
			fl.PriceFrom = fmt.Sprintf("the cheapest catalog instance type with %d× %s: %s (%s)", fl.GPUsPerNode, g.ID, best.Name, best.Provider)
		}
	}
	return fl, g, nil
}

// mix is what advising one workload needs to know about the others.
type mix struct {
	gpu *catalog.GPU
	cal *Calibration
	// tenants is how many tenants the profiles name; demand is each
	// tenant's demand in GPUs (replicas × the larger of its memory share
	// and its SM demand).
	tenants    int
	demand     map[string]float64
	slowdownOf map[string]float64
	profiles   []*model.Profile
}

func newMix(p *model.Profiles, gpu *catalog.GPU, cal *Calibration) *mix {
	m := &mix{gpu: gpu, cal: cal, demand: map[string]float64{}, slowdownOf: map[string]float64{}}
	for i := range p.Workloads {
		w := &p.Workloads[i]
		m.profiles = append(m.profiles, w)
		mem, util, _ := Effective(w)
		share := math.Max(float64(mem)/float64(gpu.MemoryMiB), float64(util)/100*cal.OccupancyOf(w))
		m.demand[w.Tenant] += float64(w.Replicas) * share
	}
	m.tenants = len(m.demand)
	return m
}

// Effective is a profile's memory and utilization: as written, or from
// its trace where the profile leaves them out (peak memory, 95th
// percentile utilization); from says which.
func Effective(p *model.Profile) (memMiB int64, util int, from string) {
	memMiB, util, from = p.MemoryMiB, p.Utilization, "profile"
	if p.Trace == nil {
		return
	}
	st := Summarize(p.Trace)
	var parts []string
	if memMiB == 0 {
		memMiB = st.PeakMemoryMiB
		parts = append(parts, "memory from the trace's peak")
	}
	if util == 0 {
		util = max(1, min(100, int(math.Ceil(st.P95Utilization))))
		parts = append(parts, "utilization from the trace's 95th percentile")
	}
	if len(parts) > 0 {
		from = strings.Join(parts, ", ") + " (" + p.Trace.File + ")"
	}
	return
}

// TraceStats summarizes a trace.
type TraceStats struct {
	Span                            time.Duration
	MeanUtilization, P95Utilization float64
	PeakMemoryMiB                   int64
}

// Summarize computes a trace's statistics: utilization weighted by the
// time each sample holds until the next.
func Summarize(t *model.Trace) TraceStats {
	var st TraceStats
	n := len(t.Samples)
	if n == 0 {
		return st
	}
	st.Span = t.Samples[n-1].At - t.Samples[0].At
	type wu struct{ u, w float64 }
	var ws []wu
	var total, sum float64
	for i, s := range t.Samples {
		st.PeakMemoryMiB = max(st.PeakMemoryMiB, s.MemoryMiB)
		w := 1.0
		if i+1 < n {
			w = (t.Samples[i+1].At - s.At).Seconds()
		} else if n > 1 {
			w = 0
		}
		ws = append(ws, wu{s.Utilization, w})
		total += w
		sum += s.Utilization * w
	}
	if total == 0 {
		for i := range ws {
			ws[i].w = 1
		}
		total = float64(len(ws))
		sum = 0
		for _, x := range ws {
			sum += x.u
		}
	}
	st.MeanUtilization = sum / total
	sort.Slice(ws, func(i, j int) bool { return ws[i].u < ws[j].u })
	acc := 0.0
	for _, x := range ws {
		acc += x.w
		if acc >= 0.95*total {
			st.P95Utilization = x.u
			break
		}
	}
	return st
}

// advise recommends a mechanism for one workload. The rules, top to
// bottom, each from the study:
//
//	| when                                              | mechanism      | study                                            |
//	|---------------------------------------------------|----------------|--------------------------------------------------|
//	| more memory than a GPU has                        | dedicated      | (one GPU per replica is the most there is)       |
//	| isolation: hardware                               | MIG, dedicated | MIG: full fault isolation, bandwidth QoS         |
//	| keeps a GPU ≥ 90 % busy; training ≥ 50 %;         | dedicated      | sharing only adds contention                     |
//	|   over half the memory and ≥ 50 % busy            |                |                                                  |
//	| a small tenant among several (< ½ GPU of demand)  | MIG            | MIG: "ideal for multi-tenant use cases"          |
//	| notebook, light (< 50 %)                          | time-slicing   | "better suited for development environments"     |
//	| notebook, heavy (≥ 50 %)                          | MPS + limits   | TS "not ideal for heavily loaded interactive"    |
//	| offline inference, heavy (≥ 50 %)                 | time-slicing   | "use time-slicing if not latency sensitive"      |
//	| online inference; light offline inference         | MPS + limits   | MPS: lower overhead; + limits: isolation         |
//	| small batch                                       | MPS            | similar performance, lower overhead than TS     |
//	| GPU-intensive batch; light training               | MPS + limits   | "time-slicing is not ideal … MPS with limits"    |
//
// "MPS + limits" is a thread limit below 100 %: a GPU-intensive job that
// alone would take every SM is capped at Calibration.MPSLimitedShare (the
// study's 50 %); any other workload whose limit would be 100 % gets a
// dedicated GPU, as does one time-slicing would put alone on a GPU
// (Alternative.Dedicated).
func (m *mix) advise(p *model.Profile) Advice {
	mem, util, from := Effective(p)
	occ := m.cal.OccupancyOf(p)
	a := Advice{Name: p.Name, Kind: p.Kind, Tenant: p.Tenant, Replicas: p.Replicas, MemoryMiB: mem, Utilization: util,
		Occupancy: int(math.Round(occ * 100)), LatencySensitive: p.LatencySensitive, SizedFrom: from}
	d := float64(util) / 100 * occ
	alts := m.alternatives(p, mem, util, d)
	a.Alternatives = alts
	possible := func(mech Mechanism) bool { return alts[index(mech)].Possible }
	heavy := util >= m.cal.HeavyUtilization
	G := m.gpu.MemoryMiB
	choose := func(mech Mechanism, reasons ...string) {
		a.Mechanism = mech
		a.Reasons = append(a.Reasons, reasons...)
	}
	smallTenant := m.tenants > 1 && m.demand[p.Tenant] < 0.5
	switch {
	case mem > G:
		choose(Dedicated, fmt.Sprintf("needs %s of GPU memory, more than one %s has (%s): no sharing mechanism helps",
			MiB(mem), m.gpu.ID, MiB(G)))
		a.Warnings = append(a.Warnings, "a replica does not fit on one GPU: split the model across GPUs or choose a bigger GPU (fleet.gpu)")
	case p.HardwareIsolation && possible(MIG):
		choose(MIG, "isolation: hardware — a MIG instance has its own memory, cache and SMs: full fault isolation and guaranteed memory-bandwidth QoS (study), without a whole GPU")
	case p.HardwareIsolation:
		choose(Dedicated, "isolation: hardware and no MIG profile holds it on "+m.gpu.ID+": only a whole GPU isolates faults and memory bandwidth")
	case util >= m.cal.WholeGPUUtilization:
		choose(Dedicated, fmt.Sprintf("keeps a whole GPU %d%% busy alone: sharing it only adds contention", util))
	case p.Kind == model.KindTraining && heavy:
		choose(Dedicated, fmt.Sprintf("training at %d%% utilization: a whole GPU; sharing would slow every step", util))
	case mem*2 > G && heavy:
		choose(Dedicated, fmt.Sprintf("uses over half the GPU's memory (%s of %s) and is busy %d%% of the time: nothing useful fits beside it", MiB(mem), MiB(G), util))
	case smallTenant && possible(MIG) && p.Kind != model.KindTraining:
		choose(MIG, fmt.Sprintf("tenant %s needs %.2f of a GPU among %d tenants: a MIG instance lets it share a GPU with other tenants with full isolation (study: MIG is \"ideal for multi-tenant use cases\"; gpuslice keeps other tenants off time-sliced and MPS GPUs)", p.Tenant, m.demand[p.Tenant], m.tenants))
	case p.Kind == model.KindNotebook && !heavy:
		choose(TimeSlicing, fmt.Sprintf("notebook busy %d%% of the time: bursty, interactive, mostly idle — time-slicing is easiest to configure, starts fastest (study: 1 s vs 6 s for MPS) and keeps a crash in its own process; the study finds it \"better suited for development environments\"", util))
	case p.Kind == model.KindNotebook:
		// Heavy interactive work is never time-sliced.
		choose(MPS, fmt.Sprintf("heavily loaded notebook (%d%% busy): the study finds time-slicing \"not ideal for heavily loaded interactive workloads\" (no resource guarantee, a context switch on every turn); an MPS client with a limit keeps its share of the SMs and caps its neighbours'", util))
	case p.Kind == model.KindOfflineInference && heavy && !p.LatencySensitive:
		choose(TimeSlicing, fmt.Sprintf("heavy (%d%%) offline inference that is not latency-sensitive: the study says to use time-slicing here — throughput drops, but nobody waits on a request", util))
	case p.Kind == model.KindOnlineInference || p.Kind == model.KindOfflineInference:
		if heavy {
			choose(MPS, fmt.Sprintf("heavy (%d%%) inference: MPS degrades it moderately, less than time-slicing, and MPS with limits gives better performance isolation (study)", util))
		} else {
			choose(MPS, fmt.Sprintf("light (%d%%) inference: time-slicing and MPS both raise utilization without hurting it; MPS has the lower overhead (study)", util))
		}
	case p.Kind == model.KindSmallBatch:
		choose(MPS, "small batch job: under MPS four jobs at 35% each ran in 27.2 s against 26.8 s for one alone (study); time-slicing is suboptimal because of context-switch overhead")
	default: // GPU-intensive batch, light training
		choose(MPS, "GPU-intensive job: time-slicing cannot cap its usage and gives no fair share; the study says to use MPS with a proper resource limit instead")
	}
	if a.Mechanism == MPS && !possible(MPS) {
		a.Mechanism = Dedicated
		a.Reasons = append(a.Reasons, "MPS cannot serve it here: "+alts[index(MPS)].Note)
	}
	if a.Mechanism == TimeSlicing && !possible(TimeSlicing) {
		a.Mechanism = Dedicated
		a.Reasons = append(a.Reasons, "time-slicing cannot serve it here: "+alts[index(TimeSlicing)].Note)
	}
	if alt := alts[index(a.Mechanism)]; alt.Dedicated {
		a.Mechanism = Dedicated
		a.Reasons = append(a.Reasons, "so it gets a dedicated GPU: "+alt.Note)
	}
	if a.Mechanism == MIG && !possible(MIG) {
		a.Mechanism = Dedicated
	}
	if smallTenant && !m.hasMIG() && a.Mechanism != Dedicated {
		a.Warnings = append(a.Warnings, fmt.Sprintf("%s has no MIG: with tenant isolation, tenant %s's replicas get GPUs of their own although it needs only %.2f of one", m.gpu.ID, p.Tenant, m.demand[p.Tenant]))
	}
	a.Sizing = alts[index(a.Mechanism)].Sizing
	a.TradeOffs = tradeOffs(a.Mechanism, m.cal)
	a.Warnings = append(a.Warnings, m.warnings(p, a, mem, util)...)
	return a
}

func (m *mix) hasMIG() bool { return m.gpu.MIG != nil }

func index(mech Mechanism) int {
	for i, x := range Mechanisms {
		if x == mech {
			return i
		}
	}
	return len(Mechanisms) - 1
}

// alternatives sizes every mechanism for the workload, in Mechanisms
// order.
func (m *mix) alternatives(p *model.Profile, mem int64, util int, d float64) []Alternative {
	G := m.gpu.MemoryMiB
	head := m.cal.HeadroomBatch
	if p.LatencySensitive {
		head = m.cal.HeadroomLatency
	}
	out := make([]Alternative, len(Mechanisms))
	// Time-slicing: as many replicas as memory allows, and for
	// latency-sensitive work as many as their busy time adds up to one GPU.
	target := m.cal.TargetBatch
	if p.LatencySensitive {
		target = m.cal.TargetLatency
	}
	ts := Alternative{Mechanism: TimeSlicing, Possible: mem <= G && !p.HardwareIsolation}
	if ts.Possible {
		// Replicas of busy time u add up; k of them take max(1, k·u)
		// times longer (plus switching): as many as stay within target.
		n := int(G / max(mem, 1))
		busyCap := int(math.Floor(target * 100 / float64(max(util, 1))))
		for busyCap > 1 && m.cal.Slowdown(TimeSlicing, Load{Util: float64(util) / 100, Occ: 0.01}, repeat(Load{Util: float64(util) / 100, Occ: 0.01}, busyCap-1), 1) > target {
			busyCap--
		}
		n = max(1, min(n, busyCap, 48))
		ts.Sizing = Sizing{TimeSliceReplicas: n, ComputePercent: max(1, 100/n),
			Text: fmt.Sprintf("%s per GPU, %s each (not enforced)", plural(n, "replica"), MiB(mem))}
		if n == 1 {
			why := "its memory leaves no room for a second replica"
			if int(G/max(mem, 1)) > 1 {
				why = fmt.Sprintf("a second replica's busy time would slow both past %.1f×", target)
			}
			ts.Dedicated = true
			ts.Sizing = Sizing{TimeSliceReplicas: 1, Text: fmt.Sprintf("1 replica per GPU, %s: a dedicated GPU, not time-slicing", MiB(mem))}
			ts.Note = "time-slicing would put one replica on each GPU (" + why + "): that is a dedicated GPU under another name"
		}
	} else {
		ts.Note = "needs more memory than the GPU has, or hardware isolation"
	}
	out[0] = ts
	// MPS: the client's thread limit is its SM demand with headroom.
	mp := Alternative{Mechanism: MPS, Possible: mem <= G && !p.HardwareIsolation}
	if mp.Possible {
		t := int(math.Ceil(d*head*100/5)) * 5
		t = max(10, min(100, t))
		text := fmt.Sprintf("MPS client with %d%% active threads and %s pinned memory", t, MiB(mem))
		switch {
		case t < 100:
		case p.Kind == model.KindIntensiveBatch && !p.LatencySensitive:
			// Alone it would take every SM. The study's "MPS with
			// limits" for GPU-intensive jobs gave each of two jobs 50%:
			// each runs slower, and they share the GPU fairly.
			t = m.cal.MPSLimitedShare
			text = fmt.Sprintf("MPS client capped at %d%% active threads (the study's limit for GPU-intensive jobs) and %s pinned memory", t, MiB(mem))
		default:
			// 100% of the threads is no limit: no performance
			// isolation (study), and the GPU is the workload's alone.
			mp.Dedicated = true
			mp.Note = fmt.Sprintf("its SM demand with headroom (%.0f%%) is the whole GPU: an MPS client with 100%% active threads has no limit, and a lower one would throttle it — that is a dedicated GPU", d*head*100)
		}
		mp.Sizing = Sizing{ThreadPercent: t, PinnedMemoryMiB: mem, ComputePercent: t, Text: text}
		if mp.Dedicated {
			mp.Sizing = Sizing{Text: fmt.Sprintf("MPS at 100%% active threads and %s: a dedicated GPU, not MPS with a limit", MiB(mem))}
		}
	} else {
		mp.Note = "needs more memory than the GPU has, or hardware isolation"
	}
	out[1] = mp
	// MIG: the smallest profile with the memory and the compute.
	mg := Alternative{Mechanism: MIG}
	if m.gpu.MIG == nil {
		mg.Note = m.gpu.ID + " has no MIG"
	} else if prof := m.migProfile(mem, func(frac float64) bool {
		u := float64(util) / 100
		return m.cal.Slowdown(MIG, Load{Util: u, Occ: d / math.Max(u, 1e-9)}, nil, frac) <= target+1e-9
	}); prof != nil {
		mg.Possible = true
		waste := prof.MemoryMiB - mem
		mg.Sizing = Sizing{MIGProfile: prof.Name, Text: fmt.Sprintf("one %s instance (%s, %d of %d compute slices; %s unused)",
			prof.Name, MiB(prof.MemoryMiB), prof.ComputeSlices, m.gpu.MIG.ComputeSlices, MiB(waste))}
	} else {
		mg.Note = fmt.Sprintf("no %s MIG profile has %s of memory", m.gpu.ID, MiB(mem))
	}
	out[2] = mg
	de := Alternative{Mechanism: Dedicated, Possible: true, Sizing: Sizing{Text: "a whole " + m.gpu.ID}}
	if mem > G {
		de.Sizing.Text = fmt.Sprintf("a whole %s (holds %s of the %s needed)", m.gpu.ID, MiB(G), MiB(mem))
	}
	out[3] = de
	return out
}

// migProfile is the smallest profile (memory slices, then compute slices,
// then memory) with at least mem whose compute share fast accepts, or
// the largest share if none is fast enough; profiles with media
// extensions are left to those who ask for them.
func (m *mix) migProfile(mem int64, fast func(frac float64) bool) *catalog.Profile {
	var best, biggest *catalog.Profile
	total := float64(m.gpu.MIG.ComputeSlices)
	for i := range m.gpu.MIG.Profiles {
		p := &m.gpu.MIG.Profiles[i]
		if p.MediaExtensions || p.MemoryMiB < mem {
			continue
		}
		if biggest == nil || p.ComputeSlices > biggest.ComputeSlices || (p.ComputeSlices == biggest.ComputeSlices && p.MemorySlices < biggest.MemorySlices) {
			biggest = p
		}
		if !fast(float64(p.ComputeSlices) / total) {
			continue
		}
		if best == nil || p.MemorySlices < best.MemorySlices ||
			(p.MemorySlices == best.MemorySlices && (p.ComputeSlices < best.ComputeSlices ||
				(p.ComputeSlices == best.ComputeSlices && p.MemoryMiB < best.MemoryMiB))) {
			best = p
		}
	}
	if best == nil {
		return biggest
	}
	return best
}

func repeat(l Load, n int) []Load {
	out := make([]Load, n)
	for i := range out {
		out[i] = l
	}
	return out
}

func tradeOffs(mech Mechanism, cal *Calibration) []string {
	switch mech {
	case TimeSlicing:
		return []string{
			"easiest to configure (time-slicing > MPS > MIG) and fastest to start (study: 1 s vs 6 s under MPS)",
			"fault isolation: a crash stays in its own process (MIG > time-slicing > MPS)",
			"no performance isolation and context-switch overhead: co-located replicas slow each other when busy (MIG > MPS > time-slicing)",
		}
	case MPS:
		return []string{
			fmt.Sprintf("lowest overhead when sharing (study: +%.1f%% for four jobs on one GPU); resource efficiency MPS > time-slicing", cal.MPSOverhead*100),
			"flexible partition sizes: any thread percentage and memory limit (MPS > MIG)",
			"with limits, better performance isolation than time-slicing (MIG > MPS > time-slicing)",
			"weakest fault isolation: a fatal fault in one client reaches every client of the daemon (MIG > time-slicing > MPS); slower start (6 s)",
		}
	case MIG:
		return []string{
			"strongest isolation: own memory, cache and SMs — faults and memory bandwidth stay inside the instance; ideal for multi-tenant use",
			"fixed partition sizes (at most 7 instances): right sizing is critical, what the profile gives beyond the need is stranded",
			"hardest to configure; gpuslice creates the instance at an explicit placement when the replica is scheduled",
		}
	}
	return []string{"no sharing: no interference and no savings; the GPU idles whenever the workload does"}
}

func (m *mix) warnings(p *model.Profile, a Advice, mem int64, util int) []string {
	var out []string
	switch a.Mechanism {
	case TimeSlicing:
		out = append(out, fmt.Sprintf("time-slicing does not enforce memory: a replica that grows past %s takes memory from the others (gpuslice's watchdog warns or kills it: memoryPolicy)", MiB(mem)))
		if p.LatencySensitive {
			out = append(out, "latency-sensitive under time-slicing: requests wait while other replicas hold the GPU")
		}
	case MPS:
		out = append(out, "MPS: one client's fatal GPU fault (an illegal address, an out-of-memory abort) can take down every client of the same daemon")
	case MIG:
		alt := a.Alternatives[index(MIG)]
		for i := range m.gpu.MIG.Profiles {
			pr := &m.gpu.MIG.Profiles[i]
			if pr.Name == alt.Sizing.MIGProfile && pr.MemoryMiB > 0 && float64(pr.MemoryMiB-mem) > 0.4*float64(pr.MemoryMiB) {
				out = append(out, fmt.Sprintf("%s gives %s for a %s need: %d%% of the instance is stranded (right sizing is critical)",
					pr.Name, MiB(pr.MemoryMiB), MiB(mem), int(100*float64(pr.MemoryMiB-mem)/float64(pr.MemoryMiB))))
			}
		}
	}
	if p.Trace != nil && p.MemoryMiB > 0 {
		if peak := Summarize(p.Trace).PeakMemoryMiB; peak > p.MemoryMiB {
			out = append(out, fmt.Sprintf("the trace peaks at %s, above the profile's memory %s", MiB(peak), MiB(p.MemoryMiB)))
		}
	}
	return out
}

func (m *mix) mixWarnings(r *Report) []string {
	var out []string
	for _, s := range r.Strategies {
		if s.Name == "advised" && s.Unplaced > 0 {
			out = append(out, fmt.Sprintf("the advised mix leaves %d replicas out: %s", s.Unplaced, s.UnplacedWhy))
		}
	}
	if r.Fleet.PricePerNodeHour == nil {
		out = append(out, "no price known for "+r.Fleet.GPU+": costs are left out (give fleet.instanceType)")
	}
	return out
}

// planStrategy plans the mix with each workload's mechanism from pick.
func (m *mix) planStrategy(name string, p *model.Profiles, fl Fleet, cat *catalog.Catalog, q plan.QualityOptions,
	pick func(int) (Mechanism, Sizing, bool)) (*Strategy, error) {
	spec := &model.Spec{Policy: alloc.Policy{DefaultReplicas: 2}}
	pool := model.Pool{Name: "fleet", MaxNodes: 100000}
	if fl.InstanceType != "" {
		pool.InstanceType = fl.InstanceType
	} else {
		pool.GPU, pool.GPUsPerNode = fl.GPU, fl.GPUsPerNode
	}
	st := &Strategy{Name: name}
	usesMIG, usesOther := false, false
	for i := range p.Workloads {
		w := &p.Workloads[i]
		mech, sz, ok := pick(i)
		if !ok || w.Replicas == 0 {
			if !ok {
				st.Unplaced += w.Replicas
				if st.UnplacedWhy == "" {
					st.UnplacedWhy = fmt.Sprintf("%s cannot serve %s", mech, w.Name)
				}
			}
			continue
		}
		req, iso := Request(w, mech, sz, m.gpu)
		switch mech {
		case TimeSlicing:
			spec.Policy.DefaultReplicas = max(spec.Policy.DefaultReplicas, min(sz.TimeSliceReplicas, 64))
			usesOther = true
		case MIG:
			usesMIG = true
		default:
			usesOther = true
		}
		spec.Workloads = append(spec.Workloads, model.Workload{Name: w.Name, Tenant: w.Tenant, Replicas: w.Replicas,
			Isolation: iso, Requests: []alloc.Request{req}})
		spec.Tenants = appendTenant(spec.Tenants, w.Tenant)
	}
	if usesMIG {
		pool.MIG = "dynamic"
		spec.Policy.AllowModeSwitch = usesOther
	}
	spec.Pools = []model.Pool{pool}
	if len(spec.Workloads) == 0 {
		return st, nil
	}
	pl, err := plan.Make(spec, plan.Options{Catalog: cat, Quality: q})
	if err != nil {
		return nil, err
	}
	st.Plan = pl
	st.GPUs = pl.Cost.GPUs
	st.PerHour, st.PriceKnown = pl.Cost.PerHour, pl.Cost.Known && fl.PricePerNodeHour != nil
	for _, pp := range pl.Pools {
		st.Nodes += pp.Nodes
	}
	st.Unplaced += len(pl.Unplaced)
	if st.UnplacedWhy == "" && len(pl.Unplaced) > 0 {
		st.UnplacedWhy = pl.Unplaced[0].Workload + ": " + pl.Unplaced[0].Reason
	}
	m.slowdowns(st, p, name == "advised")
	return st, nil
}

// Request is the allocator's request for one replica of w served by mech
// with sizing sz, and the claim's isolation.
func Request(w *model.Profile, mech Mechanism, sz Sizing, gpu *catalog.GPU) (alloc.Request, alloc.Isolation) {
	mem, _, _ := Effective(w)
	req := alloc.Request{Name: "gpu", MemoryMiB: min(mem, gpu.MemoryMiB), ComputePercent: sz.ComputePercent}
	iso := alloc.IsolationTenant
	if w.HardwareIsolation {
		iso = alloc.IsolationHardware
	}
	switch mech {
	case TimeSlicing:
		req.Mode = alloc.TimeSlice
	case MPS:
		req.Mode = alloc.MPS
	case MIG:
		req.Mode, req.Profile = alloc.MIG, sz.MIGProfile
	default:
		req.Mode, req.ComputePercent = alloc.Exclusive, 0
	}
	return req, iso
}

// Pick is a strategy's mechanism and sizing for workload i of an advice
// report: "advised" takes each workload's recommendation, a mechanism
// name takes that alternative (ok false: it cannot serve the workload).
func (r *Report) Pick(strategy string, i int) (Mechanism, Sizing, bool) {
	a := &r.Workloads[i]
	if strategy == "advised" {
		return a.Mechanism, a.Sizing, true
	}
	for _, x := range a.Alternatives {
		if string(x.Mechanism) == strategy {
			if x.Possible && x.Dedicated {
				return Dedicated, a.Alternatives[index(Dedicated)].Sizing, true
			}
			return x.Mechanism, x.Sizing, x.Possible
		}
	}
	return Mechanism(strategy), Sizing{}, false
}

// Strategies are the names Pick understands, "advised" first.
func Strategies() []string {
	out := []string{"advised"}
	for _, m := range Mechanisms {
		out = append(out, string(m))
	}
	return out
}

func appendTenant(ts []model.Tenant, name string) []model.Tenant {
	for _, t := range ts {
		if t.Name == name {
			return ts
		}
	}
	return append(ts, model.Tenant{Name: name})
}

// slowdowns applies the performance model to the plan's co-locations.
func (m *mix) slowdowns(st *Strategy, p *model.Profiles, record bool) {
	byName := map[string]*model.Profile{}
	for i := range p.Workloads {
		byName[p.Workloads[i].Name] = &p.Workloads[i]
	}
	type onDev struct {
		pl   *plan.Placement
		load Load
		a    alloc.Assigned
	}
	devs := map[string][]onDev{}
	var order []string
	for i := range st.Plan.Placements {
		pl := &st.Plan.Placements[i]
		w := byName[pl.Workload]
		if w == nil || len(pl.Devices) == 0 {
			continue
		}
		_, util, _ := Effective(w)
		a := pl.Devices[0]
		l := Load{Util: float64(util) / 100, Occ: m.cal.OccupancyOf(w)}
		if a.Mode == alloc.MPS && a.ComputePercent > 0 {
			l.Limit = float64(a.ComputePercent) / 100
		}
		if _, ok := devs[a.Device]; !ok {
			order = append(order, a.Device)
		}
		devs[a.Device] = append(devs[a.Device], onDev{pl, l, a})
	}
	sum, n, worst := 0.0, 0, 0.0
	per := map[string][2]float64{}
	for _, id := range order {
		list := devs[id]
		for i, x := range list {
			var others []Load
			for j, y := range list {
				if j != i {
					others = append(others, y.load)
				}
			}
			frac := 1.0
			if x.a.Profile != "" && m.gpu.MIG != nil {
				if pr, err := m.gpu.Profile(x.a.Profile); err == nil {
					frac = float64(pr.ComputeSlices) / float64(m.gpu.MIG.ComputeSlices)
				}
			}
			mech := Dedicated
			if x.a.Profile != "" {
				mech = MIG
			}
			switch x.a.Mode {
			case alloc.MPS:
				mech = MPS
			case alloc.TimeSlice:
				mech = TimeSlicing
			}
			s := m.cal.Slowdown(mech, x.load, others, frac)
			kind := string(mech)
			if x.a.Profile != "" && mech != MIG {
				kind += " on mig"
			}
			if st.Placed == nil {
				st.Placed = map[string]int{}
			}
			st.Placed[kind]++
			sum += s
			n++
			worst = math.Max(worst, s)
			v := per[x.pl.Workload]
			per[x.pl.Workload] = [2]float64{v[0] + s, v[1] + 1}
		}
	}
	if n > 0 {
		st.MeanSlowdown = round3(sum / float64(n))
	}
	st.WorstSlowdown = round3(worst)
	if record {
		for name, v := range per {
			m.slowdownOf[name] = round3(v[0] / v[1])
		}
	}
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// MiB writes a memory size the way people read it.
func MiB(v int64) string {
	switch {
	case v >= 1024 && v%1024 == 0:
		return fmt.Sprintf("%dGi", v/1024)
	case v >= 1024:
		return fmt.Sprintf("%.1fGi", float64(v)/1024)
	}
	return fmt.Sprintf("%dMi", v)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
