package client

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
)

// Renew extends a leased claim's lease (POST /v1/claims/{id}/renew).
func (c *Client) Renew(ctx context.Context, id string) (api.Claim, error) {
	var out api.Claim
	err := c.Do(ctx, http.MethodPost, "/v1/claims/"+url.PathEscape(id)+"/renew", nil, &out)
	return out, err
}

// ClaimGone says whether an error from Renew (or any call on a claim)
// means the claim is over for its holder: not found, or in a final state.
func ClaimGone(err error) bool {
	var ce *Error
	return errors.As(err, &ce) && (ce.Status == http.StatusNotFound || (ce.Status == http.StatusConflict && ce.State.Final()))
}

// HoldLease renews a leased claim every interval until ctx ends. The
// channel it returns gets one error and closes when the server says the
// claim is over (ClaimGone): its holder must stop using the devices. A
// renewal that fails otherwise (the server unreachable for a moment) is
// tried again at the next interval; the server's grace covers that.
func (c *Client) HoldLease(ctx context.Context, id string, interval time.Duration) <-chan error {
	lost := make(chan error, 1)
	go func() {
		defer close(lost)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rc, cancel := context.WithTimeout(ctx, max(interval, time.Second))
			_, err := c.Renew(rc, id)
			cancel()
			if ClaimGone(err) {
				lost <- err
				return
			}
		}
	}()
	return lost
}

// LeaseInterval is how often a holder renews a lease of leaseSeconds:
// three times per lease.
func LeaseInterval(leaseSeconds int) time.Duration {
	return max(time.Duration(leaseSeconds)*time.Second/3, 100*time.Millisecond)
}
