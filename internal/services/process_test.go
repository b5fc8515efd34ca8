package services

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	// A command name with spaces and a ')' of its own.
	line := "4242 (evil ) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 987654 1000 100 18446744073709551615"
	pg, start, err := parseStat("stat", line)
	if err != nil || pg != 4242 || start != 987654 {
		t.Fatalf("parseStat = %d %d %v, want 4242 987654", pg, start, err)
	}
	for _, bad := range []string{"", "1 (x S 1", "1 (x) S 1 2", "1 (x) S 1 x 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20"} {
		if _, _, err := parseStat("stat", bad); err == nil || !strings.Contains(err.Error(), "stat:") {
			t.Errorf("parseStat(%q) = %v, want an error naming the file", bad, err)
		}
	}
	// This process: its own group (go test does not make one) and a start.
	pg, start, err = procStat(os.Getpid())
	if err != nil || pg <= 0 || start == 0 {
		t.Fatalf("procStat(self) = %d %d %v", pg, start, err)
	}
}

func TestParseUIDRange(t *testing.T) {
	r, err := ParseUIDRange("2100000000-2100000001")
	if err != nil {
		t.Fatal(err)
	}
	a, releaseA, err := r.Acquire()
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := r.Acquire()
	if err != nil || a.Uid == b.Uid || a.Uid != a.Gid || len(a.Groups) != 0 {
		t.Fatalf("two replicas: %+v %+v (%v)", a, b, err)
	}
	if _, _, err := r.Acquire(); err == nil {
		t.Fatal("a third uid from a range of two")
	}
	releaseA()
	if c, _, err := r.Acquire(); err != nil || c.Uid != a.Uid {
		t.Fatalf("after a release: %+v %v", c, err)
	}
	for _, bad := range []string{"", "5", "0-10", "10-5", "a-b", "1-4294967295"} {
		if _, err := ParseUIDRange(bad); err == nil || !strings.Contains(err.Error(), "FROM-TO") {
			t.Errorf("ParseUIDRange(%q) = %v, want an error saying FROM-TO", bad, err)
		}
	}
	if _, err := LookupUser("root"); err == nil {
		t.Fatal("root accepted as the replica user")
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add("4242 (a b) S 1 4242 4242 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 987654 1000")
	f.Add("1 ())) R 0 0 0")
	f.Fuzz(func(t *testing.T, s string) {
		pg, start, err := parseStat("stat", s)
		if err != nil && (pg != 0 || start != 0) {
			t.Fatalf("error with values %d %d", pg, start)
		}
	})
}

func FuzzParseUIDRange(f *testing.F) {
	f.Add("2100000000-2100065535")
	f.Add(" 1 - 2 ")
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseUIDRange(s)
		if err != nil {
			return
		}
		if r.From == 0 || r.From > r.To {
			t.Fatalf("%q gave an invalid range %d-%d", s, r.From, r.To)
		}
		c, release, err := r.Acquire()
		if err != nil || c.Uid < r.From || c.Uid > r.To {
			t.Fatalf("%q: acquired %+v %v", s, c, err)
		}
		release()
	})
}

// A replica's process runs its command only once the controller has
// recorded it and lets it past the gate; if the gate closes unread (the
// controller died first), the command never runs.
func TestReplicaWaitsAtTheGate(t *testing.T) {
	dir := t.TempDir()
	ps := procSpec{argv: []string{"sh", "-c", "touch ran"}, env: []string{"PATH=" + safePATH}, dir: dir, out: io.Discard}
	p, err := startProc(ps)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
		t.Fatal("the command ran before the gate opened")
	}
	_ = p.gate.Close() // as when the controller dies
	if err := <-p.exited; err == nil {
		t.Fatal("a replica whose gate closed unread exited 0")
	}
	if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
		t.Fatal("the command ran although the gate closed unread")
	}
	p, err = startProc(ps)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.release(); err != nil {
		t.Fatal(err)
	}
	if err := <-p.exited; err != nil {
		t.Fatalf("released replica: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ran")); err != nil {
		t.Fatal("the released command did not run")
	}
	if _, err := startProc(procSpec{argv: []string{"no-such-command-here"}, env: []string{"PATH=" + safePATH}, dir: dir, out: io.Discard}); err == nil ||
		!strings.Contains(err.Error(), "not found in the replica's PATH") {
		t.Fatalf("a missing command: %v", err)
	}
}
