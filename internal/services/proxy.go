package services

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"
)

// Proxy is a service's reverse proxy: requests go to the ready replica
// with the fewest in flight; with none ready a request waits (up to the
// wake timeout) and the controller is told to wake the service.
type Proxy struct {
	name    string
	timeout time.Duration
	onWait  func()
	rp      *httputil.ReverseProxy

	mu       sync.Mutex
	backends []*backend
	changed  chan struct{} // closed and renewed when a backend is added
	inFlight int
	waiting  int
	requests int // since the last Stats
}

type backend struct {
	id       string
	url      *url.URL
	inFlight int
	removed  bool
	drained  chan struct{} // closed once removed and idle
}

type backendKey struct{}

// NewProxy makes a proxy for a service; onWait is called (without locks
// held) when a request finds no ready replica.
func NewProxy(name string, wakeTimeout time.Duration, onWait func()) *Proxy {
	p := &Proxy{name: name, timeout: wakeTimeout, onWait: onWait, changed: make(chan struct{})}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			b := pr.In.Context().Value(backendKey{}).(*backend)
			pr.SetURL(b.url)
			pr.SetXForwarded()
			pr.Out.Host = pr.In.Host
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			b := r.Context().Value(backendKey{}).(*backend)
			http.Error(w, fmt.Sprintf("gpuslice: service %s: replica %s did not answer: %v", p.name, b.id, err), http.StatusBadGateway)
		},
	}
	return p
}

// Add puts a ready replica into rotation and wakes waiting requests.
func (p *Proxy) Add(id string, u *url.URL) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.backends = append(p.backends, &backend{id: id, url: u, drained: make(chan struct{})})
	close(p.changed)
	p.changed = make(chan struct{})
}

// Remove takes a replica out of rotation; the channel closes once its
// requests in flight have finished (at once when it has none).
func (p *Proxy) Remove(id string) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, b := range p.backends {
		if b.id == id {
			p.backends = append(p.backends[:i], p.backends[i+1:]...)
			b.removed = true
			if b.inFlight == 0 {
				close(b.drained)
			}
			return b.drained
		}
	}
	done := make(chan struct{})
	close(done)
	return done
}

// Stats returns the requests since the previous call, those in flight and
// those waiting for a replica.
func (p *Proxy) Stats() (requests, inFlight, waiting int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	requests, p.requests = p.requests, 0
	return requests, p.inFlight, p.waiting
}

// Ready counts the replicas in rotation.
func (p *Proxy) Ready() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.backends)
}

// pick takes the replica with the fewest requests in flight and counts
// the request on it; nil when none is ready. p.mu must be held.
func (p *Proxy) pick() *backend {
	var best *backend
	for _, b := range p.backends {
		if best == nil || b.inFlight < best.inFlight {
			best = b
		}
	}
	if best != nil {
		best.inFlight++
		p.inFlight++
	}
	return best
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.requests++
	b := p.pick()
	if b == nil {
		p.waiting++
		deadline := time.NewTimer(p.timeout)
		defer deadline.Stop()
		for b == nil {
			ch := p.changed
			p.mu.Unlock()
			if p.onWait != nil {
				p.onWait()
			}
			select {
			case <-ch:
			case <-deadline.C:
				p.mu.Lock()
				p.waiting--
				p.mu.Unlock()
				w.Header().Set("Retry-After", "5")
				http.Error(w, fmt.Sprintf("gpuslice: service %s has no ready replica after %s (starting one); try again", p.name, p.timeout), http.StatusServiceUnavailable)
				return
			case <-r.Context().Done():
				p.mu.Lock()
				p.waiting--
				p.mu.Unlock()
				return
			}
			p.mu.Lock()
			b = p.pick()
		}
		p.waiting--
	}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		b.inFlight--
		p.inFlight--
		if b.removed && b.inFlight == 0 {
			close(b.drained)
		}
		p.mu.Unlock()
	}()
	p.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), backendKey{}, b)))
}

// Peek is Stats without resetting the request count.
func (p *Proxy) Peek() (requests, inFlight, waiting int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.requests, p.inFlight, p.waiting
}
