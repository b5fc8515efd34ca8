package services

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Querier evaluates a Prometheus query to one number.
type Querier interface {
	Query(ctx context.Context, server, query string) (float64, error)
}

// HTTPPrometheus queries a Prometheus server's HTTP API (/api/v1/query);
// the answer must be a scalar or a vector of one sample.
type HTTPPrometheus struct{ Client *http.Client }

// Query implements Querier.
func (h HTTPPrometheus) Query(ctx context.Context, server, query string) (float64, error) {
	hc := h.Client
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return 0, fmt.Errorf("prometheusURL %q: want http(s)://host:port", server)
	}
	u = u.JoinPath("api", "v1", "query")
	u.RawQuery = url.Values{"query": {query}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, err
	}
	return parsePromAnswer(resp.StatusCode, body)
}

// parsePromAnswer reads the body of /api/v1/query.
func parsePromAnswer(status int, body []byte) (float64, error) {
	var ans struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		return 0, fmt.Errorf("prometheus answered %d with no JSON: %v", status, err)
	}
	if ans.Status != "success" {
		return 0, fmt.Errorf("prometheus: %s %s", ans.Status, ans.Error)
	}
	var pair []any
	switch ans.Data.ResultType {
	case "scalar":
		if err := json.Unmarshal(ans.Data.Result, &pair); err != nil {
			return 0, fmt.Errorf("prometheus scalar: %v", err)
		}
	case "vector":
		var vec []struct {
			Value []any `json:"value"`
		}
		if err := json.Unmarshal(ans.Data.Result, &vec); err != nil {
			return 0, fmt.Errorf("prometheus vector: %v", err)
		}
		if len(vec) != 1 {
			return 0, fmt.Errorf("prometheus query gave %d series; want one (aggregate it, e.g. avg(...))", len(vec))
		}
		pair = vec[0].Value
	default:
		return 0, fmt.Errorf("prometheus result type %q; want scalar or vector", ans.Data.ResultType)
	}
	if len(pair) != 2 {
		return 0, fmt.Errorf("prometheus sample %v: want [time, value]", pair)
	}
	s, _ := pair[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("prometheus value %v is not a finite number", pair[1])
	}
	return v, nil
}
