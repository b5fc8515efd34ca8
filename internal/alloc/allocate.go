package alloc

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gpuslice/gpuslice/internal/mig"
)

// MPSPipeRoot is where MPS control daemons' pipe directories live on a
// node; each device gets its own directory (one daemon per device, and by
// the isolation rules one tenant per daemon unless every claim on it opted
// into isolation none).
const MPSPipeRoot = "/run/gpuslice/mps"

// Allocate decides where a claim goes. It does not change the State: the
// caller commits the answer with Apply. When nothing fits, the error is a
// *NoFitError saying per node why.
func (s *State) Allocate(c *Claim) (*Allocation, error) {
	a, err := s.allocate(c, room{}, true)
	if err == nil {
		a.Env = processEnv(a)
	}
	return a, err
}

// allocate is Allocate asking a single-device claim's new device (one it
// opens or creates, not one it joins) for room beyond the request, and
// leaving the process environment to the caller (only the answer kept
// needs one). Without
// explain, a claim that fits nowhere gets ErrNoFit instead of the costly
// *NoFitError.
func (s *State) allocate(c *Claim, extra room, explain bool) (*Allocation, error) {
	if err := validateClaim(c, func(expr string) error { _, err := s.sel.get(expr); return err }); err != nil {
		return nil, fmt.Errorf("claim %s: %w", c.Name, err)
	}
	if _, dup := s.allocs[c.Name]; dup {
		return nil, fmt.Errorf("claim %s is already allocated", c.Name)
	}
	iso := orTenant(c.Isolation)
	steps := decisionOrder(c, iso)
	try := func(wholeOnly, explain bool) (*Allocation, error) {
		a := &Allocation{Claim: c.Name, Tenant: c.Tenant, Isolation: iso}
		p := placer{s: s, c: c, iso: iso, groups: constraintGroups(c), explain: explain, wholeOnly: wholeOnly}
		if len(steps) == 1 {
			p.room = extra
		}
		var taken map[int]bool
		if len(steps) > 1 {
			taken = map[int]bool{}
		}
		if err := p.place(steps, a, taken); err != nil {
			return nil, err
		}
		return a, nil
	}
	// Whole GPUs first (see wholeFirst); MIG instances only when no whole
	// GPU can take the claim.
	whole := s.wholeFirst(c, iso)
	var a *Allocation
	var err error
	if whole {
		a, err = try(true, false)
	}
	if !whole || err != nil {
		if err != nil && !IsNoFit(err) {
			return nil, err
		}
		if a, err = try(false, explain); err != nil {
			return nil, err
		}
	}
	a.Notes = s.landingNotes(c, iso, a, whole)
	if len(a.Devices) > 1 { // report devices in the claim's request order
		rank := map[string]int{}
		for i, r := range c.Requests {
			rank[r.Name] = i
		}
		sort.SliceStable(a.Devices, func(i, j int) bool { return rank[a.Devices[i].Request] < rank[a.Devices[j].Request] })
	}
	return a, nil
}

// step is one device of a request to decide.
type step struct {
	r *Request
	k int
	d decision
}

// decisionOrder lists a claim's devices biggest first (MIG profile size,
// then memory): first-fit decreasing packs better, and MIG instances that
// must share a GPU only fit when the big ones go first (NVIDIA's 3-2-1-1
// example).
func decisionOrder(c *Claim, iso Isolation) []step {
	var out []step
	for ri := range c.Requests {
		r := &c.Requests[ri]
		d := decide(r, iso)
		for k := 0; k < max(r.Count, 1); k++ {
			out = append(out, step{r: r, k: k, d: d})
		}
	}
	if len(out) == 1 {
		return out
	}
	size := func(r *Request) (int, int64) {
		g := 0
		if p, err := mig.ParseProfileName(r.Profile); err == nil && r.Profile != "" {
			g = p.ComputeSlices*1000 + p.MemoryGB
		}
		return g, r.MemoryMiB
	}
	sort.SliceStable(out, func(i, j int) bool {
		gi, mi := size(out[i].r)
		gj, mj := size(out[j].r)
		if gi != gj {
			return gi > gj
		}
		return mi > mj
	})
	return out
}

// placer decides the devices of one claim in sequence.
type placer struct {
	s       *State
	c       *Claim
	iso     Isolation
	groups  map[string][]Constraint
	explain bool // build a NoFitError (costly) on failure
	// wholeOnly keeps the devices of requests that did not ask for MIG
	// on whole GPUs (wholeFirst's first pass).
	wholeOnly bool
	room      room // asked of a new device beyond the request (single-device claims)
	// tries counts the candidates a constrained search applied (shared by
	// the nested searches of one claim), bounded by maxTries.
	tries *int
}

// ErrNoFit is the failure of a claim that fits nowhere when no
// explanation was asked for (AllocateAheadQuick); IsNoFit reports true.
var ErrNoFit = errors.New("no room for the claim")

// place decides steps in order, appending to a. Every device but the last
// is applied to the state so the next sees it, and undone before return.
func (p *placer) place(steps []step, a *Allocation, taken map[int]bool) error {
	if p.groups != nil {
		if p.tries == nil {
			p.tries = new(int)
		}
		return p.search(steps, a, taken)
	}
	s := p.s
	var undos []func()
	defer func() {
		for i := len(undos) - 1; i >= 0; i-- {
			undos[i]()
		}
	}()
	for i, st := range steps {
		n := &need{claim: p.c, req: st.r, iso: p.iso, choices: st.d.choices, taken: taken, onNode: -1, onGPU: -1, room: p.room,
			wholeOnly: p.wholeOnly && !asksForMIG(st.r, p.iso)}
		if a.hasMPS() {
			n.choices = withoutMode(n.choices, MPS)
		}
		cons := p.groups[st.r.Name]
		s.pin(n, a, cons)
		var best cand
		var ok bool
		switch {
		case n.onNode >= 0: // pinned by an earlier device of its group
			best, ok = s.bestScan(n, []int{n.onNode})
		case len(cons) > 0: // first of its group
			best, ok = p.bestConstrained(n, cons, steps[i+1:], a)
		default:
			best, ok = s.bestIndexed(n)
		}
		if !ok {
			if p.explain {
				return s.explain(p.c, st.r, st.k, n)
			}
			return ErrNoFit
		}
		part := s.assignment(p.c, p.iso, st.r, best)
		a.Why = append(a.Why, st.r.Name+"["+strconv.Itoa(st.k)+"]: "+st.d.why+"; "+s.describe(&best))
		a.Devices = append(a.Devices, part.Devices...)
		a.Changes = append(a.Changes, part.Changes...)
		if i == len(steps)-1 {
			break // the last device: nothing to decide on top of it
		}
		undo, err := s.apply(part, true)
		if err != nil {
			return fmt.Errorf("claim %s: internal error applying a decision: %w", p.c.Name, err)
		}
		undos = append(undos, undo)
		if taken != nil {
			taken[s.byUUID[part.Devices[0].Device]] = true
		}
	}
	return nil
}

func (a *Allocation) hasMPS() bool {
	for _, d := range a.Devices {
		if d.Mode == MPS {
			return true
		}
	}
	return false
}

func withoutMode(cs []choice, m Mode) []choice {
	var out []choice
	for _, c := range cs {
		if c.mode != m {
			out = append(out, c)
		}
	}
	return out
}

// constraintGroups maps each request name to the constraints it is in.
func constraintGroups(c *Claim) map[string][]Constraint {
	if len(c.Constraints) == 0 {
		return nil
	}
	out := map[string][]Constraint{}
	for _, con := range c.Constraints {
		names := con.Requests
		if len(names) == 0 {
			for _, r := range c.Requests {
				names = append(names, r.Name)
			}
		}
		for _, n := range names {
			out[n] = append(out[n], con)
		}
	}
	return out
}

// pin restricts a device to the node or GPU of the devices already chosen
// in the same constraint.
func (s *State) pin(n *need, a *Allocation, cons []Constraint) {
	for _, con := range cons {
		for _, d := range a.Devices {
			if !inConstraint(con, d.Request, n.claim) {
				continue
			}
			gi := s.gpuIdx[d.GPU]
			if con.Match == "gpu" {
				n.onGPU = gi
			}
			n.onNode = s.gpus[gi].node
		}
	}
}

func inConstraint(con Constraint, req string, c *Claim) bool {
	if len(con.Requests) == 0 {
		return true
	}
	for _, r := range con.Requests {
		if r == req {
			return true
		}
	}
	return false
}

// bestConstrained places the first device of a constrained group where the
// rest of the claim fits too: the best device on each node (for a GPU
// constraint, each GPU) is a candidate if the remaining steps, decided for
// real on the state (undone afterwards), fit beside it; the best candidate
// wins. It asks the index for the best device anywhere, and when the rest
// does not fit beside it, rules out that node (or GPU) and asks again: the
// best of the rest is the next node's best. After maxSkips such rounds it
// scans the nodes left, one by one.
//
// When the group is the whole claim, whether a node (GPU) works depends
// only on that node (GPU) and the claim's shape, so the nodes ruled out
// are remembered for the next claim of the same shape (a workload's next
// replica) as long as they do not change.
func (p *placer) bestConstrained(n *need, cons []Constraint, rest []step, a *Allocation) (cand, bool) {
	const maxSkips = 64
	s := p.s
	perGPU := false
	for _, con := range cons {
		perGPU = perGPU || con.Match == "gpu"
	}
	skip := map[int]bool{}
	memo := p.memoFor(cons, rest, a, perGPU)
	if memo != nil {
		for u, ver := range memo.failed {
			if s.unitVersion(u, perGPU) == ver {
				skip[u] = true
			} else {
				delete(memo.failed, u)
			}
		}
	}
	var fails []int
	fail := func(u int) {
		skip[u] = true
		fails = append(fails, u)
	}
	defer func() {
		if memo != nil { // versions are read after every trial is undone
			for _, u := range fails {
				memo.failed[u] = s.unitVersion(u, perGPU)
			}
		}
	}()
	// last resort: other candidates on the units ruled out; a unit
	// rescued this way is no longer remembered as failed.
	fallback := func() (cand, bool) {
		units := make([]int, 0, len(skip))
		for u := range skip {
			units = append(units, u)
		}
		sort.Ints(units)
		cd, ok := p.alternatives(n, rest, a, perGPU, units)
		if ok {
			u := s.unitOf(cd.gpu, perGPU)
			fails = slices.DeleteFunc(fails, func(x int) bool { return x == u })
			if memo != nil {
				delete(memo.failed, u)
			}
		}
		return cd, ok
	}
	ex := *n
	ex.skip, ex.skipGPUs = skip, perGPU
	for range maxSkips {
		cd, ok := s.bestIndexed(&ex)
		if !ok {
			return fallback()
		}
		if p.restFits(n, cd, rest, a) {
			return cd, true
		}
		if perGPU {
			fail(cd.gpu)
		} else {
			fail(s.gpus[cd.gpu].node)
		}
	}
	var best cand
	found := false
	try := func(m need, ni, unit int) {
		cd, ok := s.bestScan(&m, []int{ni})
		if !ok || (found && !s.better(&cd, &best)) {
			return
		}
		if p.restFits(n, cd, rest, a) {
			best, found = cd, true
		} else {
			fail(unit)
		}
	}
	for ni := range s.nodes {
		m := *n
		m.onNode = ni
		if !perGPU {
			if !skip[ni] {
				try(m, ni, ni)
			}
			continue
		}
		for _, gi := range s.nodes[ni].gpus {
			if !skip[gi] {
				m.onGPU = gi
				try(m, ni, gi)
			}
		}
	}
	if !found {
		return fallback()
	}
	return best, found
}

// constrainedMemo remembers, for one claim shape, the nodes (GPUs) where
// its constrained group did not fit, with their versions then.
type constrainedMemo struct {
	failed map[int]uint64
}

// maxMemos bounds the claim shapes remembered at once.
const maxMemos = 64

// memoFor returns the memo for this claim's shape when the group is the
// whole claim and nothing is decided yet (nil otherwise). The shape is
// everything that decides where the claim fits: its isolation, requests
// and constraints, and its tenant only when a request may share a device
// (time-slicing or MPS), so replicas of different workloads alike share it.
func (p *placer) memoFor(cons []Constraint, rest []step, a *Allocation, perGPU bool) *constrainedMemo {
	if len(a.Devices) > 0 {
		return nil
	}
	for _, st := range rest {
		in := false
		for _, con := range cons {
			in = in || inConstraint(con, st.r.Name, p.c)
		}
		if !in {
			return nil
		}
	}
	tenant := ""
	for i := range p.c.Requests {
		for _, ch := range decide(&p.c.Requests[i], p.iso).choices {
			if ch.mode == TimeSlice || ch.mode == MPS {
				tenant = p.c.Tenant
			}
		}
	}
	shape := fmt.Sprintf("%t\x00%t\x00%s\x00%s\x00%v\x00%v", perGPU, p.wholeOnly, tenant, p.iso, p.c.Requests, p.c.Constraints)
	m := p.s.memos[shape]
	if m == nil {
		if p.s.memos == nil || len(p.s.memos) >= maxMemos {
			p.s.memos = map[string]*constrainedMemo{}
		}
		m = &constrainedMemo{failed: map[int]uint64{}}
		p.s.memos[shape] = m
	}
	return m
}

// unitVersion is the version of a GPU or a node: it changes whenever the
// GPU (any GPU of the node) is reindexed.
func (s *State) unitVersion(u int, perGPU bool) uint64 {
	if perGPU {
		if u < len(s.gpus) {
			return s.gpus[u].ver
		}
	} else if u < len(s.nodes) {
		return s.nodes[u].ver
	}
	return 0
}

// restFits reports whether the remaining steps fit once the first device
// takes cd.
func (p *placer) restFits(first *need, cd cand, rest []step, a *Allocation) bool {
	s := p.s
	part := s.assignment(p.c, p.iso, first.req, cd)
	undo, err := s.apply(part, true)
	if err != nil {
		return false
	}
	defer undo()
	trial := &Allocation{Devices: append(append([]Assigned(nil), a.Devices...), part.Devices...)}
	taken := map[int]bool{s.byUUID[part.Devices[0].Device]: true}
	for di := range first.taken {
		taken[di] = true
	}
	q := *p
	q.explain = false
	return q.place(rest, trial, taken) == nil
}

// assignment turns a candidate into a one-device allocation with its
// changes, ready to apply.
func (s *State) assignment(c *Claim, iso Isolation, r *Request, cd cand) *Allocation {
	g := &s.gpus[cd.gpu]
	node := s.nodes[g.node].node.Name
	a := &Allocation{Claim: c.Name, Tenant: c.Tenant, Isolation: iso}
	for _, di := range cd.destroy {
		d := &s.devs[di]
		if d.isMIG {
			a.Changes = append(a.Changes, Change{Kind: DestroyInstance, Node: node, GPU: g.spec.UUID, Device: d.id,
				Profile: g.geo.Shapes[d.profile].Name, Start: d.start})
		}
	}
	if cd.enable {
		a.Changes = append(a.Changes, Change{Kind: EnableMIG, Node: node, GPU: g.spec.UUID, Disruptive: true})
	}
	if cd.disable {
		sh := cd.sharing
		a.Changes = append(a.Changes, Change{Kind: DisableMIG, Node: node, GPU: g.spec.UUID, Disruptive: true, Sharing: &sh})
	}
	as := Assigned{Request: r.Name, Node: node, GPU: g.spec.UUID, Mode: cd.mode, MemoryMiB: cd.mem, ComputePercent: cd.comp}
	var compute int
	switch {
	case cd.dev >= 0:
		d := &s.devs[cd.dev]
		as.Device, compute = d.id, d.compute
		if d.isMIG {
			as.Profile, as.Start = g.geo.Shapes[d.profile].Name, d.start
		}
		if d.idle() && d.sharing != cd.sharing {
			sh := cd.sharing
			a.Changes = append(a.Changes, Change{Kind: ConfigureShare, Node: node, GPU: g.spec.UUID, Device: d.id, Sharing: &sh})
		}
		as.Slot = firstFreeSlot(d.slots)
	case cd.profile >= 0:
		name := g.geo.Shapes[cd.profile].Name
		as.Device, as.Profile, as.Start, as.New = plannedID(g.spec.UUID, name, cd.start), name, cd.start, true
		sh := cd.sharing
		a.Changes = append(a.Changes, Change{Kind: CreateInstance, Node: node, GPU: g.spec.UUID, Device: as.Device,
			Profile: name, Start: cd.start, Sharing: &sh})
		compute = s.migDevice(cd.gpu, cd.profile, cd.start, "", Sharing{}).compute
	default: // MIG switched off: the whole GPU
		as.Device, compute = g.spec.UUID, 100
	}
	if cd.mode == MPS {
		pct := cd.sharing.DefaultThreadPercent
		if cd.comp > 0 {
			pct = min(100, (cd.comp*100+compute-1)/compute)
		}
		if pct == 0 {
			pct = 100
		}
		// PipeDirectory refuses only ids no validated inventory has
		// (ValidateInventory); for such an id the directory stays empty,
		// and neither the agent nor `gpuslice run` uses the device.
		pipe := s.pipeOf(as.Device)
		as.MPS = &MPSLimits{ActiveThreadPercent: pct, PinnedMemoryMiB: cd.mem, PipeDirectory: pipe}
	}
	a.Devices = []Assigned{as}
	return a
}

// pipeOf is PipeDirectory(device), remembered per device id (a pure
// function of the id: an MPS device's directory is asked for at every
// decision that joins it, and checking the id each time was a twentieth
// of a plan's time).
func (s *State) pipeOf(device string) string {
	if p, ok := s.pipes[device]; ok {
		return p
	}
	p, _ := PipeDirectory(device)
	if s.pipes == nil {
		s.pipes = map[string]string{}
	}
	s.pipes[device] = p
	return p
}

func firstFreeSlot(slots uint64) int {
	for i := 0; i < 64; i++ {
		if slots&(1<<i) == 0 {
			return i
		}
	}
	return 63
}

// describe says in words which candidate was taken. It runs on every
// decision, so it concatenates instead of formatting.
func (s *State) describe(c *cand) string {
	g := &s.gpus[c.gpu]
	where := "node " + s.nodes[g.node].node.Name + " GPU " + strconv.Itoa(g.spec.Index) + " (" + g.model.ID + ")"
	mode := string(c.mode)
	instance := func() string {
		return g.geo.Shapes[c.profile].Name + "@" + strconv.Itoa(c.start)
	}
	switch c.kind {
	case kindJoin:
		d := &s.devs[c.dev]
		return "joins " + mode + " device " + d.id + " on " + where + " (" + strconv.Itoa(d.clients) + "/" +
			strconv.Itoa(slotLimit(d.sharing)) + " slots in use, " + strconv.FormatInt(d.memMiB-d.usedMem, 10) + " MiB free before)"
	case kindOpen:
		if c.dev >= 0 {
			return "takes idle device " + s.devs[c.dev].id + " on " + where + " as " + mode
		}
		return "creates MIG " + instance() + " on " + where + " as " + mode + " (capacity left " + strconv.FormatInt(c.fit, 10) + ")"
	case kindEvict:
		return "destroys " + strconv.Itoa(len(c.destroy)) + " idle MIG instance(s) and creates " + instance() + " on " + where + " as " + mode
	}
	if c.enable {
		return "turns MIG on (disruptive) and creates " + instance() + " on " + where + " as " + mode
	}
	return "turns MIG off (disruptive) and takes the whole GPU on " + where + " as " + mode
}

// processEnv is the environment of one process using every device of a
// claim: CUDA_VISIBLE_DEVICES lists them (GPU or MIG uuids), MPS clients
// get the pipe directory and their limits.
func processEnv(a *Allocation) map[string]string {
	env := make(map[string]string, 9)
	env["GPUSLICE_CLAIM"], env["GPUSLICE_TENANT"] = a.Claim, a.Tenant
	var ids, mem strings.Builder
	var total int64
	for i, d := range a.Devices {
		if i > 0 {
			ids.WriteByte(',')
			mem.WriteByte(',')
		}
		ids.WriteString(d.Device)
		total += d.MemoryMiB
		mem.WriteString(d.Device + "=" + strconv.FormatInt(d.MemoryMiB, 10) + "M")
		if d.MPS != nil {
			if d.MPS.PipeDirectory != "" {
				env["CUDA_MPS_PIPE_DIRECTORY"] = d.MPS.PipeDirectory
				env["CUDA_MPS_LOG_DIRECTORY"] = d.MPS.PipeDirectory + "/log"
			}
			env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = strconv.Itoa(d.MPS.ActiveThreadPercent)
			env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = d.Device + "=" + strconv.FormatInt(d.MPS.PinnedMemoryMiB, 10) + "M"
		}
	}
	env["CUDA_VISIBLE_DEVICES"] = ids.String()
	env["GPUSLICE_MEMORY_LIMITS"] = mem.String()
	env["GPUSLICE_MEMORY_LIMIT_MIB"] = strconv.FormatInt(total, 10)
	return env
}

// sortedReasons renders reason counts most frequent first.
func sortedReasons(counts map[reason]int) string {
	type kv struct {
		r reason
		n int
	}
	var list []kv
	for r, n := range counts {
		list = append(list, kv{r, n})
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].n != list[j].n {
			return list[i].n > list[j].n
		}
		return reasonText[list[i].r] < reasonText[list[j].r]
	})
	parts := make([]string, len(list))
	for i, e := range list {
		parts[i] = fmt.Sprintf("%d %s", e.n, reasonText[e.r])
	}
	return strings.Join(parts, ", ")
}
