package state

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// Tests of Tx.OnCommit and Tx.OnRollback. The contract ones (testHooks*)
// run against every backend from TestContract; the SQLite ones make a
// group-committed batch fail for real.

// hookLog records hook runs; hooks may run on another goroutine (the
// SQLite writer).
type hookLog struct {
	mu  sync.Mutex
	log []string
}

func (l *hookLog) add(s string) func() {
	return func() {
		l.mu.Lock()
		l.log = append(l.log, s)
		l.mu.Unlock()
	}
}

func (l *hookLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string{}, l.log...)
}

// shadow is state kept outside the store in step with it, the way the
// server's scheduler keeps its memory: a function changes it and registers
// an OnRollback that undoes the change. Its count must equal the store's
// counter (the GPU-seconds of usage tenant "ctr") whenever a function
// starts: a rollback hook that ran late would show there.
type shadow struct {
	mu sync.Mutex
	n  float64
}

// check compares the shadow count with the store's counter as tx sees it.
func (sh *shadow) check(t testing.TB, tx Tx, who string) {
	t.Helper()
	u, err := tx.Usage("ctr")
	if err != nil {
		t.Errorf("%s: %v", who, err)
		return
	}
	sh.mu.Lock()
	n := sh.n
	sh.mu.Unlock()
	if u.GPUSeconds != n {
		t.Errorf("%s starts with the store's counter at %v but the state kept beside it at %v: an earlier function's rollback hooks have not run", who, u.GPUSeconds, n)
	}
}

// bump adds one to the store's counter and to the shadow, undone by a
// rollback hook.
func (sh *shadow) bump(tx Tx) error {
	if err := tx.AddUsage("ctr", api.Consumption{GPUSeconds: 1}); err != nil {
		return err
	}
	sh.mu.Lock()
	sh.n++
	sh.mu.Unlock()
	tx.OnRollback(func() {
		sh.mu.Lock()
		sh.n--
		sh.mu.Unlock()
	})
	return nil
}

func (sh *shadow) count() float64 {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.n
}

// Commit hooks run once each, in the order registered, after fn and before
// Update returns; rollback hooks of a committed function never run.
func testHooksCommit(t *testing.T, s Store) {
	populate(t, s)
	var l hookLog
	err := s.Update(ctx, func(tx Tx) error {
		tx.OnCommit(l.add("commit 0"))
		tx.OnRollback(l.add("rollback 0"))
		if err := tx.PutTenant(api.Tenant{Name: "new"}); err != nil {
			return err
		}
		tx.OnCommit(l.add("commit 1"))
		// An error fn handles does not make it a rollback.
		dup := sampleClaim("c-0", "acme", api.Pending)
		wantErr(t, tx.CreateClaim(&dup), ErrExists, "")
		tx.OnCommit(l.add("commit 2"))
		tx.OnRollback(l.add("rollback 1"))
		if got := l.get(); len(got) != 0 {
			t.Errorf("hooks ran inside fn: %v", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"commit 0", "commit 1", "commit 2"}
	same(t, "hooks when Update returned", l.get(), want)
	view(t, s, func(tx Tx) error {
		_, err := tx.GetTenant("new")
		return err
	})
	// The next function sees them; nothing runs twice.
	update(t, s, func(tx Tx) error {
		same(t, "hooks seen by the next Update's fn", l.get(), want)
		tx.OnCommit(l.add("next"))
		return nil
	})
	same(t, "hooks after the next Update", l.get(), append(want, "next"))
	// A function that writes nothing commits too.
	update(t, s, func(tx Tx) error {
		tx.OnCommit(l.add("empty"))
		return nil
	})
	same(t, "hooks after an empty Update", l.get(), append(want, "next", "empty"))
}

// A failing function's rollback hooks run newest first before Update
// returns, its commit hooks never.
func testHooksRollback(t *testing.T, s Store) {
	populate(t, s)
	before := dump(t, s)
	var l hookLog
	err := s.Update(ctx, func(tx Tx) error {
		tx.OnCommit(l.add("commit"))
		tx.OnRollback(l.add("rollback 0"))
		if err := writeEverything(tx); err != nil {
			t.Errorf("writeEverything: %v", err)
		}
		tx.OnRollback(l.add("rollback 1"))
		tx.OnRollback(l.add("rollback 2"))
		if got := l.get(); len(got) != 0 {
			t.Errorf("hooks ran inside fn: %v", got)
		}
		return fmt.Errorf("wrapped: %w", errBoom)
	})
	if !errors.Is(err, errBoom) {
		t.Fatalf("Update returned %v, want fn's error", err)
	}
	want := []string{"rollback 2", "rollback 1", "rollback 0"}
	same(t, "hooks when Update returned", l.get(), want)
	if after := dump(t, s); after != before {
		t.Errorf("a failed Update left changes:\nbefore %s\nafter  %s", before, after)
	}
	update(t, s, func(tx Tx) error {
		same(t, "hooks seen by the next Update's fn", l.get(), want)
		return nil
	})
	same(t, "hooks after the next Update", l.get(), want)
}

// A panicking function's rollback hooks run newest first before the panic
// reaches Update's caller, its commit hooks never.
func testHooksPanic(t *testing.T, s Store) {
	populate(t, s)
	before := dump(t, s)
	var l hookLog
	func() {
		defer func() {
			if v := recover(); v == nil || !strings.Contains(fmt.Sprint(v), "kaboom") {
				t.Errorf("recovered %v, want fn's panic", v)
			}
			same(t, "hooks when the panic reached the caller", l.get(), []string{"rollback 1", "rollback 0"})
		}()
		s.Update(ctx, func(tx Tx) error {
			tx.OnRollback(l.add("rollback 0"))
			tx.OnCommit(l.add("commit"))
			if err := writeEverything(tx); err != nil {
				t.Errorf("writeEverything: %v", err)
			}
			tx.OnRollback(l.add("rollback 1"))
			panic("kaboom")
		})
	}()
	if after := dump(t, s); after != before {
		t.Errorf("a panicking Update left changes:\nbefore %s\nafter  %s", before, after)
	}
	update(t, s, func(tx Tx) error {
		same(t, "hooks seen by the next Update's fn", l.get(), []string{"rollback 1", "rollback 0"})
		return nil
	})
}

// Hooks registered in a View never run, whatever the View returns and
// whatever later transactions do.
func testHooksView(t *testing.T, s Store) {
	populate(t, s)
	var l hookLog
	view(t, s, func(tx Tx) error {
		tx.OnCommit(l.add("view commit"))
		tx.OnRollback(l.add("view rollback"))
		return nil
	})
	err := s.View(ctx, func(tx Tx) error {
		tx.OnCommit(l.add("failed view commit"))
		tx.OnRollback(l.add("failed view rollback"))
		return errBoom
	})
	if !errors.Is(err, errBoom) {
		t.Errorf("View returned %v, want fn's error", err)
	}
	func() {
		defer func() { recover() }()
		s.View(ctx, func(tx Tx) error {
			tx.OnCommit(l.add("panicked view commit"))
			tx.OnRollback(l.add("panicked view rollback"))
			panic("kaboom")
		})
	}()
	update(t, s, func(tx Tx) error { return nil })
	s.Update(ctx, func(tx Tx) error { return errBoom })
	if got := l.get(); len(got) != 0 {
		t.Errorf("hooks registered in a View ran: %v", got)
	}
}

// Many concurrent Updates (group-committed by SQLite) of which a third
// fail by their own error, a duplicate or a panic. Every successful
// function's commit hook runs exactly once, every failed one's rollback
// hook exactly once, never both, each before its Update returns; commit
// hooks run in the order the functions ran. When a function starts, every
// rollback hook of the functions before it has run (the shadow count
// agrees with the store), and so has every commit hook of the functions
// that ran in an earlier transaction. (With group commit, the functions
// of one batch run before its COMMIT, so a function may start before the
// commit hooks of earlier functions of its own batch: see the package
// documentation.)
func testHooksConcurrent(t *testing.T, s Store) {
	update(t, s, func(tx Tx) error {
		c := sampleClaim("taken", "acme", api.Pending)
		return tx.CreateClaim(&c)
	})
	sq, isSQL := s.(*SQLite)
	const goroutines, each = 48, 30
	var sh shadow
	var (
		mu             sync.Mutex
		ranOrder       []string // ids in the order their functions ran
		txOf           = map[string]int64{}
		commits        = map[string]int{}
		rollbacks      = map[string]int{}
		commitOrder    []string
		pendingCommit  = map[string]bool{} // ran, succeeded, commit hook not yet run
		pendingRoll    = map[string]bool{} // ran, failed, rollback hook not yet run
		sameTxPending  int                 // functions that started before an earlier one's commit hook
		functionsSoFar int64
	)
	// txID identifies the transaction a function runs in: for SQLite the
	// number of batches committed before it (the writer counts a batch
	// after running its commit hooks), for memory every Update is its own.
	txID := func() int64 {
		if isSQL {
			return sq.Stats().Batches
		}
		functionsSoFar++
		return functionsSoFar
	}
	kind := func(i int) string {
		switch i % 6 {
		case 2:
			return "error"
		case 4:
			return "panic"
		case 5:
			return "duplicate"
		}
		return "ok"
	}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				id := fmt.Sprintf("g%d-%d", g, i)
				k := kind(i)
				fn := func(tx Tx) error {
					mu.Lock()
					me := txID()
					for p := range pendingRoll {
						t.Errorf("%s starts before the rollback hook of %s ran", id, p)
					}
					for p := range pendingCommit {
						if txOf[p] < me {
							t.Errorf("%s (transaction %d) starts before the commit hook of %s (transaction %d) ran", id, me, p, txOf[p])
						} else {
							sameTxPending++
						}
					}
					ranOrder = append(ranOrder, id)
					txOf[id] = me
					if k == "ok" {
						pendingCommit[id] = true
					} else {
						pendingRoll[id] = true
					}
					mu.Unlock()
					sh.check(t, tx, id)

					tx.OnCommit(func() {
						mu.Lock()
						commits[id]++
						commitOrder = append(commitOrder, id)
						delete(pendingCommit, id)
						mu.Unlock()
					})
					tx.OnRollback(func() {
						mu.Lock()
						rollbacks[id]++
						delete(pendingRoll, id)
						mu.Unlock()
					})
					c := sampleClaim(id, "acme", api.Pending, "n1")
					if err := tx.CreateClaim(&c); err != nil {
						return err
					}
					if err := sh.bump(tx); err != nil {
						return err
					}
					switch k {
					case "error":
						return fmt.Errorf("claim %s: %w", id, errBoom)
					case "panic":
						panic("kaboom " + id)
					case "duplicate":
						dup := sampleClaim("taken", "acme", api.Pending)
						return tx.CreateClaim(&dup)
					}
					return nil
				}
				var err error
				var panicked any
				func() {
					defer func() { panicked = recover() }()
					err = s.Update(ctx, fn)
				}()
				switch k {
				case "ok":
					if err != nil || panicked != nil {
						t.Errorf("%s: %v %v", id, err, panicked)
					}
				case "error":
					if !errors.Is(err, errBoom) {
						t.Errorf("%s: got %v, want errBoom", id, err)
					}
				case "panic":
					if !strings.Contains(fmt.Sprint(panicked), "kaboom "+id) {
						t.Errorf("%s: recovered %v, want its panic", id, panicked)
					}
				case "duplicate":
					if !errors.Is(err, ErrExists) {
						t.Errorf("%s: got %v, want ErrExists", id, err)
					}
				}
				// Its hooks ran before Update returned.
				mu.Lock()
				c, r := commits[id], rollbacks[id]
				mu.Unlock()
				if k == "ok" && (c != 1 || r != 0) {
					t.Errorf("%s committed: when Update returned its commit hook had run %d times, its rollback hook %d", id, c, r)
				}
				if k != "ok" && (c != 0 || r != 1) {
					t.Errorf("%s failed (%s): when Update returned its commit hook had run %d times, its rollback hook %d", id, k, c, r)
				}
			}
		}()
	}
	wg.Wait()

	var okIDs []string
	for _, id := range ranOrder {
		var i int
		fmt.Sscanf(id[strings.IndexByte(id, '-')+1:], "%d", &i)
		want := 0
		if kind(i) == "ok" {
			okIDs = append(okIDs, id)
			want = 1
		}
		if commits[id] != want || rollbacks[id] != 1-want {
			t.Errorf("%s (%s): commit hook ran %d times, rollback hook %d", id, kind(i), commits[id], rollbacks[id])
		}
	}
	if len(ranOrder) != goroutines*each {
		t.Errorf("%d functions ran, want %d", len(ranOrder), goroutines*each)
	}
	if !slices.Equal(commitOrder, okIDs) {
		t.Errorf("commit hooks did not run in the order the functions ran")
	}
	if len(pendingCommit) > 0 || len(pendingRoll) > 0 {
		t.Errorf("hooks that never ran: commit %v, rollback %v", pendingCommit, pendingRoll)
	}
	view(t, s, func(tx Tx) error {
		sh.check(t, tx, "a View after all")
		return nil
	})
	if got := sh.count(); got != float64(len(okIDs)) {
		t.Errorf("counter %v, want %d", got, len(okIDs))
	}
	if isSQL {
		t.Logf("group commit: %+v; %d times a function started before the commit hook of an earlier function of its own batch", sq.Stats(), sameTxPending)
	} else if sameTxPending > 0 {
		t.Errorf("%d times a function started before an earlier Update's commit hook ran", sameTxPending)
	}
}

// SQLite: whole batches.

type batchOutcome struct {
	err      error
	panicked any
}

// runBatchOf runs fns as one group-committed batch, in this order: an
// Update whose fn waits holds the writer while they are queued one by one.
// ctxs[i], if set, is fns[i]'s context; cancel[i], if set, is called once
// everything is queued, before the writer takes the batch.
func runBatchOf(t *testing.T, s *SQLite, fns []func(Tx) error, ctxs []context.Context, cancel []func()) []batchOutcome {
	t.Helper()
	if len(fns) > s.maxBatch {
		t.Fatalf("%d functions do not fit in one batch of %d", len(fns), s.maxBatch)
	}
	entered, gate := make(chan struct{}), make(chan struct{})
	gateErr := make(chan error, 1)
	go func() {
		gateErr <- s.Update(ctx, func(Tx) error {
			close(entered)
			<-gate
			return nil
		})
	}()
	<-entered
	out := make([]batchOutcome, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		c := ctx
		if i < len(ctxs) && ctxs[i] != nil {
			c = ctxs[i]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { out[i].panicked = recover() }()
			out[i].err = s.Update(c, fn)
		}()
		testkit.Eventually(t, 10*time.Second, fmt.Sprintf("update %d queued", i+1), testkit.Bool(func() bool { return len(s.queue) == i+1 }))
	}
	for _, f := range cancel {
		if f != nil {
			f()
		}
	}
	before := s.Stats().Batches
	close(gate)
	if err := <-gateErr; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if got := s.Stats().Batches - before - 1; got > 1 { // less the gate's
		t.Errorf("the functions ran in %d batches", got)
	}
	return out
}

// sqlExec runs a raw statement in the writer's transaction, for a test to
// provoke what no Tx method does.
func sqlExec(tx Tx, q string) error {
	_, err := tx.(*sqlTx).r.exec(q)
	return err
}

// In one batch, commit hooks run after COMMIT, in the order the functions
// ran, and each before its own Update returns. A function therefore runs
// before the commit hooks of the earlier functions of its batch (state a
// later function must see is changed inside the function, with an
// OnRollback to undo it — as the server's scheduler does).
func TestSQLiteHooksCommitAfterBatch(t *testing.T) {
	s := openSQLite(t, t.TempDir()+"/state.db")
	defer s.Close()
	var l hookLog
	var seen [][]string
	fns := make([]func(Tx) error, 4)
	for i := range fns {
		fns[i] = func(tx Tx) error {
			seen = append(seen, l.get()) // the writer runs them one at a time
			tx.OnCommit(l.add(fmt.Sprintf("commit %d", i)))
			tx.OnRollback(l.add(fmt.Sprintf("rollback %d", i)))
			return tx.PutTenant(api.Tenant{Name: fmt.Sprintf("t%d", i)})
		}
	}
	for i, o := range runBatchOf(t, s, fns, nil, nil) {
		if o.err != nil || o.panicked != nil {
			t.Errorf("fn %d: %v %v", i, o.err, o.panicked)
		}
	}
	same(t, "hooks", l.get(), []string{"commit 0", "commit 1", "commit 2", "commit 3"})
	same(t, "hooks each function saw", seen, [][]string{{}, {}, {}, {}})
}

// COMMIT itself fails (a deferred foreign key violation): nothing of the
// batch is kept, every function that ran gets an error, and the rollback
// hooks of all of them run — once each, newest first, before any Update
// returns and before the next function runs. Functions that failed on
// their own had theirs run already, in their turn; a function whose
// context ended before its turn never ran and has none.
func TestSQLiteHooksCommitFails(t *testing.T) {
	s := openSQLite(t, t.TempDir()+"/state.db")
	defer s.Close()
	populate(t, s)
	before := dump(t, s)
	statsBefore := s.Stats()
	var l hookLog
	var sh shadow
	cctx, cancelOne := context.WithCancel(ctx)
	defer cancelOne()
	kinds := []string{"ok", "error", "ok", "poison", "panic", "ok", "cancelled", "ok"}
	fns := make([]func(Tx) error, len(kinds))
	ctxs := make([]context.Context, len(kinds))
	cancels := make([]func(), len(kinds))
	for i, k := range kinds {
		fns[i] = func(tx Tx) error {
			sh.check(t, tx, fmt.Sprintf("fn %d", i))
			tx.OnCommit(l.add(fmt.Sprintf("commit %d", i)))
			tx.OnRollback(l.add(fmt.Sprintf("rollback %d", i)))
			c := sampleClaim(fmt.Sprintf("c-batch-%d", i), "acme", api.Pending, "n1")
			if err := tx.CreateClaim(&c); err != nil {
				return err
			}
			if err := sh.bump(tx); err != nil {
				return err
			}
			switch k {
			case "error":
				return errBoom
			case "panic":
				panic("kaboom")
			case "poison":
				// Foreign keys checked at COMMIT; a claim_nodes row for no
				// claim makes COMMIT fail and leaves the transaction open.
				if err := sqlExec(tx, "PRAGMA defer_foreign_keys = ON"); err != nil {
					return err
				}
				return sqlExec(tx, "INSERT INTO claim_nodes (node, seq) VALUES ('ghost', -1)")
			}
			return nil
		}
		if k == "cancelled" {
			ctxs[i], cancels[i] = cctx, cancelOne
		}
	}
	out := runBatchOf(t, s, fns, ctxs, cancels)
	for i, k := range kinds {
		o := out[i]
		switch k {
		case "error":
			if !errors.Is(o.err, errBoom) {
				t.Errorf("fn %d (%s): %v, want its own error", i, k, o.err)
			}
		case "panic":
			if !strings.Contains(fmt.Sprint(o.panicked), "kaboom") {
				t.Errorf("fn %d (%s): recovered %v, want its panic", i, k, o.panicked)
			}
		case "cancelled":
			if !errors.Is(o.err, context.Canceled) {
				t.Errorf("fn %d (%s): %v, want context.Canceled", i, k, o.err)
			}
		default:
			if o.err == nil || !strings.Contains(o.err.Error(), "transaction aborted") || !strings.Contains(o.err.Error(), "FOREIGN KEY") {
				t.Errorf("fn %d (%s): %v, want the failed COMMIT's error", i, k, o.err)
			}
		}
	}
	// 1 and 4 rolled back in their turn; then the abort, newest first.
	same(t, "hooks", l.get(), []string{"rollback 1", "rollback 4", "rollback 7", "rollback 5", "rollback 3", "rollback 2", "rollback 0"})
	if after := dump(t, s); after != before {
		t.Errorf("an aborted batch left changes:\nbefore %s\nafter  %s", before, after)
	}
	if st := s.Stats(); st.Batches != statsBefore.Batches+1 { // the gate's
		t.Errorf("batches %d → %d: the aborted batch was counted as committed", statsBefore.Batches, st.Batches)
	}
	// The next function starts with the rollback hooks run, the state
	// beside the store back in step, and the store working.
	update(t, s, func(tx Tx) error {
		sh.check(t, tx, "the next Update")
		if got := len(l.get()); got != 7 {
			t.Errorf("%d hooks when the next function started, want 7", got)
		}
		return sh.bump(tx)
	})
	if err := s.Check(ctx); err != nil {
		t.Error(err)
	}
}

// A statement fails in a way that ends the whole SQLite transaction (the
// database is full: max_page_count), and the function that ran it returns
// nil: the writer aborts the batch at once all the same. Every function
// that ran has its rollback hooks run once, newest first; the functions
// after it never run and their Updates fail.
func TestSQLiteHooksBatchErr(t *testing.T) {
	s := openSQLite(t, t.TempDir()+"/state.db")
	defer s.Close()
	populate(t, s)
	before := dump(t, s)
	var l hookLog
	var sh shadow
	big := strings.Repeat("x", 256<<10)
	kinds := []string{"ok", "fill", "error", "big", "ok"}
	ran := make([]bool, len(kinds))
	fns := make([]func(Tx) error, len(kinds))
	for i, k := range kinds {
		fns[i] = func(tx Tx) error {
			ran[i] = true
			sh.check(t, tx, fmt.Sprintf("fn %d", i))
			tx.OnCommit(l.add(fmt.Sprintf("commit %d", i)))
			tx.OnRollback(l.add(fmt.Sprintf("rollback %d", i)))
			if err := sh.bump(tx); err != nil {
				return err
			}
			c := sampleClaim(fmt.Sprintf("c-batch-%d", i), "acme", api.Pending)
			switch k {
			case "fill":
				if err := tx.CreateClaim(&c); err != nil {
					return err
				}
				// From here on the database may not grow.
				var pages int
				if _, err := tx.(*sqlTx).queryRow([]any{&pages}, "PRAGMA page_count"); err != nil {
					return err
				}
				return sqlExec(tx, fmt.Sprintf("PRAGMA max_page_count = %d", pages))
			case "error":
				return errBoom
			case "big":
				// The function goes on as if nothing happened: the writer
				// must see for itself that the transaction is lost.
				c.Reason = big
				if err := tx.CreateClaim(&c); err == nil {
					t.Errorf("256 KiB fitted in a full database")
				}
				return nil
			}
			return tx.CreateClaim(&c)
		}
	}
	out := runBatchOf(t, s, fns, nil, nil)
	// Put the limit back whatever happened.
	update(t, s, func(tx Tx) error { return sqlExec(tx, "PRAGMA max_page_count = 1073741823") })
	for i, k := range kinds {
		o := out[i]
		switch {
		case o.panicked != nil:
			t.Errorf("fn %d (%s) panicked: %v", i, k, o.panicked)
		case k == "error":
			if !errors.Is(o.err, errBoom) {
				t.Errorf("fn %d (%s): %v, want its own error", i, k, o.err)
			}
		case k == "big" || k == "fill":
			if o.err == nil || !strings.Contains(o.err.Error(), "transaction aborted") || !strings.Contains(o.err.Error(), "full") {
				t.Errorf("fn %d (%s): %v, want the aborted transaction's database-full error", i, k, o.err)
			}
		default:
			if o.err == nil || !strings.Contains(o.err.Error(), "transaction aborted") {
				t.Errorf("fn %d (%s): %v, want the aborted transaction's error", i, k, o.err)
			}
		}
	}
	if ran[4] {
		t.Errorf("a function after the failed statement ran")
	}
	same(t, "hooks", l.get(), []string{"rollback 2", "rollback 3", "rollback 1", "rollback 0"})
	if after := dump(t, s); after != before {
		t.Errorf("an aborted batch left changes:\nbefore %s\nafter  %s", before, after)
	}
	update(t, s, func(tx Tx) error {
		sh.check(t, tx, "the next Update")
		c := sampleClaim("after", "acme", api.Pending)
		c.Reason = big
		return tx.CreateClaim(&c)
	})
	if err := s.Check(ctx); err != nil {
		t.Error(err)
	}
}

// BEGIN fails (another connection holds the write lock past the busy
// timeout): no function runs, so no hook does, and every Update fails.
func TestSQLiteHooksBeginFails(t *testing.T) {
	path := t.TempDir() + "/state.db"
	s, err := OpenSQLite(path, SQLiteOptions{BusyTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	populate(t, s)
	other, err := OpenSQLite(path, SQLiteOptions{BusyTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var l hookLog
	fns := make([]func(Tx) error, 3)
	for i := range fns {
		fns[i] = func(tx Tx) error {
			tx.OnCommit(l.add(fmt.Sprintf("commit %d", i)))
			tx.OnRollback(l.add(fmt.Sprintf("rollback %d", i)))
			return tx.PutTenant(api.Tenant{Name: fmt.Sprintf("t%d", i)})
		}
	}
	// other's writer holds its write transaction while s's batch begins.
	locked, unlock := make(chan struct{}), make(chan struct{})
	otherErr := make(chan error, 1)
	go func() {
		otherErr <- other.Update(ctx, func(tx Tx) error {
			if err := tx.PutTenant(api.Tenant{Name: "other"}); err != nil {
				return err
			}
			close(locked)
			<-unlock
			return nil
		})
	}()
	<-locked
	out := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = s.Update(ctx, fn)
		}()
	}
	wg.Wait()
	close(unlock)
	if err := <-otherErr; err != nil {
		t.Fatal(err)
	}
	for i, err := range out {
		if err == nil || !strings.Contains(err.Error(), "begin") {
			t.Errorf("fn %d: %v, want BEGIN's error", i, err)
		}
	}
	if got := l.get(); len(got) != 0 {
		t.Errorf("hooks ran for functions that never ran: %v", got)
	}
}
