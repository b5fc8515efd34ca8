// Package state is the control plane's store: tenants, tokens, claims,
// nodes, events and usage, behind a narrow transactional interface.
//
// The server sees only Store and Tx. Store.Update runs a function in a
// read-write transaction (all of it is kept, or none of it if the function
// returns an error or panics); Store.View runs one in a read-only
// transaction that sees a consistent snapshot. Records go in and come out as
// deep copies. Missing and duplicate records give errors that wrap
// ErrNotFound and ErrExists and name the record (`claim "c-12": not found`).
// Claims and events get a Seq from the store: monotonic, and never reused
// once committed, even after the record is pruned. Claims are ordered by Seq
// (FIFO); ClaimFilter selects them by tenant, states and node (ClaimNodes).
// PruneEvents and PruneClaims delete history past an age and a count, at
// most a given number of rows per call, oldest first (events by time, final
// claims by the time they ended); live claims are never pruned, and the
// tenants' usage totals are kept apart from claims.
//
// Two backends implement the same contract, checked by one test suite:
//
//   - Memory (NewMemory): maps behind a RWMutex, records kept JSON-encoded
//     as SQLite keeps them; Update keeps an undo log. It is the test fake
//     and `gpuslice serve --store memory`.
//   - SQLite (OpenSQLite): one database file through the pure-Go driver
//     modernc.org/sqlite.
//
// # SQLite settings
//
// The file is created with mode 0600 (SQLite gives its -wal and -shm files
// the same mode). The write connection runs with journal_mode=WAL,
// synchronous=FULL (every commit fsyncs the WAL, so an acknowledged Update
// survives kill -9 and power loss as far as SQLite and the disk guarantee),
// busy_timeout (SQLiteOptions.BusyTimeout, 5s) and foreign_keys=ON; Open
// verifies that they took effect. Views use a separate pool of read
// connections (query_only=ON); under WAL they read a snapshot while the
// writer writes. The queried fields are columns (claim id, seq, tenant,
// state, priority; a claim_nodes table for the nodes a claim touches, since
// an allocation may span several; since schema 4, an event's time and a
// final claim's end, in microseconds, indexed for pruning); the rest of
// each record is a JSON blob.
//
// The schema is versioned in a schema_version table and migrated on open by
// ordered steps (migrations) inside one transaction. A database whose
// version is above SchemaVersion (written by a newer gpuslice) is refused
// with ErrSchemaTooNew rather than half understood.
//
// # Group commit
//
// Every Update is queued to one writer goroutine. The writer takes the
// first queued request and then whatever else is already waiting, up to
// SQLiteOptions.MaxBatch (256), and runs them all in one BEGIN IMMEDIATE
// transaction, each function inside its own SAVEPOINT: a function that
// fails (or panics) is rolled back to its savepoint and gets its own error
// (or re-panics in its caller), and the others go on. Then the writer
// commits once (one fsync) and only after COMMIT returns answers every
// caller. There is no timer: a lone Update commits at once, and under load
// batches grow by themselves because requests pile up while the previous
// commit is syncing. Throughput is thus many claims per fsync while every
// acknowledged write is durable. If the transaction itself fails (COMMIT,
// or an I/O, disk-full or similar error after which SQLite abandons the
// transaction) nothing of the batch is kept and every caller whose function
// succeeded gets that error. A caller whose context is done before its
// function's turn comes is skipped and gets ctx.Err(); once a function has
// run, Update waits for the commit whatever the context says. Close stops
// new Updates, lets the writer drain the queue, then closes the database.
// Stats reports updates, batches and the largest batch.
//
// # Commit and rollback hooks
//
// Tx.OnCommit and Tx.OnRollback let a caller keep state outside the store
// in step with it. The server needs them because its scheduler keeps the
// allocator State, the queue and the quota counters in memory and changes
// them only inside Update functions, under its lock (internal/server/tx.go):
// the store runs functions one at a time in one order, so memory and store
// see the same sequence of changes, and every decision is made on the state
// the earlier ones left, including those whose commit is still in flight
// in the same batch. When a function's changes are thrown away, memory
// must not keep them: the server's OnRollback marks the scheduler stale and
// the next function rebuilds it from the store before deciding anything.
// OnCommit is for what may happen only once a change is durable: waking
// waiters, caches read outside transactions, metrics.
//
// A function's rollback hooks run once, newest first, before any later
// function runs and before its Update returns: in its own turn if it
// fails or panics (the writer then rolls back to its savepoint and goes
// on), or, when the whole transaction fails (COMMIT, or a statement
// after which SQLite abandons the transaction, even one the function
// ignored), those of every function of the batch that ran, newest first,
// before any caller is answered. Commit hooks run once COMMIT has
// returned, in the order the functions ran, before their Updates return
// and before the next transaction's first function. With group commit
// every function of a batch runs before that batch's COMMIT, so a function
// does not see the commit hooks of the earlier functions of its own batch
// (Memory, one transaction per Update, has no such window): what a later
// function must see is changed inside the function, with an OnRollback to
// undo it, never in an OnCommit. A View never calls either. Hooks run on
// the writer goroutine (SQLite) or under the store's lock (Memory): keep
// them short, and do not call the store from them.
//
// Functions given to Update run one at a time (on the writer goroutine, for
// SQLite): keep them short, since every other Update waits for them, and do
// slow work that need not see the latest state before calling Update or
// with a View. (The server does decide allocations inside its functions,
// because a decision must see every earlier one; BENCHMARKS.md measures
// what that costs.) Do not call Update or View from inside a transaction's
// function: a nested Update waits for itself.
package state
