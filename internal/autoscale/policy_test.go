package autoscale

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/model"
)

func TestPolicyDefaultsAndValidate(t *testing.T) {
	p := FromCapabilities(model.Autoscaling{MaxReplicas: 3}).WithDefaults()
	if p.UpThreshold != 80 || p.UpAfter != 5*time.Minute || p.IdleThreshold != 20 || p.DownAfter != 5*time.Minute {
		t.Fatalf("defaults: %+v", p)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := Policy{MinReplicas: 4, MaxReplicas: 2, UpThreshold: 30, IdleThreshold: 50, UpAfter: -time.Second}.WithDefaults()
	err := bad.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"minReplicas: 4 is more than maxReplicas 2", "idleThreshold: 50 is not below", "overUtilizedMinutesBeforeScalingUp: negative"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	if _, err := ParseMetric("gpus"); err == nil || !strings.Contains(err.Error(), "want one of gpu") {
		t.Errorf("ParseMetric: %v", err)
	}
}

// A decision ignores samples from before the last change and from the
// future, so a change always waits a whole period of new samples.
func TestDecideCountsOnlySamplesSinceTheLastChange(t *testing.T) {
	p := Policy{MinReplicas: 1, MaxReplicas: 3, UpAfter: 2 * time.Minute}
	t0 := time.Unix(1_000_000, 0)
	var w []Sample
	for i := range 20 {
		w = append(w, Sample{Time: t0.Add(time.Duration(i) * 30 * time.Second), Value: 99})
	}
	now := t0.Add(9 * time.Minute)
	if d := Decide(p, MetricGPU, Current{Replicas: 1, Since: t0.Add(-time.Second)}, w, now); d.Action != Up || d.To != 2 {
		t.Fatalf("want up: %v", d)
	}
	if d := Decide(p, MetricGPU, Current{Replicas: 2, Since: t0.Add(8 * time.Minute)}, w, now); d.Action != Hold {
		t.Fatalf("1 minute after the change: %v", d)
	}
	// Unordered samples give the same answer.
	rev := make([]Sample, len(w))
	for i := range w {
		rev[len(w)-1-i] = w[i]
	}
	if a, b := Decide(p, MetricGPU, Current{Replicas: 1}, w, now), Decide(p, MetricGPU, Current{Replicas: 1}, rev, now); a != b {
		t.Fatalf("order matters: %v vs %v", a, b)
	}
	// At zero only a waiting request wakes the service.
	stopped := Policy{MinReplicas: 1, MaxReplicas: 3, AutoStop: true}
	if d := Decide(stopped, MetricGPU, Current{}, []Sample{{Time: now, Value: math.NaN()}}, now); d.Changed() {
		t.Fatalf("woke without a request: %v", d)
	}
	if d := Decide(stopped, MetricGPU, Current{}, []Sample{{Time: now, Value: math.NaN(), Waiting: 2}}, now); d.Action != Wake || d.To != 1 {
		t.Fatalf("a waiting request: %v", d)
	}
}

// A replica that takes longer to start than the idle period is not
// stopped the moment it is ready: the idle clock starts with readiness.
func TestSlowStartIsNotIdle(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	p := Policy{MinReplicas: 1, MaxReplicas: 2, DownAfter: 2 * time.Minute, AutoStop: true}
	var w []Sample
	for i := 0; i <= 10; i++ { // starting for 10 minutes, ready at the last
		w = append(w, Sample{Time: now.Add(time.Duration(i) * time.Minute), Value: math.NaN(), Starting: i < 10})
	}
	at := now.Add(10 * time.Minute)
	if d := Decide(p, MetricGPU, Current{Replicas: 1, Since: now.Add(-time.Second)}, w, at); d.Action == Stop {
		t.Fatalf("stopped as it became ready: %v", d)
	}
	w = append(w, Sample{Time: at.Add(2 * time.Minute), Value: math.NaN()})
	if d := Decide(p, MetricGPU, Current{Replicas: 1, Since: now.Add(-time.Second)}, w, at.Add(2*time.Minute)); d.Action != Stop {
		t.Fatalf("idle for the down period once ready: %v", d)
	}
}
