package alloc

import (
	"strings"
	"testing"
)

func TestSmoke(t *testing.T) {
	s := newState(t, Policy{}, gpuNode("n1", "A100-40GB", 2, migDynamic), gpuNode("n2", "T4", 2))
	a := must(t, s, claim("c1", "acme", Request{MemoryMiB: 4000, ComputePercent: 10}))
	t.Logf("%+v", a)
	b := must(t, s, claim("c2", "acme", Request{MemoryMiB: 4000, ComputePercent: 10, Mode: TimeSlice}))
	t.Logf("%+v", b)
	c := must(t, s, claim("c3", "beta", Request{MemoryMiB: 14000, Mode: Exclusive}))
	t.Logf("%+v", c)
	_, err := s.Allocate(claim("c4", "beta", Request{MemoryMiB: 90000}))
	if !IsNoFit(err) || !strings.Contains(err.Error(), "insufficient GPU memory") {
		t.Fatalf("got %v", err)
	}
	t.Log(err)
	if err := s.Release("c1"); err != nil {
		t.Fatal(err)
	}
}
