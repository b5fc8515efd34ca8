package nodetest

import (
	"os"
	"strings"
	"testing"
)

// TestSweepSlot: a slot's lock records its holder for SlotOf; SweepSlot
// refuses a held slot and sweeps a free one (here clean: nothing to do).
func TestSweepSlot(t *testing.T) {
	if err := SweepSlot(0); err == nil {
		t.Error("SweepSlot(0) succeeded, want out of range")
	}
	if os.Geteuid() != 0 {
		t.Skip("slots live in " + slotDir + ": needs root")
	}
	s, err := acquireSlot()
	if err != nil {
		t.Fatal(err)
	}
	defer s.release()
	if got := SlotOf(os.Getpid()); got != s.n {
		t.Errorf("SlotOf(own pid) = %d, want the slot taken, %d", got, s.n)
	}
	if err := SweepSlot(s.n); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("SweepSlot of a held slot: err = %v, want in use", err)
	}
	s.release()
	if err := SweepSlot(s.n); err != nil {
		t.Errorf("SweepSlot of a free, clean slot: %v", err)
	}
}
