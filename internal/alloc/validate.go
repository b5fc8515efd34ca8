package alloc

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/mig"
)

// Limits on what one claim may ask for.
const (
	MaxDevicesPerClaim = 64
	maxMemoryMiB       = 16 << 20 // 16 TiB: far above any GPU
)

// FieldError is one problem with a claim, with the path of the field.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// ValidateClaim checks a claim and returns every problem at once, each
// naming its field and what would be valid.
func ValidateClaim(c *Claim) error {
	return validateClaim(c, func(expr string) error { _, err := CompileSelector(expr); return err })
}

// validateClaim is ValidateClaim with the selector compiler supplied, so a
// State can use its cache of compiled selectors.
func validateClaim(c *Claim, compile func(string) error) error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	if c.Tenant == "" {
		bad("tenant", "is empty; every claim belongs to a tenant")
	}
	switch c.Isolation {
	case "", IsolationNone, IsolationTenant, IsolationHardware:
	default:
		bad("isolation", "%q: want none, tenant or hardware%s", c.Isolation, didYouMean(string(c.Isolation), "none", "tenant", "hardware"))
	}
	if len(c.Requests) == 0 {
		bad("requests", "is empty; a claim asks for at least one device")
	}
	var names map[string]bool
	if len(c.Requests) > 1 || len(c.Constraints) > 0 {
		names = map[string]bool{}
	}
	total, mpsDevices := 0, 0
	for i := range c.Requests {
		r := &c.Requests[i]
		f := func(name string) string { return fmt.Sprintf("requests[%d].%s", i, name) }
		if r.Name == "" {
			bad(f("name"), "is empty")
		} else if names[r.Name] {
			bad(f("name"), "%q is used twice", r.Name)
		}
		if names != nil {
			names[r.Name] = true
		}
		count := max(r.Count, 1)
		if r.Count < 0 || r.Count > MaxDevicesPerClaim {
			bad(f("count"), "%d: want 1..%d", r.Count, MaxDevicesPerClaim)
		}
		total += count
		if r.MemoryMiB < 0 || r.MemoryMiB > maxMemoryMiB {
			bad(f("memoryMiB"), "%d: want 0..%d (0 = the whole device, or for time-slicing and MPS 1/16 of the GPU's memory)", r.MemoryMiB, maxMemoryMiB)
		}
		if r.ComputePercent < 0 || r.ComputePercent > 100 {
			bad(f("computePercent"), "%d: want 0..100 (percent of one whole GPU)", r.ComputePercent)
		}
		switch r.Mode {
		case "", Auto, Exclusive, TimeSlice, MPS, MIG:
		default:
			bad(f("mode"), "%q: want auto, exclusive, timeslice, mps or mig%s", r.Mode, didYouMean(string(r.Mode), "auto", "exclusive", "timeslice", "mps", "mig"))
		}
		if r.Mode == MPS {
			mpsDevices += count
		}
		if r.Profile != "" {
			if _, err := mig.ParseProfileName(r.Profile); err != nil {
				bad(f("profile"), "%v", err)
			}
		}
		switch r.Workload {
		case WorkloadUnknown, WorkloadInference, WorkloadInteractive, WorkloadBatch, WorkloadTraining:
		default:
			bad(f("workload"), "%q: want inference, interactive, batch or training%s", r.Workload, didYouMean(string(r.Workload), "inference", "interactive", "batch", "training"))
		}
		if r.Selector != "" {
			if err := compile(r.Selector); err != nil {
				bad(f("selector"), "%v", err)
			}
		}
		if c.Isolation == IsolationHardware && (r.Mode == TimeSlice || r.Mode == MPS) {
			bad(f("mode"), "%s shares a device, but isolation hardware needs a MIG instance or a whole GPU alone: use mode mig, exclusive or auto", r.Mode)
		}
	}
	if total > MaxDevicesPerClaim {
		bad("requests", "%d devices in all; at most %d per claim", total, MaxDevicesPerClaim)
	}
	if mpsDevices > 1 {
		bad("requests", "%d MPS devices: an MPS client talks to one control daemon, so a claim takes at most one MPS device", mpsDevices)
	}
	for i, con := range c.Constraints {
		switch con.Match {
		case "node", "gpu":
			if con.Attribute != "" {
				bad(fmt.Sprintf("constraints[%d].attribute", i), "%q: only match attribute or distinct name an attribute", con.Attribute)
			}
		case MatchAttribute, MatchDistinct:
			if con.Attribute == "" {
				bad(fmt.Sprintf("constraints[%d].attribute", i), "match %s needs the attribute", con.Match)
			}
		default:
			bad(fmt.Sprintf("constraints[%d].match", i), "%q: want node, gpu, attribute or distinct%s", con.Match, didYouMean(con.Match, "node", "gpu"))
		}
		for j, rn := range con.Requests {
			if !names[rn] && (len(c.Requests) != 1 || c.Requests[0].Name != rn) {
				bad(fmt.Sprintf("constraints[%d].requests[%d]", i, j), "%q is not a request of this claim", rn)
			}
		}
	}
	return errors.Join(errs...)
}

// didYouMean is "; did you mean X?" for the option v most likely
// mistyped (catalog.Suggest, or two neighbouring letters swapped: "mgi"),
// or "".
func didYouMean(v string, options ...string) string {
	low := strings.ToLower(v)
	for _, o := range options {
		if len(o) == len(low) && o != low {
			for i := 0; i+1 < len(o); i++ {
				if low[:i] == o[:i] && low[i] == o[i+1] && low[i+1] == o[i] && low[i+2:] == o[i+2:] {
					return "; did you mean " + o + "?"
				}
			}
		}
	}
	if s := catalog.Suggest(v, options); s != "" {
		return "; did you mean " + s + "?"
	}
	return ""
}
