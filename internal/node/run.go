package node

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/gpuslice/gpuslice/internal/gpu"
)

// Outcome is what became of one step.
type Outcome string

// Outcomes of a step.
const (
	// Done: the device did it.
	Done Outcome = "done"
	// Gone: the GPU or instance is not there (gpu.ErrNotFound): a
	// destroy is as good as done, anything else has nothing to change.
	Gone Outcome = "gone"
	// InUse: a process uses what the step would change (gpu.ErrInUse);
	// it may work later.
	InUse Outcome = "in-use"
	// Failed: the device refused for another reason.
	Failed Outcome = "failed"
	// Skipped: an earlier step made for the same hold did not work.
	Skipped Outcome = "skipped"
)

// OK reports whether the outcome leaves the device as the step wanted.
func (o Outcome) OK() bool { return o == Done || o == Gone }

// Result is one step and its outcome.
type Result struct {
	Step
	Outcome Outcome
	// Err is set unless the outcome is OK; for Skipped it is the
	// earlier step's error.
	Err error
	// Created is the instance a create made.
	Created gpu.Instance
}

// Run applies a plan's steps in order over dev. A step that does not
// work fails the holds it was made for, and the later steps made for
// them are skipped; steps for other holds (and releases and resets) go
// on. It returns every step's result.
func Run(ctx context.Context, dev gpu.Device, steps []Step) []Result {
	failed := map[int]error{} // hold -> first error
	out := make([]Result, 0, len(steps))
	for _, s := range steps {
		r := Result{Step: s}
		if i := slices.IndexFunc(s.Holds, func(h int) bool { return failed[h] != nil }); i >= 0 {
			r.Outcome, r.Err = Skipped, failed[s.Holds[i]]
			out = append(out, r)
			continue
		}
		if err := ctx.Err(); err != nil {
			r.Outcome, r.Err = Failed, err
		} else {
			r.Outcome, r.Err = apply(ctx, dev, s, &r.Created)
		}
		if !r.Outcome.OK() {
			for _, h := range s.Holds {
				failed[h] = r.Err
			}
		}
		out = append(out, r)
	}
	return out
}

// apply makes one step's call and names the outcome.
func apply(ctx context.Context, dev gpu.Device, s Step, created *gpu.Instance) (Outcome, error) {
	var err error
	switch s.Kind {
	case DestroyInstance:
		err = dev.DestroyInstance(ctx, s.Index, s.Instance)
		if errors.Is(err, gpu.ErrInUse) {
			return InUse, fmt.Errorf("not destroying MIG instance %s on GPU %d: a process uses it: %w", s.Instance, s.Index, err)
		}
		if err != nil && !errors.Is(err, gpu.ErrNotFound) {
			err = fmt.Errorf("destroying MIG instance %s on GPU %d: %w", s.Instance, s.Index, err)
		}
	case SetMIGMode:
		if err = dev.SetMIGMode(ctx, s.Index, s.MIG); err != nil {
			err = fmt.Errorf("turning MIG %s on GPU %d: %w", onOff(s.MIG), s.Index, err)
		}
	case CreateInstance:
		*created, err = dev.CreateInstance(ctx, s.Index, s.Profile, s.Start)
		if err != nil {
			err = fmt.Errorf("creating MIG %s at start %d on GPU %d: %w", s.Profile, s.Start, s.Index, err)
		}
	case SetComputeMode:
		if err = dev.SetComputeMode(ctx, s.Index, s.Mode); err != nil {
			err = fmt.Errorf("setting GPU %d's compute mode to %s: %w", s.Index, modeName(s.Mode), err)
		}
	case SetTimeSlice:
		if err = dev.SetTimeSlice(ctx, s.Index, s.Level); err != nil {
			err = fmt.Errorf("setting time-slice interval %s on GPU %d: %w", s.Level, s.Index, err)
		}
	default:
		return Failed, fmt.Errorf("step %q: unknown kind", s.Kind)
	}
	switch {
	case err == nil:
		return Done, nil
	case errors.Is(err, gpu.ErrNotFound):
		return Gone, nil
	case errors.Is(err, gpu.ErrInUse):
		return InUse, err
	}
	return Failed, err
}

// Report is what one Realize decided and did.
type Report struct {
	Plan    Plan
	Results []Result
}

// Err is why a hold (by index in Want.Holds) was not made: its refusal,
// or the first step made for it that did not work; nil when it was.
func (r Report) Err(hold int) error {
	for _, f := range r.Plan.Refused {
		if f.Hold == hold {
			return f.Err
		}
	}
	for _, res := range r.Results {
		if !res.Outcome.OK() && slices.Contains(res.Holds, hold) {
			return res.Err
		}
	}
	return nil
}

// Instance is the uuid of a MIG hold's instance: adopted or created (""
// when neither).
func (r Report) Instance(hold int) string {
	if id, ok := r.Plan.Found[hold]; ok {
		return id
	}
	for _, res := range r.Results {
		if res.Kind == CreateInstance && res.Outcome == Done && slices.Contains(res.Holds, hold) {
			return res.Created.UUID
		}
	}
	return ""
}

// Created reports whether a create made for the hold ran.
func (r Report) Created(hold int) bool {
	return slices.ContainsFunc(r.Results, func(res Result) bool {
		return res.Kind == CreateInstance && res.Outcome == Done && slices.Contains(res.Holds, hold)
	})
}

// ReleaseErr joins the errors of destroys of released instances.
func (r Report) ReleaseErr() error {
	var errs []error
	for _, res := range r.Results {
		if res.Release && !res.Outcome.OK() {
			errs = append(errs, res.Err)
		}
	}
	return errors.Join(errs...)
}

// ResetErr joins the errors of steps made for no hold and no release:
// compute modes and time slices put back.
func (r Report) ResetErr() error {
	var errs []error
	for _, res := range r.Results {
		if len(res.Holds) == 0 && !res.Release && !res.Outcome.OK() {
			errs = append(errs, res.Err)
		}
	}
	return errors.Join(errs...)
}

// Errs is every error: refusals, and every step that did not work
// (skipped ones once, by their cause).
func (r Report) Errs() []error {
	var out []error
	for _, f := range r.Plan.Refused {
		out = append(out, f.Err)
	}
	for _, res := range r.Results {
		if !res.Outcome.OK() && res.Outcome != Skipped {
			out = append(out, res.Err)
		}
	}
	return out
}
