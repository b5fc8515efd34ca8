package alloc

import (
	"strings"
	"testing"
)

// A mistyped mode, workload, isolation or constraint gets a did-you-mean.
func TestValidateClaimSuggests(t *testing.T) {
	for _, tc := range []struct {
		c    Claim
		want string
	}{
		{Claim{Name: "c", Tenant: "t", Requests: []Request{{Name: "g", Mode: "mgi"}}}, "did you mean mig?"},
		{Claim{Name: "c", Tenant: "t", Requests: []Request{{Name: "g", Mode: "timeslize"}}}, "did you mean timeslice?"},
		{Claim{Name: "c", Tenant: "t", Requests: []Request{{Name: "g", Workload: "infrence"}}}, "did you mean inference?"},
		{Claim{Name: "c", Tenant: "t", Isolation: "hardwre", Requests: []Request{{Name: "g"}}}, "did you mean hardware?"},
	} {
		err := ValidateClaim(&tc.c)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.c, err, tc.want)
		}
	}
	c := Claim{Name: "c", Tenant: "t", Requests: []Request{{Name: "g", Mode: "zzz"}}}
	if err := ValidateClaim(&c); err == nil || strings.Contains(err.Error(), "did you mean") {
		t.Errorf("no close mode: %v", err)
	}
}

// A bad quantity in a selector is reported once: the value, what is wrong
// and the fix, each a single time.
func TestSelectorQuantityErrorSaysItOnce(t *testing.T) {
	c := Claim{Name: "c", Tenant: "t", Requests: []Request{{Name: "g", Selector: "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('10GB')) >= 0"}}}
	err := ValidateClaim(&c)
	if err == nil {
		t.Fatal("accepted")
	}
	msg := err.Error()
	for _, once := range []string{`"10GB"`, "want ", "did you mean"} {
		if n := strings.Count(msg, once); n != 1 {
			t.Errorf("%q appears %d times in: %s", once, n, msg)
		}
	}
}
