package alloc

import (
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
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
	if err := ValidateClaim(c); err != nil {
		return nil, fmt.Errorf("claim %s: %w", c.Name, err)
	}
	if _, dup := s.allocs[c.Name]; dup {
		return nil, fmt.Errorf("claim %s is already allocated", c.Name)
	}
	iso := c.Isolation
	if iso == "" {
		iso = IsolationTenant
	}
	a := &Allocation{Claim: c.Name, Tenant: c.Tenant, Isolation: iso}
	// Devices after the first are decided on the state with the earlier
	// ones applied; every tentative step is undone before returning.
	var undos []func()
	defer func() {
		for i := len(undos) - 1; i >= 0; i-- {
			undos[i]()
		}
	}()
	taken := map[int]bool{}
	groups := constraintGroups(c)
	for ri := range c.Requests {
		r := &c.Requests[ri]
		d := decide(r, iso)
		for k := 0; k < max(r.Count, 1); k++ {
			n := &need{claim: c, req: r, iso: iso, choices: d.choices, taken: taken, onNode: -1, onGPU: -1}
			if a.hasMPS() {
				n.choices = withoutMode(n.choices, MPS)
			}
			s.pin(n, a, groups[r.Name])
			var best cand
			var ok bool
			switch {
			case n.onNode >= 0: // pinned by an earlier device of its group
				best, ok = s.bestScan(n, []int{n.onNode})
			case len(groups[r.Name]) > 0: // first of its group
				best, ok = s.bestConstrained(n, c)
			default:
				best, ok = s.bestIndexed(n)
			}
			if !ok {
				return nil, s.explain(c, r, k, n)
			}
			part := s.assignment(c, iso, r, best)
			a.Why = append(a.Why, fmt.Sprintf("%s[%d]: %s; %s", r.Name, k, d.why, s.describe(&best)))
			a.Devices = append(a.Devices, part.Devices...)
			a.Changes = append(a.Changes, part.Changes...)
			undo, err := s.apply(part)
			if err != nil {
				return nil, fmt.Errorf("claim %s: internal error applying a decision: %w", c.Name, err)
			}
			undos = append(undos, undo)
			taken[s.byUUID[part.Devices[0].Device]] = true
		}
	}
	a.Env = processEnv(a)
	return a, nil
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
// whole group fits: it tries every node (and for a GPU constraint every
// GPU) and keeps the first device's best candidate among places where the
// rest of the claim fits too.
func (s *State) bestConstrained(n *need, c *Claim) (cand, bool) {
	var best cand
	found := false
	for ni := range s.nodes {
		m := *n
		m.onNode = ni
		cd, ok := s.bestScan(&m, []int{ni})
		if !ok || (found && !s.better(&cd, &best)) {
			continue
		}
		if s.restFits(c, n, &cd) {
			best, found = cd, true
		}
	}
	return best, found
}

// restFits checks that the rest of a constrained claim fits once the first
// device takes cd, by deciding it for real on the state and undoing it.
func (s *State) restFits(c *Claim, first *need, cd *cand) bool {
	part := s.assignment(c, first.iso, first.req, *cd)
	undo, err := s.apply(part)
	if err != nil {
		return false
	}
	defer undo()
	// Remaining devices: the rest of the first request and the later ones.
	rest := make([]Request, 0, len(c.Requests))
	seen := false
	for _, r := range c.Requests {
		if r.Name == first.req.Name {
			seen = true
			r.Count = max(r.Count, 1) - 1
			if r.Count == 0 {
				continue
			}
		} else if !seen {
			continue
		}
		rest = append(rest, r)
	}
	if len(rest) == 0 {
		return true
	}
	a := &Allocation{Devices: part.Devices}
	taken := map[int]bool{s.byUUID[part.Devices[0].Device]: true}
	for di := range first.taken {
		taken[di] = true
	}
	groups := constraintGroups(c)
	var undos []func()
	defer func() {
		for i := len(undos) - 1; i >= 0; i-- {
			undos[i]()
		}
	}()
	for ri := range rest {
		r := &rest[ri]
		d := decide(r, first.iso)
		for k := 0; k < max(r.Count, 1); k++ {
			n := &need{claim: c, req: r, iso: first.iso, choices: d.choices, taken: taken, onNode: -1, onGPU: -1}
			s.pin(n, a, groups[r.Name])
			var cd cand
			var ok bool
			if n.onNode >= 0 {
				cd, ok = s.bestScan(n, []int{n.onNode})
			} else {
				cd, ok = s.bestIndexed(n)
			}
			if !ok {
				return false
			}
			p := s.assignment(c, first.iso, r, cd)
			u, err := s.apply(p)
			if err != nil {
				return false
			}
			undos = append(undos, u)
			a.Devices = append(a.Devices, p.Devices...)
			taken[s.byUUID[p.Devices[0].Device]] = true
		}
	}
	return true
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
		as.MPS = &MPSLimits{ActiveThreadPercent: pct, PinnedMemoryMiB: cd.mem,
			PipeDirectory: path.Join(MPSPipeRoot, pipeName(as.Device))}
	}
	a.Devices = []Assigned{as}
	return a
}

func firstFreeSlot(slots uint64) int {
	for i := 0; i < 64; i++ {
		if slots&(1<<i) == 0 {
			return i
		}
	}
	return 63
}

// pipeName makes a device id safe as one path element.
func pipeName(id string) string {
	return strings.NewReplacer("/", "_", "@", "_", ":", "_").Replace(id)
}

// describe says in words which candidate was taken.
func (s *State) describe(c *cand) string {
	g := &s.gpus[c.gpu]
	where := fmt.Sprintf("node %s GPU %d (%s)", s.nodes[g.node].node.Name, g.spec.Index, g.model.ID)
	switch c.kind {
	case kindJoin:
		d := &s.devs[c.dev]
		return fmt.Sprintf("joins %s device %s on %s (%d/%d %s slots in use, %d MiB free before)",
			c.mode, d.id, where, d.clients, slotLimit(d.sharing), c.mode, d.memMiB-d.usedMem)
	case kindOpen:
		if c.dev >= 0 {
			return fmt.Sprintf("takes idle device %s on %s as %s", s.devs[c.dev].id, where, c.mode)
		}
		return fmt.Sprintf("creates MIG %s@%d on %s as %s (capacity left %d)", g.geo.Shapes[c.profile].Name, c.start, where, c.mode, c.fit)
	case kindEvict:
		return fmt.Sprintf("destroys %d idle MIG instance(s) and creates %s@%d on %s as %s", len(c.destroy), g.geo.Shapes[c.profile].Name, c.start, where, c.mode)
	}
	if c.enable {
		return fmt.Sprintf("turns MIG on (disruptive) and creates %s@%d on %s as %s", g.geo.Shapes[c.profile].Name, c.start, where, c.mode)
	}
	return fmt.Sprintf("turns MIG off (disruptive) and takes the whole GPU on %s as %s", where, c.mode)
}

// processEnv is the environment of one process using every device of a
// claim: CUDA_VISIBLE_DEVICES lists them (GPU or MIG uuids), MPS clients
// get the pipe directory and their limits.
func processEnv(a *Allocation) map[string]string {
	env := map[string]string{"GPUSLICE_CLAIM": a.Claim, "GPUSLICE_TENANT": a.Tenant}
	var ids, mem []string
	var total int64
	for _, d := range a.Devices {
		ids = append(ids, d.Device)
		total += d.MemoryMiB
		mem = append(mem, d.Device+"="+strconv.FormatInt(d.MemoryMiB, 10)+"M")
		if d.MPS != nil {
			env["CUDA_MPS_PIPE_DIRECTORY"] = d.MPS.PipeDirectory
			env["CUDA_MPS_LOG_DIRECTORY"] = d.MPS.PipeDirectory + "/log"
			env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = strconv.Itoa(d.MPS.ActiveThreadPercent)
			env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = d.Device + "=" + strconv.FormatInt(d.MPS.PinnedMemoryMiB, 10) + "M"
		}
	}
	env["CUDA_VISIBLE_DEVICES"] = strings.Join(ids, ",")
	env["GPUSLICE_MEMORY_LIMITS"] = strings.Join(mem, ",")
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
