package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
)

// backend opens an empty store of one kind; the contract suite runs against
// every backend.
type backend struct {
	name string
	open func(testing.TB) Store
}

func backends() []backend {
	return []backend{
		{"memory", func(t testing.TB) Store {
			s := NewMemory()
			t.Cleanup(func() { s.Close() })
			return s
		}},
		{"sqlite", func(t testing.TB) Store {
			s, err := OpenSQLite(filepath.Join(t.TempDir(), "state.db"), SQLiteOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("close: %v", err)
				}
			})
			return s
		}},
	}
}

func TestContract(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		fn   func(*testing.T, Store)
	}{
		{"Tenants", testTenants},
		{"Tokens", testTokens},
		{"Claims", testClaims},
		{"ClaimFilters", testClaimFilters},
		{"Nodes", testNodes},
		{"Events", testEvents},
		{"PruneEvents", testPruneEvents},
		{"PruneClaims", testPruneClaims},
		{"EventsByTenant", testEventsByTenant},
		{"Usage", testUsage},
		{"Rollback", testRollback},
		{"RollbackPanic", testRollbackPanic},
		{"ErrorInsideSuccessfulUpdate", testErrorInsideSuccessfulUpdate},
		{"ReadOnlyAndClosedTx", testReadOnlyAndClosedTx},
		{"ViewIsolation", testViewIsolation},
		{"DeepCopy", testDeepCopy},
		{"Context", testContext},
		{"Close", testClose},
		{"ConcurrentCreate", testConcurrentCreate},
		{"ConcurrentFailures", testConcurrentFailures},
		{"HooksCommit", testHooksCommit},
		{"HooksRollback", testHooksRollback},
		{"HooksPanic", testHooksPanic},
		{"HooksView", testHooksView},
		{"HooksConcurrent", testHooksConcurrent},
	}
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					tc.fn(t, b.open(t))
				})
			}
		})
	}
}

// Helpers.

var ctx = context.Background()

var t0 = time.Date(2026, 11, 21, 10, 30, 0, 123456789, time.UTC)

func update(t testing.TB, s Store, fn func(Tx) error) {
	t.Helper()
	if err := s.Update(ctx, fn); err != nil {
		t.Fatalf("Update: %v", err)
	}
}

func view(t testing.TB, s Store, fn func(Tx) error) {
	t.Helper()
	if err := s.View(ctx, fn); err != nil {
		t.Fatalf("View: %v", err)
	}
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func same(t testing.TB, what string, got, want any) {
	t.Helper()
	if g, w := mustJSON(t, got), mustJSON(t, want); g != w {
		t.Errorf("%s:\n got %s\nwant %s", what, g, w)
	}
}

func wantErr(t testing.TB, err, target error, msg string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("got error %v, want one wrapping %v", err, target)
	}
	if msg != "" && err.Error() != msg {
		t.Errorf("error message %q, want %q", err.Error(), msg)
	}
}

// sampleClaim is a claim with every kind of nested field; with nodes it is
// allocated on them (one device per node).
func sampleClaim(id, tenant string, state api.ClaimState, nodes ...string) api.Claim {
	c := api.Claim{
		ID:     id,
		Tenant: tenant,
		State:  state,
		Spec: api.ClaimSpec{
			Priority:  3,
			Isolation: alloc.IsolationTenant,
			Requests: []alloc.Request{
				{Name: "gpu", Count: 1, MemoryMiB: 10240, ComputePercent: 25, Mode: alloc.MPS, Workload: alloc.WorkloadInference},
			},
			Constraints:  []alloc.Constraint{{Requests: []string{"gpu"}, Match: "node"}},
			MemoryPolicy: "warn",
		},
		Reason:  "because",
		Created: t0,
		Updated: t0.Add(time.Second),
	}
	if len(nodes) > 0 {
		a := &alloc.Allocation{
			Claim:     id,
			Tenant:    tenant,
			Isolation: alloc.IsolationTenant,
			Env:       map[string]string{"CUDA_VISIBLE_DEVICES": "GPU-1", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25"},
			Why:       []string{"auto: mps"},
			Changes:   []alloc.Change{{Kind: alloc.ConfigureShare, Node: nodes[0], GPU: "GPU-1", Sharing: &alloc.Sharing{Mode: alloc.MPS, MaxClients: 48}}},
		}
		for i, n := range nodes {
			a.Devices = append(a.Devices, alloc.Assigned{
				Request: "gpu", Node: n, GPU: fmt.Sprintf("GPU-%d", i), Device: fmt.Sprintf("GPU-%d", i),
				Mode: alloc.MPS, MemoryMiB: 10240, ComputePercent: 25, Slot: i,
				MPS: &alloc.MPSLimits{ActiveThreadPercent: 25, PinnedMemoryMiB: 10240, PipeDirectory: "/tmp/mps"},
			})
		}
		c.Allocation = a
	}
	return c
}

func sampleNode(name string) api.Node {
	return api.Node{
		Name:          name,
		State:         api.NodeReady,
		LastHeartbeat: t0,
		Driver:        "580.65.06",
		Created:       t0,
		Inventory: alloc.Node{
			Name:         name,
			Labels:       map[string]string{"zone": "a"},
			InstanceType: "p5.48xlarge",
			GPUs: []alloc.GPU{{
				UUID: "GPU-0", Index: 0, Model: "h100-sxm-80gb", Healthy: true, MIGEnabled: true,
				Sharing:   alloc.Sharing{Mode: alloc.Dynamic},
				Instances: []alloc.MIGInstance{{UUID: "MIG-0", Profile: "1g.10gb", Start: 0, Sharing: alloc.Sharing{Mode: alloc.Exclusive}}},
			}},
		},
	}
}

func claimIDs(cs []api.Claim) []string {
	ids := []string{}
	for _, c := range cs {
		ids = append(ids, c.ID)
	}
	return ids
}

// dump is everything a store holds, for before/after comparisons.
func dump(t testing.TB, s Store) string {
	t.Helper()
	var d struct {
		Tenants []api.Tenant
		Tokens  []api.Token
		Claims  []api.Claim
		Nodes   []api.Node
		Events  []api.Event
		Usage   []api.Usage
	}
	view(t, s, func(tx Tx) (err error) {
		if d.Tenants, err = tx.ListTenants(); err != nil {
			return err
		}
		if d.Tokens, err = tx.ListTokens(); err != nil {
			return err
		}
		if d.Claims, err = tx.ListClaims(ClaimFilter{}); err != nil {
			return err
		}
		if d.Nodes, err = tx.ListNodes(); err != nil {
			return err
		}
		if d.Events, err = tx.EventsSince(0, 0); err != nil {
			return err
		}
		for _, name := range []string{"acme", "beta", "new"} {
			u, err := tx.Usage(name)
			if err != nil {
				return err
			}
			d.Usage = append(d.Usage, u)
		}
		return nil
	})
	return mustJSON(t, d)
}

// populate gives a store one of everything.
func populate(t testing.TB, s Store) {
	t.Helper()
	update(t, s, func(tx Tx) error {
		for _, name := range []string{"acme", "beta"} {
			if err := tx.PutTenant(api.Tenant{Name: name, MemoryMiB: 1 << 20, Created: t0}); err != nil {
				return err
			}
		}
		if err := tx.CreateToken(api.Token{ID: "tok-1", Tenant: "acme", Role: api.RoleTenant, Created: t0}, []byte("hash-1")); err != nil {
			return err
		}
		for i, st := range []api.ClaimState{api.Pending, api.Allocated} {
			c := sampleClaim(fmt.Sprintf("c-%d", i), "acme", st, "n1")
			if err := tx.CreateClaim(&c); err != nil {
				return err
			}
		}
		if err := tx.PutNode(sampleNode("n1")); err != nil {
			return err
		}
		if err := tx.AppendEvent(&api.Event{Time: t0, Kind: "claim.created", Claim: "c-0", Message: "hi"}); err != nil {
			return err
		}
		return tx.AddUsage("acme", api.Consumption{GPUSeconds: 10, MemoryMiBSeconds: 1000})
	})
}

// The contract.

func testTenants(t *testing.T, s Store) {
	// Empty lists are empty, not nil (they answer as [] in JSON).
	view(t, s, func(tx Tx) error {
		tenants, _ := tx.ListTenants()
		tokens, _ := tx.ListTokens()
		claims, _ := tx.ListClaims(ClaimFilter{})
		nodes, _ := tx.ListNodes()
		events, err := tx.EventsSince(0, 0)
		if tenants == nil || tokens == nil || claims == nil || nodes == nil || events == nil {
			t.Errorf("a list on an empty store is nil: %v %v %v %v %v", tenants == nil, tokens == nil, claims == nil, nodes == nil, events == nil)
		}
		return err
	})
	update(t, s, func(tx Tx) error {
		for _, n := range []string{"zeta", "acme", "beta"} {
			if err := tx.PutTenant(api.Tenant{Name: n, MemoryMiB: 100, Created: t0}); err != nil {
				return err
			}
		}
		return nil
	})
	// Put replaces.
	update(t, s, func(tx Tx) error {
		return tx.PutTenant(api.Tenant{Name: "beta", ComputePercent: 50, Created: t0})
	})
	view(t, s, func(tx Tx) error {
		got, err := tx.GetTenant("beta")
		if err != nil {
			return err
		}
		same(t, "replaced tenant", got, api.Tenant{Name: "beta", ComputePercent: 50, Created: t0})
		list, err := tx.ListTenants()
		if err != nil {
			return err
		}
		var names []string
		for _, tn := range list {
			names = append(names, tn.Name)
		}
		same(t, "tenants by name", names, []string{"acme", "beta", "zeta"})
		_, err = tx.GetTenant("nope")
		wantErr(t, err, ErrNotFound, `tenant "nope": not found`)
		return nil
	})
	update(t, s, func(tx Tx) error {
		if err := tx.DeleteTenant("acme"); err != nil {
			return err
		}
		wantErr(t, tx.DeleteTenant("acme"), ErrNotFound, `tenant "acme": not found`)
		_, err := tx.GetTenant("acme")
		wantErr(t, err, ErrNotFound, "")
		if err := tx.PutTenant(api.Tenant{}); err == nil {
			t.Error("PutTenant with an empty name succeeded")
		}
		return nil
	})
	view(t, s, func(tx Tx) error {
		list, err := tx.ListTenants()
		if len(list) != 2 {
			t.Errorf("after delete: %d tenants, want 2", len(list))
		}
		return err
	})
}

func testTokens(t *testing.T, s Store) {
	update(t, s, func(tx Tx) error {
		if err := tx.CreateToken(api.Token{ID: "t2", Tenant: "acme", Role: api.RoleTenant, Secret: "s3cret", Created: t0}, []byte{0, 1, 2}); err != nil {
			return err
		}
		if err := tx.CreateToken(api.Token{ID: "t1", Role: api.RoleAdmin, Created: t0}, []byte{9, 9}); err != nil {
			return err
		}
		wantErr(t, tx.CreateToken(api.Token{ID: "t1", Role: api.RoleAdmin}, []byte{7}), ErrExists, `token "t1": already exists`)
		wantErr(t, tx.CreateToken(api.Token{ID: "t3", Role: api.RoleAdmin}, []byte{9, 9}), ErrExists, "")
		if err := tx.CreateToken(api.Token{ID: "t4"}, nil); err == nil {
			t.Error("CreateToken without a hash succeeded")
		}
		return nil
	})
	view(t, s, func(tx Tx) error {
		got, err := tx.TokenByHash([]byte{0, 1, 2})
		if err != nil {
			return err
		}
		same(t, "token (secret not stored)", got, api.Token{ID: "t2", Tenant: "acme", Role: api.RoleTenant, Created: t0})
		_, err = tx.TokenByHash([]byte{0, 1})
		wantErr(t, err, ErrNotFound, "")
		if strings.Contains(err.Error(), "\x00") {
			t.Errorf("error prints the hash: %q", err)
		}
		list, err := tx.ListTokens()
		if err != nil {
			return err
		}
		same(t, "tokens by id", claimIDsOfTokens(list), []string{"t1", "t2"})
		return nil
	})
	update(t, s, func(tx Tx) error {
		if err := tx.DeleteToken("t2"); err != nil {
			return err
		}
		wantErr(t, tx.DeleteToken("t2"), ErrNotFound, `token "t2": not found`)
		_, err := tx.TokenByHash([]byte{0, 1, 2})
		wantErr(t, err, ErrNotFound, "")
		// The hash is free again.
		return tx.CreateToken(api.Token{ID: "t5", Role: api.RoleAgent}, []byte{0, 1, 2})
	})
}

func claimIDsOfTokens(ts []api.Token) []string {
	var ids []string
	for _, t := range ts {
		ids = append(ids, t.ID)
	}
	return ids
}

func testClaims(t *testing.T, s Store) {
	var seqs []int64
	update(t, s, func(tx Tx) error {
		for i := range 5 {
			c := sampleClaim(fmt.Sprintf("c-%d", i), "acme", api.Pending)
			c.QueuePosition = 7 // answer-only: not stored
			c.Seq = 999         // assigned by the store
			if err := tx.CreateClaim(&c); err != nil {
				return err
			}
			seqs = append(seqs, c.Seq)
		}
		dup := sampleClaim("c-1", "beta", api.Pending)
		wantErr(t, tx.CreateClaim(&dup), ErrExists, `claim "c-1": already exists`)
		if err := tx.CreateClaim(&api.Claim{}); err == nil {
			t.Error("CreateClaim with an empty ID succeeded")
		}
		return nil
	})
	for i := 1; i < len(seqs); i++ {
		if seqs[i] <= seqs[i-1] || seqs[0] <= 0 {
			t.Fatalf("seqs not positive and increasing: %v", seqs)
		}
	}
	view(t, s, func(tx Tx) error {
		got, err := tx.GetClaim("c-2")
		if err != nil {
			return err
		}
		want := sampleClaim("c-2", "acme", api.Pending)
		want.Seq = seqs[2]
		same(t, "claim", got, want)
		_, err = tx.GetClaim("c-12")
		wantErr(t, err, ErrNotFound, `claim "c-12": not found`)
		list, err := tx.ListClaims(ClaimFilter{})
		if err != nil {
			return err
		}
		same(t, "claims in seq order", claimIDs(list), []string{"c-0", "c-1", "c-2", "c-3", "c-4"})
		return nil
	})
	// UpdateClaim replaces the record and keeps the seq.
	update(t, s, func(tx Tx) error {
		c := sampleClaim("c-0", "acme", api.Allocated, "n1")
		c.Seq = 12345
		c.Reason = "placed"
		if err := tx.UpdateClaim(c); err != nil {
			return err
		}
		wantErr(t, tx.UpdateClaim(sampleClaim("nope", "acme", api.Running)), ErrNotFound, `claim "nope": not found`)
		return nil
	})
	view(t, s, func(tx Tx) error {
		got, err := tx.GetClaim("c-0")
		if err != nil {
			return err
		}
		want := sampleClaim("c-0", "acme", api.Allocated, "n1")
		want.Seq = seqs[0]
		want.Reason = "placed"
		same(t, "updated claim", got, want)
		list, err := tx.ListClaims(ClaimFilter{})
		same(t, "order after update", claimIDs(list), []string{"c-0", "c-1", "c-2", "c-3", "c-4"})
		return err
	})
	// Later creates continue the sequence.
	update(t, s, func(tx Tx) error {
		c := sampleClaim("c-5", "acme", api.Pending)
		if err := tx.CreateClaim(&c); err != nil {
			return err
		}
		if c.Seq <= seqs[4] {
			t.Errorf("seq %d after %d", c.Seq, seqs[4])
		}
		return nil
	})
}

func testClaimFilters(t *testing.T, s Store) {
	update(t, s, func(tx Tx) error {
		claims := []api.Claim{
			sampleClaim("a-pend", "acme", api.Pending),
			sampleClaim("b-run", "beta", api.Running, "n1"),
			sampleClaim("a-alloc", "acme", api.Allocated, "n2"),
			sampleClaim("a-multi", "acme", api.Running, "n1", "n3"),
			sampleClaim("b-rel", "beta", api.Released, "n1"),
		}
		claims[0].Spec.Node = "n3" // pinned, not allocated yet
		for i := range claims {
			if err := tx.CreateClaim(&claims[i]); err != nil {
				return err
			}
		}
		return nil
	})
	cases := []struct {
		f    ClaimFilter
		want []string
	}{
		{ClaimFilter{}, []string{"a-pend", "b-run", "a-alloc", "a-multi", "b-rel"}},
		{ClaimFilter{Tenant: "acme"}, []string{"a-pend", "a-alloc", "a-multi"}},
		{ClaimFilter{Tenant: "nobody"}, []string{}},
		{ClaimFilter{States: []api.ClaimState{api.Running}}, []string{"b-run", "a-multi"}},
		{ClaimFilter{States: []api.ClaimState{api.Pending, api.Allocated, api.Running}}, []string{"a-pend", "b-run", "a-alloc", "a-multi"}},
		{ClaimFilter{States: []api.ClaimState{}}, []string{"a-pend", "b-run", "a-alloc", "a-multi", "b-rel"}},
		{ClaimFilter{Node: "n1"}, []string{"b-run", "a-multi", "b-rel"}},
		{ClaimFilter{Node: "n3"}, []string{"a-pend", "a-multi"}},
		{ClaimFilter{Node: "n1", States: []api.ClaimState{api.Running}, Tenant: "acme"}, []string{"a-multi"}},
		{ClaimFilter{Node: "n1", Tenant: "beta", States: []api.ClaimState{api.Released, api.Failed}}, []string{"b-rel"}},
		{ClaimFilter{Node: "n9"}, []string{}},
	}
	check := func() {
		t.Helper()
		view(t, s, func(tx Tx) error {
			for _, tc := range cases {
				got, err := tx.ListClaims(tc.f)
				if err != nil {
					return err
				}
				if got == nil {
					t.Errorf("ListClaims(%+v) = nil, want an empty list", tc.f)
				}
				same(t, fmt.Sprintf("ListClaims(%+v)", tc.f), claimIDs(got), tc.want)
			}
			return nil
		})
	}
	check()
	// Moving a claim to another node and state moves it between filters.
	update(t, s, func(tx Tx) error {
		c, err := tx.GetClaim("a-multi")
		if err != nil {
			return err
		}
		moved := sampleClaim("a-multi", "acme", api.Failed, "n2")
		moved.Seq = c.Seq
		return tx.UpdateClaim(moved)
	})
	cases = []struct {
		f    ClaimFilter
		want []string
	}{
		{ClaimFilter{Node: "n1"}, []string{"b-run", "b-rel"}},
		{ClaimFilter{Node: "n3"}, []string{"a-pend"}},
		{ClaimFilter{Node: "n2"}, []string{"a-alloc", "a-multi"}},
		{ClaimFilter{States: []api.ClaimState{api.Failed}}, []string{"a-multi"}},
	}
	check()
}

func testNodes(t *testing.T, s Store) {
	update(t, s, func(tx Tx) error {
		for _, n := range []string{"n2", "n1"} {
			if err := tx.PutNode(sampleNode(n)); err != nil {
				return err
			}
		}
		n := sampleNode("n2")
		n.State = api.NodeLost
		if err := tx.PutNode(n); err != nil {
			return err
		}
		if err := tx.PutNode(api.Node{}); err == nil {
			t.Error("PutNode with an empty name succeeded")
		}
		return nil
	})
	view(t, s, func(tx Tx) error {
		got, err := tx.GetNode("n2")
		if err != nil {
			return err
		}
		want := sampleNode("n2")
		want.State = api.NodeLost
		same(t, "node", got, want)
		list, err := tx.ListNodes()
		if err != nil {
			return err
		}
		same(t, "nodes by name", list, []api.Node{sampleNode("n1"), want})
		_, err = tx.GetNode("n9")
		wantErr(t, err, ErrNotFound, `node "n9": not found`)
		return nil
	})
	update(t, s, func(tx Tx) error {
		if err := tx.DeleteNode("n1"); err != nil {
			return err
		}
		wantErr(t, tx.DeleteNode("n1"), ErrNotFound, `node "n1": not found`)
		return nil
	})
}

func testEvents(t *testing.T, s Store) {
	var seqs []int64
	for i := range 5 {
		update(t, s, func(tx Tx) error {
			e := &api.Event{Time: t0.Add(time.Duration(i) * time.Second), Kind: "claim.created", Claim: fmt.Sprintf("c-%d", i), Tenant: "acme", Node: "n1", Message: "m", Seq: 77}
			if err := tx.AppendEvent(e); err != nil {
				return err
			}
			seqs = append(seqs, e.Seq)
			return nil
		})
	}
	for i := range seqs {
		if seqs[i] <= 0 || i > 0 && seqs[i] <= seqs[i-1] {
			t.Fatalf("event seqs not positive and increasing: %v", seqs)
		}
	}
	view(t, s, func(tx Tx) error {
		all, err := tx.EventsSince(0, 0)
		if err != nil {
			return err
		}
		if len(all) != 5 || all[0].Seq != seqs[0] || all[4].Claim != "c-4" || !all[2].Time.Equal(t0.Add(2*time.Second)) {
			t.Errorf("EventsSince(0, 0) = %s", mustJSON(t, all))
		}
		some, err := tx.EventsSince(seqs[1], 2)
		if err != nil {
			return err
		}
		if len(some) != 2 || some[0].Seq != seqs[2] || some[1].Seq != seqs[3] {
			t.Errorf("EventsSince(%d, 2) = %s", seqs[1], mustJSON(t, some))
		}
		none, err := tx.EventsSince(seqs[4], 10)
		if err != nil {
			return err
		}
		if none == nil || len(none) != 0 {
			t.Errorf("EventsSince(last) = %#v, want an empty list", none)
		}
		return nil
	})
}

// ListEvents with a tenant reads that tenant's events only, in Seq order,
// from a cursor, at most Limit; an event whose function failed is in no
// tenant's list; a bad filter is an error naming the field.
func testEventsByTenant(t *testing.T, s Store) {
	tenants := []string{"acme", "beta", "", "acme", "beta", "acme", "gamma", "acme"}
	bySeq := map[string][]int64{}
	var all []int64
	for i, tenant := range tenants {
		update(t, s, func(tx Tx) error {
			e := &api.Event{Time: t0.Add(time.Duration(i) * time.Second), Kind: "k", Tenant: tenant, Message: fmt.Sprint(i)}
			if err := tx.AppendEvent(e); err != nil {
				return err
			}
			bySeq[tenant] = append(bySeq[tenant], e.Seq)
			all = append(all, e.Seq)
			return nil
		})
	}
	// A failed function's event is gone from the tenant's list too.
	err := s.Update(context.Background(), func(tx Tx) error {
		if err := tx.AppendEvent(&api.Event{Time: t0, Kind: "k", Tenant: "acme", Message: "lost"}); err != nil {
			return err
		}
		return errors.New("boom")
	})
	if err == nil || err.Error() != "boom" {
		t.Fatalf("failing update: %v", err)
	}
	seqs := func(evs []api.Event) []int64 {
		out := []int64{}
		for _, e := range evs {
			out = append(out, e.Seq)
		}
		return out
	}
	view(t, s, func(tx Tx) error {
		acme, err := tx.ListEvents(EventFilter{Tenant: "acme"})
		if err != nil {
			return err
		}
		same(t, "acme's events", seqs(acme), bySeq["acme"])
		for i, e := range acme {
			if e.Tenant != "acme" || e.Message != fmt.Sprint([]int{0, 3, 5, 7}[i]) || !e.Time.Equal(t0.Add(time.Duration([]int{0, 3, 5, 7}[i])*time.Second)) {
				t.Errorf("acme's event %d = %s", i, mustJSON(t, e))
			}
		}
		page, err := tx.ListEvents(EventFilter{Tenant: "acme", AfterSeq: bySeq["acme"][0], Limit: 2})
		if err != nil {
			return err
		}
		same(t, "acme after its first, 2", seqs(page), bySeq["acme"][1:3])
		rest, err := tx.ListEvents(EventFilter{Tenant: "acme", AfterSeq: bySeq["acme"][2], Limit: 10})
		if err != nil {
			return err
		}
		same(t, "acme's last", seqs(rest), bySeq["acme"][3:])
		none, err := tx.ListEvents(EventFilter{Tenant: "nobody"})
		if err != nil {
			return err
		}
		if none == nil || len(none) != 0 {
			t.Errorf("ListEvents(nobody) = %#v, want an empty list", none)
		}
		every, err := tx.ListEvents(EventFilter{})
		if err != nil {
			return err
		}
		same(t, "every event", seqs(every), all)
		since, err := tx.EventsSince(all[2], 3)
		if err != nil {
			return err
		}
		same(t, "EventsSince = ListEvents without a tenant", seqs(since), all[3:6])
		for _, bad := range []struct {
			f     EventFilter
			field string
		}{{EventFilter{AfterSeq: -1}, "AfterSeq"}, {EventFilter{Limit: -1}, "Limit"}} {
			if _, err := tx.ListEvents(bad.f); err == nil || !strings.Contains(err.Error(), bad.field) {
				t.Errorf("ListEvents(%+v) = %v, want an error naming %s", bad.f, err, bad.field)
			}
		}
		return nil
	})
	// The next event of acme comes after all of them.
	update(t, s, func(tx Tx) error {
		e := &api.Event{Time: t0, Kind: "k", Tenant: "acme", Message: "next"}
		if err := tx.AppendEvent(e); err != nil {
			return err
		}
		if e.Seq <= all[len(all)-1] {
			t.Errorf("seq %d after a rolled-back event, want > %d", e.Seq, all[len(all)-1])
		}
		return nil
	})
	view(t, s, func(tx Tx) error {
		acme, err := tx.ListEvents(EventFilter{Tenant: "acme", AfterSeq: bySeq["acme"][3]})
		if err != nil {
			return err
		}
		if len(acme) != 1 || acme[0].Message != "next" {
			t.Errorf("acme after its fourth = %s, want the one next event", mustJSON(t, acme))
		}
		return nil
	})
	// Pruned events leave the tenant's list too; a rolled-back prune
	// leaves it whole.
	err = s.Update(context.Background(), func(tx Tx) error {
		if _, err := tx.PruneEvents(t0.Add(4*time.Second), 0, 0); err != nil {
			return err
		}
		return errors.New("boom")
	})
	if err == nil || err.Error() != "boom" {
		t.Fatalf("failing prune: %v", err)
	}
	update(t, s, func(tx Tx) error {
		_, err := tx.PruneEvents(t0.Add(4*time.Second), 0, 0) // acme's 0 and 3 go, and "next" (at t0)
		return err
	})
	view(t, s, func(tx Tx) error {
		acme, err := tx.ListEvents(EventFilter{Tenant: "acme"})
		if err != nil {
			return err
		}
		same(t, "acme's events after a prune", seqs(acme), bySeq["acme"][2:])
		beta, err := tx.ListEvents(EventFilter{Tenant: "beta"})
		if err != nil {
			return err
		}
		same(t, "beta's events after a prune", seqs(beta), bySeq["beta"][1:])
		return nil
	})
}

func testUsage(t *testing.T, s Store) {
	update(t, s, func(tx Tx) error {
		if err := tx.PutTenant(api.Tenant{Name: "acme"}); err != nil {
			return err
		}
		if err := tx.AddUsage("acme", api.Consumption{GPUSeconds: 1.5, SMSeconds: 0.5, MemoryMiBSeconds: 100}); err != nil {
			return err
		}
		if err := tx.AddUsage("beta", api.Consumption{GPUSeconds: 3, MemoryMiBSeconds: 0}); err != nil {
			return err
		}
		for _, bad := range [][3]float64{{-1, 0, 0}, {0, -1, 0}, {nan(), 0, 0}, {0, inf(), 0}, {0, 0, -1}, {0, 0, nan()}} {
			if err := tx.AddUsage("acme", api.Consumption{GPUSeconds: bad[0], MemoryMiBSeconds: bad[1], SMSeconds: bad[2]}); err == nil {
				t.Errorf("AddUsage(%v) succeeded", bad)
			}
		}
		return nil
	})
	update(t, s, func(tx Tx) error {
		return tx.AddUsage("acme", api.Consumption{GPUSeconds: 2.5, SMSeconds: 1.25, MemoryMiBSeconds: 50})
	})
	view(t, s, func(tx Tx) error {
		u, err := tx.Usage("acme")
		if err != nil {
			return err
		}
		same(t, "usage", u, api.Usage{Tenant: "acme", GPUSeconds: 4, SMSeconds: 1.75, MemoryMiBSec: 150})
		u, err = tx.Usage("beta")
		same(t, "usage", u, api.Usage{Tenant: "beta", GPUSeconds: 3})
		if err != nil {
			return err
		}
		u, err = tx.Usage("nobody")
		same(t, "usage of nobody", u, api.Usage{Tenant: "nobody"})
		return err
	})
	// Deleting a tenant forgets its usage.
	update(t, s, func(tx Tx) error { return tx.DeleteTenant("acme") })
	view(t, s, func(tx Tx) error {
		u, err := tx.Usage("acme")
		same(t, "usage after delete", u, api.Usage{Tenant: "acme"})
		return err
	})
}

var errBoom = errors.New("boom")

func second[T any](_ T, err error) error { return err }

func nan() float64 { return math.NaN() }
func inf() float64 { return math.Inf(1) }

// writeEverything changes every kind of record.
func writeEverything(tx Tx) error {
	if err := tx.PutTenant(api.Tenant{Name: "new"}); err != nil {
		return err
	}
	if err := tx.PutTenant(api.Tenant{Name: "acme", ComputePercent: 1}); err != nil {
		return err
	}
	if err := tx.DeleteTenant("beta"); err != nil {
		return err
	}
	if err := tx.CreateToken(api.Token{ID: "tok-2", Role: api.RoleAdmin}, []byte("hash-2")); err != nil {
		return err
	}
	if err := tx.DeleteToken("tok-1"); err != nil {
		return err
	}
	c := sampleClaim("c-new", "new", api.Pending, "n7")
	if err := tx.CreateClaim(&c); err != nil {
		return err
	}
	if err := tx.UpdateClaim(sampleClaim("c-0", "acme", api.Failed, "n9")); err != nil {
		return err
	}
	if err := tx.PutNode(sampleNode("n2")); err != nil {
		return err
	}
	if err := tx.DeleteNode("n1"); err != nil {
		return err
	}
	if err := tx.AppendEvent(&api.Event{Kind: "x"}); err != nil {
		return err
	}
	if err := tx.AddUsage("acme", api.Consumption{GPUSeconds: 5, MemoryMiBSeconds: 5}); err != nil {
		return err
	}
	return tx.AddUsage("new", api.Consumption{GPUSeconds: 5, MemoryMiBSeconds: 5})
}

func testRollback(t *testing.T, s Store) {
	populate(t, s)
	before := dump(t, s)
	var lastSeq int64
	view(t, s, func(tx Tx) error {
		cs, err := tx.ListClaims(ClaimFilter{})
		lastSeq = cs[len(cs)-1].Seq
		return err
	})
	err := s.Update(ctx, func(tx Tx) error {
		if err := writeEverything(tx); err != nil {
			t.Errorf("writeEverything: %v", err)
		}
		// Changes are visible inside the transaction.
		if _, err := tx.GetClaim("c-new"); err != nil {
			t.Errorf("own write not visible: %v", err)
		}
		return fmt.Errorf("wrapped: %w", errBoom)
	})
	if !errors.Is(err, errBoom) {
		t.Fatalf("Update returned %v, want fn's error", err)
	}
	if after := dump(t, s); after != before {
		t.Errorf("a failed Update left changes:\nbefore %s\nafter  %s", before, after)
	}
	// The store still works and seqs go on from the last committed one.
	update(t, s, func(tx Tx) error {
		c := sampleClaim("c-next", "acme", api.Pending)
		if err := tx.CreateClaim(&c); err != nil {
			return err
		}
		if c.Seq <= lastSeq {
			t.Errorf("seq %d after %d", c.Seq, lastSeq)
		}
		return nil
	})
	// The same writes, committed, do change the dump.
	update(t, s, writeEverything)
	if dump(t, s) == before {
		t.Error("writeEverything changed nothing")
	}
}

func testRollbackPanic(t *testing.T, s Store) {
	populate(t, s)
	before := dump(t, s)
	func() {
		defer func() {
			v := recover()
			if v == nil {
				t.Fatal("Update swallowed fn's panic")
			}
			if !strings.Contains(fmt.Sprint(v), "kaboom") {
				t.Errorf("re-panicked with %v", v)
			}
		}()
		s.Update(ctx, func(tx Tx) error {
			if err := writeEverything(tx); err != nil {
				t.Errorf("writeEverything: %v", err)
			}
			panic("kaboom")
		})
	}()
	if after := dump(t, s); after != before {
		t.Errorf("a panicking Update left changes:\nbefore %s\nafter  %s", before, after)
	}
	update(t, s, func(tx Tx) error { return tx.PutTenant(api.Tenant{Name: "after"}) })
}

// An error a fn handles does not spoil its transaction.
func testErrorInsideSuccessfulUpdate(t *testing.T, s Store) {
	populate(t, s)
	update(t, s, func(tx Tx) error {
		dup := sampleClaim("c-0", "acme", api.Pending)
		wantErr(t, tx.CreateClaim(&dup), ErrExists, "")
		wantErr(t, tx.DeleteNode("nope"), ErrNotFound, "")
		wantErr(t, tx.CreateToken(api.Token{ID: "tok-1"}, []byte("x")), ErrExists, "")
		c := sampleClaim("c-ok", "acme", api.Pending)
		return tx.CreateClaim(&c)
	})
	view(t, s, func(tx Tx) error {
		_, err := tx.GetClaim("c-ok")
		return err
	})
}

func testReadOnlyAndClosedTx(t *testing.T, s Store) {
	populate(t, s)
	var leaked Tx
	view(t, s, func(tx Tx) error {
		leaked = tx
		c := sampleClaim("x", "acme", api.Pending)
		for name, err := range map[string]error{
			"PutTenant":    tx.PutTenant(api.Tenant{Name: "x"}),
			"DeleteTenant": tx.DeleteTenant("acme"),
			"CreateToken":  tx.CreateToken(api.Token{ID: "x"}, []byte("x")),
			"DeleteToken":  tx.DeleteToken("tok-1"),
			"CreateClaim":  tx.CreateClaim(&c),
			"UpdateClaim":  tx.UpdateClaim(sampleClaim("c-0", "acme", api.Failed)),
			"PutNode":      tx.PutNode(sampleNode("x")),
			"DeleteNode":   tx.DeleteNode("n1"),
			"AppendEvent":  tx.AppendEvent(&api.Event{Kind: "x"}),
			"PruneEvents":  second(tx.PruneEvents(time.Time{}, 1, 0)),
			"PruneClaims":  second(tx.PruneClaims(time.Time{}, 1, 0)),
			"AddUsage":     tx.AddUsage("acme", api.Consumption{GPUSeconds: 1, MemoryMiBSeconds: 1}),
		} {
			if !errors.Is(err, ErrReadOnly) {
				t.Errorf("%s in View: %v, want ErrReadOnly", name, err)
			}
		}
		return nil
	})
	if _, err := leaked.GetClaim("c-0"); !errors.Is(err, ErrClosed) {
		t.Errorf("Tx used after View: %v, want ErrClosed", err)
	}
	update(t, s, func(tx Tx) error { leaked = tx; return nil })
	if err := leaked.PutTenant(api.Tenant{Name: "late"}); !errors.Is(err, ErrClosed) {
		t.Errorf("Tx used after Update: %v, want ErrClosed", err)
	}
}

// A View sees one snapshot: an Update that commits (SQLite) or waits
// (memory) meanwhile is not seen.
func testViewIsolation(t *testing.T, s Store) {
	populate(t, s)
	done := make(chan error, 1)
	view(t, s, func(tx Tx) error {
		first, err := tx.ListClaims(ClaimFilter{})
		if err != nil {
			return err
		}
		go func() {
			done <- s.Update(ctx, func(tx Tx) error {
				c := sampleClaim("c-during", "acme", api.Pending)
				if err := tx.CreateClaim(&c); err != nil {
					return err
				}
				return tx.UpdateClaim(sampleClaim("c-0", "acme", api.Failed))
			})
		}()
		select {
		case err := <-done: // SQLite: the writer does not wait for readers
			done <- err
		case <-time.After(300 * time.Millisecond): // memory: the writer waits
		}
		second, err := tx.ListClaims(ClaimFilter{})
		if err != nil {
			return err
		}
		same(t, "second read in one View", second, first)
		return nil
	})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	view(t, s, func(tx Tx) error {
		c, err := tx.GetClaim("c-0")
		if c.State != api.Failed {
			t.Errorf("a new View does not see the committed update: %v", c.State)
		}
		return err
	})
}

func testDeepCopy(t *testing.T, s Store) {
	c := sampleClaim("c-1", "acme", api.Allocated, "n1")
	n := sampleNode("n1")
	update(t, s, func(tx Tx) error {
		if err := tx.CreateClaim(&c); err != nil {
			return err
		}
		if err := tx.PutNode(n); err != nil {
			return err
		}
		// Mutating the caller's values after the write, inside the
		// transaction, changes nothing stored.
		c.Allocation.Env["CUDA_VISIBLE_DEVICES"] = "mutated"
		c.Allocation.Devices[0].MPS.ActiveThreadPercent = 99
		c.Spec.Requests[0].Name = "mutated"
		c.Spec.Constraints[0].Requests[0] = "mutated"
		n.Inventory.Labels["zone"] = "mutated"
		n.Inventory.GPUs[0].Instances[0].Profile = "mutated"
		got, err := tx.GetClaim("c-1")
		if err != nil {
			return err
		}
		got.Allocation.Why[0] = "mutated"
		got.Allocation.Changes[0].Sharing.MaxClients = 1
		return nil
	})
	wantClaim := sampleClaim("c-1", "acme", api.Allocated, "n1")
	wantClaim.Seq = c.Seq
	wantNode := sampleNode("n1")
	check := func() {
		t.Helper()
		view(t, s, func(tx Tx) error {
			got, err := tx.GetClaim("c-1")
			if err != nil {
				return err
			}
			same(t, "stored claim", got, wantClaim)
			gotNode, err := tx.GetNode("n1")
			if err != nil {
				return err
			}
			same(t, "stored node", gotNode, wantNode)
			return nil
		})
	}
	check()
	// Mutating what reads return changes nothing stored either.
	view(t, s, func(tx Tx) error {
		list, err := tx.ListClaims(ClaimFilter{})
		if err != nil {
			return err
		}
		list[0].Allocation.Env["X"] = "y"
		list[0].Allocation.Devices[0].Node = "mutated"
		nodes, err := tx.ListNodes()
		if err != nil {
			return err
		}
		nodes[0].Inventory.GPUs[0].UUID = "mutated"
		nodes[0].Inventory.Labels["new"] = "label"
		return nil
	})
	check()
}

func testContext(t *testing.T, s Store) {
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	ran := false
	err := s.Update(cctx, func(tx Tx) error { ran = true; return tx.PutTenant(api.Tenant{Name: "x"}) })
	if !errors.Is(err, context.Canceled) || ran {
		t.Errorf("Update with a done context: err %v, fn ran %v", err, ran)
	}
	if err := s.View(cctx, func(Tx) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("View with a done context: %v", err)
	}
	view(t, s, func(tx Tx) error {
		_, err := tx.GetTenant("x")
		wantErr(t, err, ErrNotFound, "")
		return nil
	})
}

func testClose(t *testing.T, s Store) {
	populate(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, func(Tx) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Errorf("Update after Close: %v", err)
	}
	if err := s.View(ctx, func(Tx) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Errorf("View after Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// 64 goroutines × 50 CreateClaim: all present exactly once, seqs unique,
// and each goroutine's claims in the order it created them.
func testConcurrentCreate(t *testing.T, s Store) {
	const goroutines, each = 64, 50
	var wg sync.WaitGroup
	seqs := make([][]int64, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				c := sampleClaim(fmt.Sprintf("g%d-%d", g, i), fmt.Sprintf("t%d", g%4), api.Pending)
				if err := s.Update(ctx, func(tx Tx) error { return tx.CreateClaim(&c) }); err != nil {
					t.Errorf("create %s: %v", c.ID, err)
					return
				}
				seqs[g] = append(seqs[g], c.Seq)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for g, ss := range seqs {
		if !slices.IsSorted(ss) {
			t.Errorf("goroutine %d: seqs not increasing: %v", g, ss)
		}
	}
	view(t, s, func(tx Tx) error {
		list, err := tx.ListClaims(ClaimFilter{})
		if err != nil {
			return err
		}
		if len(list) != goroutines*each {
			t.Errorf("%d claims, want %d", len(list), goroutines*each)
		}
		ids := map[string]int{}
		for i, c := range list {
			ids[c.ID]++
			if i > 0 && c.Seq <= list[i-1].Seq {
				t.Fatalf("list not in strictly increasing seq order at %d: %d after %d", i, c.Seq, list[i-1].Seq)
			}
		}
		for g := range goroutines {
			for i := range each {
				if id := fmt.Sprintf("g%d-%d", g, i); ids[id] != 1 {
					t.Errorf("claim %s present %d times", id, ids[id])
				}
			}
		}
		for g, ss := range seqs {
			for i, seq := range ss {
				c, err := tx.GetClaim(fmt.Sprintf("g%d-%d", g, i))
				if err != nil {
					return err
				}
				if c.Seq != seq {
					t.Fatalf("claim g%d-%d: stored seq %d, CreateClaim said %d", g, i, c.Seq, seq)
				}
			}
		}
		acme, err := tx.ListClaims(ClaimFilter{Tenant: "t1"})
		if len(acme) != goroutines*each/4 {
			t.Errorf("tenant t1 has %d claims, want %d", len(acme), goroutines*each/4)
		}
		return err
	})
}

// Many concurrent Updates (group-committed together by SQLite) where every
// third fails, by its own error or by a duplicate: the failing ones leave
// nothing, the others are all kept.
func testConcurrentFailures(t *testing.T, s Store) {
	update(t, s, func(tx Tx) error {
		c := sampleClaim("taken", "acme", api.Pending)
		return tx.CreateClaim(&c)
	})
	const goroutines, each = 48, 30
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				id := fmt.Sprintf("g%d-%d", g, i)
				err := s.Update(ctx, func(tx Tx) error {
					c := sampleClaim(id, "acme", api.Pending, "n1")
					if err := tx.CreateClaim(&c); err != nil {
						return err
					}
					if err := tx.AppendEvent(&api.Event{Kind: "claim.created", Claim: id}); err != nil {
						return err
					}
					if err := tx.AddUsage("acme", api.Consumption{GPUSeconds: 1, MemoryMiBSeconds: 2}); err != nil {
						return err
					}
					switch i % 6 {
					case 2:
						return fmt.Errorf("claim %s: %w", id, errBoom)
					case 5:
						dup := sampleClaim("taken", "acme", api.Pending)
						return tx.CreateClaim(&dup)
					}
					return nil
				})
				switch i % 6 {
				case 2:
					if !errors.Is(err, errBoom) {
						t.Errorf("%s: got %v, want errBoom", id, err)
					}
				case 5:
					if !errors.Is(err, ErrExists) {
						t.Errorf("%s: got %v, want ErrExists", id, err)
					}
				default:
					if err != nil {
						t.Errorf("%s: %v", id, err)
					}
				}
			}
		}()
	}
	wg.Wait()
	ok := 0
	view(t, s, func(tx Tx) error {
		for g := range goroutines {
			for i := range each {
				id := fmt.Sprintf("g%d-%d", g, i)
				_, err := tx.GetClaim(id)
				if i%3 == 2 {
					if !errors.Is(err, ErrNotFound) {
						t.Errorf("failed Update's claim %s: %v", id, err)
					}
				} else if err != nil {
					t.Errorf("committed claim %s: %v", id, err)
				} else {
					ok++
				}
			}
		}
		evs, err := tx.EventsSince(0, 0)
		if err != nil {
			return err
		}
		if len(evs) != ok {
			t.Errorf("%d events, want %d", len(evs), ok)
		}
		u, err := tx.Usage("acme")
		if u.GPUSeconds != float64(ok) || u.MemoryMiBSec != float64(2*ok) {
			t.Errorf("usage %+v, want %d GPU-seconds", u, ok)
		}
		n1, err := tx.ListClaims(ClaimFilter{Node: "n1"})
		if len(n1) != ok {
			t.Errorf("%d claims on n1, want %d", len(n1), ok)
		}
		return err
	})
	if want := goroutines * each * 2 / 3; ok != want {
		t.Errorf("%d committed, want %d", ok, want)
	}
	if sq, isSQL := s.(*SQLite); isSQL {
		st := sq.Stats()
		t.Logf("group commit: %+v (%.1f updates per transaction)", st, float64(st.Updates)/float64(st.Batches))
	}
}
