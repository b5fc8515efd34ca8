package alloc

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// maxTries bounds the candidates one claim's constrained search applies
// before it gives up (a claim of many requests on a big node could
// otherwise try every combination).
const maxTries = 20000

// errTries is a constrained search that ran out of tries.
var errTries = errors.New("constrained search: too many combinations tried")

// search is place for claims with constraints: a depth-first search over
// the steps. A step pinned to a node or GPU by an earlier device of its
// group tries every candidate there (MIG instances at every start they
// fit), best first, and a choice after which the rest of the claim does
// not fit, or that breaks an attribute constraint, is undone and the
// next tried. The first device of a group comes from bestConstrained,
// which tries the units (nodes or GPUs) the same way.
func (p *placer) search(steps []step, a *Allocation, taken map[int]bool) error {
	if len(steps) == 0 {
		return nil
	}
	s := p.s
	st := steps[0]
	n := &need{claim: p.c, req: st.r, iso: p.iso, choices: st.d.choices, taken: taken, onNode: -1, onGPU: -1, room: p.room,
		wholeOnly: p.wholeOnly && !asksForMIG(st.r, p.iso)}
	if a.hasMPS() {
		n.choices = withoutMode(n.choices, MPS)
	}
	cons := p.groups[st.r.Name]
	s.pin(n, a, cons)
	var cands []cand
	switch {
	case n.onNode >= 0:
		cands = s.allOn(n)
	case len(cons) > 0:
		if cd, ok := p.bestConstrained(n, cons, steps[1:], a); ok {
			cands = []cand{cd}
		}
	default:
		if cd, ok := s.bestIndexed(n); ok {
			cands = []cand{cd}
		}
	}
	noFit := func() error {
		if !p.explain {
			return ErrNoFit
		}
		err := s.explain(p.c, st.r, st.k, n)
		var named []string
		for _, con := range cons {
			if con.Attribute != "" {
				named = append(named, con.Match+" "+con.Attribute)
			}
		}
		if len(named) > 0 {
			return fmt.Errorf("%w (%s: %s)", err, errAttribute, strings.Join(named, ", "))
		}
		return err
	}
	if len(cands) == 0 {
		return noFit()
	}
	var last error
	nDev, nChg, nWhy := len(a.Devices), len(a.Changes), len(a.Why)
	for _, cd := range cands {
		if *p.tries >= maxTries {
			return errTries
		}
		*p.tries++
		part := s.assignment(p.c, p.iso, st.r, cd)
		undo, err := s.apply(part, true)
		if err != nil {
			return fmt.Errorf("claim %s: internal error applying a decision: %w", p.c.Name, err)
		}
		if !s.attributesHold(p.c, cons, st.r.Name, part, a) {
			undo()
			last = fmt.Errorf("claim %s request %s: %w", p.c.Name, st.r.Name, errAttribute)
			continue
		}
		a.Why = append(a.Why, st.r.Name+"["+strconv.Itoa(st.k)+"]: "+st.d.why+"; "+s.describe(&cd))
		a.Devices = append(a.Devices, part.Devices...)
		a.Changes = append(a.Changes, part.Changes...)
		di := s.byUUID[part.Devices[0].Device]
		had := taken != nil && taken[di]
		if taken != nil {
			taken[di] = true
		}
		err = p.search(steps[1:], a, taken)
		if taken != nil && !had {
			delete(taken, di)
		}
		undo()
		if err == nil {
			return nil
		}
		a.Devices, a.Changes, a.Why = a.Devices[:nDev], a.Changes[:nChg], a.Why[:nWhy]
		if errors.Is(err, errTries) {
			return err
		}
		last = err
	}
	if errors.Is(last, errAttribute) {
		return fmt.Errorf("%w: %w", noFit(), last)
	}
	return last
}

// errAttribute is a constraint on an attribute (match or distinct) that
// no candidate meets.
var errAttribute = errors.New("attribute constraint not met")

// allOn lists every candidate of a step pinned to a node (and maybe a
// GPU), MIG instances at every start they fit, best first.
func (s *State) allOn(n *need) []cand {
	m := *n
	m.allStarts = true
	var out []cand
	for _, k := range []kind{kindJoin, kindOpen, kindEvict, kindSwitch} {
		if k == kindSwitch && !s.policy.AllowModeSwitch {
			continue
		}
		for _, gi := range s.nodes[n.onNode].gpus {
			if n.onGPU >= 0 && gi != n.onGPU {
				continue
			}
			for rank, ch := range m.choices {
				out = append(out, s.gpuCandidates(&m, gi, ch, rank, k)...)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return s.better(&out[i], &out[j]) })
	return out
}

// alternatives is bestConstrained's last resort: on the units (nodes or
// GPUs) where the rest of the claim did not fit beside their best
// device, every other candidate for the first device is tried (a MIG
// instance at another start, another GPU of the node, ...); the best
// that works wins. Units ruled out this way stay in the memo.
func (p *placer) alternatives(first *need, rest []step, a *Allocation, perGPU bool, failed []int) (cand, bool) {
	var best cand
	found := false
	for _, u := range failed {
		gi := u
		if !perGPU {
			if len(p.s.nodes[u].gpus) == 0 {
				continue
			}
			gi = p.s.nodes[u].gpus[0]
		}
		m := *first
		m.onNode = p.s.gpus[gi].node
		if perGPU {
			m.onGPU = gi
		}
		for _, alt := range p.s.allOn(&m) {
			if p.tries != nil && *p.tries >= maxTries {
				return best, found
			}
			if found && !p.s.better(&alt, &best) {
				break
			}
			if p.restFits(first, alt, rest, a) {
				best, found = alt, true
				break
			}
		}
	}
	return best, found
}

func (s *State) unitOf(gi int, perGPU bool) int {
	if perGPU {
		return gi
	}
	return s.gpus[gi].node
}

// attributesHold checks the claim's attribute constraints (match: one
// value; distinct: all values differ) that the step's request is in,
// between the device part just applied and those decided before it. A
// device without the attribute meets neither, as in DRA.
func (s *State) attributesHold(c *Claim, cons []Constraint, req string, part, a *Allocation) bool {
	for _, con := range cons {
		if con.Attribute == "" {
			continue
		}
		v, ok := s.attributeOf(part.Devices[0].Device, con.Attribute)
		if !ok {
			return false
		}
		for _, d := range a.Devices {
			if !inConstraint(con, d.Request, c) {
				continue
			}
			w, ok := s.attributeOf(d.Device, con.Attribute)
			if !ok {
				return false
			}
			if (con.Match == MatchDistinct) == (v == w) {
				return false
			}
		}
	}
	return true
}

// attributeOf is a device's attribute as selectors see it.
func (s *State) attributeOf(uuid, name string) (any, bool) {
	di, ok := s.byUUID[uuid]
	if !ok || di < 0 {
		return nil, false
	}
	d := &s.devs[di]
	attrs := s.deviceAttrs(d)["attributes"].(map[string]any)[driverName].(map[string]any)
	v, ok := attrs[name]
	return v, ok
}

func sameCand(a, b *cand) bool {
	return a.kind == b.kind && a.dev == b.dev && a.gpu == b.gpu && a.profile == b.profile && a.start == b.start && a.modeRank == b.modeRank
}
