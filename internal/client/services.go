package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/gpuslice/gpuslice/internal/api"
)

// PutService creates or replaces a service for a tenant ("" = the token's
// own).
func (c *Client) PutService(ctx context.Context, name, tenant string, spec api.ServiceSpec) (api.Service, error) {
	return c.putService(ctx, name, tenant, false, spec)
}

// PutServiceCreatingTenant is PutService that also creates tenant, with
// no quota, when it does not exist (admin tokens only; the server refuses
// it to a tenant token).
func (c *Client) PutServiceCreatingTenant(ctx context.Context, name, tenant string, spec api.ServiceSpec) (api.Service, error) {
	return c.putService(ctx, name, tenant, true, spec)
}

func (c *Client) putService(ctx context.Context, name, tenant string, create bool, spec api.ServiceSpec) (api.Service, error) {
	var out api.Service
	body := api.PutServiceRequest{Tenant: tenant, CreateTenant: create, ServiceSpec: spec}
	err := c.Do(ctx, http.MethodPut, "/v1/services/"+url.PathEscape(name), body, &out)
	return out, err
}

// Services lists the services the token may see.
func (c *Client) Services(ctx context.Context) ([]api.Service, error) {
	var out []api.Service
	err := c.Do(ctx, http.MethodGet, "/v1/services", nil, &out)
	return out, err
}

// Service gets one service.
func (c *Client) Service(ctx context.Context, name string) (api.Service, error) {
	var out api.Service
	err := c.Do(ctx, http.MethodGet, "/v1/services/"+url.PathEscape(name), nil, &out)
	return out, err
}

// DeleteService deletes a service (the controller stops its replicas).
func (c *Client) DeleteService(ctx context.Context, name string) (api.Service, error) {
	var out api.Service
	err := c.Do(ctx, http.MethodDelete, "/v1/services/"+url.PathEscape(name), nil, &out)
	return out, err
}

// PutServiceStatus reports a service's status (the controller; admin).
func (c *Client) PutServiceStatus(ctx context.Context, name string, st api.ServiceStatus) error {
	return c.Do(ctx, http.MethodPut, "/v1/services/"+url.PathEscape(name)+"/status", st, nil)
}
