package draconfig

import (
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// applies says whether a config listing requests applies to request
// (a subrequest "req/sub" is configured by "req" too; no list: every
// request).
func applies(requests []string, request string) bool {
	base, _, _ := strings.Cut(request, "/")
	return len(requests) == 0 || slices.Contains(requests, request) || slices.Contains(requests, base)
}

// ForRequest decodes the config that applies to request among an
// allocation's configs, as DRA orders them (the class's configs first,
// then the claim's): the last opaque config of this driver that names the
// request (or names none) wins whole, as NVIDIA's driver picks its
// configs. No config: the zero Sharing. field names the config in errors
// ("status.allocation.devices.config").
func ForRequest(configs []resourceapi.DeviceAllocationConfiguration, request, field string) (Sharing, error) {
	pick := Pick(configs, request)
	if pick < 0 {
		return Sharing{}, nil
	}
	return Decode(fmt.Sprintf("%s[%d].opaque.parameters", field, pick), configs[pick].Opaque.Parameters.Raw)
}

// Pick is the index of the config ForRequest decodes for request, -1 for
// none.
func Pick(configs []resourceapi.DeviceAllocationConfiguration, request string) int {
	pick := -1
	for i, c := range configs {
		if c.Opaque != nil && c.Opaque.Driver == dranames.DriverName && applies(c.Requests, request) {
			pick = i
		}
	}
	return pick
}

// Problem is one thing wrong with a claim's spec: the field's path and
// what is wrong with it (a Message that starts with a deeper path than
// Field is shown alone).
type Problem struct {
	Field   string
	Message string
}

func (p Problem) Error() string {
	if strings.HasPrefix(p.Message, p.Field) {
		return p.Message
	}
	return p.Field + ": " + p.Message
}

// CheckClaimSpec checks a ResourceClaim spec (field: its path, "spec" or
// "spec.spec" for a template) the way prepare will read it: every opaque
// config for this driver decodes, names requests the claim has, and
// asks nothing the device class of its requests cannot give (a mode on
// the whole-GPU class is fine; "exclusive" on the shared class or MPS
// limits on a MIG request without MPS are not). classOf says which of
// gpuslice's classes a device class name is ("gpu", "shared", "mig", or
// "" for another driver's). It returns every problem found.
func CheckClaimSpec(spec *resourceapi.ResourceClaimSpec, field string, classOf func(string) string) []Problem {
	var out []Problem
	requests := map[string]string{} // request (and subrequest) name -> gpuslice class type
	for _, r := range spec.Devices.Requests {
		if r.Exactly != nil {
			requests[r.Name] = classOf(r.Exactly.DeviceClassName)
		}
		for _, sub := range r.FirstAvailable {
			requests[r.Name+"/"+sub.Name] = classOf(sub.DeviceClassName)
		}
	}
	for i, c := range spec.Devices.Config {
		if c.Opaque == nil || c.Opaque.Driver != dranames.DriverName {
			continue
		}
		f := fmt.Sprintf("%s.devices.config[%d]", field, i)
		for j, name := range c.Requests {
			found := false
			for r := range requests {
				if r == name || strings.HasPrefix(r, name+"/") {
					found = true
				}
			}
			if !found {
				out = append(out, Problem{fmt.Sprintf("%s.requests[%d]", f, j), fmt.Sprintf("%q: the claim has no such request (requests: %s)", name, strings.Join(sortedKeys(requests), ", "))})
			}
		}
		sh, err := Decode(f+".opaque.parameters", c.Opaque.Parameters.Raw)
		if err != nil {
			out = append(out, Problem{f + ".opaque.parameters", err.Error()})
			continue
		}
		for _, r := range sortedKeys(requests) {
			if !applies(c.Requests, r) {
				continue
			}
			if msg := fits(sh, requests[r]); msg != "" {
				out = append(out, Problem{f + ".opaque.parameters", fmt.Sprintf("request %q: %s", r, msg)})
			}
		}
	}
	return out
}

// fits says what a decoded config asks that a device of class type typ
// cannot give ("" when it can, or when typ is not one of ours).
func fits(sh Sharing, typ string) string {
	switch typ {
	case "shared":
		if sh.Mode == "exclusive" {
			return "mode exclusive on a shared GPU: use device class gpu.gpuslice.dev for a GPU alone"
		}
		if sh.Isolation == "hardware" {
			return "isolation hardware on a shared GPU: use gpu.gpuslice.dev or mig.gpuslice.dev"
		}
	case "mig":
		if sh.Interval != "" {
			return "a MIG instance has no time-slice interval"
		}
	}
	return ""
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
