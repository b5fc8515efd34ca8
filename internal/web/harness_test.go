package web_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/server"
	"github.com/gpuslice/gpuslice/internal/server/servertest"
	"github.com/gpuslice/gpuslice/internal/testkit"
)

// live is servertest's harness as under `gpuslice serve`: the real clock,
// background loops running (pending claims retried every 50 ms, usage
// sampled every 100 ms into series of 200 points), and simulated machines
// whose agents run on their own (Machine).
type live struct{ *servertest.Harness }

func newLive(t *testing.T) *live {
	t.Helper()
	return &live{servertest.New(t, servertest.Options{RealClock: true, Configure: func(c *server.Config) {
		c.RetryInterval, c.SampleInterval, c.SeriesLength = 50*time.Millisecond, 100*time.Millisecond, 200
	}})}
}

// waitClaim polls a claim until cond holds (the agent makes its devices
// real asynchronously).
func (l *live) waitClaim(token, id string, cond func(api.Claim) bool) api.Claim {
	l.T.Helper()
	var c api.Claim
	testkit.Eventually(l.T, 10*time.Second, "claim "+id+" to reach the wanted state", func() (bool, string) {
		l.Must(token, "GET", "/v1/claims/"+id, nil, 200, &c)
		return cond(c), fmt.Sprintf("%+v", c)
	})
	return c
}
