package dradriver

import (
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

var t0 = time.Date(2026, 11, 26, 23, 0, 0, 0, time.UTC)

func testGPUs() []gpu.GPU {
	return []gpu.GPU{
		{Index: 0, UUID: "GPU-n-0", Healthy: true, MIGEnabled: true, Instances: []gpu.Instance{{UUID: "MIG-a", Profile: "1g.5gb", Start: 6, Size: 1}}},
		{Index: 1, UUID: "GPU-n-1", Healthy: true},
	}
}

// The XID table decides the effect: every fatal XID of gpu.XIDs (and a
// lost GPU) is NoExecute, a listed non-fatal one NoSchedule, the rest
// nothing; the taint's value is the XID.
func TestXIDTaintTable(t *testing.T) {
	p := DefaultHealthPolicy()
	for _, tc := range []struct {
		ev     gpu.Event
		effect resourceapi.DeviceTaintEffect // "" = no fault
		value  string
	}{
		{gpu.Event{Kind: gpu.EventXID, XID: 48}, resourceapi.DeviceTaintEffectNoExecute, "48"},
		{gpu.Event{Kind: gpu.EventXID, XID: 79}, resourceapi.DeviceTaintEffectNoExecute, "79"},
		{gpu.Event{Kind: gpu.EventXID, XID: 94}, resourceapi.DeviceTaintEffectNoExecute, "94"},
		{gpu.Event{Kind: gpu.EventXID, XID: 95}, resourceapi.DeviceTaintEffectNoExecute, "95"},
		{gpu.Event{Kind: gpu.EventXID, XID: 119}, resourceapi.DeviceTaintEffectNoExecute, "119"},
		{gpu.Event{Kind: gpu.EventXID, XID: 120}, resourceapi.DeviceTaintEffectNoExecute, "120"},
		{gpu.Event{Kind: gpu.EventXID, XID: 500, Fatal: true}, resourceapi.DeviceTaintEffectNoExecute, "500"}, // the device layer says fatal
		{gpu.Event{Kind: gpu.EventLost, Fatal: true}, resourceapi.DeviceTaintEffectNoExecute, ValueLost},
		{gpu.Event{Kind: gpu.EventXID, XID: 63}, resourceapi.DeviceTaintEffectNoSchedule, "63"},
		{gpu.Event{Kind: gpu.EventXID, XID: 64}, resourceapi.DeviceTaintEffectNoSchedule, "64"},
		{gpu.Event{Kind: gpu.EventXID, XID: 92}, resourceapi.DeviceTaintEffectNoSchedule, "92"},
		{gpu.Event{Kind: gpu.EventXID, XID: 13}, "", ""},
		{gpu.Event{Kind: gpu.EventXID, XID: 31}, "", ""},
		{gpu.Event{Kind: gpu.EventXID, XID: 43}, "", ""},
		{gpu.Event{Kind: gpu.EventRecovered}, "", ""},
	} {
		ev := tc.ev
		ev.Index, ev.UUID, ev.Time = 1, "GPU-n-1", t0
		h, changed, err := p.Apply(Health{}, ev, testGPUs())
		if err != nil {
			t.Fatalf("%+v: %v", ev, err)
		}
		fs := h.Faults()
		if tc.effect == "" {
			if changed || len(fs) != 0 {
				t.Errorf("%s %d: faults %+v, want none", ev.Kind, ev.XID, fs)
			}
			continue
		}
		want := Fault{GPU: "GPU-n-1", Value: tc.value, Effect: tc.effect, Time: t0}
		if !changed || len(fs) != 1 || fs[0] != want {
			t.Errorf("%s %d: faults %+v (changed %v), want %+v", ev.Kind, ev.XID, fs, changed, want)
		}
	}
	// Every fatal XID of the table, whatever the list says.
	for x, info := range gpu.XIDs {
		h, _, _ := HealthPolicy{}.Apply(Health{}, gpu.Event{Kind: gpu.EventXID, XID: x, Index: 0}, testGPUs())
		got := h.Faults()
		if info.Fatal != (len(got) == 1 && got[0].Effect == resourceapi.DeviceTaintEffectNoExecute) {
			t.Errorf("XID %d (fatal %v) with an empty NoSchedule list: faults %+v", x, info.Fatal, got)
		}
	}
	// A list of its own: 13 NoSchedule, 92 ignored.
	own := HealthPolicy{NoSchedule: []int{13}}
	if h, _, _ := own.Apply(Health{}, gpu.Event{Kind: gpu.EventXID, XID: 13, Index: 1}, testGPUs()); len(h.Faults()) != 1 {
		t.Error("XID 13 listed NoSchedule taints nothing")
	}
	if h, _, _ := own.Apply(Health{}, gpu.Event{Kind: gpu.EventXID, XID: 92, Index: 1}, testGPUs()); len(h.Faults()) != 0 {
		t.Error("XID 92, not listed, taints")
	}
	if _, _, err := p.Apply(Health{}, gpu.Event{Kind: gpu.EventXID, XID: 79, Index: 7, UUID: "GPU-x"}, testGPUs()); err == nil ||
		!strings.Contains(err.Error(), "GPU 7") {
		t.Errorf("an event on an unknown GPU: err %v", err)
	}
}

// Worst fault wins and keeps its time; a recovery forgets the GPU's
// faults, its instances' too; an instance's XID faults its placement.
func TestHealthFoldsEvents(t *testing.T) {
	p := DefaultHealthPolicy()
	gpus := testGPUs()
	apply := func(h Health, ev gpu.Event) (Health, bool) {
		t.Helper()
		out, changed, err := p.Apply(h, ev, gpus)
		if err != nil {
			t.Fatal(err)
		}
		return out, changed
	}
	var h Health
	h, _ = apply(h, gpu.Event{Kind: gpu.EventXID, XID: 92, Index: 1, UUID: "GPU-n-1", Time: t0})
	h, changed := apply(h, gpu.Event{Kind: gpu.EventXID, XID: 48, Index: 1, UUID: "GPU-n-1", Time: t0.Add(time.Minute)})
	if !changed || h.Faults()[0].Effect != resourceapi.DeviceTaintEffectNoExecute || h.Faults()[0].Value != "48" {
		t.Fatalf("NoSchedule then fatal: %+v", h.Faults())
	}
	before := h
	h, changed = apply(h, gpu.Event{Kind: gpu.EventXID, XID: 79, Index: 1, UUID: "GPU-n-1", Time: t0.Add(2 * time.Minute)})
	if changed || h.Faults()[0].Value != "48" || !h.Faults()[0].Time.Equal(t0.Add(time.Minute)) {
		t.Fatalf("a second fatal XID replaced the first: %+v", h.Faults())
	}
	h, _ = apply(h, gpu.Event{Kind: gpu.EventXID, XID: 94, Index: 0, UUID: "MIG-a", Time: t0})
	want := []Fault{
		{GPU: "GPU-n-0", Profile: "1g.5gb", Start: 6, Value: "94", Effect: resourceapi.DeviceTaintEffectNoExecute, Time: t0},
		{GPU: "GPU-n-1", Value: "48", Effect: resourceapi.DeviceTaintEffectNoExecute, Time: t0.Add(time.Minute)},
	}
	if !slices.Equal(h.Faults(), want) {
		t.Fatalf("faults %+v, want %+v", h.Faults(), want)
	}
	if len(before.Faults()) != 1 {
		t.Fatalf("Apply changed the health it was given: %+v", before.Faults())
	}
	h, changed = apply(h, gpu.Event{Kind: gpu.EventRecovered, Index: 0, UUID: "GPU-n-0"})
	if !changed || !slices.Equal(h.Faults(), want[1:]) {
		t.Fatalf("after GPU 0 recovered: %+v", h.Faults())
	}
	if _, changed = apply(h, gpu.Event{Kind: gpu.EventRecovered, Index: 0, UUID: "GPU-n-0"}); changed {
		t.Fatal("recovering a healthy GPU changed something")
	}
	if got := InitialHealth([]gpu.GPU{{UUID: "G0", Healthy: true}, {UUID: "G1"}}, t0).Faults(); len(got) != 1 ||
		got[0] != (Fault{GPU: "G1", Value: ValueUnhealthy, Effect: resourceapi.DeviceTaintEffectNoExecute, Time: t0}) {
		t.Fatalf("InitialHealth: %+v", got)
	}
}

// Rendering: a GPU fault taints all of the GPU's devices (whole, shared,
// every MIG placement) and nothing of another GPU; a placement fault only
// that MIG device; the input slices are left alone.
func TestTaintSlices(t *testing.T) {
	nd := node("n", "A100-40GB", 2)
	sl, err := Slices(nd, 1, "580.65.06", nil)
	if err != nil {
		t.Fatal(err)
	}
	var h Health
	h, _ = h.With(Fault{GPU: "GPU-n-0", Value: "79", Effect: resourceapi.DeviceTaintEffectNoExecute, Time: t0.Add(1500 * time.Millisecond)})
	h, _ = h.With(Fault{GPU: "GPU-n-1", Profile: "3g.20gb", Start: 4, Value: "94", Effect: resourceapi.DeviceTaintEffectNoExecute, Time: t0})
	h, _ = h.With(Fault{GPU: "GPU-n-1", Value: "92", Effect: resourceapi.DeviceTaintEffectNoSchedule, Time: t0})
	out := TaintSlices(sl, h)
	counted := map[string]int{}
	gpu0 := 0
	for i, s := range out {
		for j, d := range s.Spec.Devices {
			if len(sl[i].Spec.Devices[j].Taints) != 0 {
				t.Fatal("TaintSlices changed its input")
			}
			if len(d.Taints) != 1 {
				t.Fatalf("device %s: taints %+v, want one", d.Name, d.Taints)
			}
			tt := d.Taints[0]
			if tt.Key != dranames.TaintKey || tt.TimeAdded == nil {
				t.Fatalf("device %s: taint %+v", d.Name, tt)
			}
			counted[tt.Value+":"+string(tt.Effect)]++
			switch {
			case strings.HasPrefix(d.Name, "gpu-0"):
				gpu0++
				if tt.Value != "79" || tt.Effect != resourceapi.DeviceTaintEffectNoExecute || !tt.TimeAdded.Time.Equal(t0.Add(time.Second)) {
					t.Fatalf("device %s: taint %+v", d.Name, tt)
				}
			case d.Name == "gpu-1-mig-3g-20gb-at-4":
				if tt.Value != "94" || tt.Effect != resourceapi.DeviceTaintEffectNoExecute {
					t.Fatalf("device %s: taint %+v, want the instance's NoExecute", d.Name, tt)
				}
			default:
				if tt.Value != "92" || tt.Effect != resourceapi.DeviceTaintEffectNoSchedule {
					t.Fatalf("device %s: taint %+v, want GPU 1's NoSchedule", d.Name, tt)
				}
			}
		}
	}
	if gpu0 < 3 || counted["94:NoExecute"] != 1 || counted["79:NoExecute"] != gpu0 {
		t.Fatalf("taints counted %v (GPU 0 devices %d)", counted, gpu0)
	}
	// Healthy again: no taint anywhere.
	h, _ = h.Without("GPU-n-0")
	h, _ = h.Without("GPU-n-1")
	for _, s := range TaintSlices(out, h) {
		for _, d := range s.Spec.Devices {
			if len(d.Taints) != 0 {
				t.Fatalf("device %s keeps %+v after recovery", d.Name, d.Taints)
			}
		}
	}
}

// The kubelet's view follows the taints device for device: NoExecute is
// Unhealthy (a lost GPU Unknown), NoSchedule Healthy with the taint in
// the message, untainted Healthy (Unknown when no health events arrive),
// every device of the slices listed once with the slices' pool.
func TestDeviceHealthsFollowTheTaints(t *testing.T) {
	sl, err := Slices(node("n", "A100-40GB", 3), 1, "580.65.06", nil)
	if err != nil {
		t.Fatal(err)
	}
	var h Health
	h, _ = h.With(Fault{GPU: "GPU-n-0", Value: "79", Effect: resourceapi.DeviceTaintEffectNoExecute, Time: t0})
	h, _ = h.With(Fault{GPU: "GPU-n-1", Profile: "3g.20gb", Start: 4, Value: "94", Effect: resourceapi.DeviceTaintEffectNoExecute, Time: t0})
	h, _ = h.With(Fault{GPU: "GPU-n-1", Value: "92", Effect: resourceapi.DeviceTaintEffectNoSchedule, Time: t0})
	h, _ = h.With(Fault{GPU: "GPU-n-2", Value: ValueLost, Effect: resourceapi.DeviceTaintEffectNoExecute, Time: t0})
	tainted := map[string]resourceapi.DeviceTaint{}
	n := 0
	for _, s := range TaintSlices(sl, h) {
		for _, d := range s.Spec.Devices {
			n++
			if len(d.Taints) == 1 {
				tainted[d.Name] = d.Taints[0]
			}
		}
	}
	got := DeviceHealths(sl, h, true)
	if len(got) != n {
		t.Fatalf("%d healths for %d devices", len(got), n)
	}
	seen := map[string]bool{}
	for _, dh := range got {
		if dh.Pool != "n" || seen[dh.Device] {
			t.Fatalf("%+v: want pool n, each device once", dh)
		}
		seen[dh.Device] = true
		tt, ok := tainted[dh.Device]
		want := StatusHealthy
		switch {
		case ok && tt.Value == ValueLost:
			want = StatusUnknown
		case ok && tt.Effect == resourceapi.DeviceTaintEffectNoExecute:
			want = StatusUnhealthy
		}
		if dh.Status != want || ok != (dh.Message != "") || (ok && !strings.Contains(dh.Message, dranames.TaintKey+"="+tt.Value+":"+string(tt.Effect))) {
			t.Errorf("%s (taint %+v): %s %q, want %s", dh.Device, tt, dh.Status, dh.Message, want)
		}
	}
	for dev, msg := range map[string]string{
		"gpu-0":                  "XID 79 (GPU has fallen off the bus) on GPU GPU-n-0 at 2026-11-26T23:00:00Z",
		"gpu-1-mig-3g-20gb-at-4": "XID 94 (contained ECC error) on MIG 3g.20gb@4 of GPU GPU-n-1",
		"gpu-1":                  "(running pods stay, no new ones come)",
		"gpu-2":                  "GPU GPU-n-2 is lost",
	} {
		i := slices.IndexFunc(got, func(dh DeviceHealth) bool { return dh.Device == dev })
		if i < 0 || !strings.Contains(got[i].Message, msg) {
			t.Errorf("%s: %+v, want a message with %q", dev, got, msg)
		}
	}
	// No health events: what is not known faulty is Unknown.
	for _, dh := range DeviceHealths(sl, Health{}, false) {
		if dh.Status != StatusUnknown || dh.Message == "" {
			t.Fatalf("%+v without health events, want Unknown with a reason", dh)
		}
	}
	if st, _ := StatusOf(Fault{Value: ValueUnhealthy, Effect: resourceapi.DeviceTaintEffectNoExecute}, true, false); st != StatusUnhealthy {
		t.Fatalf("a GPU listed unhealthy at start: %s", st)
	}
}

func TestParseXIDList(t *testing.T) {
	for in, want := range map[string][]int{"": {}, "none": {}, "92": {92}, " 63, 64 ,92,92": {63, 64, 92}} {
		got, err := ParseXIDList(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseXIDList(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for in, msg := range map[string]string{
		"92,x":  `entry 2 "x": want a positive XID number`,
		"0":     `entry 1 "0"`,
		"-3":    `entry 1 "-3"`,
		"63,,1": `entry 2 ""`,
		"79":    "XID 79 (GPU has fallen off the bus) is fatal and always taints NoExecute; fatal XIDs are 48,79,94,95,119,120",
	} {
		if _, err := ParseXIDList(in); err == nil || !strings.Contains(err.Error(), msg) || !strings.HasPrefix(err.Error(), "xid-noschedule: ") {
			t.Errorf("ParseXIDList(%q): err %v, want %q", in, err, msg)
		}
	}
}

func FuzzParseXIDList(f *testing.F) {
	for _, s := range []string{"", "none", "63,64,92", "79", "1,2,3", " 7 ,", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		xs, err := ParseXIDList(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "xid-noschedule: ") {
				t.Fatalf("error does not name the flag: %v", err)
			}
			return
		}
		if err := (HealthPolicy{NoSchedule: xs}).Validate(); err != nil {
			t.Fatalf("ParseXIDList(%q) = %v, which Validate refuses: %v", s, xs, err)
		}
		for _, x := range xs {
			if x <= 0 || gpu.FatalXID(x) {
				t.Fatalf("ParseXIDList(%q) = %v", s, xs)
			}
		}
	})
}
