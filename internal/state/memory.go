package state

import (
	"cmp"
	"context"
	"encoding/json"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
)

// Memory is an in-memory Store: the test fake, and the backend of
// `gpuslice serve --store memory` (state is lost on exit).
//
// Records are kept in their JSON encoding, exactly as the SQLite backend
// stores them, so that every record goes in and comes out as a deep copy and
// both backends return the same values. One RWMutex serialises Updates and
// lets Views run together; a View therefore sees a consistent snapshot, and
// an Update waits for running Views. An Update keeps an undo log and
// replays it backwards when fn fails or panics.
type Memory struct {
	mu     sync.RWMutex
	closed bool

	tenants     map[string][]byte
	tokens      map[string]memToken // by ID
	tokenByHash map[string]string   // hash → ID
	claims      map[string]memClaim // by ID
	claimOrder  []string            // IDs in Seq order
	// finals holds the final claims in the order PruneClaims deletes
	// them (by end, then seq), kept in step with every claim write.
	finals   []finalRef
	nodes    map[string][]byte
	services map[string][]byte
	events   []memEvent // in Seq order
	// tenantEvents indexes events by tenant: their seqs, in order
	// (ListEvents with a tenant reads only these; a pruned seq is
	// skipped).
	tenantEvents map[string][]int64
	usage        map[string]api.Consumption
	claimSeq     int64
	eventSeq     int64
}

type memToken struct {
	hash string
	data []byte
}

type memClaim struct {
	seq    int64
	tenant string
	state  api.ClaimState
	nodes  []string
	// ended is the claim's end stamp (final claims only, see ended).
	ended int64
	data  []byte
}

func newMemClaim(seq int64, c api.Claim, data []byte) memClaim {
	end, _ := ended(c)
	return memClaim{seq: seq, tenant: c.Tenant, state: c.State, nodes: ClaimNodes(c), ended: end, data: data}
}

// finalRef is a final claim in Memory.finals.
type finalRef struct {
	key pruneKey
	id  string
}

func cmpFinal(r finalRef, k pruneKey) int { return r.key.cmp(k) }

// indexFinal keeps m.finals in step with a claim write: the claim was
// old (had: it existed) and becomes now.
func (tx *memTx) indexFinal(old memClaim, had bool, now memClaim, id string) {
	m := tx.m
	oldFinal, nowFinal := had && old.state.Final(), now.state.Final()
	oldKey, nowKey := pruneKey{at: old.ended, seq: old.seq}, pruneKey{at: now.ended, seq: now.seq}
	if oldFinal == nowFinal && (!nowFinal || oldKey == nowKey) {
		return
	}
	if oldFinal {
		if i, ok := slices.BinarySearchFunc(m.finals, oldKey, cmpFinal); ok {
			ref := m.finals[i]
			m.finals = slices.Delete(m.finals, i, i+1)
			tx.undo = append(tx.undo, func() { m.finals = slices.Insert(m.finals, i, ref) })
		}
	}
	if nowFinal {
		i, _ := slices.BinarySearchFunc(m.finals, nowKey, cmpFinal)
		m.finals = slices.Insert(m.finals, i, finalRef{key: nowKey, id: id})
		tx.undo = append(tx.undo, func() { m.finals = slices.Delete(m.finals, i, i+1) })
	}
}

type memEvent struct {
	seq    int64
	at     int64 // stamp of the event's Time
	tenant string
	data   []byte
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	return &Memory{
		tenants:     map[string][]byte{},
		tokens:      map[string]memToken{},
		tokenByHash: map[string]string{},
		claims:      map[string]memClaim{},
		nodes:       map[string][]byte{},
		services:    map[string][]byte{},
		usage:       map[string]api.Consumption{},

		tenantEvents: map[string][]int64{},
	}
}

// Update implements Store.
func (m *Memory) Update(ctx context.Context, fn func(Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	tx := &memTx{m: m}
	ok := false
	defer func() {
		tx.done = true
		if !ok { // fn failed or panicked
			for i := len(tx.undo) - 1; i >= 0; i-- {
				tx.undo[i]()
			}
			tx.rolledBack()
			return
		}
		tx.committed()
	}()
	if err := fn(tx); err != nil {
		return err
	}
	ok = true
	return nil
}

// View implements Store.
func (m *Memory) View(ctx context.Context, fn func(Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return ErrClosed
	}
	tx := &memTx{m: m, txGuard: txGuard{readOnly: true}}
	defer func() { tx.done = true }()
	return fn(tx)
}

// Close implements Store.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}

type memTx struct {
	txGuard
	m    *Memory
	undo []func()
}

// txGuard is what both backends check before every read and write: a
// transaction used after its function returned, or a write in a View.
type txGuard struct {
	readOnly bool
	done     bool
	// hooks of a read-write transaction's function (OnCommit, OnRollback)
	onCommit, onRollback []func()
}

// OnCommit implements Tx.
func (g *txGuard) OnCommit(f func()) {
	if !g.readOnly && !g.done {
		g.onCommit = append(g.onCommit, f)
	}
}

// OnRollback implements Tx.
func (g *txGuard) OnRollback(f func()) {
	if !g.readOnly && !g.done {
		g.onRollback = append(g.onRollback, f)
	}
}

// committed runs the commit hooks in the order they were registered.
func (g *txGuard) committed() {
	for _, f := range g.onCommit {
		f()
	}
	g.onCommit, g.onRollback = nil, nil
}

// rolledBack runs the rollback hooks newest first.
func (g *txGuard) rolledBack() {
	for i := len(g.onRollback) - 1; i >= 0; i-- {
		g.onRollback[i]()
	}
	g.onCommit, g.onRollback = nil, nil
}

func (g *txGuard) read() error {
	if g.done {
		return ErrClosed
	}
	return nil
}

func (g *txGuard) write() error {
	if g.done {
		return ErrClosed
	}
	if g.readOnly {
		return ErrReadOnly
	}
	return nil
}

// setUndo records how to restore key in mp to what it is now.
func setUndo[V any](tx *memTx, mp map[string]V, key string) {
	old, had := mp[key]
	tx.undo = append(tx.undo, func() {
		if had {
			mp[key] = old
		} else {
			delete(mp, key)
		}
	})
}

func (tx *memTx) PutTenant(t api.Tenant) error {
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
	setUndo(tx, tx.m.tenants, t.Name)
	tx.m.tenants[t.Name] = data
	return nil
}

func (tx *memTx) GetTenant(name string) (api.Tenant, error) {
	if err := tx.read(); err != nil {
		return api.Tenant{}, err
	}
	data, ok := tx.m.tenants[name]
	if !ok {
		return api.Tenant{}, notFound("tenant", name)
	}
	return decode[api.Tenant]("tenant", data)
}

func (tx *memTx) ListTenants() ([]api.Tenant, error) {
	if err := tx.read(); err != nil {
		return nil, err
	}
	return listSorted[api.Tenant]("tenant", tx.m.tenants)
}

func listSorted[T any](kind string, mp map[string][]byte) ([]T, error) {
	keys := make([]string, 0, len(mp))
	for k := range mp {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]T, 0, len(keys))
	for _, k := range keys {
		v, err := decode[T](kind, mp[k])
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func (tx *memTx) DeleteTenant(name string) error {
	if err := tx.write(); err != nil {
		return err
	}
	if _, ok := tx.m.tenants[name]; !ok {
		return notFound("tenant", name)
	}
	setUndo(tx, tx.m.tenants, name)
	delete(tx.m.tenants, name)
	setUndo(tx, tx.m.usage, name)
	delete(tx.m.usage, name)
	return nil
}

func (tx *memTx) CreateToken(t api.Token, hash []byte) error {
	if err := tx.write(); err != nil {
		return err
	}
	if err := checkKey("token", t.ID); err != nil {
		return err
	}
	if len(hash) == 0 {
		return checkKey("token hash", "")
	}
	h := string(hash)
	if _, ok := tx.m.tokens[t.ID]; ok {
		return exists("token", t.ID)
	}
	if _, ok := tx.m.tokenByHash[h]; ok {
		return exists("token", t.ID)
	}
	data, err := encodeToken(t)
	if err != nil {
		return err
	}
	setUndo(tx, tx.m.tokens, t.ID)
	setUndo(tx, tx.m.tokenByHash, h)
	tx.m.tokens[t.ID] = memToken{hash: h, data: data}
	tx.m.tokenByHash[h] = t.ID
	return nil
}

func (tx *memTx) TokenByHash(hash []byte) (api.Token, error) {
	if err := tx.read(); err != nil {
		return api.Token{}, err
	}
	id, ok := tx.m.tokenByHash[string(hash)]
	if !ok {
		return api.Token{}, errTokenHashNotFound
	}
	return decode[api.Token]("token", tx.m.tokens[id].data)
}

func (tx *memTx) ListTokens() ([]api.Token, error) {
	if err := tx.read(); err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(tx.m.tokens))
	for id := range tx.m.tokens {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]api.Token, 0, len(ids))
	for _, id := range ids {
		t, err := decode[api.Token]("token", tx.m.tokens[id].data)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

func (tx *memTx) DeleteToken(id string) error {
	if err := tx.write(); err != nil {
		return err
	}
	t, ok := tx.m.tokens[id]
	if !ok {
		return notFound("token", id)
	}
	setUndo(tx, tx.m.tokens, id)
	setUndo(tx, tx.m.tokenByHash, t.hash)
	delete(tx.m.tokens, id)
	delete(tx.m.tokenByHash, t.hash)
	return nil
}

func (tx *memTx) CreateClaim(c *api.Claim) error {
	if err := tx.write(); err != nil {
		return err
	}
	if err := checkKey("claim", c.ID); err != nil {
		return err
	}
	if _, ok := tx.m.claims[c.ID]; ok {
		return exists("claim", c.ID)
	}
	data, err := encodeClaim(*c)
	if err != nil {
		return err
	}
	m := tx.m
	oldSeq, oldLen := m.claimSeq, len(m.claimOrder)
	setUndo(tx, m.claims, c.ID)
	tx.undo = append(tx.undo, func() {
		m.claimSeq = oldSeq
		clear(m.claimOrder[oldLen:]) // drop references
		m.claimOrder = m.claimOrder[:oldLen]
	})
	m.claimSeq++
	m.claims[c.ID] = newMemClaim(m.claimSeq, *c, data)
	tx.indexFinal(memClaim{}, false, m.claims[c.ID], c.ID)
	m.claimOrder = append(m.claimOrder, c.ID)
	c.Seq = m.claimSeq
	return nil
}

func (tx *memTx) GetClaim(id string) (api.Claim, error) {
	if err := tx.read(); err != nil {
		return api.Claim{}, err
	}
	mc, ok := tx.m.claims[id]
	if !ok {
		return api.Claim{}, notFound("claim", id)
	}
	return decodeClaim(mc.data, mc.seq)
}

func (tx *memTx) ListClaims(f ClaimFilter) ([]api.Claim, error) {
	if err := tx.read(); err != nil {
		return nil, err
	}
	out := []api.Claim{}
	order := tx.m.claimOrder
	if f.AfterSeq > 0 { // claimOrder is in Seq order
		order = order[sort.Search(len(order), func(i int) bool { return tx.m.claims[order[i]].seq > f.AfterSeq }):]
	}
	for _, id := range order {
		if f.Limit > 0 && len(out) >= f.Limit {
			break
		}
		mc := tx.m.claims[id]
		if !f.match(mc.tenant, mc.state, mc.nodes) {
			continue
		}
		c, err := decodeClaim(mc.data, mc.seq)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func (tx *memTx) UpdateClaim(c api.Claim) error {
	if err := tx.write(); err != nil {
		return err
	}
	old, ok := tx.m.claims[c.ID]
	if !ok {
		return notFound("claim", c.ID)
	}
	data, err := encodeClaim(c)
	if err != nil {
		return err
	}
	setUndo(tx, tx.m.claims, c.ID)
	tx.m.claims[c.ID] = newMemClaim(old.seq, c, data)
	tx.indexFinal(old, true, tx.m.claims[c.ID], c.ID)
	return nil
}

func (tx *memTx) PutNode(n api.Node) error {
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
	setUndo(tx, tx.m.nodes, n.Name)
	tx.m.nodes[n.Name] = data
	return nil
}

func (tx *memTx) GetNode(name string) (api.Node, error) {
	if err := tx.read(); err != nil {
		return api.Node{}, err
	}
	data, ok := tx.m.nodes[name]
	if !ok {
		return api.Node{}, notFound("node", name)
	}
	return decode[api.Node]("node", data)
}

func (tx *memTx) ListNodes() ([]api.Node, error) {
	if err := tx.read(); err != nil {
		return nil, err
	}
	return listSorted[api.Node]("node", tx.m.nodes)
}

func (tx *memTx) DeleteNode(name string) error {
	if err := tx.write(); err != nil {
		return err
	}
	if _, ok := tx.m.nodes[name]; !ok {
		return notFound("node", name)
	}
	setUndo(tx, tx.m.nodes, name)
	delete(tx.m.nodes, name)
	return nil
}

func (tx *memTx) AppendEvent(e *api.Event) error {
	if err := tx.write(); err != nil {
		return err
	}
	data, err := encodeEvent(*e)
	if err != nil {
		return err
	}
	m := tx.m
	oldSeq, oldLen := m.eventSeq, len(m.events)
	oldTenantLen := len(m.tenantEvents[e.Tenant])
	tenant := e.Tenant
	tx.undo = append(tx.undo, func() {
		m.eventSeq = oldSeq
		clear(m.events[oldLen:])
		m.events = m.events[:oldLen]
		if oldTenantLen == 0 {
			delete(m.tenantEvents, tenant)
		} else {
			m.tenantEvents[tenant] = m.tenantEvents[tenant][:oldTenantLen]
		}
	})
	m.eventSeq++
	m.events = append(m.events, memEvent{seq: m.eventSeq, at: stamp(e.Time), tenant: e.Tenant, data: data})
	m.tenantEvents[e.Tenant] = append(m.tenantEvents[e.Tenant], m.eventSeq)
	e.Seq = m.eventSeq
	return nil
}

func (tx *memTx) EventsSince(seq int64, limit int) ([]api.Event, error) {
	return tx.ListEvents(EventFilter{AfterSeq: max(seq, 0), Limit: max(limit, 0)})
}

func (tx *memTx) ListEvents(f EventFilter) ([]api.Event, error) {
	if err := tx.read(); err != nil {
		return nil, err
	}
	if err := f.check(); err != nil {
		return nil, err
	}
	evs := tx.m.events
	if f.Tenant != "" {
		// The tenant's seqs, each found in evs (in seq order) by binary
		// search; a seq pruned since is skipped.
		seqs := tx.m.tenantEvents[f.Tenant]
		out := []api.Event{}
		for i := sort.Search(len(seqs), func(i int) bool { return seqs[i] > f.AfterSeq }); i < len(seqs) && (f.Limit <= 0 || len(out) < f.Limit); i++ {
			j, ok := slices.BinarySearchFunc(evs, seqs[i], func(e memEvent, seq int64) int { return cmp.Compare(e.seq, seq) })
			if !ok {
				continue
			}
			e, err := decodeEvent(evs[j].data, evs[j].seq)
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		return out, nil
	}
	i := sort.Search(len(evs), func(i int) bool { return evs[i].seq > f.AfterSeq })
	end := len(evs)
	if f.Limit > 0 && end-i > f.Limit {
		end = i + f.Limit
	}
	out := make([]api.Event, 0, end-i)
	for ; i < end; i++ {
		e, err := decodeEvent(evs[i].data, evs[i].seq)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// pruneOrder returns keys in the order a prune deletes them (by stamp,
// then seq) and how many of them the bounds delete, at most limit.
func pruneOrder(keys []pruneKey, before time.Time, keep, limit int) int {
	if !slices.IsSortedFunc(keys, pruneKey.cmp) {
		slices.SortFunc(keys, pruneKey.cmp)
	}
	var keyK pruneKey
	hasK := keep > 0 && len(keys) > keep
	if hasK {
		keyK = keys[len(keys)-keep-1]
	}
	cut, ok := pruneCut(before, keyK, hasK)
	if !ok {
		return 0
	}
	n := sort.Search(len(keys), func(i int) bool { return cut.less(keys[i]) })
	if limit > 0 {
		n = min(n, limit)
	}
	return n
}

func (tx *memTx) PruneEvents(before time.Time, keep, limit int) (int, error) {
	if err := tx.write(); err != nil {
		return 0, err
	}
	m := tx.m
	if n, ok := pruneEventPrefix(m.events, before, keep, limit); ok {
		// Times in seq order (the usual case): what goes is a prefix.
		old := m.events
		tx.undo = append(tx.undo, func() { m.events = old })
		m.events = old[n:]
		if n > 0 {
			tx.trimTenantEvents(old[n-1].seq)
		}
		return n, nil
	}
	keys := make([]pruneKey, len(m.events))
	for i, e := range m.events {
		keys[i] = pruneKey{at: e.at, seq: e.seq}
	}
	n := pruneOrder(keys, before, keep, limit)
	if n == 0 {
		return 0, nil
	}
	gone := make(map[int64]bool, n)
	for _, k := range keys[:n] {
		gone[k.seq] = true
	}
	old := m.events
	kept := make([]memEvent, 0, len(old)-n)
	for _, e := range old {
		if !gone[e.seq] {
			kept = append(kept, e)
		}
	}
	tx.undo = append(tx.undo, func() { m.events = old })
	m.events = kept
	tx.pruneTenantEvents()
	return n, nil
}

// trimTenantEvents drops from the tenant index every seq up to last (a
// prune of a prefix): a binary search per tenant, undone with the
// transaction.
func (tx *memTx) trimTenantEvents(last int64) {
	m := tx.m
	old := maps.Clone(m.tenantEvents)
	tx.undo = append(tx.undo, func() { m.tenantEvents = old })
	for tenant, seqs := range m.tenantEvents {
		i := sort.Search(len(seqs), func(i int) bool { return seqs[i] > last })
		switch {
		case i == len(seqs):
			delete(m.tenantEvents, tenant)
		case i > 0:
			m.tenantEvents[tenant] = seqs[i:]
		}
	}
}

// pruneTenantEvents drops from the tenant index the seqs no longer in
// m.events (after a prune that was not of a prefix), undone with the
// transaction.
func (tx *memTx) pruneTenantEvents() {
	m := tx.m
	old := m.tenantEvents
	tx.undo = append(tx.undo, func() { m.tenantEvents = old })
	fresh := make(map[string][]int64, len(old))
	for _, e := range m.events {
		fresh[e.tenant] = append(fresh[e.tenant], e.seq)
	}
	m.tenantEvents = fresh
}

// pruneEventPrefix is pruneOrder for events whose times are in seq order
// (ok false otherwise), without copying them: how many of the first go.
func pruneEventPrefix(evs []memEvent, before time.Time, keep, limit int) (n int, ok bool) {
	for i := 1; i < len(evs); i++ {
		if evs[i].at < evs[i-1].at {
			return 0, false
		}
	}
	key := func(i int) pruneKey { return pruneKey{at: evs[i].at, seq: evs[i].seq} }
	var keyK pruneKey
	hasK := keep > 0 && len(evs) > keep
	if hasK {
		keyK = key(len(evs) - keep - 1)
	}
	cut, any := pruneCut(before, keyK, hasK)
	if !any {
		return 0, true
	}
	n = sort.Search(len(evs), func(i int) bool { return cut.less(key(i)) })
	if limit > 0 {
		n = min(n, limit)
	}
	return n, true
}

func (tx *memTx) PruneClaims(before time.Time, keep, limit int) (int, error) {
	if err := tx.write(); err != nil {
		return 0, err
	}
	m := tx.m
	var keyK pruneKey
	hasK := keep > 0 && len(m.finals) > keep
	if hasK {
		keyK = m.finals[len(m.finals)-keep-1].key
	}
	cut, ok := pruneCut(before, keyK, hasK)
	if !ok {
		return 0, nil
	}
	n := sort.Search(len(m.finals), func(i int) bool { return cut.less(m.finals[i].key) })
	if limit > 0 {
		n = min(n, limit)
	}
	if n == 0 {
		return 0, nil
	}
	gone := slices.Clone(m.finals[:n])
	clear(m.finals[:n]) // drop references; the undo has them
	m.finals = m.finals[n:]
	tx.undo = append(tx.undo, func() { m.finals = slices.Insert(m.finals, 0, gone...) })
	// claimOrder is in seq order: find each pruned claim by its seq,
	// then copy the rest once.
	at := make([]int, 0, n)
	for _, r := range gone {
		i := sort.Search(len(m.claimOrder), func(i int) bool { return m.claims[m.claimOrder[i]].seq >= r.key.seq })
		at = append(at, i)
	}
	for _, r := range gone {
		setUndo(tx, m.claims, r.id)
		delete(m.claims, r.id)
	}
	slices.Sort(at)
	old := m.claimOrder
	kept := make([]string, 0, len(old)-n)
	from := 0
	for _, i := range at {
		kept = append(kept, old[from:i]...)
		from = i + 1
	}
	kept = append(kept, old[from:]...)
	tx.undo = append(tx.undo, func() { m.claimOrder = old })
	m.claimOrder = kept
	return n, nil
}

func (tx *memTx) AddUsage(tenant string, used api.Consumption) error {
	if err := tx.write(); err != nil {
		return err
	}
	if err := checkKey("usage", tenant); err != nil {
		return err
	}
	if err := checkUsage(used); err != nil {
		return err
	}
	setUndo(tx, tx.m.usage, tenant)
	tx.m.usage[tenant] = tx.m.usage[tenant].Add(used)
	return nil
}

func (tx *memTx) Usage(tenant string) (api.Usage, error) {
	if err := tx.read(); err != nil {
		return api.Usage{}, err
	}
	u := tx.m.usage[tenant]
	return api.Usage{Tenant: tenant, GPUSeconds: u.GPUSeconds, SMSeconds: u.SMSeconds, MemoryMiBSec: u.MemoryMiBSeconds}, nil
}
