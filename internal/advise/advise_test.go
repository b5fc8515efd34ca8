package advise

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/model"
)

func profiles(gpu string, ws ...model.Profile) *model.Profiles {
	p := &model.Profiles{Fleet: model.ProfileFleet{GPU: gpu, GPUsPerNode: 8}}
	for _, w := range ws {
		if w.Tenant == "" {
			w.Tenant = "team"
		}
		if w.Replicas == 0 {
			w.Replicas = 4
		}
		p.Workloads = append(p.Workloads, w)
	}
	return p
}

func one(t *testing.T, p *model.Profiles, name string) Advice {
	t.Helper()
	r, err := Advise(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range r.Workloads {
		if a.Name == name {
			return a
		}
	}
	t.Fatalf("no advice for %s", name)
	return Advice{}
}

// The study's conclusions, one workload class each, on one tenant's
// A100-40GB GPUs (so that multi-tenancy does not decide).
func TestAdviceFollowsTheStudy(t *testing.T) {
	cases := []struct {
		name string
		w    model.Profile
		want Mechanism
		// why must appear in the reasons.
		why string
	}{
		{"light online inference", model.Profile{Kind: model.KindOnlineInference, MemoryMiB: 4096, Utilization: 20, LatencySensitive: true}, MPS, "MPS has the lower overhead"},
		{"heavy online inference", model.Profile{Kind: model.KindOnlineInference, MemoryMiB: 8192, Utilization: 70, LatencySensitive: true}, MPS, "MPS with limits gives better performance isolation"},
		{"heavy offline inference", model.Profile{Kind: model.KindOfflineInference, MemoryMiB: 8192, Utilization: 70}, TimeSlicing, "use time-slicing"},
		{"small batch", model.Profile{Kind: model.KindSmallBatch, MemoryMiB: 400, Utilization: 35}, MPS, "27.2 s against 26.8 s"},
		{"GPU-intensive batch", model.Profile{Kind: model.KindIntensiveBatch, MemoryMiB: 5120, Utilization: 80}, MPS, "MPS with a proper resource limit"},
		{"notebook", model.Profile{Kind: model.KindNotebook, MemoryMiB: 6144, Utilization: 10, LatencySensitive: true}, TimeSlicing, "development environments"},
		{"training that fills a GPU", model.Profile{Kind: model.KindTraining, MemoryMiB: 30000, Utilization: 95}, Dedicated, "sharing it only adds contention"},
		{"hardware isolation", model.Profile{Kind: model.KindOnlineInference, MemoryMiB: 4096, Utilization: 20, HardwareIsolation: true}, MIG, "full fault isolation"},
		{"bigger than a GPU", model.Profile{Kind: model.KindOfflineInference, MemoryMiB: 60000, Utilization: 50}, Dedicated, "more than one A100-40GB has"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.w.Name = "w"
			a := one(t, profiles("A100-40GB", c.w), "w")
			if a.Mechanism != c.want {
				t.Fatalf("mechanism %s, want %s; reasons %q", a.Mechanism, c.want, a.Reasons)
			}
			if !strings.Contains(strings.Join(a.Reasons, " "), c.why) {
				t.Errorf("reasons %q do not say %q", a.Reasons, c.why)
			}
			switch a.Mechanism {
			case MPS:
				if a.Sizing.ThreadPercent < 10 || a.Sizing.ThreadPercent > 100 || a.Sizing.PinnedMemoryMiB != c.w.MemoryMiB {
					t.Errorf("MPS sizing %+v: want a thread limit and the workload's memory pinned", a.Sizing)
				}
				if !strings.Contains(strings.Join(a.Warnings, " "), "fault") {
					t.Errorf("MPS advice without the fault-isolation warning: %q", a.Warnings)
				}
			case TimeSlicing:
				if a.Sizing.TimeSliceReplicas < 1 {
					t.Errorf("time-slicing sizing %+v", a.Sizing)
				}
				if !strings.Contains(strings.Join(a.Warnings, " "), "does not enforce memory") {
					t.Errorf("time-slicing advice without the memory warning: %q", a.Warnings)
				}
			case MIG:
				if a.Sizing.MIGProfile == "" {
					t.Errorf("MIG advice without a profile")
				}
			}
			if len(a.TradeOffs) == 0 || len(a.Alternatives) != len(Mechanisms) {
				t.Errorf("trade-offs %q, alternatives %d", a.TradeOffs, len(a.Alternatives))
			}
		})
	}
}

// A small tenant among several gets MIG where the GPU has it, and a
// warning where it does not.
func TestSmallTenantsShareThroughMIG(t *testing.T) {
	big := model.Profile{Name: "big", Kind: model.KindOnlineInference, Tenant: "a", MemoryMiB: 8192, Utilization: 40, Replicas: 16, LatencySensitive: true}
	small := model.Profile{Name: "small", Kind: model.KindOnlineInference, Tenant: "b", MemoryMiB: 3072, Utilization: 15, Replicas: 1, LatencySensitive: true}
	a := one(t, profiles("A100-40GB", big, small), "small")
	if a.Mechanism != MIG || !strings.Contains(strings.Join(a.Reasons, " "), "ideal for multi-tenant") {
		t.Fatalf("small tenant on A100: %s %q", a.Mechanism, a.Reasons)
	}
	a = one(t, profiles("L4", big, small), "small")
	if a.Mechanism == MIG || !strings.Contains(strings.Join(a.Warnings, " "), "has no MIG") {
		t.Fatalf("small tenant on L4: %s, warnings %q", a.Mechanism, a.Warnings)
	}
}

// The MIG profile is the smallest that holds the memory and keeps the
// slowdown within the target; a latency-sensitive workload gets more
// compute than a batch one of the same size.
func TestMIGSizing(t *testing.T) {
	w := model.Profile{Name: "w", Kind: model.KindOnlineInference, MemoryMiB: 3072, Utilization: 15, HardwareIsolation: true}
	batch := w
	batch.Kind = model.KindSmallBatch
	lat := one(t, profiles("A100-40GB", func() model.Profile { w.LatencySensitive = true; return w }()), "w")
	bat := one(t, profiles("A100-40GB", batch), "w")
	if lat.Sizing.MIGProfile != "2g.10gb" || bat.Sizing.MIGProfile != "1g.5gb" {
		t.Fatalf("profiles: latency-sensitive %s, batch %s; want 2g.10gb and 1g.5gb", lat.Sizing.MIGProfile, bat.Sizing.MIGProfile)
	}
	// 12 GiB needs a 3g.20gb on an A100-40GB whatever the compute.
	w.MemoryMiB = 12 * 1024
	if a := one(t, profiles("A100-40GB", w), "w"); a.Sizing.MIGProfile != "3g.20gb" {
		t.Fatalf("12Gi: %s", a.Sizing.MIGProfile)
	}
}

// The performance model reproduces the study's one measured figure and
// its orderings.
func TestCalibration(t *testing.T) {
	c := Default
	job := Load{Util: 0.35, Occ: c.Occupancy[model.KindSmallBatch]}
	three := []Load{job, job, job}
	if got, want := c.Slowdown(MPS, job, three, 1), 27.213/26.752; math.Abs(got-want) > 1e-9 {
		t.Errorf("four small jobs under MPS: %.4f, the study measured %.4f", got, want)
	}
	if ts := c.Slowdown(TimeSlicing, job, three, 1); ts <= c.Slowdown(MPS, job, three, 1) {
		t.Errorf("time-slicing (%.3f) should be slower than MPS for the study's batch jobs", ts)
	}
	if c.Slowdown(Dedicated, job, nil, 1) != 1 {
		t.Error("alone on a whole GPU is the reference")
	}
	// Performance isolation: MIG ignores the neighbours, MPS with limits
	// suffers less than time-slicing.
	heavy := Load{Util: 0.9, Occ: 0.9}
	if c.Slowdown(MIG, job, []Load{heavy, heavy}, 3.0/7) != c.Slowdown(MIG, job, nil, 3.0/7) {
		t.Error("MIG must not depend on other instances")
	}
	lim := Load{Util: 0.9, Occ: 0.9, Limit: 0.3}
	own := Load{Util: 0.35, Occ: 0.5, Limit: 0.3}
	if m, ts := c.Slowdown(MPS, own, []Load{lim, lim}, 1), c.Slowdown(TimeSlicing, own, []Load{heavy, heavy}, 1); m >= ts {
		t.Errorf("MPS with limits %.3f, time-slicing %.3f", m, ts)
	}
}

// The mix is planned by the real planner: every strategy places the same
// replicas, sharing needs fewer GPUs than dedicated, and the answer is the
// same every time.
func TestMixPlannedAndDeterministic(t *testing.T) {
	p := profiles("A100-40GB",
		model.Profile{Name: "chat", Kind: model.KindOnlineInference, Tenant: "a", MemoryMiB: 4096, Utilization: 20, Replicas: 12, LatencySensitive: true},
		model.Profile{Name: "nb", Kind: model.KindNotebook, Tenant: "b", MemoryMiB: 6144, Utilization: 10, Replicas: 10, LatencySensitive: true},
		model.Profile{Name: "train", Kind: model.KindTraining, Tenant: "b", MemoryMiB: 30000, Utilization: 95, Replicas: 2},
	)
	p.Fleet = model.ProfileFleet{InstanceType: "p4d.24xlarge"}
	r1, err := Advise(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r2, _ := Advise(p, Options{})
	j1, _ := json.Marshal(r1)
	j2, _ := json.Marshal(r2)
	if string(j1) != string(j2) {
		t.Fatal("two runs differ")
	}
	byName := map[string]Strategy{}
	for _, s := range r1.Strategies {
		byName[s.Name] = s
		placed := 0
		for _, n := range s.Placed {
			placed += n
		}
		if placed+s.Unplaced != 24 {
			t.Errorf("%s: %d placed + %d unplaced, want 24", s.Name, placed, s.Unplaced)
		}
	}
	ded, adv := byName["dedicated"], byName["advised"]
	if ded.GPUs != 24 || adv.GPUs >= ded.GPUs || adv.Unplaced != 0 {
		t.Fatalf("dedicated %d GPUs, advised %d (%d unplaced)", ded.GPUs, adv.GPUs, adv.Unplaced)
	}
	if !adv.PriceKnown || adv.PerHour <= 0 || adv.PerHour >= ded.PerHour {
		t.Fatalf("cost advised %.2f, dedicated %.2f", adv.PerHour, ded.PerHour)
	}
	if r1.Best == "" {
		t.Fatal("no best strategy")
	}
}

func TestTraceSizes(t *testing.T) {
	tr := &model.Trace{File: "t.csv"}
	for i := 0; i < 100; i++ {
		u := 10.0
		if i >= 90 {
			u = 80
		}
		tr.Samples = append(tr.Samples, model.TraceSample{At: time.Duration(i) * time.Minute, Utilization: u, MemoryMiB: int64(1000 + i)})
	}
	st := Summarize(tr)
	if st.PeakMemoryMiB != 1099 || st.P95Utilization != 80 || math.Abs(st.MeanUtilization-(89*10+9*80)/98.0*0.98-0.2) > 1 {
		t.Fatalf("stats %+v", st)
	}
	p := model.Profile{Name: "w", Kind: model.KindOfflineInference, Trace: tr}
	mem, util, from := Effective(&p)
	if mem != 1099 || util != 80 || !strings.Contains(from, "t.csv") {
		t.Fatalf("effective %d %d %q", mem, util, from)
	}
}

// The study: time-slicing is "not ideal for heavily loaded interactive
// workloads". A notebook busy 70% of the time is not time-sliced; one busy
// 10% is.
func TestHeavyInteractiveWorkIsNeverTimeSliced(t *testing.T) {
	heavy := one(t, profiles("A100-40GB", model.Profile{Name: "nb", Kind: model.KindNotebook, MemoryMiB: 6144, Utilization: 70, LatencySensitive: true}), "nb")
	if heavy.Mechanism == TimeSlicing {
		t.Fatalf("a 70%% notebook is time-sliced: %q", heavy.Reasons)
	}
	why := strings.Join(heavy.Reasons, " ")
	if strings.Contains(why, "mostly idle") || !strings.Contains(why, "not ideal for heavily loaded interactive workloads") {
		t.Errorf("reasons %q", heavy.Reasons)
	}
	if heavy.Mechanism == MPS && (heavy.Sizing.ThreadPercent <= 0 || heavy.Sizing.ThreadPercent >= 100) {
		t.Errorf("MPS without a limit: %+v", heavy.Sizing)
	}
	light := one(t, profiles("A100-40GB", model.Profile{Name: "nb", Kind: model.KindNotebook, MemoryMiB: 6144, Utilization: 10, LatencySensitive: true}), "nb")
	if light.Mechanism != TimeSlicing || !strings.Contains(strings.Join(light.Reasons, " "), "busy 10% of the time") {
		t.Errorf("a 10%% notebook: %s %q", light.Mechanism, light.Reasons)
	}
}

// "MPS with a limit" is a limit below 100%: a GPU-intensive job is capped
// at the study's 50%; a workload whose limit would be 100% is dedicated.
// Time-slicing with one replica per GPU is a dedicated GPU too. Over a
// grid of every kind, load and size, no advice and no alternative breaks
// that, and heavy interactive work is never time-sliced.
func TestAdviceNeverNamesADedicatedGPUSharing(t *testing.T) {
	burn := one(t, profiles("A100-40GB", model.Profile{Name: "burn", Kind: model.KindIntensiveBatch, MemoryMiB: 5120, Utilization: 80}), "burn")
	if burn.Mechanism != MPS || burn.Sizing.ThreadPercent != Default.MPSLimitedShare || !strings.Contains(burn.Sizing.Text, "capped at 50%") {
		t.Fatalf("gpu-burn: %s %+v", burn.Mechanism, burn.Sizing)
	}
	for _, kind := range model.WorkloadKinds {
		for _, util := range []int{5, 20, 35, 50, 70, 85} {
			for _, mem := range []int64{400, 4096, 12000, 22000, 38000} {
				for _, latency := range []bool{false, true} {
					w := model.Profile{Name: "w", Kind: kind, MemoryMiB: mem, Utilization: util, LatencySensitive: latency}
					r, err := Advise(profiles("A100-40GB", w), Options{NoPlan: true})
					if err != nil {
						t.Fatal(err)
					}
					a := r.Workloads[0]
					at := func(format string, args ...any) {
						t.Errorf("%s %d%% %s latency=%v: "+format, append([]any{kind, util, MiB(mem), latency}, args...)...)
					}
					switch a.Mechanism {
					case MPS:
						if a.Sizing.ThreadPercent <= 0 || a.Sizing.ThreadPercent >= 100 {
							at("MPS with %d%% threads: no limit", a.Sizing.ThreadPercent)
						}
					case TimeSlicing:
						if a.Sizing.TimeSliceReplicas < 2 {
							at("time-slicing with %d replica per GPU", a.Sizing.TimeSliceReplicas)
						}
						if util >= Default.HeavyUtilization && (kind == model.KindNotebook || latency) {
							at("heavy interactive work time-sliced: %q", a.Reasons)
						}
					}
					for _, x := range a.Alternatives {
						if !x.Possible || x.Dedicated {
							continue
						}
						if x.Mechanism == MPS && x.Sizing.ThreadPercent >= 100 || x.Mechanism == TimeSlicing && x.Sizing.TimeSliceReplicas < 2 {
							at("alternative %s %+v shares nothing", x.Mechanism, x.Sizing)
						}
					}
				}
			}
		}
	}
}

// The cheapest strategy is never one named after a sharing mechanism that
// shares nothing: where time-slicing would put every workload alone on a
// GPU, its strategy places them as dedicated, says so, and the dedicated
// strategy (or the advice) is the cheapest.
func TestCheapestIsNeverDedicatedUnderAnotherName(t *testing.T) {
	p := profiles("A100-40GB",
		model.Profile{Name: "big", Kind: model.KindOfflineInference, MemoryMiB: 30000, Utilization: 60},
		model.Profile{Name: "busy", Kind: model.KindOnlineInference, MemoryMiB: 8192, Utilization: 85, LatencySensitive: true})
	r, err := Advise(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range r.Strategies {
		if s.Name == "time-slicing" && (s.Placed["time-slicing"] > 0 || s.Placed["dedicated"] == 0) {
			t.Errorf("time-slicing strategy places %v: want every replica on a dedicated GPU", s.Placed)
		}
	}
	if r.Best == "time-slicing" {
		t.Errorf("cheapest: time-slicing, which shares no GPU here (%+v)", r.Strategies)
	}
	for _, a := range r.Workloads {
		ts := a.Alternatives[index(TimeSlicing)]
		if !ts.Dedicated || !strings.Contains(ts.Sizing.Text, "dedicated") {
			t.Errorf("%s: time-slicing alternative %+v is not called dedicated", a.Name, ts)
		}
	}
}
