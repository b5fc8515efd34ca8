package admit

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
)

func TestQuotaCheck(t *testing.T) {
	tenant := TenantQuota("team-a", 20*1024, 150)
	ns := Quota{Scope: NamespaceScope, Name: "team-a", MemMiB: 20 * 1024, Compute: 150}
	for _, tc := range []struct {
		name        string
		q           Quota
		used, asked Use
		want        string // "": room
	}{
		{"exactly at the quota", tenant, Use{16 * 1024, 100}, Use{4 * 1024, 50}, ""},
		{"memory over", tenant, Use{16 * 1024, 0}, Use{4*1024 + 1, 0},
			"quota: tenant team-a holds 16384 MiB of GPU memory and needs 4097 more; its quota is 20480 MiB"},
		{"compute over", tenant, Use{0, 100}, Use{0, 51}, "quota: tenant team-a holds 100% compute and needs 51% more; its quota is 150%"},
		{"memory before compute", tenant, Use{20 * 1024, 150}, Use{1, 1}, "GPU memory"},
		{"nothing asked of a resource already over", tenant, Use{30 * 1024, 200}, Use{}, ""},
		{"compute asked, memory over already", tenant, Use{30 * 1024, 0}, Use{0, 10}, ""},
		{"tenant 0 is unlimited", TenantQuota("t", 0, 0), Use{1 << 40, 1 << 20}, Use{1 << 30, 1000}, ""},
		{"namespace 0 allows nothing", Quota{Scope: NamespaceScope, Name: "n", MemMiB: 0, Compute: NoLimit}, Use{}, Use{1, 0},
			"namespace n GPU memory quota 0Gi: 0Gi in use, the pod's claims need 1Mi"},
		{"namespace no limit", Quota{Scope: NamespaceScope, Name: "n", MemMiB: NoLimit, Compute: NoLimit}, Use{1 << 40, 1 << 20}, Use{1, 1}, ""},
		{"namespace memory", ns, Use{16 * 1024, 0}, Use{4*1024 + 1, 0}, "namespace team-a GPU memory quota 20Gi: 16Gi in use, the pod's claims need 4097Mi"},
		{"namespace compute", ns, Use{0, 100}, Use{0, 51}, "namespace team-a GPU compute quota 150%: 100% in use, the pod's claims need 51%"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.q.Check(tc.used, tc.asked)
			switch {
			case tc.want == "" && o != nil:
				t.Fatalf("refused: %s", o.Reason())
			case tc.want != "" && o == nil:
				t.Fatalf("admitted, want %q", tc.want)
			case tc.want != "" && !strings.Contains(o.Reason(), tc.want):
				t.Fatalf("reason %q, want %q", o.Reason(), tc.want)
			}
		})
	}
}

func TestOverQuotaFields(t *testing.T) {
	o := TenantQuota("a", 100, 0).Check(Use{60, 0}, Use{50, 20})
	want := &OverQuota{Scope: TenantScope, Name: "a", Resource: Memory, Used: 60, Limit: 100, Asked: 50}
	if !reflect.DeepEqual(o, want) {
		t.Fatalf("%+v, want %+v", o, want)
	}
	o = TenantQuota("a", 0, 100).Check(Use{60, 90}, Use{50, 20})
	if o == nil || o.Resource != Compute || o.Used != 90 || o.Limit != 100 || o.Asked != 20 {
		t.Fatalf("compute: %+v", o)
	}
}

func TestDecide(t *testing.T) {
	q := TenantQuota("team-a", 40*1024, 0)
	for _, tc := range []struct {
		name string
		in   Claim
		want Outcome
		text string
	}{
		{"placed within the quota", Claim{Quota: q, Placed: true, Charge: Use{10 * 1024, 0}}, Admit{}, ""},
		{"placed, given more than the quota", Claim{Quota: q, Used: Use{10 * 1024, 0}, Placed: true, Given: Use{40 * 1024, 100}, Charge: Use{40 * 1024, 100}},
			&OverQuota{Scope: TenantScope, Name: "team-a", Resource: Memory, Used: 10 * 1024, Limit: 40 * 1024, Asked: 40 * 1024, Given: &Use{40 * 1024, 100}},
			"quota: tenant team-a holds 10240 MiB of GPU memory and needs 40960 more; its quota is 40960 MiB (the allocation found gives 40960 MiB and 100% compute; ask for less, or for a shared mode)"},
		{"placed ignores the queue bound", Claim{Quota: q, Placed: true, Queued: 5, MaxQueued: 5}, Admit{}, ""},
		{"waits", Claim{Quota: q, Charge: Use{1024, 0}, Queued: 4, MaxQueued: 5}, Admit{Queued: true}, ""},
		{"queue full", Claim{Quota: q, Queued: 5, MaxQueued: 5}, &QueueFull{Tenant: "team-a", Waiting: 5, Limit: 5},
			"queue full: tenant team-a has 5 claims waiting (at most 5); release some or retry later"},
		{"no queue bound", Claim{Quota: q, Queued: 1 << 20}, Admit{Queued: true}, ""},
		{"waiting charge over the quota before the queue bound", Claim{Quota: q, Used: Use{40 * 1024, 0}, Charge: Use{1, 0}, Queued: 5, MaxQueued: 5},
			&OverQuota{Scope: TenantScope, Name: "team-a", Resource: Memory, Used: 40 * 1024, Limit: 40 * 1024, Asked: 1}, "needs 1 more"},
		{"never fits, before the quota", Claim{Quota: q, Used: Use{40 * 1024, 0}, Charge: Use{1, 0}, NeverFits: "no GPU has 100000 MiB", LargestGPUMiB: 81920},
			&NeverFits{Why: "no GPU has 100000 MiB", LargestGPUMiB: 81920},
			"this claim can never fit the registered nodes, even empty: no GPU has 100000 MiB (the largest GPU here has 81920 MiB); ask for less, or pass waitForNodes (gpuslice run --wait-for-nodes) to queue it for nodes that may join"},
		{"never fits, a profile", Claim{Quota: q, NeverFits: "A100-40GB has 1g.5gb, 2g.10gb (profile 9g.90gb)", LargestGPUMiB: 40960},
			&NeverFits{Why: "A100-40GB has 1g.5gb, 2g.10gb (profile 9g.90gb)", LargestGPUMiB: 40960}, "(the largest GPU here has 40960 MiB); ask for one of those profiles, or pass waitForNodes"},
		{"never fits but waits for nodes", Claim{Quota: q, NeverFits: "too big", WaitForNodes: true}, Admit{Queued: true}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(tc.in)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("%#v, want %#v", got, tc.want)
			}
			if !strings.Contains(got.Reason(), tc.text) || (tc.text == "") != (got.Reason() == "") {
				t.Fatalf("reason %q, want %q", got.Reason(), tc.text)
			}
		})
	}
}

func TestUse(t *testing.T) {
	a := &alloc.Allocation{Devices: []alloc.Assigned{{MemoryMiB: 40960, ComputePercent: 100}, {MemoryMiB: 10240}}}
	if g := Given(a); g != (Use{51200, 100}) {
		t.Fatalf("Given: %+v", g)
	}
	if g := Given(nil); g != (Use{}) {
		t.Fatalf("Given(nil): %+v", g)
	}
	if g := GivenAll([]*alloc.Allocation{a, a}); g != (Use{102400, 200}) {
		t.Fatalf("GivenAll: %+v", g)
	}
	reqs := []alloc.Request{{Count: 2, MemoryMiB: 1000, ComputePercent: 10}, {MemoryMiB: 500}}
	if u := Asked(reqs); u != (Use{2500, 20}) {
		t.Fatalf("Asked: %+v", u)
	}
	if c := Charge(Use{2500, 20}, Use{1000, 100}); c != (Use{2500, 100}) {
		t.Fatalf("Charge: %+v", c)
	}
	for _, tc := range []struct {
		name string
		reqs []alloc.Request
		iso  alloc.Isolation
		want Use
	}{
		{"shares as asked", []alloc.Request{{Mode: alloc.TimeSlice, MemoryMiB: 4096, ComputePercent: 20}}, "", Use{4096, 20}},
		{"exclusive naming no memory: the smallest GPU, all its compute", []alloc.Request{{Mode: alloc.Exclusive, Count: 2}}, "", Use{2 * 40960, 200}},
		{"exclusive naming more keeps it", []alloc.Request{{Mode: alloc.Exclusive, MemoryMiB: 80000}}, "", Use{80000, 100}},
		{"hardware isolation without MIG is a whole GPU", []alloc.Request{{MemoryMiB: 1024}}, alloc.IsolationHardware, Use{40960, 100}},
		{"hardware isolation in MIG is as asked", []alloc.Request{{Mode: alloc.MIG, MemoryMiB: 5120}}, alloc.IsolationHardware, Use{5120, 0}},
		{"hardware isolation naming a profile is as asked", []alloc.Request{{Profile: "1g.5gb", MemoryMiB: 5120}}, alloc.IsolationHardware, Use{5120, 0}},
	} {
		if got := WaitingCharge(tc.reqs, tc.iso, 40960); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestDue(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		waited  time.Duration
		after   time.Duration
		due     bool
		waitFor time.Duration
	}{
		{"not yet", 2 * time.Minute, 5 * time.Minute, false, 3 * time.Minute},
		{"exactly", 5 * time.Minute, 5 * time.Minute, true, 0},
		{"past", time.Hour, 5 * time.Minute, true, 0},
		{"off at 0", time.Hour, 0, false, 0},
		{"off when negative", time.Hour, -1, false, 0},
	} {
		due, wait := Due(t0, t0.Add(tc.waited), tc.after)
		if due != tc.due || wait != tc.waitFor {
			t.Errorf("%s: due %v wait %s, want %v %s", tc.name, due, wait, tc.due, tc.waitFor)
		}
	}
}

func TestHoldRules(t *testing.T) {
	h := &Hold{Claim: "big", Priority: 5}
	for _, tc := range []struct {
		name  string
		h     *Hold
		id    string
		p     int
		binds bool
		takes bool
	}{
		{"no hold", nil, "x", 0, false, true},
		{"empty hold", &Hold{}, "x", 0, false, true},
		{"the holder itself", h, "big", 5, false, false},
		{"lower priority kept off", h, "small", 4, true, false},
		{"same priority kept off, does not take it", h, "small", 5, true, false},
		{"higher priority passes and takes it", h, "urgent", 6, false, true},
	} {
		if got := Binds(tc.h, tc.id, tc.p); got != tc.binds {
			t.Errorf("%s: Binds %v", tc.name, got)
		}
		if got := Yields(tc.h, tc.id, tc.p); got != tc.takes {
			t.Errorf("%s: Yields %v", tc.name, got)
		}
	}
}

func TestNominate(t *testing.T) {
	for _, tc := range []struct {
		cands []Candidate
		want  string
		ok    bool
	}{
		{nil, "", false},
		{[]Candidate{{"b", 3}, {"a", 1}, {"c", 1}}, "a", true},
		{[]Candidate{{"z", 0}, {"a", 2}}, "z", true},
		{[]Candidate{{"b", 2}, {"a", 2}}, "a", true},
	} {
		if got, ok := Nominate(tc.cands); got != tc.want || ok != tc.ok {
			t.Errorf("%v: %q %v, want %q %v", tc.cands, got, ok, tc.want, tc.ok)
		}
	}
}

func TestHeldReasons(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    Held
		want string
	}{
		{"another tenant's, on a node", Held{Node: "n1", Priority: 3, Waited: time.Hour, ReserveAfter: 5 * time.Minute},
			"node n1 is held for a claim of another tenant waiting ahead of this one (priority 3): after 5m0s waiting a claim's GPUs are held so it cannot starve; claims of its priority or lower use only the others"},
		{"own tenant's, fleet-wide", Held{Holder: "c-7", Priority: 0, Waited: 90*time.Second + 400*time.Millisecond, ReserveAfter: time.Minute},
			"the GPUs claim c-7 (priority 0, pending for 1m30s) could use are held for it: after 1m0s waiting"},
		{"a pod", Held{Scope: NamespaceScope, Node: "n2", Holder: "team-a/big", Waited: 6*time.Minute + 700*time.Millisecond},
			"node n2 is held for GPU pod team-a/big, pending for 6m1s (reserveAfter)"},
	} {
		if got := tc.h.Reason(); !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := (Holding{Node: "n1", Priority: 2, Waited: 301 * time.Second}).Note(); got != " (waiting 5m1s; node n1 is now held for it: later claims of priority 2 or lower use only the GPUs there it cannot use, or go elsewhere)" {
		t.Errorf("holding a node: %q", got)
	}
	if got := (Holding{GPUs: 12, Priority: 0, Waited: time.Minute}).Note(); !strings.Contains(got, "no single node can hold it, so the 12 GPUs it could use are now held for it") {
		t.Errorf("holding GPUs: %q", got)
	}
}
