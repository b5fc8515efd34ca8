package node

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/mig"
)

// StepKind names one change to a GPU.
type StepKind string

// The changes a decision orders, in the order they run on one GPU.
const (
	DestroyInstance StepKind = "destroy-instance"
	SetMIGMode      StepKind = "set-mig-mode"
	CreateInstance  StepKind = "create-instance"
	SetComputeMode  StepKind = "set-compute-mode"
	SetTimeSlice    StepKind = "set-time-slice"
)

// Step is one change to one GPU.
type Step struct {
	Kind  StepKind
	Index int    // the GPU's index
	GPU   string // the GPU's uuid
	// Instance is the MIG instance a destroy removes; Profile and Start
	// its placement, or the placement a create makes.
	Instance string
	Profile  string
	Start    int
	MIG      bool            // SetMIGMode: on or off
	Mode     gpu.ComputeMode // SetComputeMode
	Level    gpu.TimeSlice   // SetTimeSlice
	// Holds are the indexes (in Want.Holds) of the holds the step is
	// made for: should it fail, they fail, and the later steps made for
	// them are skipped. None: a release or a reset.
	Holds []int
	// Release marks the destroy of a released instance.
	Release bool
	// Why says why the step is there, for logs.
	Why string
}

func (s Step) String() string {
	switch s.Kind {
	case DestroyInstance:
		return fmt.Sprintf("destroy MIG instance %s (%s@%d) on GPU %d", s.Instance, s.Profile, s.Start, s.Index)
	case SetMIGMode:
		return fmt.Sprintf("turn MIG %s on GPU %d", onOff(s.MIG), s.Index)
	case CreateInstance:
		return fmt.Sprintf("create MIG %s at start %d on GPU %d", s.Profile, s.Start, s.Index)
	case SetComputeMode:
		return fmt.Sprintf("set GPU %d's compute mode to %s", s.Index, modeName(s.Mode))
	case SetTimeSlice:
		return fmt.Sprintf("set GPU %d's time-slice interval to %s", s.Index, s.Level)
	}
	return string(s.Kind)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func modeName(m gpu.ComputeMode) string {
	switch m {
	case gpu.ComputeDefault:
		return "DEFAULT"
	case gpu.ComputeExclusiveProcess:
		return "EXCLUSIVE_PROCESS"
	case gpu.ComputeProhibited:
		return "PROHIBITED"
	}
	return fmt.Sprintf("mode %d", int(m))
}

// Refusal is a hold the decision will not make, and why (a *HeldError
// when another claim holds the hardware, an error wrapping
// gpu.ErrNotFound when its GPU is not there).
type Refusal struct {
	Hold int
	Err  error
}

// Plan is a decision: the steps, in order, and the holds refused.
type Plan struct {
	Steps   []Step
	Refused []Refusal
	// Found is the uuid of the instance already at the placement of each
	// MIG hold to make (by hold index) that needs no create: it is
	// adopted.
	Found map[int]string
}

// Geometries finds a GPU model's MIG geometry (nil when unknown).
type Geometries func(model string) *mig.Geometry

// Decide is what to change on the node's GPUs so that they match want.
// It is pure: obs is the hardware as last read. The rules, one GPU at a
// time (in index order):
//
//   - A hold to make is refused when another claim holds the same GPU the
//     other way (the GPU whole against an instance on it).
//   - Released MIG instances that no hold of another claim covers are
//     destroyed (by uuid, else at their placement).
//   - A GPU held whole leaves MIG mode: every instance on it is destroyed
//     first (none is held: that would have refused the hold). Its
//     compute mode is EXCLUSIVE_PROCESS when a claim uses it by MPS (the
//     MPS daemon needs it), else DEFAULT; a time-sliced GPU gets the
//     level its claims name (TimeSliceLevels).
//   - A MIG instance to make turns MIG on, is adopted when an instance
//     is at its placement, else created there. Idle instances no hold
//     covers are destroyed first where they are in the way: those whose
//     memory slices overlap the new placements, and every one of them
//     when the layout is still not valid (mig.Geometry.Validate).
//   - A GPU nobody holds goes back to the DEFAULT compute mode, and to
//     the Default time slice where it was set otherwise; a released
//     time-sliced GPU takes the level its remaining claims name.
//
// Decisions that need the device's answer (an instance in use) are the
// runner's outcomes, not the decision's.
func Decide(want Want, obs Observed, geos Geometries) Plan {
	p := Plan{Found: map[int]string{}}
	levels := TimeSliceLevels(want.Holds)
	gpus := slices.Clone(obs.GPUs)
	slices.SortFunc(gpus, func(a, b gpu.GPU) int { return cmp.Compare(a.Index, b.Index) })
	present := map[string]bool{}
	for _, g := range gpus {
		present[g.UUID] = true
	}
	for i, h := range want.Holds {
		if h.Make && !present[h.GPU] {
			p.Refused = append(p.Refused, Refusal{Hold: i, Err: fmt.Errorf("GPU %s: %w", h.GPU, gpu.ErrNotFound)})
		}
	}
	for _, g := range gpus {
		d := gpuDecision{want: want, g: g, obs: obs, levels: levels, plan: &p}
		if geos != nil && g.Model != "" {
			d.geo = geos(g.Model)
		}
		d.decide()
	}
	return p
}

// gpuDecision decides for one GPU.
type gpuDecision struct {
	want   Want
	g      gpu.GPU
	obs    Observed
	levels map[string]gpu.TimeSlice
	geo    *mig.Geometry
	plan   *Plan

	gone      map[string]bool // instances a step destroys
	migOn     bool            // MIG mode once the steps ran
	instances []gpu.Instance  // the instances once the steps ran
}

func (d *gpuDecision) step(s Step) {
	s.Index, s.GPU = d.g.Index, d.g.UUID
	d.plan.Steps = append(d.plan.Steps, s)
}

func (d *gpuDecision) destroy(in gpu.Instance, holds []int, release bool, why string) {
	if d.gone[in.UUID] {
		return
	}
	d.gone[in.UUID] = true
	d.step(Step{Kind: DestroyInstance, Instance: in.UUID, Profile: in.Profile, Start: in.Start, Holds: holds, Release: release, Why: why})
}

// held reports whether a hold (of any claim) covers an instance.
func (d *gpuDecision) held(in gpu.Instance) bool {
	probe := Hold{GPU: d.g.UUID, Profile: in.Profile, Start: in.Start, Instance: in.UUID}
	for _, h := range d.want.Holds {
		if h.MIG() && Covers(h, probe) {
			return true
		}
	}
	return false
}

func (d *gpuDecision) decide() {
	g := d.g
	d.gone = map[string]bool{}
	d.migOn = g.MIGEnabled
	if g.MIGEnabled {
		d.instances = g.Instances
	}
	var on []int // indexes of the holds on this GPU
	for i, h := range d.want.Holds {
		if h.GPU == g.UUID {
			on = append(on, i)
		}
	}
	whole, migs := d.refuse(on)

	// Releases first: room for what comes.
	for _, r := range d.want.Release {
		if r.GPU != g.UUID || !r.MIG() || d.coveredByOther(r) {
			continue
		}
		for _, in := range d.instances {
			if (r.Instance != "" && in.UUID == r.Instance) || (r.Instance == "" && in.Profile == r.Profile && in.Start == r.Start) {
				d.destroy(in, nil, true, "released by claim "+r.name())
			}
		}
	}

	switch {
	case len(whole) > 0:
		d.makeWhole(whole)
	case len(migs) > 0:
		d.makeMIG(migs)
	}
	d.computeMode(on, whole)
	d.timeSlice(on, whole)
}

// refuse splits the holds to make on the GPU into whole and MIG ones,
// refusing those another claim holds the other way.
func (d *gpuDecision) refuse(on []int) (whole, migs []int) {
	for _, i := range on {
		h := d.want.Holds[i]
		if !h.Make {
			continue
		}
		var err error
		for _, j := range on {
			o := d.want.Holds[j]
			if o.Claim == h.Claim || o.MIG() == h.MIG() {
				continue
			}
			if h.MIG() {
				err = &HeldError{What: fmt.Sprintf("GPU %d", d.g.Index), Holder: o.name()}
			} else {
				err = &HeldError{What: fmt.Sprintf("MIG instance %s@%d on GPU %d", o.Profile, o.Start, d.g.Index), Holder: o.name()}
			}
			break
		}
		switch {
		case err != nil:
			d.plan.Refused = append(d.plan.Refused, Refusal{Hold: i, Err: err})
		case h.MIG():
			migs = append(migs, i)
		default:
			whole = append(whole, i)
		}
	}
	return whole, migs
}

// coveredByOther reports whether a hold of a claim other than r's covers
// the released device.
func (d *gpuDecision) coveredByOther(r Hold) bool {
	for _, h := range d.want.Holds {
		if h.Claim != r.Claim && Covers(h, r) {
			return true
		}
	}
	return false
}

// makeWhole takes the GPU out of MIG mode for the whole holds.
func (d *gpuDecision) makeWhole(whole []int) {
	if !d.migOn {
		return
	}
	by := d.want.Holds[whole[0]].name()
	for _, in := range d.instances {
		d.destroy(in, whole, false, "GPU used whole by claim "+by)
	}
	d.step(Step{Kind: SetMIGMode, MIG: false, Holds: whole, Why: "GPU used whole by claim " + by})
	d.migOn, d.instances = false, nil
}

// makeMIG turns MIG on and adopts or creates each instance to make,
// clearing idle unheld instances in the way.
func (d *gpuDecision) makeMIG(migs []int) {
	if !d.migOn {
		d.step(Step{Kind: SetMIGMode, MIG: true, Holds: migs, Why: "MIG instance for claim " + d.want.Holds[migs[0]].name()})
		d.migOn, d.instances = true, nil
	}
	type create struct {
		profile string
		start   int
		holds   []int
	}
	var creates []create
	for _, i := range migs {
		h := d.want.Holds[i]
		if in, ok := d.find(h); ok {
			d.plan.Found[i] = in.UUID
			continue
		}
		k := slices.IndexFunc(creates, func(c create) bool { return c.profile == h.Profile && c.start == h.Start })
		if k < 0 {
			creates = append(creates, create{profile: h.Profile, start: h.Start})
			k = len(creates) - 1
		}
		creates[k].holds = append(creates[k].holds, i)
	}
	if len(creates) == 0 {
		return
	}
	var all []int
	var wanted []mig.Instance
	for _, c := range creates {
		all = append(all, c.holds...)
		wanted = append(wanted, mig.Instance{Profile: c.profile, Start: c.start})
	}
	for _, in := range d.inTheWay(wanted) {
		d.destroy(in, all, false, fmt.Sprintf("in the way of %s for claim %s", wanted[0], d.want.Holds[all[0]].name()))
	}
	for _, c := range creates {
		d.step(Step{Kind: CreateInstance, Profile: c.profile, Start: c.start, Holds: c.holds,
			Why: "for claim " + d.want.Holds[c.holds[0]].name()})
	}
}

// find is the instance a MIG hold names (by uuid) or the one at its
// placement, unless a step destroys it.
func (d *gpuDecision) find(h Hold) (gpu.Instance, bool) {
	for _, in := range d.instances {
		if d.gone[in.UUID] {
			continue
		}
		if (h.Instance != "" && in.UUID == h.Instance) || (in.Profile == h.Profile && in.Start == h.Start) {
			return in, true
		}
	}
	return gpu.Instance{}, false
}

// inTheWay are the idle instances no hold covers that must go for the
// wanted placements: those overlapping them in memory slices, and all of
// them when what stays and what comes is still no valid layout. Without
// the model's geometry nothing is cleared (the create's answer says).
func (d *gpuDecision) inTheWay(wanted []mig.Instance) []gpu.Instance {
	if d.geo == nil {
		return nil
	}
	var kept, free []gpu.Instance
	for _, in := range d.instances {
		switch {
		case d.gone[in.UUID]:
		case d.held(in):
			kept = append(kept, in)
		default:
			free = append(free, in)
		}
	}
	var out, stay []gpu.Instance
	for _, in := range free {
		if slices.ContainsFunc(wanted, func(w mig.Instance) bool { return d.overlap(in, w) }) {
			out = append(out, in)
		} else {
			stay = append(stay, in)
		}
	}
	layout := slices.Clone(wanted)
	for _, in := range append(kept, stay...) {
		layout = append(layout, mig.Instance{Profile: in.Profile, Start: in.Start})
	}
	if d.geo.Validate(layout) != nil {
		return free
	}
	return out
}

// overlap reports whether an instance shares memory slices with a
// wanted placement.
func (d *gpuDecision) overlap(in gpu.Instance, w mig.Instance) bool {
	p, err := d.geo.Profile(w.Profile)
	if err != nil {
		return false
	}
	size := in.Size
	if q, err := d.geo.Profile(in.Profile); err == nil {
		size = d.geo.Shapes[q].Size
	}
	return in.Start < w.Start+d.geo.Shapes[p].Size && w.Start < in.Start+size
}

// computeMode sets a whole GPU's compute mode for its holds, and resets
// it on a GPU nobody holds.
func (d *gpuDecision) computeMode(on, whole []int) {
	if d.migOn {
		return
	}
	want, holds := gpu.ComputeDefault, whole
	switch {
	case len(whole) > 0:
		for _, i := range on {
			if h := d.want.Holds[i]; !h.MIG() && h.Mode == alloc.MPS {
				want = gpu.ComputeExclusiveProcess
			}
		}
	case len(on) > 0:
		return // held, nothing to make: left as it is
	}
	if d.g.ComputeMode == want {
		return
	}
	why := "no claim holds it"
	if len(whole) > 0 {
		why = "for claim " + d.want.Holds[whole[0]].name()
	}
	d.step(Step{Kind: SetComputeMode, Mode: want, Holds: holds, Why: why})
}

// timeSlice sets a time-sliced GPU's level for its claims when one of
// them is made, and puts back the level the remaining claims name (or
// Default) where it was set otherwise or a time-sliced hold was
// released.
func (d *gpuDecision) timeSlice(on, whole []int) {
	if d.migOn {
		return
	}
	level, sliced := d.levels[d.g.UUID]
	known, isKnown := d.obs.TimeSlice[d.g.UUID]
	var holds []int
	for _, i := range whole {
		if d.want.Holds[i].TimeSliced() {
			holds = append(holds, i)
		}
	}
	released := slices.ContainsFunc(d.want.Release, func(r Hold) bool { return r.GPU == d.g.UUID && r.TimeSliced() })
	switch {
	case len(holds) > 0:
		if isKnown && known == level {
			return
		}
		d.step(Step{Kind: SetTimeSlice, Level: level, Holds: holds, Why: "time-sliced for claim " + d.want.Holds[holds[0]].name()})
	case sliced && !released:
		return // time-sliced, nothing to make: left as it is
	case (isKnown && known != level) || (!isKnown && released):
		why := "released"
		if !sliced {
			why = "no claim time-slices it"
		}
		d.step(Step{Kind: SetTimeSlice, Level: level, Why: why})
	}
}
