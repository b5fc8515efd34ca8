package state

import (
	"context"
	"encoding/json"
	"slices"
	"sort"
	"sync"

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
	claimOrder  []string            // IDs in Seq order (claims are never deleted)
	nodes       map[string][]byte
	services    map[string][]byte
	events      []memEvent // in Seq order
	// tenantEvents indexes events by tenant: positions in events, in Seq
	// order (ListEvents with a tenant reads only these).
	tenantEvents map[string][]int
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
	data   []byte
}

type memEvent struct {
	seq    int64
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

		tenantEvents: map[string][]int{},
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
	m.claims[c.ID] = memClaim{seq: m.claimSeq, tenant: c.Tenant, state: c.State, nodes: ClaimNodes(*c), data: data}
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
	tx.m.claims[c.ID] = memClaim{seq: old.seq, tenant: c.Tenant, state: c.State, nodes: ClaimNodes(c), data: data}
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
	m.events = append(m.events, memEvent{seq: m.eventSeq, tenant: e.Tenant, data: data})
	m.tenantEvents[e.Tenant] = append(m.tenantEvents[e.Tenant], len(m.events)-1)
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
	var idx []int // positions in evs; nil: all of them
	n := len(evs)
	if f.Tenant != "" {
		idx = tx.m.tenantEvents[f.Tenant]
		n = len(idx)
	}
	at := func(i int) memEvent {
		if f.Tenant != "" {
			return evs[idx[i]]
		}
		return evs[i]
	}
	i := sort.Search(n, func(i int) bool { return at(i).seq > f.AfterSeq })
	end := n
	if f.Limit > 0 && end-i > f.Limit {
		end = i + f.Limit
	}
	out := make([]api.Event, 0, end-i)
	for ; i < end; i++ {
		me := at(i)
		e, err := decodeEvent(me.data, me.seq)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
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
