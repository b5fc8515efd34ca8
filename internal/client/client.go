// Package client is the Go client of gpuslice's HTTP API, used by the CLI
// and the node agent.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
)

// Client talks to one gpuslice server with one token.
type Client struct {
	base  string
	token string
	http  *http.Client
}

// New makes a client for a server URL ("http://127.0.0.1:7777").
func New(server, token string, hc *http.Client) (*Client, error) {
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("server %q: want a URL such as http://127.0.0.1:7777", server)
	}
	if hc == nil {
		hc = &http.Client{Timeout: 90 * time.Second}
	}
	return &Client{base: strings.TrimRight(server, "/"), token: token, http: hc}, nil
}

// Error is an error answer from the server.
type Error struct {
	Status  int
	Message string
	Field   string
	// State is a claim's current state on a 409 (the claim was no longer
	// in the state the transition starts from).
	State api.ClaimState
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s (field %s, HTTP %d)", e.Message, e.Field, e.Status)
	}
	return fmt.Sprintf("%s (HTTP %d)", e.Message, e.Status)
}

// Do sends a request with a JSON body (nil for none) and decodes the JSON
// answer into out (nil to discard).
func (c *Client) Do(ctx context.Context, method, path string, body, out any) error {
	_, err := c.do(ctx, method, path, body, out)
	return err
}

// NextCursorHeader names the cursor of a list's next page (the server's
// server.NextCursorHeader).
const NextCursorHeader = "X-Next-Cursor"

// ListAll gets every page of a list (GET path, which may carry a query)
// by following the server's cursors.
func ListAll[T any](ctx context.Context, c *Client, path string) ([]T, error) {
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	out := []T{}
	after := ""
	for {
		p := path
		if after != "" {
			p += sep + "after=" + url.QueryEscape(after)
		}
		var page []T
		h, err := c.do(ctx, http.MethodGet, p, nil, &page)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		next := h.Get(NextCursorHeader)
		if next == "" || next == after || len(page) == 0 {
			return out, nil
		}
		after = next
	}
}

func (c *Client) do(ctx context.Context, method, path string, body, out any) (http.Header, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode >= 400 {
		var body api.Error
		e := &Error{Status: resp.StatusCode}
		if json.Unmarshal(data, &body) == nil && body.Error != "" {
			e.Message, e.Field, e.State = body.Error, body.Field, api.ClaimState(body.State)
		} else {
			e.Message = strings.TrimSpace(string(data))
		}
		return resp.Header, e
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.Header, fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
		}
	}
	return resp.Header, nil
}

// CreateClaim posts a claim for a tenant ("" = the token's own).
func (c *Client) CreateClaim(ctx context.Context, tenant string, spec api.ClaimSpec) (api.Claim, error) {
	var out api.Claim
	err := c.Do(ctx, http.MethodPost, "/v1/claims", api.CreateClaimRequest{Tenant: tenant, ClaimSpec: spec}, &out)
	return out, err
}

// Claim gets a claim; with wait > 0 it long-polls until the claim leaves
// the state from.
func (c *Client) Claim(ctx context.Context, id string, from api.ClaimState, wait time.Duration) (api.Claim, error) {
	var out api.Claim
	path := "/v1/claims/" + url.PathEscape(id)
	if wait > 0 {
		path += "?wait=" + wait.String() + "&state=" + url.QueryEscape(string(from))
	}
	err := c.Do(ctx, http.MethodGet, path, nil, &out)
	return out, err
}

// Release releases a claim.
func (c *Client) Release(ctx context.Context, id string) (api.Claim, error) {
	var out api.Claim
	err := c.Do(ctx, http.MethodDelete, "/v1/claims/"+url.PathEscape(id), nil, &out)
	return out, err
}
