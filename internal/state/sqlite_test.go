package state

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
)

func openSQLite(t testing.TB, path string) *SQLite {
	t.Helper()
	s, err := OpenSQLite(path, SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSQLiteReopenKeepsData(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := openSQLite(t, path)
	populate(t, s)
	var lastSeq int64
	update(t, s, func(tx Tx) error {
		c := sampleClaim("c-last", "acme", api.Pending)
		err := tx.CreateClaim(&c)
		lastSeq = c.Seq
		return err
	})
	// A rolled-back claim after the last committed one.
	s.Update(ctx, func(tx Tx) error {
		c := sampleClaim("c-rolled-back", "acme", api.Pending)
		tx.CreateClaim(&c)
		return errBoom
	})
	before := dump(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openSQLite(t, path)
	defer s.Close()
	if after := dump(t, s); after != before {
		t.Errorf("data changed across reopen:\nbefore %s\nafter  %s", before, after)
	}
	view(t, s, func(tx Tx) error {
		if _, err := tx.GetClaim("c-last"); err != nil {
			return err
		}
		_, err := tx.GetClaim("c-rolled-back")
		wantErr(t, err, ErrNotFound, "")
		return nil
	})
	// Seqs go on after a reopen: never reused.
	update(t, s, func(tx Tx) error {
		c := sampleClaim("c-after-reopen", "acme", api.Pending)
		if err := tx.CreateClaim(&c); err != nil {
			return err
		}
		if c.Seq <= lastSeq {
			t.Errorf("seq %d after reopen, last before was %d", c.Seq, lastSeq)
		}
		return nil
	})
	if err := s.Check(ctx); err != nil {
		t.Error(err)
	}
}

func TestSQLiteSchemaVersion(t *testing.T) {
	if len(migrations) != SchemaVersion {
		t.Fatalf("%d migrations but SchemaVersion is %d", len(migrations), SchemaVersion)
	}
	path := filepath.Join(t.TempDir(), "state.db")
	s := openSQLite(t, path)
	s.Close()

	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	var v int
	if err := raw.QueryRow("SELECT version FROM schema_version").Scan(&v); err != nil || v != SchemaVersion {
		t.Fatalf("schema_version = %d (%v), want %d", v, err, SchemaVersion)
	}
	if _, err := raw.Exec("UPDATE schema_version SET version = ?", SchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	raw.Close()

	_, err = OpenSQLite(path, SQLiteOptions{})
	if !errors.Is(err, ErrSchemaTooNew) {
		t.Fatalf("opening a newer schema: %v, want ErrSchemaTooNew", err)
	}
	for _, want := range []string{path, "schema version " + strconv.Itoa(SchemaVersion+1), "up to " + strconv.Itoa(SchemaVersion), "upgrade gpuslice"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// A version-1 database (before SM-seconds) keeps its usage through the
// migration to the current schema, with zero SM-seconds.
func TestSQLiteMigratesUsageFromV1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	stmts := append([]string{`CREATE TABLE schema_version (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL)`,
		`INSERT INTO schema_version VALUES (1, 1)`}, migrations[0]...)
	stmts = append(stmts, `INSERT INTO usage (tenant, gpu_seconds, memory_mib_seconds) VALUES ('acme', 7, 700)`)
	for _, q := range stmts {
		if _, err := raw.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	raw.Close()
	s := openSQLite(t, path)
	defer s.Close()
	update(t, s, func(tx Tx) error { return tx.AddUsage("acme", api.Consumption{GPUSeconds: 1, SMSeconds: 0.5}) })
	view(t, s, func(tx Tx) error {
		u, err := tx.Usage("acme")
		same(t, "usage after migration", u, api.Usage{Tenant: "acme", GPUSeconds: 8, SMSeconds: 0.5, MemoryMiBSec: 700})
		return err
	})
}

// A version-3 database (before events by tenant) keeps its events through
// the migration, each found under its tenant, and new events join them.
func TestSQLiteMigratesEventsFromV3(t *testing.T) {
	path, raw := dbAtVersion(t, 3)
	for _, tenant := range []string{"acme", "", "beta", "acme"} {
		data, err := encodeEvent(api.Event{Time: t0, Kind: "created", Tenant: tenant, Message: "old " + tenant})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := raw.Exec(`INSERT INTO events (kind, data) VALUES (?, ?)`, "created", data); err != nil {
			t.Fatal(err)
		}
	}
	raw.Close()
	s := openSQLite(t, path)
	defer s.Close()
	update(t, s, func(tx Tx) error {
		return tx.AppendEvent(&api.Event{Time: t0, Kind: "created", Tenant: "acme", Message: "new acme"})
	})
	view(t, s, func(tx Tx) error {
		acme, err := tx.ListEvents(EventFilter{Tenant: "acme"})
		if err != nil {
			return err
		}
		var got []string
		for _, e := range acme {
			got = append(got, fmt.Sprintf("%d %s", e.Seq, e.Message))
		}
		same(t, "acme's events after migration", got, []string{"1 old acme", "4 old acme", "5 new acme"})
		beta, err := tx.ListEvents(EventFilter{Tenant: "beta"})
		if err != nil {
			return err
		}
		if len(beta) != 1 || beta[0].Seq != 3 {
			t.Errorf("beta's events after migration = %+v", beta)
		}
		all, err := tx.EventsSince(0, 0)
		if len(all) != 5 {
			t.Errorf("%d events after migration, want 5", len(all))
		}
		return err
	})
}

// A tenant's events are read through the (tenant, seq) index, not by a
// scan of every event.
func TestSQLiteEventsByTenantUseTheIndex(t *testing.T) {
	s := openSQLite(t, filepath.Join(t.TempDir(), "state.db"))
	defer s.Close()
	rows, err := s.rdb.Query(`EXPLAIN QUERY PLAN SELECT seq, data FROM events WHERE tenant = ? AND seq > ? ORDER BY seq LIMIT ?`, "acme", 5, 500)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, fmt.Sprint(vals[len(vals)-1])) // detail
	}
	joined := strings.Join(plan, "; ")
	if !strings.Contains(joined, "events_tenant") {
		t.Fatalf("query plan of a tenant's events: %q, want the events_tenant index", joined)
	}
}

// A View's first use of a query never waits for a second read
// connection: with every read connection in a View preparing a new query,
// none would ever come free. (Found with two read connections and a crowd
// of event streams: every read of the API hung.) One read connection
// makes it certain.
func TestSQLiteViewPreparesOnItsOwnConnection(t *testing.T) {
	s, err := OpenSQLite(filepath.Join(t.TempDir(), "state.db"), SQLiteOptions{ReadConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	populate(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for range 2 { // first use, then from the cache
		err := s.View(ctx, func(tx Tx) error {
			if _, err := tx.ListEvents(EventFilter{Tenant: "acme", Limit: 5}); err != nil {
				return err
			}
			if _, err := tx.ListClaims(ClaimFilter{States: []api.ClaimState{api.Pending, api.Running, api.Failed}}); err != nil {
				return err
			}
			_, err := tx.GetTenant("acme")
			return err
		})
		if err != nil {
			t.Fatalf("a View on the only read connection: %v", err)
		}
	}
}

// A database with only the version table at version 0 (an interrupted first
// open, say) is migrated.
func TestSQLiteMigratesFromZero(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`CREATE TABLE schema_version (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL);
		INSERT INTO schema_version VALUES (1, 0)`); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	s := openSQLite(t, path)
	defer s.Close()
	populate(t, s)
}

// Paths with characters that mean something in a URI work.
func TestSQLiteOddPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a dir?x=1#y", "state 100%.db")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	s := openSQLite(t, path)
	populate(t, s)
	s.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	s = openSQLite(t, path)
	defer s.Close()
	view(t, s, func(tx Tx) error {
		_, err := tx.GetClaim("c-0")
		return err
	})
}

func TestSQLiteFileMode(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	s := openSQLite(t, path)
	defer s.Close()
	populate(t, s) // the -wal and -shm files exist while open
	for _, name := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", filepath.Base(name), fi.Mode().Perm())
		}
	}
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var mode string
	if err := raw.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode %q (%v), want wal", mode, err)
	}
}

// Readers run while the writer commits: an Update completes inside a View,
// and the View keeps its snapshot.
func TestSQLiteReadDuringWrite(t *testing.T) {
	s := openSQLite(t, filepath.Join(t.TempDir(), "state.db"))
	defer s.Close()
	populate(t, s)
	view(t, s, func(tx Tx) error {
		before, err := tx.ListClaims(ClaimFilter{})
		if err != nil {
			return err
		}
		update(t, s, func(tx Tx) error {
			c := sampleClaim("c-new", "acme", api.Pending)
			return tx.CreateClaim(&c)
		})
		after, err := tx.ListClaims(ClaimFilter{})
		same(t, "claims in the View", claimIDs(after), claimIDs(before))
		return err
	})
	view(t, s, func(tx Tx) error {
		_, err := tx.GetClaim("c-new")
		return err
	})
}

// Concurrent Updates share transactions.
func TestSQLiteGroupCommitBatches(t *testing.T) {
	s := openSQLite(t, filepath.Join(t.TempDir(), "state.db"))
	defer s.Close()
	const n = 256
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := sampleClaim(fmt.Sprintf("c-%d", i), "acme", api.Pending)
			if err := s.Update(ctx, func(tx Tx) error { return tx.CreateClaim(&c) }); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	st := s.Stats()
	t.Logf("%+v", st)
	if st.Updates != n || st.Batches >= n/2 || st.LargestBatch < 2 {
		t.Errorf("no batching: %+v", st)
	}
}

// Close lets queued Updates finish: every Update either succeeded (and its
// write is there after reopening) or was refused with ErrClosed.
func TestSQLiteCloseDrains(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := openSQLite(t, path)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var acked []string
	start := make(chan struct{})
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := 0; ; i++ {
				c := sampleClaim(fmt.Sprintf("g%d-%d", g, i), "acme", api.Pending)
				err := s.Update(ctx, func(tx Tx) error { return tx.CreateClaim(&c) })
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				acked = append(acked, c.ID)
				mu.Unlock()
			}
		}()
	}
	close(start)
	time.Sleep(100 * time.Millisecond)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	s = openSQLite(t, path)
	defer s.Close()
	view(t, s, func(tx Tx) error {
		for _, id := range acked {
			if _, err := tx.GetClaim(id); err != nil {
				t.Errorf("acknowledged before Close: %v", err)
			}
		}
		return nil
	})
	t.Logf("%d acknowledged", len(acked))
}

// The crash test: a child process creates claims from 16 goroutines and
// prints each ID once Update has returned; it is killed with SIGKILL after
// ~300ms. Every printed ID must be in the database exactly once, with its
// event, and the database must pass integrity_check. Three rounds on the
// same file: each child starts from the previous crash.
const (
	crashDBEnv    = "GPUSLICE_STATE_CRASH_DB"
	crashRoundEnv = "GPUSLICE_STATE_CRASH_ROUND"
)

func TestCrashChild(t *testing.T) {
	path := os.Getenv(crashDBEnv)
	if path == "" {
		t.Skip("helper process of TestCrashDurability")
	}
	round := os.Getenv(crashRoundEnv)
	s, err := OpenSQLite(path, SQLiteOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	var mu sync.Mutex
	deadline := time.Now().Add(time.Minute) // never outlive a dead parent for long
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				c := sampleClaim(fmt.Sprintf("r%s-g%d-%d", round, g, i), "acme", api.Pending, "n1")
				err := s.Update(ctx, func(tx Tx) error {
					if err := tx.CreateClaim(&c); err != nil {
						return err
					}
					return tx.AppendEvent(&api.Event{Kind: "claim.created", Claim: c.ID})
				})
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(4)
				}
				line := "ack " + c.ID + " " + strconv.FormatInt(c.Seq, 10) + "\n"
				mu.Lock()
				os.Stdout.WriteString(line) // one write(2) per line: no buffering
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	os.Exit(0)
}

func TestCrashDurability(t *testing.T) {
	// Not parallel: its child commits (and fsyncs) as fast as it can, and
	// beside the contract suite's SQLite subtests it slowed them threefold.
	if testing.Short() {
		t.Skip("crash test")
	}
	path := filepath.Join(t.TempDir(), "crash.db")
	acked := map[string]int64{} // id → seq
	for round := range 3 {
		ids := runCrashChild(t, path, round)
		if len(ids) == 0 {
			t.Fatalf("round %d: the child acknowledged nothing", round)
		}
		for id, seq := range ids {
			acked[id] = seq
		}
		s := openSQLite(t, path)
		if err := s.Check(ctx); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		var stored int
		view(t, s, func(tx Tx) error {
			claims, err := tx.ListClaims(ClaimFilter{})
			if err != nil {
				return err
			}
			stored = len(claims)
			count := map[string]int{}
			for i, c := range claims {
				count[c.ID]++
				if i > 0 && c.Seq <= claims[i-1].Seq {
					t.Errorf("seqs not increasing: %d after %d", c.Seq, claims[i-1].Seq)
				}
			}
			events, err := tx.EventsSince(0, 0)
			if err != nil {
				return err
			}
			evCount := map[string]int{}
			for _, e := range events {
				evCount[e.Claim]++
			}
			for id, seq := range acked {
				if count[id] != 1 || evCount[id] != 1 {
					t.Errorf("acknowledged claim %s: %d copies, %d events", id, count[id], evCount[id])
					continue
				}
				c, err := tx.GetClaim(id)
				if err != nil {
					return err
				}
				if c.Seq != seq {
					t.Errorf("claim %s: seq %d, acknowledged with %d", id, c.Seq, seq)
				}
			}
			// What was committed but not yet printed when the kill came
			// may be there too, but nothing else.
			if len(events) != len(claims) {
				t.Errorf("%d events for %d claims", len(events), len(claims))
			}
			return nil
		})
		st, _ := os.Stat(path + "-wal")
		walSize := int64(-1)
		if st != nil {
			walSize = st.Size()
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: %d acknowledged this round, %d in all, %d stored (wal was %d bytes)", round, len(ids), len(acked), stored, walSize)
	}
}

// runCrashChild runs TestCrashChild against path, kills it ~300ms after
// its first acknowledgement, and returns every acknowledged id with its seq.
func runCrashChild(t *testing.T, path string, round int) map[string]int64 {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashDBEnv+"="+path, crashRoundEnv+"="+strconv.Itoa(round))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	first := make(chan struct{})
	lines := make(chan map[string]int64)
	go func() {
		ids := map[string]int64{}
		r := bufio.NewReader(out)
		for {
			line, err := r.ReadString('\n')
			if err != nil { // EOF; a partial last line was not acknowledged
				io.Copy(io.Discard, r)
				lines <- ids
				return
			}
			f := strings.Fields(line)
			if len(f) != 3 || f[0] != "ack" {
				continue
			}
			seq, _ := strconv.ParseInt(f[2], 10, 64)
			if len(ids) == 0 {
				close(first)
			}
			ids[f[1]] = seq
		}
	}()
	select {
	case <-first:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("child printed nothing in 60s; stderr:\n%s", stderr.String())
	}
	time.Sleep(300 * time.Millisecond)
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	ids := <-lines
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != -1 {
		t.Fatalf("child did not die by the kill: %v; stderr:\n%s", err, stderr.String())
	}
	return ids
}

// When the transaction itself fails (here: the database is full), nothing
// of the batch is kept and nobody is told it was: every Update either
// returned nil and is stored, or returned an error and is not.
func TestSQLiteBatchAbort(t *testing.T) {
	s := openSQLite(t, filepath.Join(t.TempDir(), "state.db"))
	defer s.Close()
	populate(t, s)
	var pages int
	if err := s.wconn.QueryRowContext(ctx, "PRAGMA page_count").Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if _, err := s.wconn.ExecContext(ctx, "PRAGMA max_page_count = "+strconv.Itoa(pages+2)); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 64<<10)
	var wg sync.WaitGroup
	var mu sync.Mutex
	results := map[string]error{}
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 8 {
				c := sampleClaim(fmt.Sprintf("g%d-%d", g, i), "acme", api.Pending)
				if i%2 == 1 {
					c.Reason = big // does not fit
				}
				err := s.Update(ctx, func(tx Tx) error { return tx.CreateClaim(&c) })
				mu.Lock()
				results[c.ID] = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if _, err := s.wconn.ExecContext(ctx, "PRAGMA max_page_count = 1073741823"); err != nil {
		t.Fatal(err)
	}
	var ok, failed int
	view(t, s, func(tx Tx) error {
		for id, err := range results {
			_, gerr := tx.GetClaim(id)
			switch {
			case err == nil && gerr != nil:
				t.Errorf("%s acknowledged but not stored: %v", id, gerr)
			case err != nil && gerr == nil:
				t.Errorf("%s stored but its Update failed: %v", id, err)
			case err == nil:
				ok++
			default:
				failed++
			}
			if n, _ := strconv.Atoi(id[strings.LastIndexByte(id, '-')+1:]); n%2 == 1 && err == nil {
				t.Errorf("%s (64 KiB) fitted in a full database", id)
			}
		}
		return nil
	})
	t.Logf("%d committed, %d failed; %+v", ok, failed, s.Stats())
	if failed < len(results)/2 {
		t.Errorf("only %d of %d failed", failed, len(results))
	}
	// The store works again.
	update(t, s, func(tx Tx) error {
		c := sampleClaim("after", "acme", api.Pending)
		c.Reason = big
		return tx.CreateClaim(&c)
	})
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
}

// dbAtVersion makes a database as gpuslice of schema version v left it
// (its first v migrations), open raw, for a migration test to fill.
func dbAtVersion(t *testing.T, v int) (string, *sql.DB) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	stmts := []string{`CREATE TABLE schema_version (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL)`,
		fmt.Sprintf(`INSERT INTO schema_version VALUES (1, %d)`, v)}
	for _, m := range migrations[:v] {
		stmts = append(stmts, m...)
	}
	for _, q := range stmts {
		if _, err := raw.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return path, raw
}
