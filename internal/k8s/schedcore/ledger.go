package schedcore

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuslice/gpuslice/internal/admit"
	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/k8s/draalloc"
)

// Ledger is the scheduler's view of gpuslice's devices: every node's
// slices and every claim holding gpuslice devices, whether read from the
// API server (informers) or reserved by this scheduler and not yet
// written (in flight). Per node it keeps an allocator State built from
// exactly that, rebuilt whenever something on the node changed in a way
// the State did not see happen (a slice, a claim freed or allocated by
// someone else), so the State never keeps a phantom allocation.
type Ledger struct {
	cat    *catalog.Catalog
	policy alloc.Policy
	log    *slog.Logger

	mu     sync.Mutex
	slices map[string]map[string]*resourceapi.ResourceSlice // node -> slice name -> slice
	nodes  map[string]*nodeEntry
	claims map[types.UID]*claimEntry
	// seq numbers node versions (nodeEntry.version).
	seq uint64
	// shared are Filter's verdicts on nodes with nothing allocated, by
	// node shape and claim shape (see verdicts); shapes are numbered
	// (ids, never reused) so a lookup hashes two numbers, not a node's
	// device list and a claim's JSON.
	shared map[shapePair]*verdict
	ids    map[string]uint64
	nextID uint64
	// onFree is called (without l.mu) after devices were freed or
	// added: a claim dropped, a slice changed (OnFree).
	onFree func()
}

type nodeEntry struct {
	name string
	// mu serialises use of st (a State is not safe for concurrent use;
	// Filter runs on many nodes at once, but on one node at a time).
	mu     sync.Mutex
	labels map[string]string
	devs   *draalloc.NodeDevices // nil: read the slices again
	devErr error
	st     *alloc.State // nil: rebuild from devs and claims
	claims map[types.UID]bool
	// version changes whenever the node's devices or State change;
	// verdicts are Filter's answers for this version, by claim shape.
	// Both are guarded by the ledger's lock.
	version  uint64
	verdicts map[uint64]*verdict
	shape    uint64 // the id of devs.Shape() (0: not read yet)
}

// shapePair keys a shared verdict: a node shape's id and a claim shape's.
type shapePair struct{ node, claim uint64 }

// verdict is what Filter learnt of a pod's claims (by their shape) on a
// node: whether they fit (else why not), the GPU share they newly hold
// and how full the node's GPUs are after, and what they hold (quota).
// The allocations themselves are made again in Reserve.
type verdict struct {
	reason string // "": they fit
	share  float64
	used   float64
	held   admit.Use // what the claims are given (quota)
	pref   int64     // the subrequests' score (prioritized lists)
}

// maxShared bounds the shared verdicts (claim shapes × node shapes).
const maxShared = 1 << 14

// changed gives the node a new version (its verdicts are forgotten).
// Caller holds l.mu.
func (l *Ledger) changed(n *nodeEntry) {
	l.seq++
	n.version = l.seq
	n.verdicts = nil
}

// shapeID numbers a shape (a node's or a claim's). Caller holds l.mu.
func (l *Ledger) shapeID(shape string) uint64 {
	id, ok := l.ids[shape]
	if !ok {
		if len(l.ids) >= maxShared {
			// forget them all; ids are never reused, so verdicts
			// kept under old ones are only never found again
			clear(l.ids)
			clear(l.shared)
		}
		l.nextID++
		id = l.nextID
		l.ids[shape] = id
	}
	return id
}

// cachedVerdict returns the verdict for claims of shape id claim on the
// node as it is now, or nil, with the node's version to store one under.
// shareable says the claims read no GPU uuid, so an empty node's verdict
// holds for every empty node of its shape. Caller holds l.mu.
func (l *Ledger) cachedVerdict(n *nodeEntry, nd *draalloc.NodeDevices, claim uint64, shareable bool) (*verdict, uint64) {
	if len(n.claims) == 0 && shareable {
		if n.shape == 0 {
			n.shape = l.shapeID(nd.Shape())
		}
		return l.shared[shapePair{n.shape, claim}], n.version
	}
	return n.verdicts[claim], n.version
}

// keepVerdict stores a verdict made on version of the node, unless the
// node changed meanwhile. Caller holds l.mu.
func (l *Ledger) keepVerdict(n *nodeEntry, nd *draalloc.NodeDevices, version, claim uint64, shareable bool, v *verdict) {
	if n.version != version {
		return
	}
	if len(n.claims) == 0 && shareable {
		if n.shape == 0 {
			n.shape = l.shapeID(nd.Shape())
		}
		if len(l.shared) >= maxShared {
			clear(l.shared)
		}
		l.shared[shapePair{n.shape, claim}] = v
		return
	}
	if n.verdicts == nil {
		n.verdicts = map[uint64]*verdict{}
	}
	n.verdicts[claim] = v
}

type claimEntry struct {
	uid       types.UID
	namespace string
	node      string
	// rc is the claim as the API server holds it (nil while in flight);
	// a is its allocation for the allocator, read from rc against the
	// node's devices when the node's State is built (nil until then:
	// claims may arrive before the slices they name).
	rc       *resourceapi.ResourceClaim
	a        *alloc.Allocation
	devices  []string // result device names, to recognise our own write
	inflight bool
	held     admit.Use // what the claim is given (quota)
}

// NewLedger makes an empty ledger deciding with policy on cat's models;
// log hears of allocations the API server records that do not restore.
func NewLedger(policy alloc.Policy, cat *catalog.Catalog, log *slog.Logger) *Ledger {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Ledger{cat: cat, policy: policy, log: log, slices: map[string]map[string]*resourceapi.ResourceSlice{},
		nodes: map[string]*nodeEntry{}, claims: map[types.UID]*claimEntry{}, shared: map[shapePair]*verdict{}, ids: map[string]uint64{}}
}

// OnFree sets what is called (without the ledger's lock) whenever devices
// were freed or added: a claim dropped, a slice changed, a hold released.
func (l *Ledger) OnFree(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.onFree = f
}

// node returns the node's entry, creating it. Caller holds l.mu.
func (l *Ledger) node(name string) *nodeEntry {
	n := l.nodes[name]
	if n == nil {
		n = &nodeEntry{name: name, claims: map[types.UID]bool{}}
		l.nodes[name] = n
	}
	return n
}

// stale drops a node's State (and with slices, its devices). Caller holds
// l.mu; the node's own lock is taken so a Filter in progress finishes on
// the old State first.
func (l *Ledger) stale(name string, devicesToo bool) {
	n := l.node(name)
	l.changed(n)
	n.mu.Lock()
	n.st = nil
	if devicesToo {
		n.devs, n.devErr, n.shape = nil, nil, 0
		for uid := range n.claims {
			if e := l.claims[uid]; e != nil && e.rc != nil {
				e.a = nil
			}
		}
	}
	n.mu.Unlock()
}

// SetSlice records a gpuslice ResourceSlice (nil s: deleted).
func (l *Ledger) SetSlice(name, node string, s *resourceapi.ResourceSlice) {
	defer l.Freed()
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.slices[node]
	if m == nil {
		m = map[string]*resourceapi.ResourceSlice{}
		l.slices[node] = m
	}
	if s == nil {
		delete(m, name)
	} else {
		m[name] = s
	}
	l.stale(node, true)
}

// devices returns the node's devices, reading its slices when needed.
// Caller holds l.mu.
func (l *Ledger) devices(n *nodeEntry) (*draalloc.NodeDevices, error) {
	if n.devs == nil && n.devErr == nil {
		n.devs, n.devErr = draalloc.NodeFromSlices(n.name, n.labels, slices.Collect(maps.Values(l.slices[n.name])), l.cat)
	}
	return n.devs, n.devErr
}

// SetClaim records what the API server says about a claim (nil: deleted).
func (l *Ledger) SetClaim(uid types.UID, rc *resourceapi.ResourceClaim) {
	l.mu.Lock()
	old := l.claims[uid]
	if rc == nil || rc.Status.Allocation == nil {
		dropped := old != nil && (rc == nil || !old.inflight)
		if dropped {
			l.drop(old)
		}
		l.mu.Unlock()
		if dropped {
			l.Freed()
		}
		return
	}
	defer l.mu.Unlock()
	node := draalloc.AllocatedNode(rc.Status.Allocation)
	var devs []string
	for _, r := range rc.Status.Allocation.Devices.Results {
		devs = append(devs, r.Device)
	}
	sort.Strings(devs)
	if old != nil && old.node == node && slices.Equal(old.devices, devs) {
		old.inflight = false // our own write, seen
		old.rc = rc
		return
	}
	if old != nil {
		l.drop(old)
	}
	if !draalloc.HoldsOurs(rc.Status.Allocation) {
		return
	}
	e := &claimEntry{uid: uid, namespace: rc.Namespace, node: node, rc: rc, devices: devs}
	l.claims[uid] = e
	l.node(node).claims[uid] = true
	l.stale(node, false)
}

// allocation returns the claim's allocation, reading it from the claim
// against the node's devices when needed. Caller holds l.mu.
func (l *Ledger) allocation(e *claimEntry, nd *draalloc.NodeDevices) (*alloc.Allocation, error) {
	if e.a != nil {
		return e.a, nil
	}
	a, _, err := draalloc.FromResult(e.rc, e.rc.Status.Allocation, nd, l.cat)
	if err != nil {
		return nil, err
	}
	e.a = a
	e.held = admit.Given(a)
	return a, nil
}

// Freed tells the ledger's OnFree that devices may have been freed.
func (l *Ledger) Freed() {
	l.mu.Lock()
	f := l.onFree
	l.mu.Unlock()
	if f != nil {
		f()
	}
}

// drop forgets a claim and its node's State. Caller holds l.mu.
func (l *Ledger) drop(e *claimEntry) {
	delete(l.claims, e.uid)
	if n := l.nodes[e.node]; n != nil {
		delete(n.claims, e.uid)
	}
	l.stale(e.node, false)
}

// state returns the node's State, rebuilt when stale, with the node's
// lock held: the caller must call n.mu.Unlock. Claims in skip are left
// out (a preemption simulation), in a State of their own that is not
// kept. Caller holds l.mu.
func (l *Ledger) state(name string, labels map[string]string, skip map[types.UID]bool) (*nodeEntry, *alloc.State, error) {
	n := l.node(name)
	if labels != nil && !maps.Equal(labels, n.labels) {
		n.labels = maps.Clone(labels)
		l.stale(name, true)
	}
	nd, err := l.devices(n)
	n.mu.Lock()
	if err != nil {
		return n, nil, err
	}
	if n.st != nil && len(skip) == 0 {
		return n, n.st, nil
	}
	var as []*alloc.Allocation
	for uid := range n.claims {
		if skip[uid] {
			continue
		}
		a, err := l.allocation(l.claims[uid], nd)
		if err != nil {
			// The API server records devices this node does not
			// publish (any more): nothing on the node is decided until
			// the slices or the claim change.
			return n, nil, fmt.Errorf("claim %s: %w", draalloc.ClaimName(l.claims[uid].rc), err)
		}
		as = append(as, cloneAlloc(a))
	}
	st, failed, err := draalloc.NewState([]*draalloc.NodeDevices{nd}, as, l.policy, l.cat)
	if err != nil {
		return n, nil, err
	}
	for c, ferr := range failed {
		l.log.Error("allocation on the node does not restore; its devices stay taken by the API server's record", "claim", c, "node", name, "err", ferr)
	}
	if len(skip) == 0 {
		n.st = st
	}
	return n, st, nil
}

// reserve records an allocation this scheduler made and will write.
// Caller holds l.mu and the node's lock, and has applied a to the node's
// State.
func (l *Ledger) reserve(uid types.UID, namespace string, a *alloc.Allocation, res *resourceapi.AllocationResult) {
	node := a.Devices[0].Node
	var devs []string
	for _, r := range res.Devices.Results {
		devs = append(devs, r.Device)
	}
	sort.Strings(devs)
	e := &claimEntry{uid: uid, namespace: namespace, node: node, a: cloneAlloc(a), devices: devs, inflight: true, held: admit.Given(a)}
	l.claims[uid] = e
	n := l.node(node)
	n.claims[uid] = true
	l.changed(n)
}

// Unreserve forgets an in-flight allocation: its node's State is rebuilt
// before the next decision.
func (l *Ledger) Unreserve(uid types.UID) {
	defer l.Freed()
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.claims[uid]; e != nil && e.inflight {
		l.drop(e)
	}
}

func cloneAlloc(a *alloc.Allocation) *alloc.Allocation {
	b := *a
	b.Devices = slices.Clone(a.Devices)
	b.Changes = nil // restored allocations get their changes from Realize
	return &b
}
