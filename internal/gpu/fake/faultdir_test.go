package fake_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/gpu/fake"
)

// Bad requests are refused with the field and what is valid; none panics.
func TestParseFaultRequest(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"gpu": 0, "xid": 79}`, ""},
		{`{"instance": "MIG-1f1f1f1f-0000-0000-0000-000000000000", "xid": 94}`, ""},
		{`{"gpu": 1, "lost": true}`, ""},
		{`{"gpu": 1, "recover": true}` + "\n", ""},
		{``, "empty fault request"},
		{`{"gpu": 0, "xid": 79, "why": 1}`, `unknown field "why": valid fields are gpu, instance, xid, lost, recover`},
		{`{"gpu": "0", "xid": 79}`, `"gpu": a JSON string: want an index`},
		{`{"gpu": 0, "xid": 7.5}`, `"xid": a JSON number 7.5: want a positive XID`},
		{`{"gpu": 0, "lost": "yes"}`, `"lost": a JSON string: want true or false`},
		{`[1]`, `fault request is a JSON array: want an object`},
		{`{"gpu": 0, "xid": 79`, `not valid JSON`},
		{`{"gpu": 0, "xid": 79} {}`, `one JSON object, with nothing after it`},
		{`{"xid": 79}`, `name the device: "gpu" (an index) or "instance"`},
		{`{"gpu": 0, "instance": "GPU-1", "xid": 79}`, `"gpu" and "instance": give one of them`},
		{`{"gpu": -1, "xid": 79}`, `"gpu": -1: want an index ≥ 0`},
		{`{"instance": "gpu0", "xid": 79}`, `"instance": "gpu0": want a MIG or GPU uuid`},
		{`{"gpu": 0}`, `say what happens: "xid" (a number), "lost": true or "recover": true`},
		{`{"gpu": 0, "xid": 0}`, `"xid": 0: want a positive XID (fatal ones: 48, 79, 94, 95, 119, 120)`},
		{`{"gpu": 0, "xid": 79, "lost": true}`, `"xid" and "lost": give one of them`},
		{`{"instance": "MIG-1", "recover": true}`, `"recover": a whole GPU is lost or recovers: name it by "gpu"`},
		{`{"gpu": 0, "lost": false}`, `say what happens`},
		{strings.Repeat(" ", fake.MaxFaultRequest+1), "at most 4096"},
	} {
		_, err := fake.ParseFaultRequest([]byte(tc.in))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.in, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%.60s: error %v, want one containing %q", tc.in, err, tc.want)
		}
	}
	// Every problem at once.
	_, err := fake.ParseFaultRequest([]byte(`{"gpu": -2, "xid": -1, "recover": true}`))
	if err == nil || !strings.Contains(err.Error(), `"gpu": -2`) || !strings.Contains(err.Error(), `"xid": -1`) || !strings.Contains(err.Error(), `"xid" and "recover"`) {
		t.Fatalf("three problems: %v", err)
	}
}

// faultDir is a watcher over a fresh directory with a fixed clock.
func faultDir(t *testing.T, m *fake.Machine, now time.Time) *fake.FaultWatcher {
	t.Helper()
	return &fake.FaultWatcher{Dir: t.TempDir(), Machine: m, Clock: func() time.Time { return now }}
}

func writeRequest(t *testing.T, dir, name, body string, mtime time.Time) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

// outcome reads NAME.done or NAME.error; the request must be gone.
func outcome(t *testing.T, dir, name string) (done, failed string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dir, name)); !os.IsNotExist(err) {
		t.Fatalf("request %s still there (%v)", name, err)
	}
	d, e := fake.FaultOutcomeFiles(name)
	b1, err1 := os.ReadFile(filepath.Join(dir, d))
	b2, err2 := os.ReadFile(filepath.Join(dir, e))
	if (err1 == nil) == (err2 == nil) {
		t.Fatalf("%s: want exactly one of %s (%v) and %s (%v)", name, d, err1, e, err2)
	}
	return strings.TrimSpace(string(b1)), strings.TrimSpace(string(b2))
}

// Requests written to the directory are applied once, in name order, as
// InjectXID, InjectInstanceXID, Remove and Recover are: subscribers get
// the events, the GPU's health follows, and each request is replaced by
// its outcome.
func TestFaultWatcherAppliesRequests(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	m := a100MIG(t)
	g0, g1 := gpus(t, m)[0], gpus(t, m)[1]
	in, err := m.CreateInstance(t.Context(), 0, "3g.20gb", 4)
	if err != nil {
		t.Fatal(err)
	}
	ch := events(t, m)
	w := faultDir(t, m, now)
	old := now.Add(-time.Minute)
	writeRequest(t, w.Dir, "1-xid.json", `{"gpu": 1, "xid": 79}`, old)
	writeRequest(t, w.Dir, "2-instance.json", `{"instance": "`+in.UUID+`", "xid": 31}`, old)
	writeRequest(t, w.Dir, "3-recover.json", `{"gpu": 1, "recover": true}`, old)
	writeRequest(t, w.Dir, "4-lost.json", `{"gpu": 0, "lost": true}`, old)
	writeRequest(t, w.Dir, ".5-hidden.json", `{"gpu": 1, "lost": true}`, old)
	writeRequest(t, w.Dir, "notes.txt", `{"gpu": 1, "lost": true}`, old)

	got := w.Scan()
	var names []string
	for _, o := range got {
		names = append(names, o.Name)
	}
	if !slices.Equal(names, []string{"1-xid.json", "2-instance.json", "3-recover.json", "4-lost.json"}) {
		t.Fatalf("applied %v", names)
	}
	want := []struct {
		kind  gpu.EventKind
		index int
		uuid  string
		xid   int
	}{
		{gpu.EventXID, 1, g1.UUID, 79},
		{gpu.EventXID, 0, in.UUID, 31},
		{gpu.EventRecovered, 1, g1.UUID, 0},
		{gpu.EventLost, 0, g0.UUID, 0},
	}
	for i, w := range want {
		ev := next(t, ch)
		if ev.Kind != w.kind || ev.Index != w.index || ev.UUID != w.uuid || ev.XID != w.xid {
			t.Fatalf("event %d: %+v, want %+v", i, ev, w)
		}
	}
	for name, text := range map[string]string{
		"1-xid.json":      "XID 79 on GPU 1 (GPU has fallen off the bus, fatal: the GPU is unhealthy)",
		"2-instance.json": "XID 31 on " + in.UUID + " (GPU memory page fault, non-fatal)",
		"3-recover.json":  "GPU 1 recovered",
		"4-lost.json":     "GPU 0 lost",
	} {
		if done, failed := outcome(t, w.Dir, name); done != text {
			t.Errorf("%s: done %q error %q, want done %q", name, done, failed, text)
		}
	}
	if gs := gpus(t, m); len(gs) != 1 || !gs[0].Healthy {
		t.Fatalf("after the requests: %+v, want GPU 1 alone and healthy", gs)
	}
	for _, keep := range []string{".5-hidden.json", "notes.txt"} {
		if _, err := os.Stat(filepath.Join(w.Dir, keep)); err != nil {
			t.Errorf("%s: %v", keep, err)
		}
	}
	if again := w.Scan(); len(again) != 0 {
		t.Fatalf("a second scan applied %+v", again)
	}
}

// A request that cannot be applied gets NAME.error with the reason; one
// that does not parse is left alone while it may still be being written.
func TestFaultWatcherRefusals(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	m := a100MIG(t)
	w := faultDir(t, m, now)
	old := now.Add(-time.Minute)
	writeRequest(t, w.Dir, "a.json", `{"gpu": 7, "xid": 79}`, old)
	writeRequest(t, w.Dir, "b.json", `{"instance": "MIG-00000000-0000-0000-0000-000000000000", "xid": 79}`, old)
	writeRequest(t, w.Dir, "c.json", `{"gpu": 0, "xid": 79, "colour": "red"}`, old)
	writeRequest(t, w.Dir, "d.json", ``, now.Add(-time.Second)) // being written
	writeRequest(t, w.Dir, "e.json", `{"gpu": 1, "lost": true}`, old)
	writeRequest(t, w.Dir, "f.json", `{"gpu": 1, "xid": 13}`, old)
	if err := os.Mkdir(filepath.Join(w.Dir, "g.json"), 0o700); err != nil {
		t.Fatal(err)
	}
	w.Scan()
	for name, want := range map[string]string{
		"a.json": `"gpu": 7: this machine has GPUs 0..1`,
		"b.json": `"instance": "MIG-00000000-0000-0000-0000-000000000000": no such MIG instance or GPU on this machine`,
		"c.json": `unknown field "colour": valid fields are gpu, instance, xid, lost, recover`,
		"f.json": `"gpu": 1: the GPU is lost, and stays lost until the simulated machine restarts`,
		"g.json": `g.json is a directory: a fault request is a regular file`,
	} {
		if done, failed := outcome(t, w.Dir, name); failed != want {
			t.Errorf("%s: error %q (done %q), want %q", name, failed, done, want)
		}
	}
	if _, err := os.Stat(filepath.Join(w.Dir, "d.json")); err != nil {
		t.Fatalf("the request being written was taken: %v", err)
	}
	w.Clock = func() time.Time { return now.Add(time.Minute) }
	w.Scan()
	if _, failed := outcome(t, w.Dir, "d.json"); !strings.Contains(failed, "empty fault request") {
		t.Fatalf("d.json settled: %q", failed)
	}
}

// Run makes the directory and scans on every tick until its context ends.
func TestFaultWatcherRun(t *testing.T) {
	m := a100MIG(t)
	dir := filepath.Join(t.TempDir(), "faults")
	tick := make(chan time.Time)
	w := &fake.FaultWatcher{Dir: dir, Machine: m, Tick: tick}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	tick <- time.Time{} // the first scan is over and the directory made
	writeRequest(t, dir, "x.json", `{"gpu": 0, "xid": 48}`, time.Now().Add(-time.Minute))
	tick <- time.Time{}
	tick <- time.Time{} // the scan after the request is over
	if done, _ := outcome(t, dir, "x.json"); !strings.HasPrefix(done, "XID 48 on GPU 0") {
		t.Fatalf("done %q", done)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("directory: %v %v", fi, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// With AwaitSubscriber a request waits until someone listens to the
// machine's events, and then raises its event for them.
func TestFaultWatcherAwaitsSubscriber(t *testing.T) {
	m := a100MIG(t)
	dir := t.TempDir()
	tick := make(chan time.Time)
	w := &fake.FaultWatcher{Dir: dir, Machine: m, Tick: tick, AwaitSubscriber: true}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	writeRequest(t, dir, "x.json", `{"gpu": 1, "xid": 94}`, time.Now().Add(-time.Minute))
	go func() { _ = w.Run(ctx) }()
	tick <- time.Time{}
	tick <- time.Time{}
	if _, err := os.Stat(filepath.Join(dir, "x.json")); err != nil {
		t.Fatalf("applied with nobody listening: %v", err)
	}
	ch := events(t, m)
	tick <- time.Time{}
	if ev := next(t, ch); ev.XID != 94 || ev.Index != 1 {
		t.Fatalf("event %+v", ev)
	}
}
