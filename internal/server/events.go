package server

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/state"
)

// eventPage is how many events a stream reads per store read; a page that
// comes back full is followed at once by the next.
const eventPage = 500

// streamReaders is how many event streams read the store at once (each
// holding a read connection, decoding and encoding a page); the others
// wait for a turn holding nothing.
const streamReaders = 1

// eventKeepalive is how often an idle stream writes a comment, so that
// proxies keep it open and a gone client is noticed.
const eventKeepalive = 15 * time.Second

// eventBell wakes event streams when events they may show commit, and
// says, without a store read, the seq of the newest committed event of a
// scope: every event ("") or one tenant's. Other changes (heartbeats,
// other tenants' events) wake no tenant stream.
type eventBell struct {
	mu      sync.Mutex
	all     bellScope
	tenants map[string]*bellScope // created by the first watch of a tenant
}

type bellScope struct {
	seq int64 // newest committed event of the scope (a lower bound when created)
	ch  chan struct{}
}

func newEventBell() *eventBell {
	return &eventBell{all: bellScope{ch: make(chan struct{})}, tenants: map[string]*bellScope{}}
}

// watch returns a channel closed when an event of the scope (tenant, or
// every event for "") commits after this call, and the seq of the newest
// event of the scope committed before it: a store read begun after watch
// returns sees every event up to that seq.
func (b *eventBell) watch(tenant string) (<-chan struct{}, int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if tenant == "" {
		return b.all.ch, b.all.seq
	}
	sc := b.tenants[tenant]
	if sc == nil {
		// Not watched before: its newest event is at most the newest of
		// all (one extra read at worst).
		sc = &bellScope{seq: b.all.seq, ch: make(chan struct{})}
		b.tenants[tenant] = sc
	}
	return sc.ch, sc.seq
}

// ring records committed events (called once they have committed).
func (b *eventBell) ring(evs []api.Event) {
	if len(evs) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	rung := map[*bellScope]bool{}
	for _, e := range evs {
		scopes := []*bellScope{&b.all}
		if sc := b.tenants[e.Tenant]; sc != nil && e.Tenant != "" {
			scopes = append(scopes, sc)
		}
		for _, sc := range scopes {
			sc.seq = max(sc.seq, e.Seq)
			if !rung[sc] {
				rung[sc] = true
				close(sc.ch)
				sc.ch = make(chan struct{})
			}
		}
	}
}

// eventsTx is the Tx Server.update hands its functions: it notes the
// events appended, which the bell rings for once they commit.
type eventsTx struct {
	state.Tx
	appended []api.Event
}

func (tx *eventsTx) AppendEvent(e *api.Event) error {
	if err := tx.Tx.AppendEvent(e); err != nil {
		return err
	}
	tx.appended = append(tx.appended, api.Event{Seq: e.Seq, Tenant: e.Tenant})
	return nil
}

// watchEvents streams events as Server-Sent Events from ?since=SEQ. A
// tenant sees its own tenant's events only, none from before its tenant
// was created (a namesake of a deleted tenant inherits nothing), read
// through the store's index on the tenant. A stream holds a slot
// (Config.MaxStreamsPerToken, MaxStreamsPerTenant) and no store
// connection while it waits; it reads only when an event it may show has
// committed, and a stream that is behind reads page after page at once.
func (srv *Server) watchEvents(w http.ResponseWriter, r *http.Request, p principal) {
	since, err := strconv.ParseInt(r.URL.Query().Get("since"), 10, 64)
	if err != nil && r.URL.Query().Get("since") != "" || since < 0 {
		writeError(w, errField("since", "want the seq of the last event seen (a whole number ≥ 0)"))
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		writeError(w, errStatus(http.StatusInternalServerError, "streaming unsupported"))
		return
	}
	release, err := srv.slots.take(p)
	if err != nil {
		writeError(w, err)
		return
	}
	defer release()
	scope, from := "", time.Time{}
	if p.role == api.RoleTenant {
		scope, from = p.tenant, p.tenantCreated
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl.Flush()
	keepalive := time.NewTimer(eventKeepalive)
	defer keepalive.Stop()
	first := true
	for {
		ch, last := srv.bell.watch(scope)
		if first || last > since {
			first = false
			if !srv.sendEvents(w, fl, r, scope, from, &since) {
				return
			}
			// Every event of the scope up to last committed before the
			// reads began, so the reads returned all of them.
			since = max(since, last)
		}
		select {
		case <-ch:
		case <-keepalive.C:
			fmt.Fprint(w, ": keepalive\n\n")
			fl.Flush()
			keepalive.Reset(eventKeepalive)
		case <-r.Context().Done():
			return
		}
	}
}

// sendEvents writes the scope's events after *since, page after page
// until a page comes back short. A page is read and encoded holding one
// of the few stream readers (Server.streamReads), never more, so that
// streams catching up leave the store's other read connections and most
// of the CPU to everyone else; it is written to the client after (no
// reader or connection is held while a slow client reads). It reports
// false when the stream should end.
func (srv *Server) sendEvents(w http.ResponseWriter, fl http.Flusher, r *http.Request, scope string, from time.Time, since *int64) bool {
	var buf bytes.Buffer
	for {
		select {
		case srv.streamReads <- struct{}{}:
		case <-r.Context().Done():
			return false
		}
		var evs []api.Event
		err := srv.store.View(r.Context(), func(tx state.Tx) error {
			var err error
			evs, err = tx.ListEvents(state.EventFilter{Tenant: scope, AfterSeq: *since, Limit: eventPage})
			return err
		})
		buf.Reset()
		for _, e := range evs {
			*since = e.Seq
			if scope != "" && (e.Tenant != scope || e.Time.Before(from)) {
				continue
			}
			writeSSE(&buf, e)
		}
		<-srv.streamReads
		if err != nil {
			return false
		}
		if _, err := w.Write(buf.Bytes()); err != nil {
			return false
		}
		fl.Flush()
		if len(evs) < eventPage {
			return true
		}
	}
}
