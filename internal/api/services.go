package api

import (
	"time"

	"github.com/gpuslice/gpuslice/internal/autoscale"
	"github.com/gpuslice/gpuslice/internal/model"
)

// Service is N replicas of one claim and one command, scaled between
// minReplicas and maxReplicas by the controller in `gpuslice serve`.
type Service struct {
	Name    string        `json:"name"`
	Tenant  string        `json:"tenant"`
	Spec    ServiceSpec   `json:"spec"`
	Status  ServiceStatus `json:"status"`
	Created time.Time     `json:"created"`
	Updated time.Time     `json:"updated"`
	// PutBy is the role of the token that last put the spec: a tenant's
	// spec runs only while its command is one the admin allows the tenant
	// (Tenant.Commands); an admin's runs as put.
	PutBy Role `json:"putBy,omitempty"`
	// Disabled says why no replica of the service runs (its command is no
	// longer allowed to its tenant); empty when it runs.
	Disabled string `json:"disabled,omitempty"`
}

// ServiceSpec is what a user asks for.
type ServiceSpec struct {
	// Claim is each replica's claim (pinned to the serving node).
	Claim ClaimSpec `json:"claim"`
	// Command is run once per replica with the claim's environment, the
	// service's Env and PORT (the port the replica must listen on when
	// the service has a targetPort).
	Command []string          `json:"command"`
	Env     map[string]string `json:"env,omitempty"`
	// Autoscaling holds compose's x-omnistrate-capabilities keys
	// (autoscaling and serverlessConfiguration together).
	Autoscaling model.Autoscaling `json:"autoscaling"`
	// Metric is gpu (default; "compute" is the same), memory, requests or
	// prometheus.
	Metric string `json:"metric,omitempty"`
	// TargetConcurrency is the requests in flight per replica that the
	// requests metric counts as 100% (default 10).
	TargetConcurrency int `json:"targetConcurrency,omitempty"`
	// PrometheusURL and PrometheusQuery: the prometheus metric, a query
	// whose value is a percent.
	PrometheusURL   string `json:"prometheusURL,omitempty"`
	PrometheusQuery string `json:"prometheusQuery,omitempty"`
	// WakeTimeoutSeconds bounds how long a request waits at the proxy for
	// a replica (default 30); past it the answer is 503.
	WakeTimeoutSeconds int `json:"wakeTimeoutSeconds,omitempty"`
}

// ServiceStatus is what the controller reports.
type ServiceStatus struct {
	// Replicas is the decided count; Ready those serving.
	Replicas int       `json:"replicas"`
	Ready    int       `json:"ready"`
	Since    time.Time `json:"since,omitempty"`
	// Claims are the replicas' claims.
	Claims []string `json:"claims,omitempty"`
	// Decisions are the latest changes, newest last, each with its reason.
	Decisions []autoscale.Decision `json:"decisions,omitempty"`
	// Message says what keeps the service from its decided count.
	Message string `json:"message,omitempty"`
}

// MaxDecisions is how many decisions a service's status keeps.
const MaxDecisions = 50
