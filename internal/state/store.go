package state

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
)

// Store is the control plane's persistent state. All access goes through
// transactions: Update for changes, View for consistent reads. A Store is
// safe for concurrent use; a Tx is not (use it only from the goroutine that
// runs fn, and not after fn returns).
//
// Do not call Update or View from inside fn: a nested Update deadlocks.
type Store interface {
	// Update runs fn in a read-write transaction. If fn returns an error
	// (or panics) nothing it did is kept and Update returns fn's error
	// unchanged (or re-panics). When Update returns nil, everything fn did
	// is committed (durably, for a durable backend). If ctx is done before
	// fn starts, fn does not run and Update returns ctx.Err(); once fn has
	// started, Update waits for the outcome.
	Update(ctx context.Context, fn func(Tx) error) error
	// View runs fn in a read-only transaction that sees one consistent
	// snapshot. Write methods of its Tx fail with ErrReadOnly.
	View(ctx context.Context, fn func(Tx) error) error
	// Close waits for queued Updates to finish and releases the store.
	// Later calls fail with ErrClosed.
	Close() error
}

// Tx is one transaction. Records go in and come out as deep copies: a
// caller cannot change a stored record except through Tx methods.
// Get and Delete methods fail with an error wrapping ErrNotFound; Create
// methods with one wrapping ErrExists.
type Tx interface {
	// PutTenant creates or replaces a tenant.
	PutTenant(api.Tenant) error
	GetTenant(name string) (api.Tenant, error)
	// ListTenants returns every tenant ordered by name.
	ListTenants() ([]api.Tenant, error)
	// DeleteTenant removes a tenant and its accumulated usage. Its tokens
	// and claims are the caller's business.
	DeleteTenant(name string) error

	// CreateToken stores a token under the hash of its secret. The Secret
	// field is never stored. ErrExists when the ID or the hash is taken.
	CreateToken(t api.Token, hash []byte) error
	TokenByHash(hash []byte) (api.Token, error)
	// ListTokens returns every token ordered by ID.
	ListTokens() ([]api.Token, error)
	DeleteToken(id string) error

	// CreateClaim stores a new claim and assigns c.Seq: claim seqs are
	// monotonic and a committed seq is never reused. QueuePosition and
	// LeaseExpires are not stored. ErrExists on a duplicate ID.
	CreateClaim(c *api.Claim) error
	GetClaim(id string) (api.Claim, error)
	// ListClaims returns the claims that match f, ordered by Seq.
	ListClaims(f ClaimFilter) ([]api.Claim, error)
	// UpdateClaim replaces a stored claim (ErrNotFound if absent). The
	// stored Seq is kept whatever c.Seq says; QueuePosition is not stored.
	UpdateClaim(c api.Claim) error
	// PruneClaims deletes at most limit final claims (released, failed;
	// limit <= 0: no bound), those that ended first going first (by
	// Updated, then Seq): the claims that ended before before (zero: no
	// age bound) and those beyond the keep that ended last (keep <= 0: no
	// count bound). Live claims are never deleted, and a deleted claim's
	// seq is never reused. It returns how many it deleted.
	PruneClaims(before time.Time, keep, limit int) (int, error)

	// PutNode creates or replaces a node.
	PutNode(n api.Node) error
	GetNode(name string) (api.Node, error)
	// ListNodes returns every node ordered by name.
	ListNodes() ([]api.Node, error)
	DeleteNode(name string) error

	// AppendEvent stores an event and assigns e.Seq (monotonic).
	AppendEvent(e *api.Event) error
	// EventsSince returns the events with Seq > seq in Seq order, at most
	// limit of them (limit <= 0: all). It is ListEvents with no tenant.
	EventsSince(seq int64, limit int) ([]api.Event, error)
	// PruneEvents deletes at most limit events (limit <= 0: no bound),
	// oldest first (by Time, then Seq): those whose Time is before before
	// (zero: no age bound) and those beyond the newest keep (keep <= 0:
	// no count bound). A deleted event's seq is never reused. It returns
	// how many it deleted.
	PruneEvents(before time.Time, keep, limit int) (int, error)
	// ListEvents returns the events that match f in Seq order. With a
	// tenant it reads that tenant's events only, through an index: its
	// cost does not grow with other tenants' events.
	ListEvents(f EventFilter) ([]api.Event, error)

	// AddUsage adds to a tenant's accumulated GPU-seconds, SM-seconds and
	// MiB-seconds (all finite and >= 0). The tenant need not exist.
	AddUsage(tenant string, used api.Consumption) error
	// Usage returns a tenant's accumulated seconds (Tenant, GPUSeconds,
	// SMSeconds and MemoryMiBSec; zero when nothing was added). The live fields (Claims,
	// MemoryMiB, ComputePercent) are left zero for the server to fill.
	Usage(tenant string) (api.Usage, error)

	// PutService creates or replaces a service (by name).
	PutService(s api.Service) error
	GetService(name string) (api.Service, error)
	// ListServices returns every service ordered by name.
	ListServices() ([]api.Service, error)
	DeleteService(name string) error

	// OnCommit registers f to run once the transaction that holds this
	// function's changes has committed (durably, for a durable backend),
	// before Update returns. With group commit, later functions of the
	// same batch run before it (they share the one COMMIT): anything a
	// later function must see has to change inside the function itself,
	// with an OnRollback hook to undo it. In a View it is never called.
	OnCommit(f func())
	// OnRollback registers f to run when this function's changes are
	// thrown away: the function failed or panicked, or the transaction it
	// ran in did not commit. Hooks run newest first, before any later
	// Update's function runs. A caller that keeps state outside the store
	// in step with it (the server's scheduler) undoes it here, so that the
	// two never see different sequences of changes.
	OnRollback(f func())
}

// ClaimFilter selects claims. Zero fields match everything.
type ClaimFilter struct {
	// Tenant matches claims of this tenant.
	Tenant string
	// States matches claims in any of these states.
	States []api.ClaimState
	// Node matches claims that touch the node (see ClaimNodes).
	Node string
	// AfterSeq keeps claims with Seq > AfterSeq (a cursor: the Seq of the
	// last claim of the previous page).
	AfterSeq int64
	// Limit returns at most this many claims (0: all).
	Limit int
}

// EventFilter selects events. Zero fields match everything.
type EventFilter struct {
	// Tenant matches events of this tenant (Event.Tenant).
	Tenant string
	// AfterSeq keeps events with Seq > AfterSeq.
	AfterSeq int64
	// Limit returns at most this many events (0: all).
	Limit int
}

func (f EventFilter) check() error {
	if f.AfterSeq < 0 {
		return fmt.Errorf("state: EventFilter.AfterSeq %d: want a seq >= 0", f.AfterSeq)
	}
	if f.Limit < 0 {
		return fmt.Errorf("state: EventFilter.Limit %d: want >= 0 (0: all)", f.Limit)
	}
	return nil
}

// Errors of the store. Errors returned for a missing or duplicate record
// wrap ErrNotFound or ErrExists and name the record: `claim "c-12": not
// found`.
var (
	ErrNotFound = errors.New("not found")
	ErrExists   = errors.New("already exists")
	// ErrReadOnly is returned by a write method called inside View.
	ErrReadOnly = errors.New("state: write in a read-only transaction")
	// ErrClosed is returned by Update and View after Close, and by a Tx
	// used after its fn returned.
	ErrClosed = errors.New("state: store or transaction closed")
)

// errTokenHashNotFound does not print the hash: it is derived from a secret.
var errTokenHashNotFound = fmt.Errorf("token (by secret hash): %w", ErrNotFound)

func notFound(kind, key string) error { return fmt.Errorf("%s %q: %w", kind, key, ErrNotFound) }
func exists(kind, key string) error   { return fmt.Errorf("%s %q: %w", kind, key, ErrExists) }

// ClaimNodes returns the nodes a claim touches, sorted and without
// duplicates: the node it is pinned to (Spec.Node) and every node its
// allocation has a device on. ClaimFilter.Node matches these.
func ClaimNodes(c api.Claim) []string {
	var nodes []string
	if c.Spec.Node != "" {
		nodes = append(nodes, c.Spec.Node)
	}
	if c.Allocation != nil {
		for _, d := range c.Allocation.Devices {
			if d.Node != "" {
				nodes = append(nodes, d.Node)
			}
		}
	}
	slices.Sort(nodes)
	return slices.Compact(nodes)
}

func (f ClaimFilter) match(tenant string, state api.ClaimState, nodes []string) bool {
	if f.Tenant != "" && tenant != f.Tenant {
		return false
	}
	if len(f.States) > 0 && !slices.Contains(f.States, state) {
		return false
	}
	if f.Node != "" && !slices.Contains(nodes, f.Node) {
		return false
	}
	return true
}

// Validation and encoding shared by both backends, so that they store and
// return exactly the same thing.

func checkKey(kind, key string) error {
	if key == "" {
		return fmt.Errorf("state: %s with an empty key", kind)
	}
	return nil
}

func checkUsage(u api.Consumption) error {
	for _, v := range []float64{u.GPUSeconds, u.SMSeconds, u.MemoryMiBSeconds} {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return fmt.Errorf("state: usage must be finite and non-negative, got %v", v)
		}
	}
	return nil
}

// encodeClaim returns the stored form of a claim: Seq (kept in its own
// column), QueuePosition and LeaseExpires (answer-only fields) are zeroed.
func encodeClaim(c api.Claim) ([]byte, error) {
	c.Seq = 0
	c.QueuePosition = 0
	c.LeaseExpires = nil
	return json.Marshal(c)
}

func decodeClaim(data []byte, seq int64) (api.Claim, error) {
	var c api.Claim
	if err := json.Unmarshal(data, &c); err != nil {
		return api.Claim{}, fmt.Errorf("state: decoding claim: %w", err)
	}
	c.Seq = seq
	return c, nil
}

func encodeToken(t api.Token) ([]byte, error) {
	t.Secret = ""
	return json.Marshal(t)
}

func encodeEvent(e api.Event) ([]byte, error) {
	e.Seq = 0
	return json.Marshal(e)
}

func decodeEvent(data []byte, seq int64) (api.Event, error) {
	var e api.Event
	if err := json.Unmarshal(data, &e); err != nil {
		return api.Event{}, fmt.Errorf("state: decoding event: %w", err)
	}
	e.Seq = seq
	return e, nil
}

// stamp is a time as both backends index it: microseconds since the Unix
// epoch (exact for every time the server writes; SQLite's own date
// functions, used once to fill the column of rows written before it
// existed, keep milliseconds).
func stamp(t time.Time) int64 { return t.UnixMicro() }

// ended is the index key of a claim's end: its Updated when it is final,
// and none (false) while it is live.
func ended(c api.Claim) (int64, bool) {
	if !c.State.Final() {
		return 0, false
	}
	return stamp(c.Updated), true
}

// pruneKey orders what PruneEvents and PruneClaims delete: a stamp, then
// the seq.
type pruneKey struct{ at, seq int64 }

func (k pruneKey) less(o pruneKey) bool { return k.cmp(o) < 0 }

func (k pruneKey) cmp(o pruneKey) int {
	if c := cmp.Compare(k.at, o.at); c != 0 {
		return c
	}
	return cmp.Compare(k.seq, o.seq)
}

// pruneCut is the last key a prune may delete, given the age bound (all
// keys with at < before) and the count bound (keyK: the key just past
// the newest keep, if any); ok is false when neither bound deletes
// anything.
func pruneCut(before time.Time, keyK pruneKey, hasK bool) (cut pruneKey, ok bool) {
	if !before.IsZero() {
		cut, ok = pruneKey{at: stamp(before) - 1, seq: math.MaxInt64}, true
	}
	if hasK && (!ok || cut.less(keyK)) {
		cut, ok = keyK, true
	}
	return cut, ok
}

func decode[T any](kind string, data []byte) (T, error) {
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		return v, fmt.Errorf("state: decoding %s: %w", kind, err)
	}
	return v, nil
}
