package autoscale

import (
	"errors"
	"fmt"
	"time"

	"github.com/gpuslice/gpuslice/internal/model"
)

// Defaults applied to a zero field of a Policy (the compose settings'
// defaults when unset).
const (
	DefaultUpThreshold   = 80
	DefaultUpAfter       = 5 * time.Minute
	DefaultIdleThreshold = 20
	DefaultDownAfter     = 5 * time.Minute
)

// Policy is when a service scales. Thresholds are percents of the metric
// (see Metric); a zero field takes its default.
type Policy struct {
	MinReplicas int `json:"minReplicas"`
	MaxReplicas int `json:"maxReplicas"`
	// UpThreshold and UpAfter: one more replica once the metric stayed
	// above UpThreshold for UpAfter.
	UpThreshold float64       `json:"overUtilizedThreshold,omitempty"`
	UpAfter     time.Duration `json:"overUtilizedFor,omitempty"`
	// IdleThreshold and DownAfter: one fewer once the metric stayed below
	// IdleThreshold for DownAfter.
	IdleThreshold float64       `json:"idleThreshold,omitempty"`
	DownAfter     time.Duration `json:"idleFor,omitempty"`
	// AutoStop drops the service to zero replicas after DownAfter without
	// any request, and wakes it on the next one (serverless).
	AutoStop bool `json:"enableAutoStop,omitempty"`
}

// FromCapabilities reads compose's x-omnistrate-capabilities (minutes,
// percents; zero = default).
func FromCapabilities(a model.Autoscaling) Policy {
	return Policy{
		MinReplicas:   a.MinReplicas,
		MaxReplicas:   a.MaxReplicas,
		UpThreshold:   float64(a.OverUtilizedThreshold),
		UpAfter:       time.Duration(a.OverUtilizedMinutesBeforeScalingUp) * time.Minute,
		IdleThreshold: float64(a.IdleThreshold),
		DownAfter:     time.Duration(a.IdleMinutesBeforeScalingDown) * time.Minute,
		AutoStop:      a.EnableAutoStop,
	}
}

// WithDefaults fills zero fields with the defaults (80% for 5 minutes up,
// 20% for 5 minutes down) and a zero MaxReplicas with MinReplicas (at
// least 1).
func (p Policy) WithDefaults() Policy {
	if p.UpThreshold == 0 {
		p.UpThreshold = DefaultUpThreshold
	}
	if p.UpAfter == 0 {
		p.UpAfter = DefaultUpAfter
	}
	if p.IdleThreshold == 0 {
		p.IdleThreshold = DefaultIdleThreshold
	}
	if p.DownAfter == 0 {
		p.DownAfter = DefaultDownAfter
	}
	if p.MaxReplicas == 0 {
		p.MaxReplicas = max(p.MinReplicas, 1)
	}
	return p
}

// Validate reports every problem of a policy (after WithDefaults), each
// naming its field and what would be valid.
func (p Policy) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if p.MinReplicas < 0 {
		bad("minReplicas", "%d is negative; want 0 or more", p.MinReplicas)
	}
	if p.MaxReplicas < 1 {
		bad("maxReplicas", "%d; want 1 or more", p.MaxReplicas)
	}
	if p.MinReplicas > p.MaxReplicas {
		bad("minReplicas", "%d is more than maxReplicas %d; lower it to %d or raise maxReplicas", p.MinReplicas, p.MaxReplicas, p.MaxReplicas)
	}
	for _, t := range []struct {
		f string
		v float64
	}{{"overUtilizedThreshold", p.UpThreshold}, {"idleThreshold", p.IdleThreshold}} {
		if t.v < 0 || t.v > 100 || t.v != t.v {
			bad(t.f, "%v; want a percent, 0..100", t.v)
		}
	}
	if p.IdleThreshold >= p.UpThreshold {
		bad("idleThreshold", "%v is not below overUtilizedThreshold %v; the service would scale down and up on the same value", p.IdleThreshold, p.UpThreshold)
	}
	if p.UpAfter < 0 {
		bad("overUtilizedMinutesBeforeScalingUp", "negative; want 0 or more")
	}
	if p.DownAfter < 0 {
		bad("idleMinutesBeforeScalingDown", "negative; want 0 or more")
	}
	return errors.Join(errs...)
}
