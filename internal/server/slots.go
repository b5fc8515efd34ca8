package server

import (
	"net/http"
	"sync"

	"github.com/gpuslice/gpuslice/internal/api"
)

// Defaults of Config.MaxStreamsPerToken and MaxStreamsPerTenant.
const (
	DefaultMaxStreamsPerToken  = 16
	DefaultMaxStreamsPerTenant = 64
)

// streamSlots bounds the requests that stay open — event streams and long
// polls — per token (every role) and per tenant (tenant tokens), so that
// one caller cannot hold the server's goroutines, read connections and
// wake-ups for everyone. A slot is taken before the request starts
// waiting and given back when it ends, however it ends.
type streamSlots struct {
	perToken, perTenant int // <= 0: no bound

	mu      sync.Mutex
	tokens  map[string]int // token id → open
	tenants map[string]int // tenant → open
}

func newStreamSlots(perToken, perTenant int) *streamSlots {
	return &streamSlots{perToken: perToken, perTenant: perTenant, tokens: map[string]int{}, tenants: map[string]int{}}
}

// take holds a slot for p, or refuses with 429 naming the cap that is
// full and how many are open. The caller calls release exactly once.
func (s *streamSlots) take(p principal) (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.tokens[p.token]; s.perToken > 0 && n >= s.perToken {
		return nil, errStatus(http.StatusTooManyRequests,
			"too many open event streams and long polls: token %s has %d open, at most %d per token (serve --max-streams-per-token); close one or retry later", p.token, n, s.perToken)
	}
	tenant := ""
	if p.role == api.RoleTenant {
		tenant = p.tenant
	}
	if n := s.tenants[tenant]; tenant != "" && s.perTenant > 0 && n >= s.perTenant {
		return nil, errStatus(http.StatusTooManyRequests,
			"too many open event streams and long polls: tenant %s has %d open, at most %d per tenant (serve --max-streams-per-tenant); close one or retry later", tenant, n, s.perTenant)
	}
	s.tokens[p.token]++
	if tenant != "" {
		s.tenants[tenant]++
	}
	var once sync.Once
	return func() { once.Do(func() { s.give(p.token, tenant) }) }, nil
}

func (s *streamSlots) give(token, tenant string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tokens[token]--; s.tokens[token] <= 0 {
		delete(s.tokens, token)
	}
	if tenant != "" {
		if s.tenants[tenant]--; s.tenants[tenant] <= 0 {
			delete(s.tenants, tenant)
		}
	}
}
