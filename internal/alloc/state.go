package alloc

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/mig"
)

// State is the allocator's working copy of a fleet and its allocations,
// indexed for fast decisions. Allocate reads it; only Apply and Release
// change it. A State is not safe for concurrent use; Clone it instead.
type State struct {
	cat    *catalog.Catalog
	policy Policy
	geos   map[string]*mig.Geometry
	models map[string]*catalog.GPU

	nodes []nodeState
	gpus  []gpuState
	devs  []devState

	allocs  map[string]*Allocation
	byUUID  map[string]int // device uuid or planned id -> device index
	gpuIdx  map[string]int // GPU uuid -> GPU index
	nodeIdx map[string]int // node name -> node index
	idx     index
	sel     *selectorCache
	// memos are constrained searches' failures by claim shape
	// (bestConstrained).
	memos map[string]*constrainedMemo
	// pipes remembers MPS pipe directories by device id (pipeOf).
	pipes map[string]string
	// occBuf is bestOpen's scratch list of occupancy classes.
	occBuf []occEntry
	// migOn counts the GPUs with MIG on: with some on and some off, a
	// shared claim may land either way (see wholeFirst).
	migOn int
}

type nodeState struct {
	node    *Node
	gpus    []int
	touched int // device assignments on this node
	attrs   map[string]any
	class   int
	ver     uint64 // bumped whenever one of its GPUs is reindexed
	// indexedBusy is whether the index last saw the node touched.
	indexedBusy bool
}

type gpuState struct {
	node     int
	spec     *GPU
	model    *catalog.GPU
	geo      *mig.Geometry // nil when the model has no MIG
	migOn    bool
	dynamic  bool
	healthy  bool
	whole    int   // device index of the whole GPU when MIG is off, else -1
	inst     []int // device indices of live MIG instances
	allDevs  []int // every device index ever on this GPU, dead ones too
	occ      mig.Occupancy
	touched  int // device assignments on this GPU
	occKey   occKey
	inOccIdx bool
	gen      uint64 // see selectorCache
	ver      uint64 // bumped whenever it is reindexed
}

type devState struct {
	gpu     int
	alive   bool
	id      string // uuid, or "<gpu>/<profile>@<start>" for a planned instance
	isMIG   bool
	profile int // geometry profile index when isMIG
	start   int
	memMiB  int64
	compute int // percent of a whole GPU this device has
	sharing Sharing
	// dynamic devices had no sharing of their own (the fleet reported
	// Dynamic, or the allocator created them): they take the sharing of
	// their first claim and go back to Dynamic when the last one leaves.
	dynamic bool

	// usage
	mode     Mode // the mode serving current claims ("" when idle)
	usedMem  int64
	usedComp int
	clients  int
	slots    uint64 // replica / client slots in use
	tenants  []tenantUse
	strict   int            // claims with tenant isolation
	hardware bool           // held alone (exclusive, mig or hardware isolation)
	attrs    map[string]any // the selector's `device`; nil until first needed
	gen      uint64         // see selectorCache
}

type tenantUse struct {
	name string
	n    int
}

func (d *devState) idle() bool { return d.clients == 0 }

// Options configure a State.
type Options struct {
	// Catalog defaults to catalog.Default().
	Catalog *catalog.Catalog
}

// NewState indexes a fleet and the allocations already made on it. The
// fleet is the truth about layouts: the existing allocations' changes are
// taken as already made (as in a snapshot from Fleet()), and only their use
// of devices is applied — checked against every rule, so a snapshot that
// would break one is rejected rather than trusted.
func NewState(f Fleet, existing []Allocation, opts Options) (*State, error) {
	cat := opts.Catalog
	if cat == nil {
		cat = catalog.Default()
	}
	s := &State{cat: cat, policy: f.Policy, geos: map[string]*mig.Geometry{}, models: map[string]*catalog.GPU{},
		allocs: map[string]*Allocation{}, byUUID: map[string]int{}, gpuIdx: map[string]int{}, nodeIdx: map[string]int{},
		sel: newSelectorCache()}
	if s.policy.Placement == "" {
		s.policy.Placement = "binpack"
	}
	if s.policy.Placement != "binpack" && s.policy.Placement != "spread" {
		return nil, fmt.Errorf("policy.placement %q: want binpack or spread", s.policy.Placement)
	}
	var errs []error
	for ni := range f.Nodes {
		n := &f.Nodes[ni]
		if _, dup := s.nodeIdx[n.Name]; n.Name == "" || dup {
			errs = append(errs, fmt.Errorf("nodes[%d]: name %q is empty or repeated", ni, n.Name))
			continue
		}
		s.appendNode(n)
		for gi := range n.GPUs {
			if err := s.addGPU(len(s.nodes)-1, &n.GPUs[gi]); err != nil {
				errs = append(errs, fmt.Errorf("node %s gpu %d: %w", n.Name, gi, err))
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	s.idx = newIndex(s)
	for i := range existing {
		a := existing[i]
		if _, dup := s.allocs[a.Claim]; dup {
			return nil, fmt.Errorf("existing allocation %s: listed twice", a.Claim)
		}
		if _, err := s.apply(&a, false); err != nil {
			return nil, fmt.Errorf("existing allocation %s: %w", a.Claim, err)
		}
		s.allocs[a.Claim] = &a
	}
	return s, nil
}

// appendNode adds a node without GPUs.
func (s *State) appendNode(n *Node) {
	s.nodeIdx[n.Name] = len(s.nodes)
	s.nodes = append(s.nodes, nodeState{node: n, attrs: nodeAttrs(n), class: s.classOf(n)})
}

// classOf numbers a node's class: nodes with the same labels and instance
// type, which any selector that does not read the node's name treats
// alike (the index keeps devices by class). Numbers are kept with the
// selector cache, so a State and its clones agree on them.
func (s *State) classOf(n *Node) int {
	keys := make([]string, 0, len(n.Labels))
	for k := range n.Labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	b.WriteString(n.InstanceType)
	for _, k := range keys {
		b.WriteString("\x00" + k + "\x00" + n.Labels[k])
	}
	return s.sel.classOf(b.String())
}

// AddNode adds a node with its GPUs to the fleet, as NewState would have
// taken it, and indexes it: the allocations already made stay as they are.
// A planner growing a pool uses it instead of rebuilding the State. It
// changes nothing when the node is invalid (name empty or taken, a GPU
// uuid repeated, an unknown model, a bad layout or sharing).
func (s *State) AddNode(n Node) error {
	if _, dup := s.nodeIdx[n.Name]; n.Name == "" || dup {
		return fmt.Errorf("node name %q is empty or already in the fleet", n.Name)
	}
	own := n
	own.GPUs = slices.Clone(n.GPUs)
	for i := range own.GPUs {
		own.GPUs[i].Instances = slices.Clone(own.GPUs[i].Instances)
	}
	s.appendNode(&own)
	ni := len(s.nodes) - 1
	for gi := range own.GPUs {
		if err := s.addGPU(ni, &own.GPUs[gi]); err != nil {
			s.dropLastNode()
			return fmt.Errorf("node %s gpu %d: %w", n.Name, gi, err)
		}
	}
	for _, gi := range s.nodes[ni].gpus {
		s.reindexGPU(gi)
	}
	return nil
}

// RemoveNode takes the node added last out of the fleet again. It refuses
// (changing nothing) any other node, a node whose devices serve a claim,
// and one on which devices were created after a later node was added.
func (s *State) RemoveNode(name string) error {
	ni, ok := s.nodeIdx[name]
	if !ok {
		return fmt.Errorf("node %s is not in the fleet", name)
	}
	if ni != len(s.nodes)-1 {
		return fmt.Errorf("node %s: only the node added last can be removed", name)
	}
	if s.nodes[ni].touched > 0 {
		return fmt.Errorf("node %s: its devices serve claims", name)
	}
	first := len(s.devs)
	n := 0
	for _, gi := range s.nodes[ni].gpus {
		for _, di := range s.gpus[gi].allDevs {
			first = min(first, di)
			n++
		}
	}
	if first+n != len(s.devs) {
		return fmt.Errorf("node %s: devices were made elsewhere after it", name)
	}
	s.dropLastNode()
	return nil
}

// dropLastNode removes the last node, its GPUs and their devices (the last
// ones of the State), from the State and the index.
func (s *State) dropLastNode() {
	ni := len(s.nodes) - 1
	nd := &s.nodes[ni]
	for k := len(nd.gpus) - 1; k >= 0; k-- {
		gi := nd.gpus[k]
		if gi < len(s.idx.gpuFree) {
			s.unindexGPU(gi)
		}
		g := &s.gpus[gi]
		for _, di := range g.allDevs {
			if s.byUUID[s.devs[di].id] == di {
				delete(s.byUUID, s.devs[di].id)
			}
		}
		delete(s.byUUID, g.spec.UUID)
		delete(s.gpuIdx, g.spec.UUID)
		if g.migOn {
			s.migOn--
		}
	}
	devs, gpus := len(s.devs), len(s.gpus)
	for _, gi := range nd.gpus {
		for _, di := range s.gpus[gi].allDevs {
			devs = min(devs, di)
		}
		gpus = min(gpus, gi)
	}
	s.devs = s.devs[:devs]
	s.gpus = s.gpus[:gpus]
	ix := &s.idx
	ix.devJoin = ix.devJoin[:min(len(ix.devJoin), devs)]
	ix.devIdle = ix.devIdle[:min(len(ix.devIdle), devs)]
	ix.gpuFree = ix.gpuFree[:min(len(ix.gpuFree), gpus)]
	delete(s.nodeIdx, nd.node.Name)
	s.nodes = s.nodes[:ni]
}

func (s *State) geometry(m *catalog.GPU) (*mig.Geometry, error) {
	if m.MIG == nil {
		return nil, nil
	}
	if g, ok := s.geos[m.ID]; ok {
		return g, nil
	}
	g, err := mig.New(m)
	if err != nil {
		return nil, err
	}
	s.geos[m.ID] = g
	return g, nil
}

func (s *State) addGPU(ni int, g *GPU) error {
	if g.UUID == "" {
		return fmt.Errorf("uuid is empty")
	}
	if _, dup := s.byUUID[g.UUID]; dup {
		return fmt.Errorf("uuid %s is repeated", g.UUID)
	}
	model, ok := s.models[g.Model]
	if !ok {
		m, err := s.cat.GPU(g.Model)
		if err != nil {
			return err
		}
		s.models[g.Model], model = m, m
	}
	geo, err := s.geometry(model)
	if err != nil {
		return err
	}
	if g.MIGEnabled && geo == nil {
		return fmt.Errorf("MIG is enabled but %s does not support MIG", model.ID)
	}
	if err := checkSharing(g.Sharing, "sharing"); err != nil {
		return err
	}
	gs := gpuState{node: ni, spec: g, model: model, geo: geo, migOn: g.MIGEnabled,
		dynamic: g.DynamicMIG && geo != nil, healthy: g.Healthy, whole: -1, gen: s.sel.nextGen()}
	gi := len(s.gpus)
	s.gpuIdx[g.UUID] = gi
	s.nodes[ni].gpus = append(s.nodes[ni].gpus, gi)
	s.gpus = append(s.gpus, gs)
	if g.MIGEnabled {
		s.migOn++
	}
	if !g.MIGEnabled {
		s.gpus[gi].whole = s.addDevice(devState{gpu: gi, alive: true, id: g.UUID,
			memMiB: model.MemoryMiB, compute: 100, sharing: g.Sharing, dynamic: g.Sharing.Mode == Dynamic})
		s.byUUID[g.UUID] = s.gpus[gi].whole
		return nil
	}
	s.byUUID[g.UUID] = -1 - gi // the GPU itself is not a device
	layout := make(mig.Layout, len(g.Instances))
	for i, in := range g.Instances {
		layout[i] = mig.Instance{Profile: in.Profile, Start: in.Start}
	}
	occ, err := geo.Occupancy(layout)
	if err != nil {
		return err
	}
	s.gpus[gi].occ = occ
	for i, in := range g.Instances {
		if err := checkSharing(in.Sharing, fmt.Sprintf("instances[%d].sharing", i)); err != nil {
			return err
		}
		id := in.UUID
		if id == "" {
			id = plannedID(g.UUID, in.Profile, in.Start)
		}
		if _, dup := s.byUUID[id]; dup {
			return fmt.Errorf("instance uuid %s is repeated", id)
		}
		p, _ := geo.Profile(in.Profile)
		d := s.migDevice(gi, p, in.Start, id, in.Sharing)
		d.dynamic = in.Sharing.Mode == Dynamic
		di := s.addDevice(d)
		s.gpus[gi].inst = append(s.gpus[gi].inst, di)
		s.byUUID[id] = di
	}
	return nil
}

func (s *State) migDevice(gi, p, start int, id string, sh Sharing) devState {
	g := &s.gpus[gi]
	mem, compute := profileSize(g.model, g.geo, p)
	return devState{gpu: gi, alive: true, id: id, isMIG: true, profile: p, start: start,
		memMiB: mem, compute: compute, sharing: sh}
}

// profileSize is the memory and compute share (percent of the whole GPU)
// of a MIG profile.
func profileSize(m *catalog.GPU, geo *mig.Geometry, p int) (int64, int) {
	shape := &geo.Shapes[p]
	mem := shape.MemoryMiB
	if mem <= 0 {
		mem = m.MemoryMiB * int64(shape.Size) / int64(geo.Slices)
	}
	return mem, shape.Compute * 100 / geo.ComputeSlices
}

func (s *State) addDevice(d devState) int {
	d.gen = s.sel.nextGen() // attrs are built when a selector first reads them
	s.devs = append(s.devs, d)
	di := len(s.devs) - 1
	s.gpus[d.gpu].allDevs = append(s.gpus[d.gpu].allDevs, di)
	return di
}

// plannedID names an instance that does not exist yet.
func plannedID(gpu, profile string, start int) string {
	return fmt.Sprintf("%s/%s@%d", gpu, profile, start)
}

func checkSharing(sh Sharing, field string) error {
	switch sh.Mode {
	case "", Exclusive, Dynamic:
	case TimeSlice:
		if sh.Replicas < 1 {
			return fmt.Errorf("%s.replicas %d: a time-sliced device needs at least 1 replica", field, sh.Replicas)
		}
		if sh.Replicas > 64 {
			return fmt.Errorf("%s.replicas %d: at most 64 replicas per device", field, sh.Replicas)
		}
		switch sh.Interval {
		case "", "Default", "Short", "Medium", "Long":
		default:
			return fmt.Errorf("%s.interval %q: want Default, Short, Medium or Long", field, sh.Interval)
		}
	case MPS:
		if sh.MaxClients < 1 || sh.MaxClients > MaxMPSClients {
			return fmt.Errorf("%s.maxClients %d: MPS takes 1..%d clients per device", field, sh.MaxClients, MaxMPSClients)
		}
		if sh.DefaultThreadPercent < 0 || sh.DefaultThreadPercent > 100 {
			return fmt.Errorf("%s.defaultThreadPercent %d: want 0..100", field, sh.DefaultThreadPercent)
		}
	default:
		return fmt.Errorf("%s.mode %q: want exclusive, timeslice, mps or dynamic", field, sh.Mode)
	}
	return nil
}

// Clone returns an independent copy for what-if decisions.
func (s *State) Clone() *State {
	c := *s
	c.nodes = slices.Clone(s.nodes)
	c.gpus = slices.Clone(s.gpus)
	for i := range c.gpus {
		c.gpus[i].inst = slices.Clone(s.gpus[i].inst)
		c.gpus[i].allDevs = slices.Clone(s.gpus[i].allDevs)
	}
	c.devs = slices.Clone(s.devs)
	for i := range c.devs {
		c.devs[i].tenants = slices.Clone(s.devs[i].tenants)
	}
	c.allocs = make(map[string]*Allocation, len(s.allocs))
	for k, v := range s.allocs {
		c.allocs[k] = v
	}
	c.byUUID = maps.Clone(s.byUUID)
	c.gpuIdx = maps.Clone(s.gpuIdx)
	c.nodeIdx = maps.Clone(s.nodeIdx)
	c.models = maps.Clone(s.models)
	c.geos = maps.Clone(s.geos)
	c.idx = s.idx.clone()
	c.sel = s.sel // answers are kept by generation (see selectorCache)
	c.memos = nil
	c.pipes = nil
	c.occBuf = nil
	return &c
}

// Allocations returns the committed allocations (do not modify them).
func (s *State) Allocations() map[string]*Allocation { return s.allocs }

// GPUsUsed counts the GPUs holding at least one allocation.
func (s *State) GPUsUsed() int {
	used := map[string]bool{}
	for _, a := range s.allocs {
		for _, d := range a.Devices {
			used[d.GPU] = true
		}
	}
	return len(used)
}
