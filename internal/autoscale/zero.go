package autoscale

import (
	"fmt"
	"time"
)

// DecideZero is the decision of a proxy that only wakes and stops a
// workload whose replica count another autoscaler owns between its
// bounds (a Kubernetes Deployment under an HPA or KEDA, or none): from
// zero to max(MinReplicas, 1) when a request waits, and, with AutoStop, to
// zero once no request at all has come for the down period, whatever the
// count. Anything else holds. Like Decide, it is a pure function of its
// arguments; only samples after cur.Since count.
func DecideZero(p Policy, cur Current, window []Sample, now time.Time) Decision {
	p = p.WithDefaults()
	d := Decision{Time: now, Action: Hold, From: cur.Replicas, To: cur.Replicas}
	var recent []Sample
	for _, s := range window {
		if s.Time.After(cur.Since) && !s.Time.After(now) {
			recent = append(recent, s)
		}
	}
	sortByTime(recent)
	if cur.Replicas == 0 {
		if n := waiting(recent); n > 0 {
			d.Action, d.To, d.Reason = Wake, max(p.MinReplicas, 1), fmt.Sprintf("%d request(s) waiting with no replica", n)
			return d
		}
		d.Reason = "stopped: no request waiting"
		return d
	}
	if !p.AutoStop {
		d.Reason = "running; auto-stop is off"
		return d
	}
	start, _, _, ok := run(recent, func(s Sample) bool { return s.Requests == 0 && s.InFlight == 0 && s.Waiting == 0 && !s.Starting })
	if !ok {
		d.Reason = "serving requests"
		return d
	}
	if held := now.Sub(start); held >= p.DownAfter {
		d.Action, d.To, d.Reason = Stop, 0, fmt.Sprintf("no request for %s (auto-stop)", Human(held))
	} else {
		d.Reason = fmt.Sprintf("no request for %s of %s before auto-stop", Human(held), p.DownAfter)
	}
	return d
}
