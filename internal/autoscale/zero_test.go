package autoscale

import (
	"strings"
	"testing"
	"time"
)

// DecideZero wakes on a waiting request, stops after the down period
// without requests at any replica count, and holds in between; samples
// from before the last change do not count.
func TestDecideZero(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	p := Policy{MinReplicas: 2, MaxReplicas: 5, DownAfter: 2 * time.Minute, AutoStop: true}
	at := func(min int, requests, waiting int) Sample {
		return Sample{Time: t0.Add(time.Duration(min) * time.Minute), Requests: requests, Waiting: waiting}
	}
	// At zero: nothing waiting holds; a waiting request wakes to minReplicas.
	if d := DecideZero(p, Current{Replicas: 0, Since: t0}, []Sample{at(1, 0, 0)}, t0.Add(time.Minute)); d.Action != Hold || d.To != 0 {
		t.Fatalf("idle at zero: %v", d)
	}
	if d := DecideZero(p, Current{Replicas: 0, Since: t0}, []Sample{at(1, 1, 1)}, t0.Add(time.Minute)); d.Action != Wake || d.To != 2 {
		t.Fatalf("waiting at zero: %v", d)
	}
	p1 := p
	p1.MinReplicas = 0
	if d := DecideZero(p1, Current{Replicas: 0, Since: t0}, []Sample{at(1, 1, 1)}, t0.Add(time.Minute)); d.Action != Wake || d.To != 1 {
		t.Fatalf("minReplicas 0 wakes one: %v", d)
	}
	// Running at 4 (another autoscaler's count): idle for 1 of 2 minutes
	// holds, for 2 stops; a request in the run restarts it.
	idle := []Sample{at(1, 0, 0), at(2, 0, 0), at(3, 0, 0)}
	if d := DecideZero(p, Current{Replicas: 4, Since: t0}, idle[:2], t0.Add(2*time.Minute)); d.Action != Hold {
		t.Fatalf("idle 1m: %v", d)
	}
	if d := DecideZero(p, Current{Replicas: 4, Since: t0}, idle, t0.Add(3*time.Minute)); d.Action != Stop || d.To != 0 {
		t.Fatalf("idle 2m: %v", d)
	}
	busy := []Sample{at(1, 0, 0), at(2, 3, 0), at(3, 0, 0)}
	if d := DecideZero(p, Current{Replicas: 4, Since: t0}, busy, t0.Add(3*time.Minute)); d.Action != Hold {
		t.Fatalf("a request a minute ago: %v", d)
	}
	// Samples before the last change do not count.
	if d := DecideZero(p, Current{Replicas: 1, Since: t0.Add(150 * time.Second)}, idle, t0.Add(3*time.Minute)); d.Action != Hold {
		t.Fatalf("just woken: %v", d)
	}
	// Without auto-stop it never stops.
	p.AutoStop = false
	if d := DecideZero(p, Current{Replicas: 4, Since: t0}, idle, t0.Add(3*time.Minute)); d.Action != Hold {
		t.Fatalf("auto-stop off: %v", d)
	}
}

// Reasons give measured durations rounded for people: "2m5s", never
// "2m5.053434914s".
func TestReasonDurationsAreRounded(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	p := Policy{MinReplicas: 1, MaxReplicas: 5, DownAfter: 10 * time.Minute, AutoStop: true}
	start := t0.Add(53434914 * time.Nanosecond)
	d := DecideZero(p, Current{Replicas: 1, Since: t0}, []Sample{{Time: start}}, start.Add(2*time.Minute+5*time.Second+53434914*time.Nanosecond))
	if !strings.Contains(d.Reason, "no request for 2m5s of 10m0s") {
		t.Fatalf("reason %q", d.Reason)
	}
	if got := Human(1500 * time.Microsecond); got != 2*time.Millisecond {
		t.Fatalf("Human(1.5ms) = %s", got)
	}
}
