package autoscale

import (
	"fmt"
	"math"
	"time"
)

// Metric names what a service's samples measure. Every metric is a
// percent, so the thresholds read the same way for each.
type Metric string

// Metrics.
const (
	// MetricGPU is the replicas' measured SM (compute) utilization of the
	// devices their claims hold, averaged over replicas (the default).
	MetricGPU Metric = "gpu"
	// MetricMemory is the replicas' GPU memory utilization of their
	// devices, averaged.
	MetricMemory Metric = "memory"
	// MetricRequests is requests in flight per replica as a percent of the
	// service's target concurrency per replica.
	MetricRequests Metric = "requests"
	// MetricPrometheus is the value of a Prometheus query (a percent).
	MetricPrometheus Metric = "prometheus"
)

// Metrics lists the valid metrics.
func Metrics() []Metric {
	return []Metric{MetricGPU, MetricMemory, MetricRequests, MetricPrometheus}
}

// ParseMetric reads a metric name; "compute" and "" mean gpu.
func ParseMetric(s string) (Metric, error) {
	switch s {
	case "", "gpu", "compute":
		return MetricGPU, nil
	case "memory", "requests", "prometheus":
		return Metric(s), nil
	}
	return "", fmt.Errorf("metric %q: want one of gpu (or compute), memory, requests, prometheus", s)
}

// Sample is one measurement of a service.
type Sample struct {
	Time time.Time `json:"time"`
	// Value is the metric (a percent); NaN when nothing could be measured
	// (no replica ready, a query that failed): it breaks a run.
	Value float64 `json:"value"`
	// Requests counts the requests that reached the service's proxy since
	// the previous sample; InFlight those being served at Time; Waiting
	// those held at the proxy for want of a ready replica.
	Requests int `json:"requests,omitempty"`
	InFlight int `json:"inFlight,omitempty"`
	Waiting  int `json:"waiting,omitempty"`
	// Starting is set when replicas exist but none is ready yet: a
	// service cannot be idle before it can answer, so such a sample
	// breaks an auto-stop run (a slow start is not stopped as it ends).
	Starting bool `json:"starting,omitempty"`
}

func (s Sample) measured() bool { return !math.IsNaN(s.Value) && !math.IsInf(s.Value, 0) }

// Current is where the service stands: its replica count and when it last
// changed (samples before then do not count toward the next change).
type Current struct {
	Replicas int       `json:"replicas"`
	Since    time.Time `json:"since"`
}

// Action is what a decision does.
type Action string

// Actions.
const (
	Hold  Action = "hold"
	Up    Action = "up"
	Down  Action = "down"
	Stop  Action = "stop"  // to zero (auto-stop)
	Wake  Action = "wake"  // from zero on a waiting request
	Clamp Action = "clamp" // into [min, max] after the policy changed
)

// Decision is the answer of Decide, with its reason.
type Decision struct {
	Time   time.Time `json:"time"`
	Action Action    `json:"action"`
	From   int       `json:"from"`
	To     int       `json:"to"`
	Reason string    `json:"reason"`
}

// Changed reports whether the decision changes the replica count.
func (d Decision) Changed() bool { return d.From != d.To }

func (d Decision) String() string {
	return fmt.Sprintf("%s %d→%d: %s", d.Action, d.From, d.To, d.Reason)
}

// Decide is the replica decision at now for a service under policy p,
// given the samples of window (any order of age; those not after cur.Since
// and those after now are ignored). It is a pure function: the same
// arguments always give the same decision.
func Decide(p Policy, metric Metric, cur Current, window []Sample, now time.Time) Decision {
	p = p.WithDefaults()
	d := Decision{Time: now, Action: Hold, From: cur.Replicas, To: cur.Replicas}
	set := func(a Action, to int, format string, args ...any) Decision {
		d.Action, d.To, d.Reason = a, to, fmt.Sprintf(format, args...)
		return d
	}
	var recent []Sample
	for _, s := range window {
		if s.Time.After(cur.Since) && !s.Time.After(now) {
			recent = append(recent, s)
		}
	}
	sortByTime(recent)
	floor := max(p.MinReplicas, 1) // what a wake or a start brings up
	switch {
	case cur.Replicas > p.MaxReplicas:
		return set(Clamp, p.MaxReplicas, "%d replicas is above maxReplicas %d", cur.Replicas, p.MaxReplicas)
	case cur.Replicas == 0:
		if n := waiting(recent); n > 0 {
			return set(Wake, floor, "%d request(s) waiting with no replica", n)
		}
		if p.MinReplicas > 0 && !p.AutoStop {
			return set(Clamp, p.MinReplicas, "0 replicas is below minReplicas %d", p.MinReplicas)
		}
		if p.AutoStop {
			d.Reason = "stopped: no request waiting"
		} else {
			d.Reason = "at minReplicas 0: no request waiting"
		}
		return d
	case cur.Replicas < p.MinReplicas:
		return set(Clamp, p.MinReplicas, "%d replicas is below minReplicas %d", cur.Replicas, p.MinReplicas)
	}
	// Over-utilized: the trailing run of samples above the threshold.
	if start, last, mean, ok := run(recent, func(s Sample) bool { return s.measured() && s.Value > p.UpThreshold }); ok {
		held := now.Sub(start)
		if held >= p.UpAfter {
			if cur.Replicas >= p.MaxReplicas {
				d.Reason = fmt.Sprintf("%s %.0f%% above %.0f%% for %s or more, but at maxReplicas %d", metric, last, p.UpThreshold, p.UpAfter, p.MaxReplicas)
				return d
			}
			return set(Up, cur.Replicas+1, "%s above %.0f%% for %s (mean %.0f%%, last %.0f%%)", metric, p.UpThreshold, Human(held), mean, last)
		}
		d.Reason = fmt.Sprintf("%s above %.0f%% for %s of %s", metric, p.UpThreshold, Human(held), p.UpAfter)
		return d
	}
	// Auto-stop: no request at all for the down period.
	if p.AutoStop && cur.Replicas <= p.MinReplicas {
		if start, _, _, ok := run(recent, func(s Sample) bool { return s.Requests == 0 && s.InFlight == 0 && s.Waiting == 0 && !s.Starting }); ok {
			held := now.Sub(start)
			if held >= p.DownAfter {
				return set(Stop, 0, "no request for %s (auto-stop)", Human(held))
			}
			d.Reason = fmt.Sprintf("no request for %s of %s before auto-stop", Human(held), p.DownAfter)
		}
	}
	// Idle: the trailing run of samples below the idle threshold.
	if start, last, mean, ok := run(recent, func(s Sample) bool { return s.measured() && s.Value < p.IdleThreshold }); ok {
		held := now.Sub(start)
		if cur.Replicas <= p.MinReplicas {
			if d.Reason == "" {
				d.Reason = fmt.Sprintf("%s %.0f%% below %.0f%%, at minReplicas %d", metric, last, p.IdleThreshold, p.MinReplicas)
			}
			return d
		}
		if held >= p.DownAfter {
			return set(Down, cur.Replicas-1, "%s below %.0f%% for %s (mean %.0f%%, last %.0f%%)", metric, p.IdleThreshold, Human(held), mean, last)
		}
		d.Reason = fmt.Sprintf("%s below %.0f%% for %s of %s", metric, p.IdleThreshold, Human(held), p.DownAfter)
		return d
	}
	if d.Reason == "" {
		switch {
		case len(recent) == 0:
			d.Reason = "no sample since the last change"
		case !recent[len(recent)-1].measured():
			d.Reason = fmt.Sprintf("%s not measured", metric)
		default:
			d.Reason = fmt.Sprintf("%s %.0f%% within [%.0f%%, %.0f%%]", metric, recent[len(recent)-1].Value, p.IdleThreshold, p.UpThreshold)
		}
	}
	return d
}

// run finds the trailing run of samples (sorted by time) for which in
// holds: when it started, the last value and the mean value.
func run(ss []Sample, in func(Sample) bool) (start time.Time, last, mean float64, ok bool) {
	i := len(ss)
	for i > 0 && in(ss[i-1]) {
		i--
	}
	if i == len(ss) {
		return time.Time{}, 0, 0, false
	}
	sum := 0.0
	for _, s := range ss[i:] {
		sum += s.Value
	}
	return ss[i].Time, ss[len(ss)-1].Value, sum / float64(len(ss)-i), true
}

func waiting(ss []Sample) int {
	if len(ss) == 0 {
		return 0
	}
	return ss[len(ss)-1].Waiting
}

func sortByTime(ss []Sample) {
	// Insertion sort: windows are short and nearly always in order.
	for i := 1; i < len(ss); i++ {
		for j := i; j > 0 && ss[j].Time.Before(ss[j-1].Time); j-- {
			ss[j], ss[j-1] = ss[j-1], ss[j]
		}
	}
}

// Trim drops the samples a decision at now can no longer use: those older
// than the longer of the policy's periods (plus one sample's slack).
func Trim(p Policy, window []Sample, now time.Time) []Sample {
	p = p.WithDefaults()
	keep := max(p.UpAfter, p.DownAfter) + time.Minute
	out := window[:0]
	for _, s := range window {
		if now.Sub(s.Time) <= keep {
			out = append(out, s)
		}
	}
	return out
}

// Human rounds a measured duration for a reason people read: whole
// seconds from a second up ("2m5s", not "2m5.053434914s"), milliseconds
// below.
func Human(d time.Duration) time.Duration {
	if d >= time.Second || d <= -time.Second {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}
