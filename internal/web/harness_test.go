package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/agent"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/gpu/fake"
	"github.com/gpuslice/gpuslice/internal/server"
	"github.com/gpuslice/gpuslice/internal/state"
)

// live is a real server over HTTP (real clock, background loops running)
// with simulated machines whose agents run on their own, as under
// `gpuslice serve`.
type live struct {
	t     testing.TB
	srv   *server.Server
	url   string
	admin string
	ctx   context.Context
}

func newLive(t *testing.T) *live {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	srv, err := server.New(ctx, server.Config{Store: state.NewMemory(), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		RetryInterval: 50 * time.Millisecond, SampleInterval: 100 * time.Millisecond, SeriesLength: 200})
	if err != nil {
		t.Fatal(err)
	}
	srv.Run(ctx)
	hs := httptest.NewServer(srv.Handler())
	// A browser's event stream stays open: close connections first.
	t.Cleanup(func() { hs.CloseClientConnections(); hs.Close() })
	tok, err := srv.CreateToken(ctx, api.RoleAdmin, "")
	if err != nil {
		t.Fatal(err)
	}
	return &live{t: t, srv: srv, url: hs.URL, admin: tok.Secret, ctx: ctx}
}

// machine registers a simulated machine and runs its agent.
func (l *live) machine(name string, spec fake.MachineSpec) *fake.Machine {
	l.t.Helper()
	tok, err := l.srv.CreateTokenFor(l.ctx, api.RoleAgent, "", name)
	if err != nil {
		l.t.Fatal(err)
	}
	m, err := fake.New(spec, fake.WithSeed(int64(len(name))*7919+int64(name[len(name)-1])))
	if err != nil {
		l.t.Fatal(err)
	}
	c, err := client.New(l.url, tok.Secret, nil)
	if err != nil {
		l.t.Fatal(err)
	}
	a, err := agent.New(agent.Config{Name: name, Client: c, Device: m, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Interval: 100 * time.Millisecond, Kill: m.StopProcess, Workloads: m})
	if err != nil {
		l.t.Fatal(err)
	}
	if err := a.Register(l.ctx); err != nil {
		l.t.Fatal(err)
	}
	go func() { _ = a.Run(l.ctx) }()
	return m
}

func (l *live) tenant(name string, quotaMiB int64) string {
	l.t.Helper()
	l.must(l.admin, "PUT", "/v1/tenants/"+name, api.Tenant{MemoryMiB: quotaMiB}, 200, nil)
	var tok api.Token
	l.must(l.admin, "POST", "/v1/tokens", api.CreateTokenRequest{Role: api.RoleTenant, Tenant: name}, 201, &tok)
	return tok.Secret
}

func (l *live) call(token, method, path string, body any) (int, []byte) {
	l.t.Helper()
	var rd io.Reader
	if body != nil {
		data, _ := json.Marshal(body)
		rd = bytes.NewReader(data)
	}
	req, _ := http.NewRequest(method, l.url+path, rd)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		l.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func (l *live) must(token, method, path string, body any, want int, out any) {
	l.t.Helper()
	code, data := l.call(token, method, path, body)
	if code != want {
		l.t.Fatalf("%s %s: HTTP %d, want %d: %s", method, path, code, want, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			l.t.Fatal(err)
		}
	}
}

// waitClaim polls a claim until cond holds (the agent makes its devices
// real asynchronously).
func (l *live) waitClaim(token, id string, cond func(api.Claim) bool) api.Claim {
	l.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var c api.Claim
		l.must(token, "GET", "/v1/claims/"+id, nil, 200, &c)
		if cond(c) {
			return c
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("claim %s never reached the wanted state: %+v", id, c)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
