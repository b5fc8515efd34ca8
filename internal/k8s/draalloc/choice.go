package draalloc

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// Claim is a ResourceClaim translated for the allocator, keeping what DRA
// decides per node: a request with a prioritized list (firstAvailable) is
// one of its subrequests, the first in order with which the whole claim
// can be allocated on the node, and a request of allocationMode All is
// every device of the node its class and selectors match. Claim.Allocate
// decides both on one node's State; a claim with neither is the same
// alloc.Claim on every node (ToClaim).
type Claim struct {
	// Name is the allocator's claim name: namespace/name.
	Name string
	base alloc.Claim // name, tenant, priority, isolation
	reqs []request
	cons []constraint
}

// request is one of the claim's requests with its alternatives: its
// subrequests in order, or for exactly the one request.
type request struct {
	name string
	alts []alt
}

// alt is one way to satisfy a request.
type alt struct {
	// ref is the request name the allocation result gives its devices:
	// "<request>" or "<request>/<subrequest>".
	ref string
	// sub is the subrequest's name ("" for exactly).
	sub string
	// field is the path of the exactly request or subrequest,
	// parentField that of the request.
	field, parentField string
	class              string
	// req is the allocator's request (Name ref); for All its Count is
	// the number of devices the node matches.
	req alloc.Request
	// all is allocationMode All.
	all bool
	// selectors are the CEL selectors as written; All matches them
	// against the node's devices as the stock allocator does.
	selectors []string
	capacity  *resourceapi.CapacityRequirements
}

// describe is the alternative as the user wrote it, for messages: its
// reference and, when it has any, its selectors.
func (a *alt) describe() string {
	s := a.ref
	if a.all {
		s += " (allocationMode All)"
	}
	for _, e := range a.selectors {
		s += fmt.Sprintf(" selector %q", e)
	}
	return s
}

// constraint is one of the claim's constraints with the request names
// as written (a request or request/subrequest; none: every request).
type constraint struct {
	names []string
	c     alloc.Constraint
}

// Translate translates a ResourceClaim whose requests name gpuslice's
// DeviceClasses: tenant = namespace, the given priority (the pod's),
// isolation from AnnotationIsolation; per request or subrequest:
// gpu.gpuslice.dev → an exclusive whole GPU, shared.gpuslice.dev → a
// time-sliced (or MPS) share with the requested memory (rounded up to
// StepMiB; none: the allocator's equal share, 1/16 of the GPU) and
// compute, mig.gpuslice.dev → a MIG instance (a capacity request on
// memory picks the smallest profile that holds it). Request selectors
// are kept, read through the allocator's selector model. All devices of
// a claim are on one node (a DRA allocation has one node selector).
//
// Prioritized lists and allocationMode All are kept for Claim.Allocate.
// What DRA can say and this cannot is an error naming the field: admin
// access, gpuslice classes mixed with others. Constraints
// (matchAttribute, distinctAttribute) on gpuslice's attributes are kept
// across the requests they name (all when empty), a request or one of
// its subrequests as in DRA.
func Translate(rc *resourceapi.ResourceClaim, priority int) (*Claim, error) {
	c := &Claim{Name: ClaimName(rc), base: alloc.Claim{Name: ClaimName(rc), Tenant: rc.Namespace, Priority: priority}}
	switch iso := alloc.Isolation(rc.Annotations[AnnotationIsolation]); iso {
	case "", alloc.IsolationTenant, alloc.IsolationNone, alloc.IsolationHardware:
		c.base.Isolation = iso
	default:
		return nil, fmt.Errorf("ResourceClaim %s: annotation %s %q: want none, tenant or hardware", c.Name, AnnotationIsolation, iso)
	}
	share := alloc.TimeSlice
	switch m := rc.Annotations[AnnotationSharing]; m {
	case "", "timeslice":
	case "mps":
		share = alloc.MPS
	default:
		return nil, fmt.Errorf("ResourceClaim %s: annotation %s %q: want timeslice or mps", c.Name, AnnotationSharing, m)
	}
	refs := map[string]bool{}
	for i, r := range rc.Spec.Devices.Requests {
		f := fmt.Sprintf("spec.devices.requests[%d]", i)
		q := request{name: r.Name}
		switch {
		case r.Exactly != nil && len(r.FirstAvailable) > 0:
			return nil, fmt.Errorf("ResourceClaim %s: %s: exactly and firstAvailable are both set; a request has one", c.Name, f)
		case r.Exactly != nil:
			e := r.Exactly
			if e.AdminAccess != nil && *e.AdminAccess {
				return nil, fmt.Errorf("ResourceClaim %s: %s.exactly.adminAccess: admin access is not supported by gpuslice-scheduler", c.Name, f)
			}
			a, err := translateOne(c.Name, f+".exactly", r.Name, "", e.DeviceClassName, e.Selectors, e.AllocationMode, e.Count, e.Capacity, share)
			if err != nil {
				return nil, err
			}
			a.parentField = f
			q.alts = append(q.alts, a)
		case len(r.FirstAvailable) > 0:
			if len(r.FirstAvailable) > resourceapi.FirstAvailableDeviceRequestMaxSize {
				return nil, fmt.Errorf("ResourceClaim %s: %s.firstAvailable: %d subrequests, at most %d", c.Name, f, len(r.FirstAvailable), resourceapi.FirstAvailableDeviceRequestMaxSize)
			}
			seen := map[string]bool{}
			for j, s := range r.FirstAvailable {
				sf := fmt.Sprintf("%s.firstAvailable[%d]", f, j)
				if s.Name == "" || seen[s.Name] {
					return nil, fmt.Errorf("ResourceClaim %s: %s.name %q: each subrequest needs a name of its own", c.Name, sf, s.Name)
				}
				seen[s.Name] = true
				a, err := translateOne(c.Name, sf, r.Name, s.Name, s.DeviceClassName, s.Selectors, s.AllocationMode, s.Count, s.Capacity, share)
				if err != nil {
					return nil, err
				}
				a.parentField = f
				q.alts = append(q.alts, a)
				refs[a.ref] = true
			}
		default:
			return nil, fmt.Errorf("ResourceClaim %s: %s: neither exactly nor firstAvailable", c.Name, f)
		}
		if r.Name == "" || refs[r.Name] {
			return nil, fmt.Errorf("ResourceClaim %s: %s.name %q: each request needs a name of its own", c.Name, f, r.Name)
		}
		refs[r.Name] = true
		c.reqs = append(c.reqs, q)
	}
	if len(c.reqs) == 0 {
		return nil, fmt.Errorf("ResourceClaim %s: spec.devices.requests is empty", c.Name)
	}
	for i, con := range rc.Spec.Devices.Constraints {
		for _, r := range con.Requests {
			if !refs[r] {
				return nil, fmt.Errorf("ResourceClaim %s: spec.devices.constraints[%d].requests: no request or subrequest %q (write <request> or <request>/<subrequest>)", c.Name, i, r)
			}
		}
		var full, fld string
		match := alloc.MatchAttribute
		switch {
		case con.MatchAttribute != nil:
			full, fld = string(*con.MatchAttribute), "matchAttribute"
		case con.DistinctAttribute != nil:
			full, fld, match = string(*con.DistinctAttribute), "distinctAttribute", alloc.MatchDistinct
		default:
			return nil, fmt.Errorf("ResourceClaim %s: spec.devices.constraints[%d]: neither matchAttribute nor distinctAttribute; gpuslice-scheduler supports those two", c.Name, i)
		}
		// As Kubernetes looks attributes up: domain/name, where the
		// driver's own attributes are published under its domain.
		domain, name, ok := strings.Cut(full, "/")
		if !ok || domain != dranames.DriverName || !slices.Contains(knownAttributes, name) {
			return nil, fmt.Errorf("ResourceClaim %s: spec.devices.constraints[%d].%s %q: gpuslice devices have %s/<name> for name in %s",
				c.Name, i, fld, full, dranames.DriverName, strings.Join(knownAttributes, ", "))
		}
		k := constraint{names: con.Requests, c: alloc.Constraint{Match: match, Attribute: name}}
		if match == alloc.MatchAttribute && name == dranames.AttrParentUUID {
			// one physical GPU: the allocator's fast path
			k.c = alloc.Constraint{Match: "gpu"}
		}
		c.cons = append(c.cons, k)
	}
	// Every choice must make a valid allocator claim; the first (and
	// the others' requests one by one) are checked here so a claim that
	// never could is refused before any node is tried.
	for i := range c.reqs {
		for j := range c.reqs[i].alts {
			choice := make([]int, len(c.reqs))
			choice[i] = j
			if _, err := c.flatten(choice, nil); err != nil {
				return nil, err
			}
		}
	}
	return c, nil
}

// translateOne translates an exactly request or a subrequest (field is
// its path) into the allocator's request named ref.
func translateOne(claim, field, reqName, sub, class string, selectors []resourceapi.DeviceSelector, mode resourceapi.DeviceAllocationMode,
	count int64, capacity *resourceapi.CapacityRequirements, share alloc.Mode) (alt, error) {
	a := alt{ref: reqName, sub: sub, field: field, class: class, capacity: capacity}
	if sub != "" {
		a.ref = reqName + "/" + sub
	}
	if !ourClass(class) {
		return a, fmt.Errorf("ResourceClaim %s: %s.deviceClassName %q: a claim with gpuslice devices may only name %s, %s or %s",
			claim, field, class, dranames.ClassGPU, dranames.ClassShared, dranames.ClassMIG)
	}
	switch mode {
	case "", resourceapi.DeviceAllocationModeExactCount:
		if count < 0 || count > resourceapi.AllocationResultsMaxSize {
			return a, fmt.Errorf("ResourceClaim %s: %s.count %d: want 1..%d", claim, field, count, resourceapi.AllocationResultsMaxSize)
		}
	case resourceapi.DeviceAllocationModeAll:
		a.all = true
		if count != 0 {
			return a, fmt.Errorf("ResourceClaim %s: %s.count %d: allocationMode All takes every matching device; leave count out", claim, field, count)
		}
	default:
		return a, fmt.Errorf("ResourceClaim %s: %s.allocationMode %q: want ExactCount or All", claim, field, mode)
	}
	req := alloc.Request{Name: a.ref, Count: int(max(count, 1))}
	var sels []string
	switch class {
	case dranames.ClassGPU:
		req.Mode = alloc.Exclusive
		sels = append(sels, fmt.Sprintf("device.attributes[%q].type == %q", allocDriver, "gpu"))
	case dranames.ClassShared:
		req.Mode = share
		sels = append(sels, fmt.Sprintf("device.attributes[%q].type == %q", allocDriver, "gpu"))
	case dranames.ClassMIG:
		req.Mode = alloc.MIG
	}
	if capacity != nil {
		for name, q := range capacity.Requests {
			switch name {
			case dranames.CapacityMemory:
				mib := (q.Value() + 1<<20 - 1) >> 20
				if class == dranames.ClassShared {
					mib = (mib + StepMiB - 1) / StepMiB * StepMiB
				}
				req.MemoryMiB = mib
			case dranames.CapacityCompute:
				if class != dranames.ClassShared {
					return a, fmt.Errorf("ResourceClaim %s: %s.capacity.requests.compute: compute is requested from %s devices only", claim, field, dranames.ClassShared)
				}
				req.ComputePercent = int(q.Value())
			default:
				return a, fmt.Errorf("ResourceClaim %s: %s.capacity.requests: capacity %q; gpuslice devices have memory and (shared) compute", claim, field, name)
			}
		}
	}
	for j, s := range selectors {
		if s.CEL == nil {
			continue
		}
		expr, err := selector(s.CEL.Expression)
		if err != nil {
			return a, fmt.Errorf("ResourceClaim %s: %s.selectors[%d].cel.expression: %w", claim, field, j, err)
		}
		a.selectors = append(a.selectors, s.CEL.Expression)
		sels = append(sels, "("+expr+")")
	}
	req.Selector = strings.Join(sels, " && ")
	a.req = req
	return a, nil
}

// HasChoices reports whether the claim has a prioritized list or a
// request of allocationMode All (what is decided per node).
func (c *Claim) HasChoices() bool {
	for _, r := range c.reqs {
		if len(r.alts) > 1 || r.alts[0].sub != "" || r.alts[0].all {
			return true
		}
	}
	return false
}

// maxChoices bounds the combinations of subrequests one decision tries
// (eight subrequests in each of several requests multiply fast).
const maxChoices = 512

// Allocate decides the claim on s, the State of node nd's devices (nd may
// be nil when no request is of allocationMode All). The choices of
// subrequests are tried in order — the first request's first subrequest
// with the second's first, then the second's second, ..., as the stock
// allocator backtracks — and the first the allocator places (with the
// claim's constraints and tenant isolation) and accept takes (nil: any;
// else "" or the reason it refuses, such as a quota) wins. Devices of a
// subrequest are named <request>/<subrequest>, as in the stock
// allocator's results. Nothing is applied to s.
//
// When nothing fits, a claim without prioritized lists returns the
// allocator's error; one with returns a *ChoiceError naming each choice
// tried and why it failed.
func (c *Claim) Allocate(s *alloc.State, nd *NodeDevices, accept func(*alloc.Allocation) string) (*alloc.Allocation, error) {
	choice := make([]int, len(c.reqs))
	multi := false
	for _, r := range c.reqs {
		multi = multi || len(r.alts) > 1
	}
	ce := &ChoiceError{Claim: c.Name}
	for tries := 0; ; tries++ {
		if tries == maxChoices {
			ce.Truncated = true
			return nil, ce
		}
		a, err := c.try(s, nd, choice, accept)
		if err == nil {
			return a, nil
		}
		if !multi {
			return nil, err
		}
		ce.Tries = append(ce.Tries, Try{Choice: c.choiceText(choice), Err: err})
		if !c.next(choice) {
			return nil, ce
		}
	}
}

func (c *Claim) try(s *alloc.State, nd *NodeDevices, choice []int, accept func(*alloc.Allocation) string) (*alloc.Allocation, error) {
	flat, err := c.flatten(choice, nd)
	if err != nil {
		return nil, err
	}
	a, err := s.Allocate(&flat)
	if err != nil {
		var alls []string
		for i, r := range c.reqs {
			if al := &r.alts[choice[i]]; al.all {
				alls = append(alls, al.describe()+" matches "+al.matched(flat))
			}
		}
		if len(alls) == 0 {
			return nil, err
		}
		why := err.Error()
		var nf *alloc.NoFitError
		if errors.As(err, &nf) && nd != nil && nf.PerNode[nd.Node.Name] != "" {
			why = nf.PerNode[nd.Node.Name]
		}
		return nil, fmt.Errorf("%s on node %s: they cannot all be allocated: %s", strings.Join(alls, "; "), nd.Node.Name, expandedName.ReplaceAllString(why, ""))
	}
	if accept != nil {
		if why := accept(a); why != "" {
			return nil, errors.New(why)
		}
	}
	// An All request's devices were decided as requests of their own
	// (<ref>#k): their results carry the request's name.
	for i := range a.Devices {
		a.Devices[i].Request, _, _ = strings.Cut(a.Devices[i].Request, "#")
	}
	return a, nil
}

// expandedName is the suffix that names an All request's devices apart.
var expandedName = regexp.MustCompile(`#[0-9]+`)

// matched says which devices an All alternative expanded into in flat.
func (a *alt) matched(flat alloc.Claim) string {
	n := 0
	var parts []string
	for _, q := range flat.Requests {
		if base, _, _ := strings.Cut(q.Name, "#"); base != a.ref || q.Name == base {
			continue
		}
		n += q.Count
		if q.Profile != "" {
			parts = append(parts, fmt.Sprintf("%d × %s", q.Count, q.Profile))
		}
	}
	s := fmt.Sprintf("%d devices", n)
	if len(parts) > 0 {
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	return s
}

// next advances choice to the next combination in order (the last
// request's subrequest varies fastest); false after the last.
func (c *Claim) next(choice []int) bool {
	for i := len(choice) - 1; i >= 0; i-- {
		if choice[i]+1 < len(c.reqs[i].alts) {
			choice[i]++
			for k := i + 1; k < len(choice); k++ {
				choice[k] = 0
			}
			return true
		}
	}
	return false
}

// choiceText names the subrequests of a choice as the user wrote them.
func (c *Claim) choiceText(choice []int) string {
	var parts []string
	for i, r := range c.reqs {
		if len(r.alts) > 1 || r.alts[0].sub != "" {
			parts = append(parts, r.alts[choice[i]].describe())
		}
	}
	return strings.Join(parts, ", ")
}

// flatten is the allocator's claim for one choice of subrequests, with
// All requests expanded into nd's matching devices (nd nil: an All
// request is an error).
func (c *Claim) flatten(choice []int, nd *NodeDevices) (alloc.Claim, error) {
	out := c.base
	out.Constraints = []alloc.Constraint{{Match: "node"}}
	refs := map[string][]string{}
	for i, r := range c.reqs {
		a := &r.alts[choice[i]]
		var names []string
		if a.all {
			if nd == nil {
				// Translate checks the alternative alone: the
				// request's own checks are done; its devices come
				// from a node.
				q := a.req
				out.Requests = append(out.Requests, q)
				names = []string{q.Name}
			} else {
				rs, err := a.expand(nd, out.Tenant)
				if err != nil {
					return out, fmt.Errorf("ResourceClaim %s: %s: %w", c.Name, a.field, err)
				}
				for _, q := range rs {
					names = append(names, q.Name)
				}
				out.Requests = append(out.Requests, rs...)
			}
		} else {
			out.Requests = append(out.Requests, a.req)
			names = []string{a.req.Name}
		}
		refs[r.name] = names
		if a.sub != "" {
			refs[a.ref] = names
		}
	}
	for _, k := range c.cons {
		con := k.c
		if len(k.names) > 0 {
			con.Requests = nil
			for _, n := range k.names {
				con.Requests = append(con.Requests, refs[n]...)
			}
			if len(con.Requests) == 0 {
				continue // it names only subrequests not chosen
			}
		}
		out.Constraints = append(out.Constraints, con)
	}
	if err := alloc.ValidateClaim(&out); err != nil {
		return out, fmt.Errorf("ResourceClaim %s: %w", c.Name, err)
	}
	return out, nil
}

// ChoiceError is a claim with prioritized lists of which no choice of
// subrequests could be allocated: each choice tried, in order, and why.
type ChoiceError struct {
	Claim string
	Tries []Try
	// Truncated is set when the search stopped at maxChoices.
	Truncated bool
}

// Try is one choice of subrequests and why it did not fit.
type Try struct {
	// Choice names the subrequests (with their selectors) as written.
	Choice string
	Err    error
}

func (e *ChoiceError) Error() string {
	return fmt.Sprintf("claim %s: no subrequest of its prioritized list fits: %s", e.Claim, e.text(""))
}

// Reason is the error for one node's Filter status: each choice and the
// allocator's reason on node.
func (e *ChoiceError) Reason(node string) string {
	return "no subrequest fits: " + e.text(node)
}

func (e *ChoiceError) text(node string) string {
	var parts []string
	for _, t := range e.Tries {
		why := t.Err.Error()
		var nf *alloc.NoFitError
		if errors.As(t.Err, &nf) && node != "" && nf.PerNode[node] != "" {
			why = nf.PerNode[node]
		}
		parts = append(parts, t.Choice+": "+why)
	}
	s := strings.Join(parts, "; ")
	if e.Truncated {
		s += "; stopped after " + strconv.Itoa(maxChoices) + " combinations"
	}
	return s
}

// SubrequestScore is the stock scheduler's score of an allocation of rc
// for its prioritized lists (DynamicResources.Score): for each request
// with subrequests, the list's most length (8) less the index of the
// subrequest chosen, so a node where earlier subrequests fit scores
// higher. Devices name their request as in the result
// (<request>/<subrequest>).
func SubrequestScore(rc *resourceapi.ResourceClaim, a *alloc.Allocation) int64 {
	chosen := map[string]bool{}
	for _, d := range a.Devices {
		chosen[d.Request] = true
	}
	var score int64
	for _, r := range rc.Spec.Devices.Requests {
		for i, s := range r.FirstAvailable {
			if chosen[r.Name+"/"+s.Name] {
				score += int64(resourceapi.FirstAvailableDeviceRequestMaxSize - i)
			}
		}
	}
	return score
}
