package autoscale

import (
	"math"
	"testing"
	"time"
)

// FuzzDecide: whatever the samples, a decision stays within [0, max], is
// within [min, max] unless stopped, moves by one step except to wake, stop
// or clamp, and is the same when asked twice.
func FuzzDecide(f *testing.F) {
	f.Add(1, 3, 80.0, 20.0, 2, false, []byte{90, 90, 90, 90, 90, 90}, uint8(1))
	f.Add(0, 2, 0.0, 0.0, 0, true, []byte{0, 0, 0, 0, 255}, uint8(0))
	f.Fuzz(func(t *testing.T, minR, maxR int, up, idle float64, cur int, stop bool, vals []byte, waiting uint8) {
		p := Policy{MinReplicas: minR % 20, MaxReplicas: maxR % 20, UpThreshold: up, IdleThreshold: idle,
			UpAfter: time.Minute, DownAfter: time.Minute, AutoStop: stop}.WithDefaults()
		if p.Validate() != nil || cur < 0 || cur > 40 {
			return
		}
		t0 := time.Unix(0, 0)
		var w []Sample
		for i, v := range vals {
			s := Sample{Time: t0.Add(time.Duration(i) * 20 * time.Second), Value: float64(v) / 2.55}
			if v == 255 {
				s.Value = math.NaN()
			}
			if i == len(vals)-1 {
				s.Waiting = int(waiting)
			}
			w = append(w, s)
		}
		now := t0.Add(time.Duration(len(vals)) * 20 * time.Second)
		d := Decide(p, MetricGPU, Current{Replicas: cur}, w, now)
		if d.To < 0 || d.To > p.MaxReplicas {
			t.Fatalf("%v outside [0, %d]", d, p.MaxReplicas)
		}
		if d.To != 0 && d.To < p.MinReplicas && cur >= p.MinReplicas {
			t.Fatalf("%v below min %d", d, p.MinReplicas)
		}
		if step := d.To - d.From; (step > 1 || step < -1) && d.Action != Wake && d.Action != Stop && d.Action != Clamp {
			t.Fatalf("step %d: %v", step, d)
		}
		if d.Reason == "" {
			t.Fatalf("no reason: %+v", d)
		}
		if again := Decide(p, MetricGPU, Current{Replicas: cur}, w, now); again != d {
			t.Fatalf("%v then %v", d, again)
		}
	})
}
