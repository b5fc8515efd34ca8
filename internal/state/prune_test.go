package state

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
)

// The retention part of the contract (TestContract runs these on every
// backend).

func prune(t testing.TB, s Store, fn func(Tx) (int, error)) int {
	t.Helper()
	var n int
	update(t, s, func(tx Tx) (err error) {
		n, err = fn(tx)
		return err
	})
	return n
}

func eventSeqs(t testing.TB, s Store) []int64 {
	t.Helper()
	var out []int64
	view(t, s, func(tx Tx) error {
		evs, err := tx.EventsSince(0, 0)
		for _, e := range evs {
			out = append(out, e.Seq)
		}
		return err
	})
	return out
}

func testPruneEvents(t *testing.T, s Store) {
	var seqs []int64
	update(t, s, func(tx Tx) error {
		for i := range 10 {
			e := &api.Event{Time: t0.Add(time.Duration(i) * time.Second), Kind: "k", Message: fmt.Sprint(i)}
			if err := tx.AppendEvent(e); err != nil {
				return err
			}
			seqs = append(seqs, e.Seq)
		}
		return nil
	})
	if n := prune(t, s, func(tx Tx) (int, error) { return tx.PruneEvents(time.Time{}, 0, 0) }); n != 0 {
		t.Fatalf("PruneEvents with no bound deleted %d", n)
	}
	if n := prune(t, s, func(tx Tx) (int, error) { return tx.PruneEvents(t0.Add(-time.Hour), 10, 0) }); n != 0 {
		t.Fatalf("PruneEvents with nothing past its bounds deleted %d", n)
	}
	// Age: strictly before, at most limit per call, oldest first.
	before := t0.Add(3 * time.Second)
	if n := prune(t, s, func(tx Tx) (int, error) { return tx.PruneEvents(before, 0, 2) }); n != 2 {
		t.Fatalf("PruneEvents(age, limit 2) deleted %d, want 2", n)
	}
	same(t, "events after a limited age prune", eventSeqs(t, s), seqs[2:])
	if n := prune(t, s, func(tx Tx) (int, error) { return tx.PruneEvents(before, 0, 2) }); n != 1 {
		t.Fatalf("the rest of the age prune deleted %d, want 1 (the event at exactly the bound stays)", n)
	}
	same(t, "events after the age prune", eventSeqs(t, s), seqs[3:])
	// Count: the newest keep stay.
	if n := prune(t, s, func(tx Tx) (int, error) { return tx.PruneEvents(time.Time{}, 5, 0) }); n != 2 {
		t.Fatalf("PruneEvents(keep 5) of 7 deleted %d", n)
	}
	same(t, "events after the count prune", eventSeqs(t, s), seqs[5:])
	// Both: whichever deletes more wins.
	if n := prune(t, s, func(tx Tx) (int, error) { return tx.PruneEvents(t0.Add(7*time.Second), 4, 0) }); n != 2 {
		t.Fatalf("PruneEvents(age past 2, keep 4 of 5) deleted %d, want 2", n)
	}
	same(t, "events after both bounds", eventSeqs(t, s), seqs[7:])
	// Oldest means by time: an event appended late with an early time
	// goes first; and seqs are never reused.
	var late int64
	update(t, s, func(tx Tx) error {
		e := &api.Event{Time: t0.Add(-time.Hour), Kind: "late"}
		err := tx.AppendEvent(e)
		late = e.Seq
		return err
	})
	if late <= seqs[9] {
		t.Fatalf("seq %d after pruning, last was %d: reused", late, seqs[9])
	}
	if n := prune(t, s, func(tx Tx) (int, error) { return tx.PruneEvents(time.Time{}, 3, 0) }); n != 1 {
		t.Fatalf("PruneEvents(keep 3 of 4) deleted %d", n)
	}
	same(t, "events after the late one went", eventSeqs(t, s), seqs[7:])
	// A prune in a failed Update keeps everything.
	err := s.Update(ctx, func(tx Tx) error {
		if n, err := tx.PruneEvents(time.Time{}, 1, 0); err != nil || n != 2 {
			t.Errorf("PruneEvents in a failing Update: %d, %v", n, err)
		}
		return errBoom
	})
	if !errors.Is(err, errBoom) {
		t.Fatal(err)
	}
	same(t, "events after a rolled-back prune", eventSeqs(t, s), seqs[7:])
	update(t, s, func(tx Tx) error {
		e := &api.Event{Time: t0.Add(time.Minute), Kind: "after"}
		if err := tx.AppendEvent(e); err != nil {
			return err
		}
		if e.Seq <= late {
			t.Errorf("seq %d after a rolled-back prune, last was %d", e.Seq, late)
		}
		return nil
	})
	if n := prune(t, s, func(tx Tx) (int, error) { return tx.PruneEvents(t0.Add(time.Hour), 0, 0) }); n != 4 {
		t.Fatalf("PruneEvents(everything) deleted %d, want 4", n)
	}
	if got := eventSeqs(t, s); len(got) != 0 {
		t.Fatalf("events left: %v", got)
	}
}

func claimIDsOf(t testing.TB, s Store, f ClaimFilter) []string {
	t.Helper()
	var out []string
	view(t, s, func(tx Tx) error {
		cs, err := tx.ListClaims(f)
		out = claimIDs(cs)
		return err
	})
	return out
}

func testPruneClaims(t *testing.T, s Store) {
	// Live claims with old times, and final ones that ended at t0+i s
	// (f-0 … f-5), created in an order unlike their ends.
	ends := []int{3, 0, 5, 1, 4, 2}
	update(t, s, func(tx Tx) error {
		for _, st := range []api.ClaimState{api.Pending, api.Allocated, api.Running} {
			c := sampleClaim("live-"+string(st), "acme", st, "n1")
			c.Created, c.Updated = t0.Add(-48*time.Hour), t0.Add(-48*time.Hour)
			if err := tx.CreateClaim(&c); err != nil {
				return err
			}
		}
		for _, i := range ends {
			st := api.Released
			if i%2 == 1 {
				st = api.Failed
			}
			c := sampleClaim(fmt.Sprintf("f-%d", i), "acme", api.Running, "n1")
			c.Created, c.Updated = t0.Add(-time.Hour), t0.Add(-time.Hour)
			if err := tx.CreateClaim(&c); err != nil {
				return err
			}
			// Ended later, through UpdateClaim as the server does.
			c.State, c.Updated = st, t0.Add(time.Duration(i)*time.Second)
			if err := tx.UpdateClaim(c); err != nil {
				return err
			}
		}
		return nil
	})
	live := []string{"live-pending", "live-allocated", "live-running"}
	if n := prune(t, s, func(tx Tx) (int, error) { return tx.PruneClaims(time.Time{}, 0, 0) }); n != 0 {
		t.Fatalf("PruneClaims with no bound deleted %d", n)
	}
	// Age, limited: the first to end go first, whatever their seq.
	if n := prune(t, s, func(tx Tx) (int, error) { return tx.PruneClaims(t0.Add(2*time.Second), 0, 1) }); n != 1 {
		t.Fatalf("PruneClaims(age, limit 1) deleted %d", n)
	}
	same(t, "claims after one", claimIDsOf(t, s, ClaimFilter{}), append(live, "f-3", "f-5", "f-1", "f-4", "f-2"))
	if n := prune(t, s, func(tx Tx) (int, error) { return tx.PruneClaims(t0.Add(2*time.Second), 0, 0) }); n != 1 {
		t.Fatalf("PruneClaims(age) deleted %d, want 1", n)
	}
	same(t, "claims after the age prune", claimIDsOf(t, s, ClaimFilter{}), append(live, "f-3", "f-5", "f-4", "f-2"))
	// Count: the last keep to end stay; live claims do not count.
	if n := prune(t, s, func(tx Tx) (int, error) { return tx.PruneClaims(time.Time{}, 2, 0) }); n != 2 {
		t.Fatalf("PruneClaims(keep 2 of 4) deleted %d", n)
	}
	same(t, "claims after the count prune", claimIDsOf(t, s, ClaimFilter{}), append(live, "f-5", "f-4"))
	// Filters and lookups forget a pruned claim (its nodes too).
	same(t, "claims on n1", claimIDsOf(t, s, ClaimFilter{Node: "n1"}), append(live, "f-5", "f-4"))
	same(t, "final claims", claimIDsOf(t, s, ClaimFilter{States: []api.ClaimState{api.Released, api.Failed}}), []string{"f-5", "f-4"})
	view(t, s, func(tx Tx) error {
		_, err := tx.GetClaim("f-3")
		wantErr(t, err, ErrNotFound, `claim "f-3": not found`)
		return nil
	})
	// A prune in a failed Update keeps everything.
	before := dump(t, s)
	err := s.Update(ctx, func(tx Tx) error {
		if n, err := tx.PruneClaims(t0.Add(time.Hour), 0, 0); err != nil || n != 2 {
			t.Errorf("PruneClaims in a failing Update: %d, %v", n, err)
		}
		return errBoom
	})
	if !errors.Is(err, errBoom) {
		t.Fatal(err)
	}
	if after := dump(t, s); after != before {
		t.Fatalf("a rolled-back prune changed the store:\nbefore %s\nafter  %s", before, after)
	}
	// Writes rolled back leave the order of ends as it was: a live claim
	// made final, a final one re-dated, and a new final one, all undone.
	err = s.Update(ctx, func(tx Tx) error {
		for id, st := range map[string]api.ClaimState{"live-running": api.Released, "f-5": api.Failed} {
			c, err := tx.GetClaim(id)
			if err != nil {
				return err
			}
			c.State, c.Updated = st, t0.Add(-time.Hour)
			if err := tx.UpdateClaim(c); err != nil {
				return err
			}
		}
		c := sampleClaim("f-new", "acme", api.Released)
		c.Updated = t0.Add(-time.Hour)
		if err := tx.CreateClaim(&c); err != nil {
			return err
		}
		if n, err := tx.PruneClaims(t0, 0, 0); err != nil || n != 3 {
			t.Errorf("PruneClaims of the three just made final: %d, %v", n, err)
		}
		return errBoom
	})
	if !errors.Is(err, errBoom) {
		t.Fatal(err)
	}
	if after := dump(t, s); after != before {
		t.Fatalf("rolled-back writes and prune changed the store:\nbefore %s\nafter  %s", before, after)
	}
	// A final claim re-dated (committed) is pruned by its new end.
	update(t, s, func(tx Tx) error {
		c, err := tx.GetClaim("f-5")
		if err != nil {
			return err
		}
		c.Updated = t0.Add(-time.Minute)
		return tx.UpdateClaim(c)
	})
	if n := prune(t, s, func(tx Tx) (int, error) { return tx.PruneClaims(t0, 0, 0) }); n != 1 {
		t.Fatalf("PruneClaims by the re-dated end deleted %d, want 1", n)
	}
	same(t, "claims after the re-dated one went", claimIDsOf(t, s, ClaimFilter{}), append(live, "f-4"))
	// Everything final goes; nothing live ever does, however old.
	if n := prune(t, s, func(tx Tx) (int, error) { return tx.PruneClaims(t0.Add(time.Hour), 1, 0) }); n != 1 {
		t.Fatalf("PruneClaims(everything final) deleted %d, want 1", n)
	}
	same(t, "claims left", claimIDsOf(t, s, ClaimFilter{}), live)
	same(t, "claims left on n1", claimIDsOf(t, s, ClaimFilter{Node: "n1"}), live)
	// Seqs go on past the pruned ones; a pruned ID may be used again.
	update(t, s, func(tx Tx) error {
		c := sampleClaim("f-5", "acme", api.Pending)
		if err := tx.CreateClaim(&c); err != nil {
			return err
		}
		all, err := tx.ListClaims(ClaimFilter{})
		if err != nil {
			return err
		}
		if n := len(all); n != 4 || all[n-1].ID != "f-5" || all[n-1].Seq <= all[n-2].Seq+6 {
			t.Errorf("claims after a create that follows pruning: %v", mustJSON(t, all))
		}
		return nil
	})
}

// A version-3 database (before retention) opens with its events' times and
// its final claims' ends read from their JSON, so that age pruning works on
// rows written before the columns existed; live claims get no end.
func TestSQLiteMigratesRetentionFromV3(t *testing.T) {
	path, raw := dbAtVersion(t, 3)
	for i := range 4 { // events at t0, t0+1h, t0+2h, t0+3h
		data, err := encodeEvent(api.Event{Time: t0.Add(time.Duration(i) * time.Hour), Kind: "k", Message: fmt.Sprint(i)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := raw.Exec(`INSERT INTO events (kind, data) VALUES ('k', ?)`, data); err != nil {
			t.Fatal(err)
		}
	}
	for i, st := range []api.ClaimState{api.Released, api.Running, api.Failed, api.Pending} {
		c := sampleClaim(fmt.Sprintf("c-%d", i), "acme", st)
		c.Updated = t0.Add(time.Duration(i) * time.Hour)
		data, err := encodeClaim(c)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := raw.Exec(`INSERT INTO claims (id, tenant, state, priority, data) VALUES (?, 'acme', ?, 3, ?)`, c.ID, string(st), data); err != nil {
			t.Fatal(err)
		}
	}
	raw.Close()

	s := openSQLite(t, path)
	defer s.Close()
	if n := prune(t, s, func(tx Tx) (int, error) { return tx.PruneEvents(t0.Add(90*time.Minute), 0, 0) }); n != 2 {
		t.Fatalf("age prune of migrated events deleted %d, want 2", n)
	}
	view(t, s, func(tx Tx) error {
		evs, err := tx.EventsSince(0, 0)
		if len(evs) != 2 || evs[0].Message != "2" {
			t.Errorf("events left after the migration and an age prune: %s", mustJSON(t, evs))
		}
		return err
	})
	if n := prune(t, s, func(tx Tx) (int, error) { return tx.PruneClaims(t0.Add(24*time.Hour), 0, 0) }); n != 2 {
		t.Fatalf("prune of migrated claims deleted %d, want the 2 final ones", n)
	}
	same(t, "claims left", claimIDsOf(t, s, ClaimFilter{}), []string{"c-1", "c-3"})
	if err := s.Check(ctx); err != nil {
		t.Error(err)
	}
}
