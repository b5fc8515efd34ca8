package draalloc

import (
	"encoding/json"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpuslice/gpuslice/internal/alloc"
)

// Shape is the claim without its name: two claims of one shape get the
// same answer from Allocate on the same node state, so a scheduler may
// keep that answer per shape. readsUUID says a selector reads a GPU's
// uuid (then an answer on one empty node does not carry over to another
// of the same devices). choices says a request has several subrequests
// (a prioritized list), whose choice may depend on more than the node,
// e.g. a quota.
func (c *Claim) Shape() (key string, readsUUID, choices bool) {
	type altShape struct {
		Ref, Sub, Class string
		Req             alloc.Request
		All             bool
		Selectors       []string
		Capacity        *resourceapi.CapacityRequirements
	}
	type reqShape struct {
		Name string
		Alts []altShape
	}
	type conShape struct {
		Names []string
		C     alloc.Constraint
	}
	base := c.base
	base.Name = ""
	var s struct {
		Base alloc.Claim
		Reqs []reqShape
		Cons []conShape
	}
	s.Base = base
	for _, r := range c.reqs {
		rs := reqShape{Name: r.name}
		choices = choices || len(r.alts) > 1
		for _, a := range r.alts {
			req := a.req
			rs.Alts = append(rs.Alts, altShape{Ref: a.ref, Sub: a.sub, Class: a.class, Req: req, All: a.all, Selectors: a.selectors, Capacity: a.capacity})
			readsUUID = readsUUID || strings.Contains(strings.ToLower(req.Selector), "uuid")
			for _, sel := range a.selectors {
				readsUUID = readsUUID || strings.Contains(strings.ToLower(sel), "uuid")
			}
		}
		s.Reqs = append(s.Reqs, rs)
	}
	for _, k := range c.cons {
		s.Cons = append(s.Cons, conShape{Names: k.names, C: k.c})
	}
	b, err := json.Marshal(s)
	if err != nil {
		return "", true, choices
	}
	return string(b), readsUUID, choices
}
