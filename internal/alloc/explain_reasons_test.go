package alloc

import (
	"strings"
	"testing"
)

// No-fit reasons say what is true: a GPU every claim holds whole is "held
// by other claims", not "MIG instances in use"; a node with no GPU says
// so, not "sharing mode mismatch".
func TestNoFitReasonsSayWhatIsTrue(t *testing.T) {
	fleet := Fleet{Policy: Policy{AllowModeSwitch: true}, Nodes: []Node{gpuNode("n0", "A100-40GB", 1), {Name: "empty"}}}
	s, err := NewState(fleet, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Allocate(&Claim{Name: "whole", Tenant: "t", Requests: []Request{{Name: "gpu", Mode: Exclusive}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(a); err != nil {
		t.Fatal(err)
	}
	_, err = s.Allocate(&Claim{Name: "mig", Tenant: "t", Requests: []Request{{Name: "gpu", Mode: MIG, Profile: "1g.5gb"}}})
	if err == nil {
		t.Fatal("a MIG claim fit a GPU held whole")
	}
	msg := err.Error()
	if strings.Contains(msg, "MIG instances in use") || !strings.Contains(msg, "1 GPU held by other claims") {
		t.Fatalf("reason: %s", msg)
	}
	if strings.Contains(msg, "sharing mode mismatch") || !strings.Contains(msg, "1 no GPUs") {
		t.Fatalf("the node with no GPU: %s", msg)
	}
}
