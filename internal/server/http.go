package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/state"
)

// principal is who a request comes from.
type principal struct {
	role   api.Role
	tenant string
	token  string // token id, never the secret
	// node is the node an agent token was issued for ("" if unbound yet).
	node string
	// tenantCreated is when a tenant token's tenant was created: it sees
	// nothing from before (a namesake of a deleted tenant inherits
	// nothing).
	tenantCreated time.Time
}

// sees says whether p may see claim c: admins and agents every claim, a
// tenant token its own tenant's claims made since the tenant was created
// (none of a deleted namesake's).
func (p principal) sees(c *api.Claim) bool {
	return p.role != api.RoleTenant || c.Tenant == p.tenant && !c.Created.Before(p.tenantCreated)
}

type handlerFunc func(w http.ResponseWriter, r *http.Request, p principal)

// httpError is an error with a status and, for validation, the field.
type httpError struct {
	status int
	field  string
	msg    string
	// state is the claim's current state, on a 409 of a transition.
	state string
}

func (e *httpError) Error() string { return e.msg }

func errStatus(status int, format string, args ...any) error {
	return &httpError{status: status, msg: fmt.Sprintf(format, args...)}
}

func errField(field, format string, args ...any) error {
	return &httpError{status: http.StatusUnprocessableEntity, field: field, msg: fmt.Sprintf(format, args...)}
}

// authed checks the bearer token and the role, then calls h. Failures
// never echo the token.
func (srv *Server) authed(roles []api.Role, h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		secret, ok := strings.CutPrefix(auth, "Bearer ")
		if !ok || secret == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="gpuslice"`)
			writeError(w, errStatus(http.StatusUnauthorized, "missing bearer token (Authorization: Bearer <token>)"))
			return
		}
		hash := hashToken(secret)
		tok, err := srv.tokenOf(r.Context(), hash)
		if err != nil {
			writeError(w, errStatus(http.StatusUnauthorized, "invalid token"))
			return
		}
		var tenantCreated time.Time
		if tok.Role == api.RoleTenant {
			// A tenant's tokens die with it: deleting a tenant deletes
			// them, and a token older than its tenant (one that survived a
			// delete and re-create some other way) is refused too.
			t, ok := srv.cache.tenant(tok.Tenant)
			if !ok || t.Created.After(tok.Created) {
				writeError(w, errStatus(http.StatusUnauthorized, "invalid token: its tenant %s no longer exists", tok.Tenant))
				return
			}
			tenantCreated = t.Created
		}
		allowed := false
		for _, role := range roles {
			allowed = allowed || role == tok.Role
		}
		if !allowed {
			writeError(w, errStatus(http.StatusForbidden, "a %s token cannot do this", tok.Role))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, srv.cfg.MaxBodyBytes)
		h(w, r, principal{role: tok.Role, tenant: tok.Tenant, token: tok.ID, node: tok.Node, tenantCreated: tenantCreated})
	})
}

// tokenOf finds a token by the hash of its secret: from the cache, or from
// the store (then cached, unless a purge ran meanwhile).
func (srv *Server) tokenOf(ctx context.Context, hash []byte) (api.Token, error) {
	if tok, ok := srv.cache.token(hash); ok {
		return tok, nil
	}
	srv.cache.mu.RLock()
	gen := srv.cache.gen
	srv.cache.mu.RUnlock()
	var tok api.Token
	err := srv.store.View(ctx, func(tx state.Tx) error {
		var err error
		tok, err = tx.TokenByHash(hash)
		return err
	})
	if err != nil {
		return api.Token{}, err
	}
	srv.cache.mu.Lock()
	if srv.cache.gen == gen {
		srv.cache.tokens[string(hash)] = tok
	}
	srv.cache.mu.Unlock()
	return tok, nil
}

// statusWriter records the status for the access log.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// logged logs method, path, status and duration — never headers, so
// tokens stay out of logs.
func (srv *Server) logged(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := srv.cfg.Clock()
		sw := &statusWriter{ResponseWriter: w, status: 200}
		h.ServeHTTP(sw, r)
		srv.log.Debug("http", "method", r.Method, "path", r.URL.Path, "status", sw.status, "took", srv.cfg.Clock().Sub(start))
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		http.Error(w, `{"error":"encoding the answer failed"}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// writeError maps errors to statuses: validation 422, not found 404,
// conflicts 409, bodies too large 413, everything else 500 (whose detail
// stays in the log).
func writeError(w http.ResponseWriter, err error) {
	var he *httpError
	var mb *http.MaxBytesError
	switch {
	case errors.As(err, &he):
		if he.status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "5")
		}
		writeJSON(w, he.status, api.Error{Error: he.msg, Field: he.field, State: he.state})
	case errors.As(err, &mb):
		writeJSON(w, http.StatusRequestEntityTooLarge, api.Error{Error: fmt.Sprintf("request body over %d bytes", mb.Limit)})
	case errors.Is(err, state.ErrNotFound):
		writeJSON(w, http.StatusNotFound, api.Error{Error: err.Error()})
	case errors.Is(err, state.ErrExists):
		writeJSON(w, http.StatusConflict, api.Error{Error: err.Error()})
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		writeJSON(w, http.StatusServiceUnavailable, api.Error{Error: "request canceled"})
	default:
		writeJSON(w, http.StatusInternalServerError, api.Error{Error: "internal error: " + err.Error()})
	}
}

// decode reads a JSON body strictly: unknown fields and trailing data are
// errors naming what was wrong.
func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mb *http.MaxBytesError
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &mb):
			return err
		case errors.As(err, &se):
			return errStatus(http.StatusBadRequest, "malformed JSON at byte %d: %v", se.Offset, se)
		case errors.As(err, &te):
			return errField(te.Field, "field %s: want %s, got %s", te.Field, te.Type, te.Value)
		case errors.Is(err, io.EOF):
			return errStatus(http.StatusBadRequest, "empty body: send a JSON object")
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			f := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return errField(f, "unknown field %q", f)
		}
		return errStatus(http.StatusBadRequest, "malformed JSON: %v", err)
	}
	if dec.More() {
		return errStatus(http.StatusBadRequest, "trailing data after the JSON object")
	}
	return nil
}

// waitFor reads ?wait=DURATION (capped at 60s) for long polls.
func waitFor(r *http.Request) (time.Duration, error) {
	v := r.URL.Query().Get("wait")
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, errField("wait", "wait %q: want a duration such as 30s", v)
	}
	return min(d, 60*time.Second), nil
}

// readList runs one read-only transaction that yields a list and answers it
// as JSON: 200 with [] rather than null when empty, or the mapped error.
func readList[T any](srv *Server, w http.ResponseWriter, r *http.Request, read func(tx state.Tx) ([]T, error)) {
	var out []T
	err := srv.store.View(r.Context(), func(tx state.Tx) error {
		var err error
		out, err = read(tx)
		return err
	})
	if err != nil {
		writeError(w, err)
		return
	}
	if out == nil {
		out = []T{}
	}
	writeJSON(w, http.StatusOK, out)
}

// writeSSE writes one event as a Server-Sent Events frame. Every field is
// encoded: the id is a number, the event name keeps only [A-Za-z0-9._-]
// (anything else becomes '_'), and the data is one line of JSON (which
// escapes newlines), so no stored value can end a frame or forge another.
func writeSSE(w io.Writer, e api.Event) {
	fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", e.Seq, sseName(e.Kind), mustJSON(e))
}

func sseName(kind string) string {
	if kind == "" {
		return "message"
	}
	b := []byte(kind)
	if len(b) > 64 {
		b = b[:64]
	}
	for i, c := range b {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			b[i] = '_'
		}
	}
	return string(b)
}
