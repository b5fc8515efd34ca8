package karpenterdra

import (
	"strings"
	"testing"
)

func TestResourceSlices(t *testing.T) {
	its, err := InstanceTypes("aws")
	if err != nil || len(its) < 10 {
		t.Fatalf("%d AWS GPU instance types, %v", len(its), err)
	}
	for _, it := range its {
		out, err := ResourceSlices(it)
		if err != nil {
			t.Fatalf("%s: %v", it, err)
		}
		devices := 0
		for _, s := range out {
			if s.Kind != "ResourceSlice" || s.Spec.Driver != Driver || s.Labels[InstanceTypeLabel] != it {
				t.Fatalf("%s: slice %s: kind %q driver %q label %q", it, s.Name, s.Kind, s.Spec.Driver, s.Labels[InstanceTypeLabel])
			}
			if len(s.Spec.Devices) > 0 && len(s.Spec.SharedCounters) > 0 {
				t.Errorf("%s: slice %s holds devices and counters; Karpenter's templates hold one or the other", it, s.Name)
			}
			devices += len(s.Spec.Devices)
		}
		if devices == 0 {
			t.Errorf("%s: no devices", it)
		}
	}
	if _, err := ResourceSlices("p9.huge"); err == nil || !strings.Contains(err.Error(), "g5.xlarge") {
		t.Errorf("unknown instance type: %v, want the valid ones named", err)
	}
	if _, err := InstanceTypes("ibm"); err == nil {
		t.Error("unknown provider accepted")
	}
}
