package fake

import (
	"context"
	"fmt"
	"sync"

	"github.com/gpuslice/gpuslice/internal/gpu"
)

// xidMessages describes the XIDs the fake knows by name.
var xidMessages = map[int]string{
	13:  "graphics engine exception",
	31:  "GPU memory page fault",
	43:  "GPU stopped processing",
	48:  "double-bit ECC error",
	79:  "GPU has fallen off the bus",
	94:  "contained ECC error",
	95:  "uncontained ECC error",
	119: "GSP RPC timeout",
}

// FatalXID reports whether an XID makes a GPU unhealthy: gpu.FatalXID,
// the table in package gpu (79 fell off the bus, 48 double-bit ECC, 94 and
// 95 contained and uncontained ECC errors, 119 and 120 GSP). Others, such
// as the application faults 13, 31 and 43, leave it healthy.
func FatalXID(xid int) bool { return gpu.FatalXID(xid) }

// InjectXID raises an XID on a GPU: subscribers get an EventXID and a fatal
// XID (see FatalXID) makes the GPU unhealthy.
func (m *Machine) InjectXID(index, xid int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.device(index)
	if err != nil {
		return err
	}
	return m.xid(d, d.uuid, xid)
}

// InjectInstanceXID raises an XID attributed to a MIG instance (or a GPU)
// by uuid; a fatal one makes the whole GPU unhealthy.
func (m *Machine) InjectInstanceXID(uuid string, xid int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, _, err := m.lookup(uuid)
	if err != nil {
		return err
	}
	return m.xid(d, uuid, xid)
}

func (m *Machine) xid(d *device, uuid string, xid int) error {
	if xid <= 0 {
		return fmt.Errorf("XID %d: want a positive XID", xid)
	}
	fatal := FatalXID(xid)
	if fatal {
		d.healthy = false
		d.lastXID = xid
	}
	msg := xidMessages[xid]
	if msg == "" {
		msg = gpu.XIDName(xid)
	}
	m.emit(gpu.Event{Kind: gpu.EventXID, Index: d.index, UUID: uuid, XID: xid,
		Fatal: fatal, Message: fmt.Sprintf("XID %d: %s", xid, msg)})
	return nil
}

// FailNextCreate makes the next CreateInstance call fail, whatever its
// arguments, with an error that wraps both gpu.ErrFault and err (err may be
// nil). Calls queue: n calls fail the next n creates.
func (m *Machine) FailNextCreate(err error) {
	e := fmt.Errorf("create instance: %w", gpu.ErrFault)
	if err != nil {
		e = fmt.Errorf("create instance: %w: %w", gpu.ErrFault, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failCreate = append(m.failCreate, e)
}

// SetBusy marks a GPU busy (or not). A busy GPU refuses MIG mode changes
// and instance creation and destruction with ErrInUse, as a GPU does while
// another client holds it.
func (m *Machine) SetBusy(index int, busy bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.device(index)
	if err != nil {
		return err
	}
	d.busy = busy
	return nil
}

// Remove makes a GPU disappear, as when it falls off the bus: it leaves
// GPUs, every call naming it or its instances fails with ErrNotFound, its
// processes are gone and subscribers get a fatal EventLost. The other GPUs
// keep their indexes.
func (m *Machine) Remove(index int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.device(index)
	if err != nil {
		return err
	}
	d.lost = true
	d.healthy = false
	for pid, p := range m.procs {
		if p.index == index {
			delete(m.procs, pid)
		}
	}
	m.emit(gpu.Event{Kind: gpu.EventLost, Index: index, UUID: d.uuid, Fatal: true,
		Message: fmt.Sprintf("GPU %d (%s) is lost", index, d.uuid)})
	return nil
}

// Recover makes a GPU healthy again, as a GPU reset does after a fatal XID:
// it is listed healthy and subscribers get an EventRecovered. A lost GPU
// (Remove) stays lost.
func (m *Machine) Recover(index int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.device(index)
	if err != nil {
		return err
	}
	d.healthy = true
	d.lastXID = 0
	m.emit(gpu.Event{Kind: gpu.EventRecovered, Index: index, UUID: d.uuid,
		Message: fmt.Sprintf("GPU %d (%s) recovered", index, d.uuid)})
	return nil
}

// subscriber is one Events channel: an unbounded queue drained by a
// goroutine, so injecting a fault never blocks and no event is dropped.
type subscriber struct {
	mu    sync.Mutex
	queue []gpu.Event
	wake  chan struct{}
}

// Events delivers every event raised after the call, in order, until ctx
// ends; then the channel is closed. Events are never dropped: a slow
// reader only delays them.
func (m *Machine) Events(ctx context.Context) (<-chan gpu.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := &subscriber{wake: make(chan struct{}, 1)}
	m.mu.Lock()
	m.subs[s] = struct{}{}
	m.mu.Unlock()
	out := make(chan gpu.Event)
	go func() {
		defer close(out)
		defer func() {
			m.mu.Lock()
			delete(m.subs, s)
			m.mu.Unlock()
		}()
		for {
			s.mu.Lock()
			batch := s.queue
			s.queue = nil
			s.mu.Unlock()
			for _, ev := range batch {
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			}
			select {
			case <-s.wake:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// emit stamps an event and queues it for every subscriber. m.mu must be
// held.
func (m *Machine) emit(ev gpu.Event) {
	ev.Time = m.now()
	for s := range m.subs {
		s.mu.Lock()
		s.queue = append(s.queue, ev)
		s.mu.Unlock()
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// Subscribers reports how many Events streams are open, so a test can wait
// for a consumer before injecting a fault rather than sleeping.
func (m *Machine) Subscribers() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.subs)
}
