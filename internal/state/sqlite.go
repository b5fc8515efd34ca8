package state

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/gpuslice/gpuslice/internal/api"
)

// SQLiteOptions tunes OpenSQLite. Zero values take the defaults.
type SQLiteOptions struct {
	// BusyTimeout is how long a connection waits for a lock another
	// process holds (default 5s).
	BusyTimeout time.Duration
	// MaxBatch is the most Update calls group-committed in one SQLite
	// transaction (default 256).
	MaxBatch int
	// QueueLength is how many Update calls may wait for the writer before
	// callers block (default 1024).
	QueueLength int
	// ReadConns is the size of the read connection pool (default 4).
	ReadConns int
	// MustExist says the database must already hold a gpuslice schema:
	// a missing file, an empty one or one without a schema_version table
	// is refused with ErrNoSchema instead of being created.
	MustExist bool
}

// ErrSchemaTooNew is returned by OpenSQLite for a database written by a
// newer gpuslice (its schema version is above SchemaVersion).
var ErrSchemaTooNew = errors.New("database schema is newer than this gpuslice supports")

// ErrDamaged is returned by OpenSQLite for a database that fails SQLite's
// quick_check or that SQLite reports as corrupt or not a database.
var ErrDamaged = errors.New("database is damaged")

// ErrNoSchema is returned by OpenSQLite with SQLiteOptions.MustExist for a
// database file that is missing, empty or holds no gpuslice schema.
var ErrNoSchema = errors.New("database holds no gpuslice schema")

// migrations are the schema steps, in order: migrations[i] takes the schema
// from version i to version i+1. Never edit a released step; append one.
var migrations = [][]string{
	// 1: the first schema.
	{
		`CREATE TABLE tenants (
			name TEXT PRIMARY KEY,
			data BLOB NOT NULL
		)`,
		`CREATE TABLE tokens (
			id     TEXT PRIMARY KEY,
			hash   BLOB NOT NULL UNIQUE,
			tenant TEXT NOT NULL,
			role   TEXT NOT NULL,
			data   BLOB NOT NULL
		)`,
		// AUTOINCREMENT: a committed seq is never reused.
		`CREATE TABLE claims (
			seq      INTEGER PRIMARY KEY AUTOINCREMENT,
			id       TEXT NOT NULL UNIQUE,
			tenant   TEXT NOT NULL,
			state    TEXT NOT NULL,
			priority INTEGER NOT NULL,
			data     BLOB NOT NULL
		)`,
		`CREATE INDEX claims_tenant ON claims (tenant, seq)`,
		`CREATE INDEX claims_state ON claims (state, priority, seq)`,
		// The nodes a claim touches (ClaimNodes): an allocation may span
		// several, so it is a table rather than a column.
		`CREATE TABLE claim_nodes (
			node TEXT NOT NULL,
			seq  INTEGER NOT NULL REFERENCES claims (seq) ON DELETE CASCADE,
			PRIMARY KEY (node, seq)
		) WITHOUT ROWID`,
		`CREATE INDEX claim_nodes_seq ON claim_nodes (seq)`,
		`CREATE TABLE nodes (
			name TEXT PRIMARY KEY,
			data BLOB NOT NULL
		)`,
		`CREATE TABLE events (
			seq  INTEGER PRIMARY KEY AUTOINCREMENT,
			kind TEXT NOT NULL,
			data BLOB NOT NULL
		)`,
		`CREATE TABLE usage (
			tenant             TEXT PRIMARY KEY,
			gpu_seconds        REAL NOT NULL,
			memory_mib_seconds REAL NOT NULL
		)`,
	},
	// 2: SM activity per tenant (per-process utilization samples).
	{
		`ALTER TABLE usage ADD COLUMN sm_seconds REAL NOT NULL DEFAULT 0`,
	},
	// 3: services (replicas of a claim and a command, autoscaled).
	{
		`CREATE TABLE services (
			name TEXT PRIMARY KEY,
			data BLOB NOT NULL
		)`,
	},
	// 4: retention. Events carry their time and final claims their end
	// (microseconds since the epoch, see stamp), indexed so that a prune
	// reads and deletes only what it removes. Rows written before get them
	// from their JSON (SQLite's date functions keep milliseconds; a time
	// it cannot read counts as 0, 1970).
	{
		`ALTER TABLE events ADD COLUMN at INTEGER NOT NULL DEFAULT 0`,
		`UPDATE events SET at = COALESCE(CAST(unixepoch(json_extract(CAST(data AS TEXT), '$.time'), 'subsec') * 1000000 AS INTEGER), 0)`,
		`CREATE INDEX events_at ON events (at, seq)`,
		`ALTER TABLE claims ADD COLUMN ended INTEGER`,
		`UPDATE claims SET ended = COALESCE(CAST(unixepoch(json_extract(CAST(data AS TEXT), '$.updated'), 'subsec') * 1000000 AS INTEGER), 0)
			WHERE state IN ('released', 'failed')`,
		`CREATE INDEX claims_ended ON claims (ended, seq) WHERE ended IS NOT NULL`,
	},
	// 5: events by tenant (a tenant's event stream reads its own events
	// through an index, whatever the others append). Existing events get
	// their tenant from their stored JSON.
	{
		`ALTER TABLE events ADD COLUMN tenant TEXT NOT NULL DEFAULT ''`,
		`UPDATE events SET tenant = coalesce(json_extract(CAST(data AS TEXT), '$.tenant'), '')`,
		`CREATE INDEX events_tenant ON events (tenant, seq)`,
	},
}

// SchemaVersion is the schema version this binary writes: the number of
// migrations (a test checks they agree).
const SchemaVersion = 5

// SQLite is the durable Store: one SQLite database file in WAL mode,
// written by one goroutine that group-commits concurrent Updates (see the
// package documentation).
type SQLite struct {
	path string

	wdb   *sql.DB
	wconn *sql.Conn
	wstmt map[string]*sql.Stmt // prepared on wconn; writer goroutine only

	rdb    *sql.DB
	rmu    sync.Mutex
	rstmts map[string]*sql.Stmt // prepared on rdb

	maxBatch int

	mu         sync.RWMutex // guards sends on queue against its closing
	closed     atomic.Bool  // set under mu
	queue      chan *writeReq
	writerDone chan struct{}
	closeOnce  sync.Once
	closeErr   error

	// batchErr is set by the writer when a statement failed in a way that
	// ends the whole SQLite transaction; every later statement of the
	// batch fails with it. Writer goroutine only.
	batchErr error

	updates, batches, largest atomic.Int64
}

type writeReq struct {
	ctx  context.Context
	fn   func(Tx) error
	done chan writeResult
}

type writeResult struct {
	err      error
	panicked bool
	panicVal any
	stack    []byte
}

var _ Store = (*SQLite)(nil)

// OpenSQLite opens (creating it with mode 0600 if needed) the database at
// path, checks it with SQLite's quick_check, migrates its schema to
// SchemaVersion and starts the writer. It refuses a damaged database
// (ErrDamaged), one whose schema is newer (ErrSchemaTooNew) and, with
// opts.MustExist, one that is missing, empty or has no schema
// (ErrNoSchema).
func OpenSQLite(path string, opts SQLiteOptions) (*SQLite, error) {
	if opts.BusyTimeout <= 0 {
		opts.BusyTimeout = 5 * time.Second
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 256
	}
	if opts.QueueLength <= 0 {
		opts.QueueLength = 1024
	}
	if opts.ReadConns <= 0 {
		opts.ReadConns = 4
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	if opts.MustExist {
		// Before SQLite sees the path: it would create a missing file.
		if err := checkExists(abs); err != nil {
			return nil, err
		}
	} else {
		// Create the file ourselves so that it is 0600; SQLite gives its
		// -wal and -shm files the mode of the database file.
		f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("state: %w", err)
		}
		f.Close()
	}

	s := &SQLite{
		path:       abs,
		wstmt:      map[string]*sql.Stmt{},
		rstmts:     map[string]*sql.Stmt{},
		maxBatch:   opts.MaxBatch,
		queue:      make(chan *writeReq, opts.QueueLength),
		writerDone: make(chan struct{}),
	}
	busy := strconv.FormatInt(opts.BusyTimeout.Milliseconds(), 10)
	s.wdb, err = sql.Open("sqlite", dsn(abs, url.Values{
		"_busy_timeout": {busy},
		"_journal_mode": {"WAL"},
		"_synchronous":  {"FULL"},
		"_foreign_keys": {"1"},
	}))
	if err != nil {
		return nil, fmt.Errorf("state: opening %s: %w", abs, err)
	}
	s.wdb.SetMaxOpenConns(1)
	s.wdb.SetMaxIdleConns(1)
	s.wdb.SetConnMaxLifetime(0)
	s.wdb.SetConnMaxIdleTime(0)
	ctx := context.Background()
	if s.wconn, err = s.wdb.Conn(ctx); err != nil {
		s.wdb.Close()
		return nil, damagedOr(abs, "opening", fmt.Errorf("state: opening %s: %w", abs, err))
	}
	if err := s.checkSettings(ctx); err != nil {
		s.closeConns()
		return nil, damagedOr(abs, "opening", err)
	}
	if err := s.quickCheck(ctx); err != nil {
		s.closeConns()
		return nil, err
	}
	if opts.MustExist {
		if err := s.checkSchema(ctx); err != nil {
			s.closeConns()
			return nil, damagedOr(abs, "schema check", err)
		}
	}
	if err := s.migrate(ctx); err != nil {
		s.closeConns()
		return nil, damagedOr(abs, "migration", err)
	}
	s.rdb, err = sql.Open("sqlite", dsn(abs, url.Values{
		"_busy_timeout": {busy},
		"_foreign_keys": {"1"},
		"_query_only":   {"1"},
	}))
	if err != nil {
		s.closeConns()
		return nil, fmt.Errorf("state: opening %s: %w", abs, err)
	}
	s.rdb.SetMaxOpenConns(opts.ReadConns)
	s.rdb.SetMaxIdleConns(opts.ReadConns)
	if err := s.rdb.PingContext(ctx); err != nil {
		s.closeConns()
		return nil, fmt.Errorf("state: opening %s: %w", abs, err)
	}
	go s.writeLoop()
	return s, nil
}

// checkExists refuses (ErrNoSchema) a database file that is missing or
// empty: with SQLiteOptions.MustExist either means the database was lost.
func checkExists(path string) error {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("state: %s does not exist: %w", path, ErrNoSchema)
	case err != nil:
		return fmt.Errorf("state: %w", err)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("state: %s is not a regular file", path)
	case fi.Size() == 0:
		return fmt.Errorf("state: %s is empty (0 bytes): %w", path, ErrNoSchema)
	}
	return nil
}

// checkSchema refuses (ErrNoSchema) a database without a schema_version
// row: not a gpuslice database, or one whose content was lost.
func (s *SQLite) checkSchema(ctx context.Context) error {
	var n int
	if err := s.wconn.QueryRowContext(ctx,
		"SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'").Scan(&n); err != nil {
		return fmt.Errorf("state: %s: %w", s.path, err)
	}
	if n == 1 {
		var version int
		err := s.wconn.QueryRowContext(ctx, "SELECT version FROM schema_version WHERE id = 1").Scan(&version)
		switch {
		case err == nil && version > 0:
			return nil
		case err != nil && !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("state: %s: %w", s.path, err)
		}
	}
	return fmt.Errorf("state: %s has no schema_version table: %w", s.path, ErrNoSchema)
}

// quickCheck runs SQLite's quick_check (the b-trees and their pages, in
// time linear in the file's size) and refuses a database that fails it
// with ErrDamaged: a server on a damaged file would fail some reads and
// keep writing into it.
func (s *SQLite) quickCheck(ctx context.Context) error {
	rows, err := s.wconn.QueryContext(ctx, "PRAGMA quick_check(10)")
	if err != nil {
		return damagedOr(s.path, "quick_check", fmt.Errorf("state: quick_check of %s: %w", s.path, err))
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return damagedOr(s.path, "quick_check", fmt.Errorf("state: quick_check of %s: %w", s.path, err))
		}
		if line != "ok" {
			problems = append(problems, line)
		}
	}
	if err := rows.Err(); err != nil {
		return damagedOr(s.path, "quick_check", fmt.Errorf("state: quick_check of %s: %w", s.path, err))
	}
	if len(problems) > 0 {
		return damaged(s.path, "quick_check: "+strings.Join(problems, "; "))
	}
	return nil
}

// damaged is the error for a database that must not be used as it is.
func damaged(path, detail string) error {
	return fmt.Errorf("state: %s: %w (%s); stop here and restore it from a backup (with its -wal file, if any) rather than start on it", path, ErrDamaged, detail)
}

// damagedOr turns an error in which SQLite reports a corrupt file or not a
// database into ErrDamaged (saying at which step), and returns any other
// error as it is.
func damagedOr(path, step string, err error) error {
	var se *sqlite.Error
	if err == nil || !errors.As(err, &se) {
		return err
	}
	if c := se.Code() & 0xff; c == sqlite3.SQLITE_CORRUPT || c == sqlite3.SQLITE_NOTADB {
		return damaged(path, step+": "+se.Error())
	}
	return err
}

// dsn is a SQLite URI filename (the path escaped) with driver parameters.
func dsn(path string, params url.Values) string {
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(path), RawQuery: params.Encode()}
	if !strings.HasPrefix(u.Path, "/") { // Windows drive letters
		u.Path = "/" + u.Path
	}
	return u.String()
}

// checkSettings verifies that the durability settings took effect: WAL
// needs shared memory, which some file systems refuse.
func (s *SQLite) checkSettings(ctx context.Context) error {
	var mode string
	var syncMode, fk int
	if err := s.wconn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("state: %s: %w", s.path, err)
	}
	if err := s.wconn.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&syncMode); err != nil {
		return fmt.Errorf("state: %s: %w", s.path, err)
	}
	if err := s.wconn.QueryRowContext(ctx, "PRAGMA foreign_keys").Scan(&fk); err != nil {
		return fmt.Errorf("state: %s: %w", s.path, err)
	}
	if !strings.EqualFold(mode, "wal") || syncMode != 2 || fk != 1 {
		return fmt.Errorf("state: %s: want journal_mode=wal synchronous=2 (FULL) foreign_keys=1, got %s, %d and %d", s.path, mode, syncMode, fk)
	}
	return nil
}

func (s *SQLite) migrate(ctx context.Context) (err error) {
	c := s.wconn
	if _, err := c.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("state: migrating %s: %w", s.path, err)
	}
	defer func() {
		if err != nil {
			c.ExecContext(ctx, "ROLLBACK")
		}
	}()
	if _, err := c.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_version (
		id      INTEGER PRIMARY KEY CHECK (id = 1),
		version INTEGER NOT NULL
	)`); err != nil {
		return fmt.Errorf("state: migrating %s: %w", s.path, err)
	}
	version := 0
	switch err := c.QueryRowContext(ctx, "SELECT version FROM schema_version WHERE id = 1").Scan(&version); {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return fmt.Errorf("state: migrating %s: %w", s.path, err)
	}
	if version > SchemaVersion {
		return fmt.Errorf("state: %s has schema version %d but this gpuslice knows versions up to %d: %w (upgrade gpuslice, or restore a backup made by this version)",
			s.path, version, SchemaVersion, ErrSchemaTooNew)
	}
	for v := version; v < SchemaVersion; v++ {
		for _, stmt := range migrations[v] {
			if _, err := c.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("state: migrating %s to schema version %d: %w", s.path, v+1, err)
			}
		}
	}
	if version != SchemaVersion {
		if _, err := c.ExecContext(ctx, `INSERT INTO schema_version (id, version) VALUES (1, ?)
			ON CONFLICT (id) DO UPDATE SET version = excluded.version`, SchemaVersion); err != nil {
			return fmt.Errorf("state: migrating %s: %w", s.path, err)
		}
	}
	if _, err := c.ExecContext(ctx, "COMMIT"); err != nil {
		return fmt.Errorf("state: migrating %s: %w", s.path, err)
	}
	return nil
}

// Path is the database file.
func (s *SQLite) Path() string { return s.path }

// BatchStats counts group commits since OpenSQLite.
type BatchStats struct {
	Updates      int64 // Update calls whose fn ran
	Batches      int64 // SQLite transactions they ran in
	LargestBatch int64
}

// Stats reports how well group commit batches.
func (s *SQLite) Stats() BatchStats {
	return BatchStats{Updates: s.updates.Load(), Batches: s.batches.Load(), LargestBatch: s.largest.Load()}
}

// Update implements Store: fn is queued for the writer goroutine, which runs
// it in a group-committed transaction inside its own savepoint; Update
// returns once that transaction has committed (or fn's error, after fn's
// changes were rolled back).
func (s *SQLite) Update(ctx context.Context, fn func(Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	req := &writeReq{ctx: ctx, fn: fn, done: make(chan writeResult, 1)}
	s.mu.RLock()
	if s.closed.Load() {
		s.mu.RUnlock()
		return ErrClosed
	}
	select {
	case s.queue <- req:
	case <-ctx.Done():
		s.mu.RUnlock()
		return ctx.Err()
	}
	s.mu.RUnlock()
	// Once queued, wait for the answer even if ctx ends: the writer skips
	// fn if ctx is done when its turn comes, but once fn runs, only the
	// commit says whether it happened.
	res := <-req.done
	if res.panicked {
		// Re-raise in the caller, keeping an error value's identity.
		if err, ok := res.panicVal.(error); ok {
			panic(fmt.Errorf("%w\n\npanic in a state.Update fn, re-raised in its caller; original stack:\n%s", err, res.stack))
		}
		panic(fmt.Sprintf("%v\n\npanic in a state.Update fn, re-raised in its caller; original stack:\n%s", res.panicVal, res.stack))
	}
	return res.err
}

// View implements Store on a read connection: the snapshot is the database
// as of the first read in fn; writes committed later are not seen.
func (s *SQLite) View(ctx context.Context, fn func(Tx) error) error {
	if s.closed.Load() {
		return ErrClosed
	}
	rtx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		if errors.Is(err, sql.ErrConnDone) || strings.Contains(err.Error(), "database is closed") {
			return ErrClosed
		}
		return fmt.Errorf("state: %w", err)
	}
	defer rtx.Rollback()
	var unprepared []string
	tx := &sqlTx{s: s, txGuard: txGuard{readOnly: true}, r: readRunner{s: s, ctx: ctx, tx: rtx, unprepared: &unprepared}}
	defer func() { tx.done = true }()
	err = fn(tx)
	tx.done = true
	_ = rtx.Rollback()
	// This View's connection is back in the pool: the queries it used for
	// the first time are prepared for the pool now.
	s.prepareReads(ctx, unprepared)
	return err
}

// Close stops accepting Updates, lets the writer finish every queued one,
// and closes the database.
func (s *SQLite) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed.Store(true)
		close(s.queue)
		s.mu.Unlock()
		<-s.writerDone
		s.closeErr = s.closeConns()
	})
	return s.closeErr
}

func (s *SQLite) closeConns() error {
	var errs []error
	for _, st := range s.wstmt {
		st.Close()
	}
	s.rmu.Lock()
	for _, st := range s.rstmts {
		st.Close()
	}
	s.rmu.Unlock()
	if s.rdb != nil {
		errs = append(errs, s.rdb.Close())
	}
	if s.wconn != nil {
		errs = append(errs, s.wconn.Close())
	}
	errs = append(errs, s.wdb.Close())
	return errors.Join(errs...)
}

// Check runs SQLite's integrity_check and foreign_key_check.
func (s *SQLite) Check(ctx context.Context) error {
	rows, err := s.rdb.QueryContext(ctx, "PRAGMA integrity_check")
	if err != nil {
		return fmt.Errorf("state: integrity check: %w", err)
	}
	var problems []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			rows.Close()
			return fmt.Errorf("state: integrity check: %w", err)
		}
		if line != "ok" {
			problems = append(problems, line)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("state: integrity check: %w", err)
	}
	fk, err := s.rdb.QueryContext(ctx, "PRAGMA foreign_key_check")
	if err != nil {
		return fmt.Errorf("state: foreign key check: %w", err)
	}
	for fk.Next() {
		problems = append(problems, "foreign key violation")
	}
	fk.Close()
	if len(problems) > 0 {
		return fmt.Errorf("state: %s is damaged: %s", s.path, strings.Join(problems, "; "))
	}
	return nil
}

// writeLoop is the single writer. It takes whatever is queued (at most
// maxBatch) and commits it as one transaction; while it commits, new
// requests pile up and form the next batch. No timer: an Update alone is
// committed at once, and batches grow exactly as fast as fsync is slower
// than the callers.
func (s *SQLite) writeLoop() {
	defer close(s.writerDone)
	batch := make([]*writeReq, 0, s.maxBatch)
	for req := range s.queue {
		batch = append(batch[:0], req)
	fill:
		for len(batch) < s.maxBatch {
			select {
			case r, ok := <-s.queue:
				if !ok {
					break fill
				}
				batch = append(batch, r)
			default:
				break fill
			}
		}
		s.runBatch(batch)
		clear(batch)
	}
}

// runBatch runs each fn of batch in its own savepoint of one transaction,
// commits once, then answers every caller.
func (s *SQLite) runBatch(batch []*writeReq) {
	results := make([]writeResult, len(batch))
	txs := make([]*sqlTx, len(batch))
	s.batchErr = nil
	abort := func(err error) {
		s.wexecRaw("ROLLBACK")
		// Undo what the functions that did run kept outside the store,
		// newest first, before any later transaction starts.
		for i := len(txs) - 1; i >= 0; i-- {
			if txs[i] != nil {
				txs[i].rolledBack()
			}
		}
		for i, r := range batch {
			if results[i].err != nil || results[i].panicked {
				r.done <- results[i] // it failed on its own anyway
			} else {
				r.done <- writeResult{err: fmt.Errorf("state: transaction aborted, nothing kept: %w", err)}
			}
		}
	}
	if err := s.wexecRaw("BEGIN IMMEDIATE"); err != nil {
		for _, r := range batch {
			r.done <- writeResult{err: fmt.Errorf("state: begin: %w", err)}
		}
		return
	}
	n := int64(0)
	for i, r := range batch {
		if err := r.ctx.Err(); err != nil {
			results[i].err = err
			continue
		}
		if err := s.wexecRaw("SAVEPOINT fn"); err != nil {
			abort(err)
			return
		}
		n++
		tx := &sqlTx{s: s, r: writeRunner{s: s}}
		txs[i] = tx
		results[i] = runFn(r.fn, tx)
		tx.done = true
		if s.batchErr != nil {
			abort(s.batchErr)
			return
		}
		if results[i].err != nil || results[i].panicked {
			txs[i] = nil
			tx.rolledBack()
			if err := s.wexecRaw("ROLLBACK TO fn"); err != nil {
				abort(err)
				return
			}
		}
		if err := s.wexecRaw("RELEASE fn"); err != nil {
			abort(err)
			return
		}
	}
	if err := s.wexecRaw("COMMIT"); err != nil {
		abort(fmt.Errorf("commit: %w", err))
		return
	}
	for _, tx := range txs {
		if tx != nil {
			tx.committed()
		}
	}
	s.updates.Add(n)
	s.batches.Add(1)
	for l := s.largest.Load(); n > l && !s.largest.CompareAndSwap(l, n); l = s.largest.Load() {
	}
	for i, r := range batch {
		r.done <- results[i]
	}
}

func runFn(fn func(Tx) error, tx Tx) (res writeResult) {
	defer func() {
		if v := recover(); v != nil {
			res = writeResult{panicked: true, panicVal: v, stack: debug.Stack()}
		}
	}()
	return writeResult{err: fn(tx)}
}

// wexecRaw runs a control statement (BEGIN, SAVEPOINT, COMMIT…) on the
// write connection. It never uses a caller's context: interrupting a
// statement inside a transaction may roll back the whole batch.
// They are prepared once, like every statement on the write connection.
func (s *SQLite) wexecRaw(q string) error {
	st, ok := s.wstmt[q]
	if !ok {
		var err error
		if st, err = s.wconn.PrepareContext(context.Background(), q); err != nil {
			return err
		}
		s.wstmt[q] = st
	}
	_, err := st.ExecContext(context.Background())
	return err
}

// runner runs the statements of one transaction.
type runner interface {
	exec(q string, args ...any) (sql.Result, error)
	query(q string, args ...any) (*sql.Rows, error)
}

type writeRunner struct{ s *SQLite }

func (w writeRunner) stmt(q string) (*sql.Stmt, error) {
	if w.s.batchErr != nil {
		return nil, w.s.batchErr
	}
	st, ok := w.s.wstmt[q]
	if !ok {
		var err error
		if st, err = w.s.wconn.PrepareContext(context.Background(), q); err != nil {
			return nil, w.s.noteErr(err)
		}
		w.s.wstmt[q] = st
	}
	return st, nil
}

func (w writeRunner) exec(q string, args ...any) (sql.Result, error) {
	st, err := w.stmt(q)
	if err != nil {
		return nil, err
	}
	r, err := st.ExecContext(context.Background(), args...)
	return r, w.s.noteErr(err)
}

func (w writeRunner) query(q string, args ...any) (*sql.Rows, error) {
	st, err := w.stmt(q)
	if err != nil {
		return nil, err
	}
	rows, err := st.QueryContext(context.Background(), args...)
	return rows, w.s.noteErr(err)
}

// noteErr remembers an error after which SQLite may have rolled back the
// whole transaction (https://sqlite.org/lang_transaction.html: "Response To
// Errors Within A Transaction"), so that the batch is aborted rather than
// half-committed.
func (s *SQLite) noteErr(err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_BUSY, sqlite3.SQLITE_NOMEM,
			sqlite3.SQLITE_INTERRUPT, sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB:
			if s.batchErr == nil {
				s.batchErr = err
			}
		}
	}
	return err
}

type readRunner struct {
	s   *SQLite
	ctx context.Context
	tx  *sql.Tx
	// unprepared collects the queries this View prepared on its own
	// connection (View prepares them for the pool when it ends).
	unprepared *[]string
}

// stmt returns q's statement on this View's transaction: the pool's
// prepared statement, or — q's first use — one prepared on the
// transaction's own connection. Preparing on the pool here would wait for
// a second connection while this one is held: with every read connection
// in a View doing so, none would ever come free.
func (r readRunner) stmt(q string) (*sql.Stmt, error) {
	r.s.rmu.Lock()
	st, ok := r.s.rstmts[q]
	r.s.rmu.Unlock()
	if !ok {
		*r.unprepared = append(*r.unprepared, q)
		return r.tx.PrepareContext(r.ctx, q)
	}
	return r.tx.StmtContext(r.ctx, st), nil
}

// prepareReads prepares queries for the read pool (holding no connection
// while it waits for one); a failure is left for a later View to retry.
func (s *SQLite) prepareReads(ctx context.Context, qs []string) {
	for _, q := range qs {
		if s.closed.Load() {
			return
		}
		s.rmu.Lock()
		_, ok := s.rstmts[q]
		s.rmu.Unlock()
		if ok {
			continue
		}
		st, err := s.rdb.PrepareContext(ctx, q)
		if err != nil {
			return
		}
		s.rmu.Lock()
		if _, ok := s.rstmts[q]; ok {
			st.Close()
		} else {
			s.rstmts[q] = st
		}
		s.rmu.Unlock()
	}
}

func (r readRunner) exec(q string, args ...any) (sql.Result, error) {
	return nil, ErrReadOnly
}

func (r readRunner) query(q string, args ...any) (*sql.Rows, error) {
	st, err := r.stmt(q)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(r.ctx, args...)
}

// sqlTx implements Tx over a runner.
type sqlTx struct {
	txGuard
	s *SQLite
	r runner
}

func wrap(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("state: %w", err)
}

func isConstraint(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	return se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
}

// queryRow runs a query that returns at most one row and scans it.
func (tx *sqlTx) queryRow(dest []any, q string, args ...any) (found bool, err error) {
	rows, err := tx.r.query(q, args...)
	if err != nil {
		return false, wrap(err)
	}
	defer rows.Close()
	if !rows.Next() {
		return false, wrap(rows.Err())
	}
	if err := rows.Scan(dest...); err != nil {
		return false, wrap(err)
	}
	return true, wrap(rows.Close())
}

// queryList scans rows of (seq, data) or (data) into values.
func queryList[T any](tx *sqlTx, withSeq bool, decodeFn func(data []byte, seq int64) (T, error), q string, args ...any) ([]T, error) {
	rows, err := tx.r.query(q, args...)
	if err != nil {
		return nil, wrap(err)
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		var seq int64
		var data []byte
		if withSeq {
			err = rows.Scan(&seq, &data)
		} else {
			err = rows.Scan(&data)
		}
		if err != nil {
			return nil, wrap(err)
		}
		v, err := decodeFn(data, seq)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(err)
	}
	return out, nil
}

func decoder[T any](kind string) func([]byte, int64) (T, error) {
	return func(data []byte, _ int64) (T, error) { return decode[T](kind, data) }
}

func affected(res sql.Result, kind, key string) error {
	n, err := res.RowsAffected()
	if err != nil {
		return wrap(err)
	}
	if n == 0 {
		return notFound(kind, key)
	}
	return nil
}

func (tx *sqlTx) PutTenant(t api.Tenant) error {
	if err := tx.write(); err != nil {
		return err
	}
	if err := checkKey("tenant", t.Name); err != nil {
		return err
	}
	data, err := json.Marshal(t)
	if err != nil {
		return err
	}
	_, err = tx.r.exec(`INSERT INTO tenants (name, data) VALUES (?, ?)
		ON CONFLICT (name) DO UPDATE SET data = excluded.data`, t.Name, data)
	return wrap(err)
}

func (tx *sqlTx) GetTenant(name string) (api.Tenant, error) {
	if err := tx.read(); err != nil {
		return api.Tenant{}, err
	}
	var data []byte
	found, err := tx.queryRow([]any{&data}, `SELECT data FROM tenants WHERE name = ?`, name)
	if err != nil {
		return api.Tenant{}, err
	}
	if !found {
		return api.Tenant{}, notFound("tenant", name)
	}
	return decode[api.Tenant]("tenant", data)
}

func (tx *sqlTx) ListTenants() ([]api.Tenant, error) {
	if err := tx.read(); err != nil {
		return nil, err
	}
	return queryList(tx, false, decoder[api.Tenant]("tenant"), `SELECT data FROM tenants ORDER BY name`)
}

func (tx *sqlTx) DeleteTenant(name string) error {
	if err := tx.write(); err != nil {
		return err
	}
	res, err := tx.r.exec(`DELETE FROM tenants WHERE name = ?`, name)
	if err != nil {
		return wrap(err)
	}
	if err := affected(res, "tenant", name); err != nil {
		return err
	}
	_, err = tx.r.exec(`DELETE FROM usage WHERE tenant = ?`, name)
	return wrap(err)
}

func (tx *sqlTx) CreateToken(t api.Token, hash []byte) error {
	if err := tx.write(); err != nil {
		return err
	}
	if err := checkKey("token", t.ID); err != nil {
		return err
	}
	if len(hash) == 0 {
		return checkKey("token hash", "")
	}
	data, err := encodeToken(t)
	if err != nil {
		return err
	}
	_, err = tx.r.exec(`INSERT INTO tokens (id, hash, tenant, role, data) VALUES (?, ?, ?, ?, ?)`,
		t.ID, hash, t.Tenant, string(t.Role), data)
	if isConstraint(err) {
		return exists("token", t.ID)
	}
	return wrap(err)
}

func (tx *sqlTx) TokenByHash(hash []byte) (api.Token, error) {
	if err := tx.read(); err != nil {
		return api.Token{}, err
	}
	if len(hash) == 0 {
		return api.Token{}, errTokenHashNotFound
	}
	var data []byte
	found, err := tx.queryRow([]any{&data}, `SELECT data FROM tokens WHERE hash = ?`, hash)
	if err != nil {
		return api.Token{}, err
	}
	if !found {
		return api.Token{}, errTokenHashNotFound
	}
	return decode[api.Token]("token", data)
}

func (tx *sqlTx) ListTokens() ([]api.Token, error) {
	if err := tx.read(); err != nil {
		return nil, err
	}
	return queryList(tx, false, decoder[api.Token]("token"), `SELECT data FROM tokens ORDER BY id`)
}

func (tx *sqlTx) DeleteToken(id string) error {
	if err := tx.write(); err != nil {
		return err
	}
	res, err := tx.r.exec(`DELETE FROM tokens WHERE id = ?`, id)
	if err != nil {
		return wrap(err)
	}
	return affected(res, "token", id)
}

func (tx *sqlTx) putClaimNodes(seq int64, c api.Claim, replace bool) error {
	if replace {
		if _, err := tx.r.exec(`DELETE FROM claim_nodes WHERE seq = ?`, seq); err != nil {
			return wrap(err)
		}
	}
	for _, n := range ClaimNodes(c) {
		if _, err := tx.r.exec(`INSERT INTO claim_nodes (node, seq) VALUES (?, ?)`, n, seq); err != nil {
			return wrap(err)
		}
	}
	return nil
}

func (tx *sqlTx) CreateClaim(c *api.Claim) error {
	if err := tx.write(); err != nil {
		return err
	}
	if err := checkKey("claim", c.ID); err != nil {
		return err
	}
	data, err := encodeClaim(*c)
	if err != nil {
		return err
	}
	res, err := tx.r.exec(`INSERT INTO claims (id, tenant, state, priority, ended, data) VALUES (?, ?, ?, ?, ?, ?)`,
		c.ID, c.Tenant, string(c.State), c.Spec.Priority, endedArg(*c), data)
	if isConstraint(err) {
		return exists("claim", c.ID)
	}
	if err != nil {
		return wrap(err)
	}
	seq, err := res.LastInsertId()
	if err != nil {
		return wrap(err)
	}
	if err := tx.putClaimNodes(seq, *c, false); err != nil {
		return err
	}
	c.Seq = seq
	return nil
}

func (tx *sqlTx) GetClaim(id string) (api.Claim, error) {
	if err := tx.read(); err != nil {
		return api.Claim{}, err
	}
	var seq int64
	var data []byte
	found, err := tx.queryRow([]any{&seq, &data}, `SELECT seq, data FROM claims WHERE id = ?`, id)
	if err != nil {
		return api.Claim{}, err
	}
	if !found {
		return api.Claim{}, notFound("claim", id)
	}
	return decodeClaim(data, seq)
}

func (tx *sqlTx) ListClaims(f ClaimFilter) ([]api.Claim, error) {
	if err := tx.read(); err != nil {
		return nil, err
	}
	// One of a few fixed statements, so that each is prepared once.
	var where []string
	var args []any
	if f.Tenant != "" {
		where = append(where, `tenant = ?`)
		args = append(args, f.Tenant)
	}
	if len(f.States) > 0 {
		states, err := json.Marshal(f.States)
		if err != nil {
			return nil, err
		}
		where = append(where, `state IN (SELECT value FROM json_each(?))`)
		args = append(args, string(states))
	}
	if f.Node != "" {
		where = append(where, `seq IN (SELECT seq FROM claim_nodes WHERE node = ?)`)
		args = append(args, f.Node)
	}
	if f.AfterSeq > 0 {
		where = append(where, `seq > ?`)
		args = append(args, f.AfterSeq)
	}
	q := `SELECT seq, data FROM claims`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	q += ` ORDER BY seq`
	if f.Limit > 0 {
		q += ` LIMIT ?`
		args = append(args, f.Limit)
	}
	return queryList(tx, true, decodeClaim, q, args...)
}

func (tx *sqlTx) UpdateClaim(c api.Claim) error {
	if err := tx.write(); err != nil {
		return err
	}
	data, err := encodeClaim(c)
	if err != nil {
		return err
	}
	var seq int64
	found, err := tx.queryRow([]any{&seq}, `UPDATE claims SET tenant = ?, state = ?, priority = ?, ended = ?, data = ?
		WHERE id = ? RETURNING seq`, c.Tenant, string(c.State), c.Spec.Priority, endedArg(c), data, c.ID)
	if err != nil {
		return err
	}
	if !found {
		return notFound("claim", c.ID)
	}
	return tx.putClaimNodes(seq, c, true)
}

func (tx *sqlTx) PutNode(n api.Node) error {
	if err := tx.write(); err != nil {
		return err
	}
	if err := checkKey("node", n.Name); err != nil {
		return err
	}
	data, err := json.Marshal(n)
	if err != nil {
		return err
	}
	_, err = tx.r.exec(`INSERT INTO nodes (name, data) VALUES (?, ?)
		ON CONFLICT (name) DO UPDATE SET data = excluded.data`, n.Name, data)
	return wrap(err)
}

func (tx *sqlTx) GetNode(name string) (api.Node, error) {
	if err := tx.read(); err != nil {
		return api.Node{}, err
	}
	var data []byte
	found, err := tx.queryRow([]any{&data}, `SELECT data FROM nodes WHERE name = ?`, name)
	if err != nil {
		return api.Node{}, err
	}
	if !found {
		return api.Node{}, notFound("node", name)
	}
	return decode[api.Node]("node", data)
}

func (tx *sqlTx) ListNodes() ([]api.Node, error) {
	if err := tx.read(); err != nil {
		return nil, err
	}
	return queryList(tx, false, decoder[api.Node]("node"), `SELECT data FROM nodes ORDER BY name`)
}

func (tx *sqlTx) DeleteNode(name string) error {
	if err := tx.write(); err != nil {
		return err
	}
	res, err := tx.r.exec(`DELETE FROM nodes WHERE name = ?`, name)
	if err != nil {
		return wrap(err)
	}
	return affected(res, "node", name)
}

func (tx *sqlTx) AppendEvent(e *api.Event) error {
	if err := tx.write(); err != nil {
		return err
	}
	data, err := encodeEvent(*e)
	if err != nil {
		return err
	}
	res, err := tx.r.exec(`INSERT INTO events (kind, at, tenant, data) VALUES (?, ?, ?, ?)`, e.Kind, stamp(e.Time), e.Tenant, data)
	if err != nil {
		return wrap(err)
	}
	seq, err := res.LastInsertId()
	if err != nil {
		return wrap(err)
	}
	e.Seq = seq
	return nil
}

func (tx *sqlTx) EventsSince(seq int64, limit int) ([]api.Event, error) {
	return tx.ListEvents(EventFilter{AfterSeq: max(seq, 0), Limit: max(limit, 0)})
}

func (tx *sqlTx) ListEvents(f EventFilter) ([]api.Event, error) {
	if err := tx.read(); err != nil {
		return nil, err
	}
	if err := f.check(); err != nil {
		return nil, err
	}
	limit := f.Limit
	if limit == 0 {
		limit = -1 // SQLite: no limit
	}
	if f.Tenant != "" {
		return queryList(tx, true, decodeEvent, `SELECT seq, data FROM events WHERE tenant = ? AND seq > ? ORDER BY seq LIMIT ?`, f.Tenant, f.AfterSeq, limit)
	}
	return queryList(tx, true, decodeEvent, `SELECT seq, data FROM events WHERE seq > ? ORDER BY seq LIMIT ?`, f.AfterSeq, limit)
}

// endedArg is the claims.ended column of c: its end stamp, NULL while live.
func endedArg(c api.Claim) any {
	if at, ok := ended(c); ok {
		return at
	}
	return nil
}

func (tx *sqlTx) PruneEvents(before time.Time, keep, limit int) (int, error) {
	if err := tx.write(); err != nil {
		return 0, err
	}
	// The key just past the newest keep: a walk of keep entries of the
	// index, newest first.
	var keyK pruneKey
	hasK := false
	if keep > 0 {
		var err error
		if hasK, err = tx.queryRow([]any{&keyK.at, &keyK.seq},
			`SELECT at, seq FROM events ORDER BY at DESC, seq DESC LIMIT 1 OFFSET ?`, keep); err != nil {
			return 0, err
		}
	}
	cut, ok := pruneCut(before, keyK, hasK)
	if !ok {
		return 0, nil
	}
	res, err := tx.r.exec(`DELETE FROM events WHERE seq IN (
		SELECT seq FROM events WHERE (at, seq) <= (?, ?) ORDER BY at, seq LIMIT ?)`, cut.at, cut.seq, sqlLimit(limit))
	return rowsAffected(res, err)
}

func (tx *sqlTx) PruneClaims(before time.Time, keep, limit int) (int, error) {
	if err := tx.write(); err != nil {
		return 0, err
	}
	var keyK pruneKey
	hasK := false
	if keep > 0 {
		var err error
		if hasK, err = tx.queryRow([]any{&keyK.at, &keyK.seq},
			`SELECT ended, seq FROM claims WHERE ended IS NOT NULL ORDER BY ended DESC, seq DESC LIMIT 1 OFFSET ?`, keep); err != nil {
			return 0, err
		}
	}
	cut, ok := pruneCut(before, keyK, hasK)
	if !ok {
		return 0, nil
	}
	// The state test is a second guard: ended is set on final claims only.
	res, err := tx.r.exec(`DELETE FROM claims WHERE seq IN (
		SELECT seq FROM claims WHERE ended IS NOT NULL AND (ended, seq) <= (?, ?) AND +state IN ('released', 'failed')
		ORDER BY ended, seq LIMIT ?)`, cut.at, cut.seq, sqlLimit(limit))
	return rowsAffected(res, err)
}

// sqlLimit is a LIMIT argument: -1 (none) for limit <= 0.
func sqlLimit(limit int) int {
	if limit <= 0 {
		return -1
	}
	return limit
}

func rowsAffected(res sql.Result, err error) (int, error) {
	if err != nil {
		return 0, wrap(err)
	}
	n, err := res.RowsAffected()
	return int(n), wrap(err)
}

func (tx *sqlTx) AddUsage(tenant string, used api.Consumption) error {
	if err := tx.write(); err != nil {
		return err
	}
	if err := checkKey("usage", tenant); err != nil {
		return err
	}
	if err := checkUsage(used); err != nil {
		return err
	}
	_, err := tx.r.exec(`INSERT INTO usage (tenant, gpu_seconds, sm_seconds, memory_mib_seconds) VALUES (?, ?, ?, ?)
		ON CONFLICT (tenant) DO UPDATE SET
			gpu_seconds = gpu_seconds + excluded.gpu_seconds,
			sm_seconds = sm_seconds + excluded.sm_seconds,
			memory_mib_seconds = memory_mib_seconds + excluded.memory_mib_seconds`,
		tenant, used.GPUSeconds, used.SMSeconds, used.MemoryMiBSeconds)
	return wrap(err)
}

func (tx *sqlTx) Usage(tenant string) (api.Usage, error) {
	if err := tx.read(); err != nil {
		return api.Usage{}, err
	}
	u := api.Usage{Tenant: tenant}
	if _, err := tx.queryRow([]any{&u.GPUSeconds, &u.SMSeconds, &u.MemoryMiBSec},
		`SELECT gpu_seconds, sm_seconds, memory_mib_seconds FROM usage WHERE tenant = ?`, tenant); err != nil {
		return api.Usage{}, err
	}
	return u, nil
}
