package sim

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/gpuslice/gpuslice/internal/advise"
	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/model"
)

// Options configure Run.
type Options struct {
	Catalog     *catalog.Catalog
	Calibration *advise.Calibration
	// Strategies to compare (advise.Strategies names); default all.
	Strategies []string
	// Nodes overrides the profiles' fleet size (0: theirs, else sized
	// so that dedicated GPUs hold the expected load; see FleetSize).
	Nodes int
	// Progress, when set, is called now and then with the fraction of
	// the whole run done (0..1].
	Progress func(done float64)
	// Backfill is how many queued jobs a departure may try to start,
	// in arrival order (default 64); a job that does not fit is skipped,
	// not waited for.
	Backfill int
}

// Result is one run: every strategy on the same arrivals.
type Result struct {
	Seed        uint64        `json:"seed"`
	Duration    time.Duration `json:"duration"`
	SampleEvery time.Duration `json:"sampleEvery"`
	Fleet       advise.Fleet  `json:"fleet"`
	Nodes       int           `json:"nodes"`
	GPUs        int           `json:"gpus"`
	// Arrivals counts the jobs that came (the same for every strategy).
	Arrivals   int        `json:"arrivals"`
	Strategies []Strategy `json:"strategies"`
}

// Strategy is what one strategy did.
type Strategy struct {
	Name string `json:"name"`
	// Started, Completed and Queued (at the end) count jobs; Rejected
	// those the strategy cannot serve at all (e.g. no MIG profile holds
	// them).
	Started   int `json:"started"`
	Completed int `json:"completed"`
	Queued    int `json:"queuedAtEnd"`
	Rejected  int `json:"rejected"`
	// Queue delay of the started jobs, in seconds.
	DelayMean float64 `json:"queueDelayMeanSeconds"`
	DelayP95  float64 `json:"queueDelayP95Seconds"`
	DelayMax  float64 `json:"queueDelayMaxSeconds"`
	// PeakGPUs and MeanGPUs are GPUs holding at least one job; GPUHours
	// and NodeHours integrate GPUs and nodes in use over time.
	PeakGPUs  int     `json:"peakGPUs"`
	MeanGPUs  float64 `json:"meanGPUs"`
	GPUHours  float64 `json:"gpuHours"`
	NodeHours float64 `json:"nodeHours"`
	// Cost is NodeHours at the instance type's price (nodes with no job
	// are released); CostKnown is false without a price.
	Cost      float64 `json:"cost"`
	CostKnown bool    `json:"costKnown"`
	// Utilization is the SM demand of the running jobs over the GPUs in
	// use, time-averaged; Stranded the memory of GPUs in use that no job
	// needs (MIG instances bigger than their job count as stranded).
	Utilization float64 `json:"utilization"`
	Stranded    float64 `json:"strandedMemory"`
	// MIGChanges counts MIG instances created and destroyed and MIG mode
	// switches the allocator's decisions made (re-layouts).
	MIGChanges int `json:"migChanges"`
	// MeanSlowdown is the run-time stretch of the started jobs, from the
	// performance model.
	MeanSlowdown float64 `json:"meanSlowdown"`
	// Decisions counts allocator calls.
	Decisions int     `json:"decisions"`
	Series    []Point `json:"series"`
}

// Point is one sample of a strategy's fleet.
type Point struct {
	Hours   float64 `json:"hours"`
	GPUs    int     `json:"gpus"`
	Running int     `json:"running"`
	Queued  int     `json:"queued"`
}

// job is one arrival.
type job struct {
	id       int
	w        int // workload index
	arrive   time.Duration
	runAlone time.Duration
}

// ErrNothingToSimulate is returned for profiles with no load.
var ErrNothingToSimulate = errors.New("simulate: no workload has replicas or arrivals")

// Arrivals draws the jobs of a run: every workload's initial replicas at
// time 0, then Poisson arrivals at its rate; run times are exponential
// with the workload's mean duration. The same seed gives the same jobs.
func Arrivals(p *model.Profiles) []job {
	var jobs []job
	horizon := p.Sim.Duration
	for wi := range p.Workloads {
		w := &p.Workloads[wi]
		rng := rand.New(rand.NewPCG(p.Sim.Seed, uint64(wi)+1))
		mean := w.Duration
		var span time.Duration
		if mean <= 0 && w.Trace != nil {
			span = advise.Summarize(w.Trace).Span
		}
		if mean <= 0 {
			mean = time.Hour
		}
		draw := func() time.Duration {
			if span > 0 {
				return span // a measured run lasts as long as it was measured
			}
			return max(time.Second, time.Duration(rng.ExpFloat64()*float64(mean)))
		}
		for range w.Replicas {
			jobs = append(jobs, job{w: wi, runAlone: draw()})
		}
		if w.ArrivalsPerHour <= 0 {
			continue
		}
		t := time.Duration(0)
		for {
			t += time.Duration(rng.ExpFloat64() / w.ArrivalsPerHour * float64(time.Hour))
			if t >= horizon {
				break
			}
			jobs = append(jobs, job{w: wi, arrive: t, runAlone: draw()})
		}
	}
	sort.SliceStable(jobs, func(i, j int) bool { return jobs[i].arrive < jobs[j].arrive })
	for i := range jobs {
		jobs[i].id = i
	}
	return jobs
}

// FleetSize is the nodes a run gets when the profiles do not say: enough
// whole GPUs for the expected concurrent jobs (initial replicas plus
// arrival rate × mean duration, Little's law), plus a fifth.
func FleetSize(p *model.Profiles, gpusPerNode int) int {
	conc := 0.0
	for _, w := range p.Workloads {
		d := w.Duration
		if d <= 0 && w.Trace != nil {
			d = advise.Summarize(w.Trace).Span
		}
		if d <= 0 {
			d = time.Hour
		}
		conc += float64(w.Replicas) + w.ArrivalsPerHour*d.Hours()
	}
	return max(1, int(math.Ceil(conc*1.2/float64(max(gpusPerNode, 1)))))
}

// Run simulates every strategy on the same arrivals.
func Run(p *model.Profiles, opts Options) (*Result, error) {
	cat := opts.Catalog
	if cat == nil {
		cat = catalog.Default()
	}
	cal := opts.Calibration
	if cal == nil {
		cal = &advise.Default
	}
	adv, err := advise.Advise(p, advise.Options{Catalog: cat, Calibration: cal, NoPlan: true})
	if err != nil {
		return nil, err
	}
	fl, gpu, err := advise.ResolveFleet(cat, p.Fleet)
	if err != nil {
		return nil, err
	}
	strategies := opts.Strategies
	if len(strategies) == 0 {
		strategies = advise.Strategies()
	}
	for _, s := range strategies {
		if !slices.Contains(advise.Strategies(), s) {
			return nil, fmt.Errorf("simulate: unknown strategy %q; valid: %v", s, advise.Strategies())
		}
	}
	nodes := p.Fleet.Nodes
	if opts.Nodes > 0 {
		nodes = opts.Nodes
	}
	if nodes == 0 {
		nodes = FleetSize(p, fl.GPUsPerNode)
	}
	jobs := Arrivals(p)
	if len(jobs) == 0 {
		return nil, ErrNothingToSimulate
	}
	res := &Result{Seed: p.Sim.Seed, Duration: p.Sim.Duration, SampleEvery: p.Sim.SampleEvery, Fleet: fl, Nodes: nodes,
		GPUs: nodes * fl.GPUsPerNode, Arrivals: len(jobs)}
	backfill := opts.Backfill
	if backfill <= 0 {
		backfill = 64
	}
	for k, name := range strategies {
		r := &runner{p: p, adv: adv, gpu: gpu, fl: fl, cal: cal, name: name, nodes: nodes, jobs: jobs, backfill: backfill}
		if opts.Progress != nil {
			base, share := float64(k)/float64(len(strategies)), 1/float64(len(strategies))
			r.progress = func(f float64) { opts.Progress(base + share*f) }
		}
		st, err := r.run()
		if err != nil {
			return nil, fmt.Errorf("simulate %s: %w", name, err)
		}
		res.Strategies = append(res.Strategies, *st)
	}
	return res, nil
}

// runner is one strategy's simulation.
type runner struct {
	p        *model.Profiles
	adv      *advise.Report
	gpu      *catalog.GPU
	fl       advise.Fleet
	cal      *advise.Calibration
	name     string
	nodes    int
	jobs     []job
	backfill int
	progress func(float64)

	state  *alloc.State
	claims []*alloc.Claim // per workload: the template (nil: cannot serve)
	loads  []advise.Load
	need   []int64
	// running jobs by device, GPUs and nodes in use.
	onDev    map[string][]int // device -> job ids
	devOf    map[int]alloc.Assigned
	gpuJobs  map[string]int
	nodeJobs map[string]int
	events   eventHeap
	queue    []int // job ids, arrival order
	st       Strategy
	demand   float64 // Σ SM demand of running jobs
	needMiB  int64   // Σ memory needed by running jobs
	gpuMiB   int64   // memory of the GPUs in use
	slowSum  float64
	delays   []float64
	// integrals
	last                                 time.Duration
	gpuArea, nodeArea, utilArea, strArea float64
}

type event struct {
	at   time.Duration
	kind int // 0 departure, 1 arrival (departures first at a tie)
	job  int
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	if h[i].kind != h[j].kind {
		return h[i].kind < h[j].kind
	}
	return h[i].job < h[j].job
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (r *runner) run() (*Strategy, error) {
	r.st.Name = r.name
	if err := r.setup(); err != nil {
		return nil, err
	}
	next := 0 // next arrival (jobs are sorted by arrival)
	horizon := r.p.Sim.Duration
	sampleAt := time.Duration(0)
	steps := 0
	for {
		// The next event: an arrival, a departure, or a sample.
		at, isArrival := time.Duration(math.MaxInt64), false
		if next < len(r.jobs) {
			at, isArrival = r.jobs[next].arrive, true
		}
		if len(r.events) > 0 && r.events[0].at <= at {
			at, isArrival = r.events[0].at, false
		}
		if sampleAt <= at && sampleAt <= horizon {
			r.advance(sampleAt)
			r.sample(sampleAt)
			sampleAt += r.p.Sim.SampleEvery
			continue
		}
		if at > horizon {
			break
		}
		r.advance(at)
		if isArrival {
			j := next
			next++
			if r.claims[r.jobs[j].w] == nil {
				r.st.Rejected++
				continue
			}
			if len(r.queue) > 0 || !r.tryStart(j, at) {
				r.queue = append(r.queue, j)
			}
		} else {
			ev := heap.Pop(&r.events).(event)
			if err := r.finish(ev.job); err != nil {
				return nil, err
			}
			r.drain(at)
		}
		if steps++; r.progress != nil && steps%4096 == 0 {
			r.progress(float64(at) / float64(horizon))
		}
	}
	r.advance(horizon)
	// Every decision was the real allocator's: its rules hold at the end.
	if err := r.state.Check(); err != nil {
		return nil, fmt.Errorf("the allocator's state breaks a rule at the end: %w", err)
	}
	if r.progress != nil {
		r.progress(1)
	}
	r.st.Queued = len(r.queue)
	hours := horizon.Hours()
	if hours > 0 {
		r.st.MeanGPUs = round(r.gpuArea/hours, 2)
	}
	r.st.GPUHours, r.st.NodeHours = round(r.gpuArea, 1), round(r.nodeArea, 1)
	if r.fl.PricePerNodeHour != nil {
		r.st.Cost, r.st.CostKnown = round(r.nodeArea**r.fl.PricePerNodeHour, 2), true
	}
	if r.gpuArea > 0 {
		r.st.Utilization = round(r.utilArea/r.gpuArea, 3)
		r.st.Stranded = round(r.strArea/r.gpuArea, 3)
	}
	if r.st.Started > 0 {
		r.st.MeanSlowdown = round(r.slowSum/float64(r.st.Started), 3)
	}
	if n := len(r.delays); n > 0 {
		sort.Float64s(r.delays)
		sum := 0.0
		for _, d := range r.delays {
			sum += d
		}
		r.st.DelayMean = round(sum/float64(n), 1)
		r.st.DelayP95 = round(r.delays[min(n-1, int(math.Ceil(0.95*float64(n)))-1)], 1)
		r.st.DelayMax = round(r.delays[n-1], 1)
	}
	return &r.st, nil
}

// setup builds the strategy's fleet and one claim template per workload.
func (r *runner) setup() error {
	usesMIG, usesOther := false, false
	policy := alloc.Policy{DefaultReplicas: 2}
	r.claims = make([]*alloc.Claim, len(r.p.Workloads))
	r.loads = make([]advise.Load, len(r.p.Workloads))
	r.need = make([]int64, len(r.p.Workloads))
	for i := range r.p.Workloads {
		w := &r.p.Workloads[i]
		mech, sz, ok := r.adv.Pick(r.name, i)
		mem, util, _ := advise.Effective(w)
		r.need[i] = mem
		r.loads[i] = advise.Load{Util: float64(util) / 100, Occ: r.cal.OccupancyOf(w)}
		if w.Trace != nil && w.Utilization == 0 {
			// Sized by the trace's 95th percentile, busy on average at
			// its mean: contention is about the time-average.
			r.loads[i].Util = advise.Summarize(w.Trace).MeanUtilization / 100
		}
		if !ok || mem > r.gpu.MemoryMiB {
			continue
		}
		req, iso := advise.Request(w, mech, sz, r.gpu)
		if mech == advise.MPS && sz.ThreadPercent > 0 {
			r.loads[i].Limit = float64(sz.ThreadPercent) / 100
		}
		switch mech {
		case advise.MIG:
			usesMIG = true
		case advise.TimeSlicing:
			policy.DefaultReplicas = max(policy.DefaultReplicas, min(sz.TimeSliceReplicas, 64))
			usesOther = true
		default:
			usesOther = true
		}
		r.claims[i] = &alloc.Claim{Tenant: w.Tenant, Isolation: iso, Requests: []alloc.Request{req}}
	}
	dynMIG := usesMIG && r.gpu.MIG != nil
	policy.AllowModeSwitch = dynMIG && usesOther
	fleet := alloc.Fleet{Policy: policy}
	for n := 0; n < r.nodes; n++ {
		name := "node-" + strconv.Itoa(n)
		node := alloc.Node{Name: name, InstanceType: r.fl.InstanceType}
		for g := 0; g < r.fl.GPUsPerNode; g++ {
			gp := alloc.GPU{UUID: name + "-gpu-" + strconv.Itoa(g), Index: g, Model: r.gpu.ID, Healthy: true,
				Sharing: alloc.Sharing{Mode: alloc.Dynamic}}
			if dynMIG {
				// A mixed strategy starts with MIG off: the allocator
				// turns it on for a GPU when a MIG claim needs one.
				gp.MIGEnabled, gp.DynamicMIG = !usesOther, true
			}
			node.GPUs = append(node.GPUs, gp)
		}
		fleet.Nodes = append(fleet.Nodes, node)
	}
	st, err := alloc.NewState(fleet, nil, alloc.Options{})
	if err != nil {
		return err
	}
	r.state = st
	// A workload that does not fit an empty fleet cannot be served.
	for i, c := range r.claims {
		if c == nil {
			continue
		}
		probe := *c
		probe.Name = "probe"
		if _, err := st.AllocateAheadQuick(&probe, nil); err != nil {
			r.claims[i] = nil
		}
	}
	r.onDev, r.devOf = map[string][]int{}, map[int]alloc.Assigned{}
	r.gpuJobs, r.nodeJobs = map[string]int{}, map[string]int{}
	return nil
}

// advance integrates the fleet's measures up to t.
func (r *runner) advance(t time.Duration) {
	if t <= r.last {
		return
	}
	h := (t - r.last).Hours()
	g := float64(len(r.gpuJobs))
	r.gpuArea += g * h
	r.nodeArea += float64(len(r.nodeJobs)) * h
	r.utilArea += math.Min(r.demand, g) * h
	if r.gpuMiB > 0 {
		r.strArea += g * h * (1 - float64(r.needMiB)/float64(r.gpuMiB))
	}
	r.last = t
}

func (r *runner) sample(t time.Duration) {
	r.st.Series = append(r.st.Series, Point{Hours: round(t.Hours(), 3), GPUs: len(r.gpuJobs), Running: len(r.devOf), Queued: len(r.queue)})
}

// tryStart asks the allocator for job j and starts it if it fits.
func (r *runner) tryStart(j int, now time.Duration) bool {
	jb := &r.jobs[j]
	c := *r.claims[jb.w]
	c.Name = "j" + strconv.Itoa(j)
	r.st.Decisions++
	a, err := r.state.AllocateAheadQuick(&c, nil)
	if err != nil {
		return false
	}
	if err := r.state.Apply(a); err != nil {
		return false
	}
	d := a.Devices[0]
	for _, ch := range a.Changes {
		if ch.Kind != alloc.ConfigureShare {
			r.st.MIGChanges++
		}
	}
	// The slowdown is fixed at the start, from who is on the device now.
	others := make([]advise.Load, 0, len(r.onDev[d.Device]))
	for _, o := range r.onDev[d.Device] {
		others = append(others, r.loads[r.jobs[o].w])
	}
	frac := 1.0
	if d.Profile != "" && r.gpu.MIG != nil {
		if pr, err := r.gpu.Profile(d.Profile); err == nil {
			frac = float64(pr.ComputeSlices) / float64(r.gpu.MIG.ComputeSlices)
		}
	}
	mech := advise.Dedicated
	switch d.Mode {
	case alloc.MPS:
		mech = advise.MPS
	case alloc.TimeSlice:
		mech = advise.TimeSlicing
	}
	slow := r.cal.Slowdown(mech, r.loads[jb.w], others, frac)
	r.slowSum += slow
	r.onDev[d.Device] = append(r.onDev[d.Device], j)
	r.devOf[j] = d
	if r.gpuJobs[d.GPU] == 0 {
		r.gpuMiB += r.gpu.MemoryMiB
	}
	r.gpuJobs[d.GPU]++
	r.st.PeakGPUs = max(r.st.PeakGPUs, len(r.gpuJobs))
	r.nodeJobs[d.Node]++
	l := r.loads[jb.w]
	r.demand += l.Util * l.Occ
	r.needMiB += r.need[jb.w]
	r.st.Started++
	r.delays = append(r.delays, (now - jb.arrive).Seconds())
	heap.Push(&r.events, event{at: now + time.Duration(float64(jb.runAlone)*slow), job: j})
	return true
}

// finish releases job j.
func (r *runner) finish(j int) error {
	d, ok := r.devOf[j]
	if !ok {
		return fmt.Errorf("job %d is not running", j)
	}
	if err := r.state.Release("j" + strconv.Itoa(j)); err != nil {
		return err
	}
	delete(r.devOf, j)
	list := r.onDev[d.Device]
	if k := slices.Index(list, j); k >= 0 {
		list = slices.Delete(list, k, k+1)
	}
	if len(list) == 0 {
		delete(r.onDev, d.Device)
	} else {
		r.onDev[d.Device] = list
	}
	if r.gpuJobs[d.GPU]--; r.gpuJobs[d.GPU] == 0 {
		delete(r.gpuJobs, d.GPU)
		r.gpuMiB -= r.gpu.MemoryMiB
	}
	if r.nodeJobs[d.Node]--; r.nodeJobs[d.Node] == 0 {
		delete(r.nodeJobs, d.Node)
	}
	l := r.loads[r.jobs[j].w]
	r.demand -= l.Util * l.Occ
	r.needMiB -= r.need[r.jobs[j].w]
	r.st.Completed++
	return nil
}

// drain starts queued jobs in arrival order, trying at most backfill of
// them; those that fit start, the others keep their place.
func (r *runner) drain(now time.Duration) {
	if len(r.queue) == 0 {
		return
	}
	kept := r.queue[:0]
	tried := 0
	for i, j := range r.queue {
		if tried >= r.backfill {
			kept = append(kept, r.queue[i:]...)
			break
		}
		tried++
		if !r.tryStart(j, now) {
			kept = append(kept, j)
		}
	}
	r.queue = kept
}

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}
