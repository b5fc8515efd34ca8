package spec

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
)

// The keys ReadCompose knows inside the extensions it reads.
var (
	composeGPUKeys      = []string{"instanceType", "timeSlicingReplicas", "migProfile"}
	composeSliceKeys    = []string{"tenant", "isolation", "mode", "memory", "compute", "workload", "latencySensitive", "priority", "mps", "replicas", "metric", "targetConcurrency"}
	composeMPSKeys      = []string{"activeThreadPercent", "pinnedMemory"}
	composeScaleKeys    = []string{"minReplicas", "maxReplicas", "idleMinutesBeforeScalingDown", "idleThreshold", "overUtilizedMinutesBeforeScalingUp", "overUtilizedThreshold"}
	composeServerlessKs = []string{"targetPort", "enableAutoStop", "minimumNodesInPool"}
	composeModes        = []string{"auto", "exclusive", "timeslice", "mps", "mig"}
	composeIsolations   = []string{"none", "tenant", "hardware"}
	composeWorkloads    = []string{"inference", "interactive", "batch", "training"}
	// composeMetrics are the metrics a compose service may scale on (a
	// prometheus metric needs a URL and a query: a gpuslice service file).
	composeMetrics = []string{"gpu", "compute", "memory", "requests"}
)

// composeMaxReplicas bounds timeSlicingReplicas.
const composeMaxReplicas = 64

// composeGPU is one x-internal-integrations.multiTenantGpu.
type composeGPU struct {
	node     *yaml.Node
	f        *fields
	it       *catalog.InstanceType
	gpu      *catalog.GPU
	profile  *catalog.Profile // nil without a (valid) migProfile
	replicas int              // timeSlicingReplicas; 0 when unset or invalid
	hasMIG   bool             // migProfile given, valid or not
}

// composeSlice is one x-gpuslice block; set records which keys it gives
// and the node of each (mps keys as "mps.activeThreadPercent").
type composeSlice struct {
	set       map[string]*yaml.Node
	paths     map[string]string
	tenant    string
	isolation alloc.Isolation
	mode      alloc.Mode
	workload  alloc.Workload
	memoryMiB int64
	compute   int
	priority  int
	replicas  int
	latency   bool
	threads   int
	pinnedMiB int64
	metric    string
	target    int
}

// readGPU reads a multiTenantGpu mapping.
func (c *composeFile) readGPU(n *yaml.Node, path string) *composeGPU {
	w := c.w
	if n.Kind != yaml.MappingNode {
		w.errorf(n, path, "e.g. multiTenantGpu: {instanceType: g4dn.xlarge, timeSlicingReplicas: 2}", "want a mapping (key: value), found %s", kindName(n))
		return nil
	}
	f := w.mapping(n, path, composeGPUKeys...)
	g := &composeGPU{node: n, f: f}
	name, ok := w.str(f, "instanceType")
	cat := catalog.Default()
	switch {
	case !ok:
		w.errorf(n, join(path, "instanceType"), "e.g. instanceType: g4dn.xlarge (T4) or p4d.24xlarge (A100, MIG)", "multiTenantGpu needs an instanceType")
	case name != "":
		it, err := cat.InstanceType(name)
		if err != nil {
			w.errorf(f.get("instanceType"), join(path, "instanceType"), composeNotFoundHint(err), "unknown instance type %q", name)
			break
		}
		g.it = it
		g.gpu, _ = cat.GPU(it.GPU)
	}
	if r, ok := c.intIn(f, "timeSlicingReplicas", 1, composeMaxReplicas,
		"each GPU (or MIG instance) is offered as 1..64 time-sliced devices"); ok {
		g.replicas = int(r)
	}
	prof, ok := w.str(f, "migProfile")
	g.hasMIG = ok
	if ok && g.gpu != nil {
		pn := f.get("migProfile")
		pp := join(path, "migProfile")
		switch p, err := g.gpu.Profile(prof); {
		case g.gpu.MIG == nil:
			w.errorf(pn, pp, composeMIGTypesHint(g.it, prof),
				"%s has %s GPUs, which have no MIG: migProfile %s cannot be used", g.it.Name, g.gpu.ID, prof)
		case err != nil:
			w.errorf(pn, pp, composeNotFoundHint(err), "%s (%s) has no MIG profile %q", g.gpu.ID, g.it.Name, prof)
		default:
			g.profile = p
		}
	}
	return g
}

// composeNotFoundHint is a catalog lookup's did-you-mean and valid names.
func composeNotFoundHint(err error) string {
	nf, ok := err.(*catalog.NotFoundError)
	if !ok {
		return ""
	}
	h := "valid: " + composeList(nf.Valid, 12)
	if nf.Suggestion != "" {
		h = fmt.Sprintf("did you mean %q? %s", nf.Suggestion, h)
	}
	return h
}

// composeMIGTypesHint lists MIG-capable instance types of it's provider,
// those whose GPU has profile first, then by GPU memory.
func composeMIGTypesHint(it *catalog.InstanceType, profile string) string {
	cat := catalog.Default()
	its := cat.InstanceTypesWithGPU(func(g *catalog.GPU) bool { return g.MIG != nil })
	rank := func(t catalog.InstanceType) (bool, int64) {
		g, err := cat.GPU(t.GPU)
		if err != nil {
			return false, 0
		}
		_, perr := g.Profile(profile)
		return perr == nil, g.MemoryMiB
	}
	var same []catalog.InstanceType
	for _, t := range its {
		if t.Provider == it.Provider {
			same = append(same, t)
		}
	}
	sort.SliceStable(same, func(i, j int) bool {
		hi, mi := rank(same[i])
		hj, mj := rank(same[j])
		if hi != hj {
			return hi
		}
		return mi < mj
	})
	names := make([]string, len(same))
	for i, t := range same {
		names[i] = t.Name
	}
	return "MIG-capable instance types: " + composeList(names, 6) + "; or drop migProfile and time-slice with timeSlicingReplicas"
}

// readSlice reads an x-gpuslice block.
func (c *composeFile) readSlice(n *yaml.Node, path string) composeSlice {
	w := c.w
	f := w.mapping(n, path, composeSliceKeys...)
	s := composeSlice{set: map[string]*yaml.Node{}, paths: map[string]string{}}
	for _, k := range f.keys {
		s.set[k], s.paths[k] = f.get(k), join(path, k)
	}
	s.tenant, _ = w.str(f, "tenant")
	if _, ok := f.vals["tenant"]; ok && strings.TrimSpace(s.tenant) == "" {
		w.errorf(f.get("tenant"), join(path, "tenant"), "e.g. tenant: team-a", "tenant is empty")
	}
	s.isolation = alloc.Isolation(c.oneOf(f, "isolation", composeIsolations))
	s.mode = alloc.Mode(c.oneOf(f, "mode", composeModes))
	s.workload = alloc.Workload(c.oneOf(f, "workload", composeWorkloads))
	s.memoryMiB = c.size(f, "memory")
	if v, ok := c.intIn(f, "compute", 1, 100, "percent of one GPU's SMs, 1..100"); ok {
		s.compute = int(v)
	}
	if v, ok := c.intIn(f, "priority", -1000000, 1000000, "a whole number; higher runs first"); ok {
		s.priority = int(v)
	}
	if v, ok := c.intIn(f, "replicas", 0, 100000, "replica count, 0..100000"); ok {
		s.replicas = int(v)
	}
	s.latency, _ = w.boolean(f, "latencySensitive")
	s.metric = c.oneOf(f, "metric", composeMetrics)
	if v, ok := c.intIn(f, "targetConcurrency", 1, 10000, "requests in flight per replica that count as 100%, 1..10000"); ok {
		s.target = int(v)
	}
	if m := f.get("mps"); m != nil {
		mp := join(path, "mps")
		mf := w.mapping(m, mp, composeMPSKeys...)
		for _, k := range mf.keys {
			s.set["mps."+k], s.paths["mps."+k] = mf.get(k), join(mp, k)
		}
		if v, ok := c.intIn(mf, "activeThreadPercent", 1, 100, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: 1..100 percent of the SMs"); ok {
			s.threads = int(v)
		}
		s.pinnedMiB = c.size(mf, "pinnedMemory")
	}
	delete(s.set, "mps")
	return s
}

// merge returns top overridden key by key by s.
func (s composeSlice) merge(top composeSlice) composeSlice {
	out := top
	out.set, out.paths = map[string]*yaml.Node{}, map[string]string{}
	for k, n := range top.set {
		out.set[k], out.paths[k] = n, top.paths[k]
	}
	for k, n := range s.set {
		out.set[k], out.paths[k] = n, s.paths[k]
		switch k {
		case "tenant":
			out.tenant = s.tenant
		case "isolation":
			out.isolation = s.isolation
		case "mode":
			out.mode = s.mode
		case "workload":
			out.workload = s.workload
		case "memory":
			out.memoryMiB = s.memoryMiB
		case "compute":
			out.compute = s.compute
		case "priority":
			out.priority = s.priority
		case "replicas":
			out.replicas = s.replicas
		case "latencySensitive":
			out.latency = s.latency
		case "metric":
			out.metric = s.metric
		case "targetConcurrency":
			out.target = s.target
		case "mps.activeThreadPercent":
			out.threads = s.threads
		case "mps.pinnedMemory":
			out.pinnedMiB = s.pinnedMiB
		}
	}
	return out
}

// readCapabilities reads x-omnistrate-capabilities; nil without
// autoscaling or serverlessConfiguration. Unknown keys are warnings:
// Omnistrate has capabilities gpuslice does not use.
func (c *composeFile) readCapabilities(n *yaml.Node, path string) *Autoscaling {
	w := c.w
	f := w.mapping(n, path)
	as, sv := f.get("autoscaling"), f.get("serverlessConfiguration")
	if as == nil && sv == nil {
		return nil
	}
	a := &Autoscaling{}
	if as != nil {
		ap := join(path, "autoscaling")
		af := w.mapping(as, ap)
		c.warnUnknown(af, composeScaleKeys)
		get := func(key string, lo, hi int64, hint string) int {
			v, _ := c.intIn(af, key, lo, hi, hint)
			return int(v)
		}
		a.MinReplicas = get("minReplicas", 0, 100000, "0..100000 replicas")
		a.MaxReplicas = get("maxReplicas", 1, 100000, "1..100000 replicas")
		a.IdleMinutesBeforeScalingDown = get("idleMinutesBeforeScalingDown", 0, 100000, "minutes, 0 or more")
		a.IdleThreshold = get("idleThreshold", 0, 100, "percent utilization, 0..100")
		a.OverUtilizedMinutesBeforeScalingUp = get("overUtilizedMinutesBeforeScalingUp", 0, 100000, "minutes, 0 or more")
		a.OverUtilizedThreshold = get("overUtilizedThreshold", 0, 100, "percent utilization, 0..100")
		if !af.has("maxReplicas") {
			w.errorf(as, join(ap, "maxReplicas"), "e.g. maxReplicas: 3", "autoscaling needs maxReplicas")
		} else if af.has("minReplicas") && a.MaxReplicas > 0 && a.MinReplicas > a.MaxReplicas {
			w.errorf(af.get("minReplicas"), join(ap, "minReplicas"), fmt.Sprintf("minReplicas ≤ maxReplicas: lower minReplicas to %d or raise maxReplicas to %d", a.MaxReplicas, a.MinReplicas),
				"minReplicas %d is more than maxReplicas %d", a.MinReplicas, a.MaxReplicas)
		}
	}
	if sv != nil {
		sf := w.mapping(sv, join(path, "serverlessConfiguration"))
		c.warnUnknown(sf, composeServerlessKs)
		p, _ := c.intIn(sf, "targetPort", 1, 65535, "a port, 1..65535")
		m, _ := c.intIn(sf, "minimumNodesInPool", 0, 100000, "nodes, 0 or more")
		a.TargetPort, a.MinimumNodesInPool = int(p), int(m)
		a.EnableAutoStop, _ = w.boolean(sf, "enableAutoStop")
	}
	return a
}

// intIn reads a whole number; out of [lo, hi] is an error naming the
// range. ok is false when absent or invalid.
func (c *composeFile) intIn(f *fields, key string, lo, hi int64, hint string) (int64, bool) {
	n := f.get(key)
	if n == nil {
		return 0, false
	}
	v, err := strconv.ParseInt(strings.TrimSpace(n.Value), 10, 64)
	if n.Kind != yaml.ScalarNode || err != nil {
		c.w.errorf(n, join(f.path, key), fmt.Sprintf("want a whole number from %d to %d: %s", lo, hi, hint), "%s: %s is not a whole number", key, kindName(n))
		return 0, false
	}
	hint = fmt.Sprintf("want %d..%d: %s", lo, hi, hint)
	switch {
	case v < 0 && lo >= 0:
		c.w.errorf(n, join(f.path, key), hint, "%s %d is negative", key, v)
	case v < lo:
		c.w.errorf(n, join(f.path, key), hint, "%s %d is less than %d", key, v, lo)
	case v > hi:
		c.w.errorf(n, join(f.path, key), hint, "%s %d is more than %d", key, v, hi)
	default:
		return v, true
	}
	return 0, false
}

// oneOf reads a string that must be one of valid.
func (c *composeFile) oneOf(f *fields, key string, valid []string) string {
	v, ok := c.w.str(f, key)
	if n := f.get(key); !ok || n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return ""
	}
	if contains(valid, v) {
		return v
	}
	hint := "valid: " + strings.Join(valid, ", ")
	if s := catalog.Suggest(v, valid); s != "" {
		hint = fmt.Sprintf("did you mean %q? %s", s, hint)
	}
	c.w.errorf(f.get(key), join(f.path, key), hint, "unknown %s %q", key, v)
	return ""
}

// size reads a memory size in MiB (at least 1).
func (c *composeFile) size(f *fields, key string) int64 {
	n := f.get(key)
	if n == nil {
		return 0
	}
	v, err := ParseMemoryMiB(n.Value)
	switch {
	case n.Kind != yaml.ScalarNode:
		c.w.errorf(n, join(f.path, key), sizeHint, "%s: want a size, found %s", key, kindName(n))
	case err != nil:
		c.w.errorf(n, join(f.path, key), sizeHint, "%s %q is not a size", key, n.Value)
	case v < 1:
		c.w.errorf(n, join(f.path, key), sizeHint, "%s %q is less than 1 MiB", key, n.Value)
	default:
		return v
	}
	return 0
}

// warnUnknown warns about keys outside known, with a did-you-mean.
func (c *composeFile) warnUnknown(f *fields, known []string) {
	for _, k := range f.keys {
		if contains(known, k) || strings.HasPrefix(k, "x-") {
			continue
		}
		hint := "gpuslice reads: " + strings.Join(known, ", ")
		if s := catalog.Suggest(k, known); s != "" {
			hint = fmt.Sprintf("did you mean %q? %s", s, hint)
		}
		c.w.warnf(f.knode[k], join(f.path, k), hint, "%q is not read by gpuslice", k)
	}
}

// composeList joins at most n names, then says how many more.
func composeList(xs []string, n int) string {
	if len(xs) <= n {
		return strings.Join(xs, ", ")
	}
	return strings.Join(xs[:n], ", ") + fmt.Sprintf(", … (%d more)", len(xs)-n)
}
