package server

import (
	"sync"
	"time"
)

// Defaults of the per-node event limit (Config.AgentEventRate,
// AgentEventBurst, EventDropWindow).
const (
	DefaultAgentEventRate  = 1.0
	DefaultAgentEventBurst = 100
	DefaultEventDropWindow = time.Minute
)

// bucket is one node's token bucket for events, and what it dropped since
// it last said so.
type bucket struct {
	tokens float64
	// last is when tokens was last refilled.
	last time.Time
	// dropped counts the events dropped since the last summary, told at
	// summarized (zero: never).
	dropped    int
	summarized time.Time
}

// limit is a token bucket's parameters.
type limit struct {
	rate   float64 // tokens per second; negative: no limit
	burst  int
	window time.Duration // at most one summary per window
}

// admit decides what becomes of a heartbeat's n events at now (pure): the
// first pass of them are kept and the rest dropped; when events were
// dropped and no summary was given for a window, summary is how many
// since the last one (0: say nothing now). A new node's bucket (the zero
// bucket) starts full. Time going backwards refills nothing.
func (l limit) admit(b bucket, now time.Time, n int) (next bucket, pass, summary int) {
	if l.rate < 0 {
		return b, n, 0
	}
	if b.last.IsZero() {
		b.tokens, b.last = float64(l.burst), now
	}
	if now.After(b.last) {
		b.tokens = min(float64(l.burst), b.tokens+l.rate*now.Sub(b.last).Seconds())
		b.last = now
	}
	pass = min(n, int(b.tokens))
	b.tokens -= float64(pass)
	b.dropped += n - pass
	if b.dropped > 0 && (b.summarized.IsZero() || now.Sub(b.summarized) >= l.window) {
		summary, b.dropped, b.summarized = b.dropped, 0, now
	}
	return b, pass, summary
}

// eventLimiter holds every node's bucket. The heartbeat applies its
// decisions inside the transaction that stores the events, and undoes
// them if that transaction does not commit (Tx.OnRollback).
type eventLimiter struct {
	limit limit
	mu    sync.Mutex
	nodes map[string]bucket
}

func newEventLimiter(rate float64, burst int, window time.Duration) *eventLimiter {
	return &eventLimiter{limit: limit{rate: rate, burst: burst, window: window}, nodes: map[string]bucket{}}
}

// admit applies limit.admit to node's bucket; undo puts the bucket back
// as it was.
func (l *eventLimiter) admit(node string, now time.Time, n int) (pass, summary int, undo func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	old, had := l.nodes[node]
	next, pass, summary := l.limit.admit(old, now, n)
	if l.limit.rate >= 0 {
		l.nodes[node] = next
	}
	return pass, summary, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if had {
			l.nodes[node] = old
		} else {
			delete(l.nodes, node)
		}
	}
}

// forget drops a deleted node's bucket.
func (l *eventLimiter) forget(node string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.nodes, node)
}
