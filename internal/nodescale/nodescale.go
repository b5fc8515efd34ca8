// Package nodescale carries out the node autoscaler's decisions on a
// running control plane: each Step reads the pending claims and the nodes
// through the API, asks autoscale.PlanNodes (pure) what to add and what to
// remove, and applies the answer through a Provider. SimProvider is the
// runnable fake: it starts simulated-GPU agents in-process against the
// server, so a demo or a test sees nodes join and leave as a cloud would
// make them.
package nodescale

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gpuslice/gpuslice/internal/agent"
	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/autoscale"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/gpu/fake"
)

// Provider makes and removes nodes of a pool.
type Provider interface {
	// Create starts a node called name with the pool's instance type; it
	// registers with the control plane on its own.
	Create(ctx context.Context, pool autoscale.NodePool, name string) error
	// Delete stops the node and removes it from the control plane.
	Delete(ctx context.Context, name string) error
}

// quotaReason starts the reason the server gives a pending claim that fits
// but would pass its tenant's quota (internal/server quotaRoomOf): new
// nodes cannot place it, so the controller buys none for it.
const quotaReason = "quota:"

// DefaultBootTimeout is how long a node asked of the provider may take to
// join before the controller gives up on it (deletes it) and may buy
// another.
const DefaultBootTimeout = 15 * time.Minute

// Controller applies PlanNodes through a Provider.
type Controller struct {
	Client   *client.Client // admin
	Pools    []autoscale.NodePool
	Provider Provider
	Clock    func() time.Time
	Log      *slog.Logger
	// BootTimeout: see DefaultBootTimeout (0 takes it).
	BootTimeout time.Duration

	emptySince map[string]time.Time
	// booting: nodes created through the provider that have not joined
	// the control plane yet, with their pool and when they were asked
	// for. PlanNodes counts them (NodePool.Booting) so a slow boot does
	// not buy the same capacity again.
	booting map[string]bootingNode
}

type bootingNode struct {
	pool  string
	since time.Time
}

// poolOf is the pool a node belongs to: the nodes a controller makes are
// named "<pool>-<n>".
func poolOf(node string, pools []autoscale.NodePool) string {
	for _, p := range pools {
		if rest, ok := strings.CutPrefix(node, p.Pool.Name+"-"); ok && rest != "" && strings.Trim(rest, "0123456789") == "" {
			return p.Pool.Name
		}
	}
	return ""
}

// Step makes one decision and applies it; it returns the decision.
func (c *Controller) Step(ctx context.Context) (autoscale.NodePlan, error) {
	if c.emptySince == nil {
		c.emptySince = map[string]time.Time{}
	}
	if c.booting == nil {
		c.booting = map[string]bootingNode{}
	}
	bootTimeout := c.BootTimeout
	if bootTimeout <= 0 {
		bootTimeout = DefaultBootTimeout
	}
	now := c.Clock()
	nodes, err := client.ListAll[api.Node](ctx, c.Client, "/v1/nodes")
	if err != nil {
		return autoscale.NodePlan{}, err
	}
	claims, err := client.ListAll[api.Claim](ctx, c.Client, "/v1/claims?state=pending&state=allocated&state=running")
	if err != nil {
		return autoscale.NodePlan{}, err
	}
	busy := map[string]bool{}
	var pending []alloc.Claim
	var overQuota []string
	for _, cl := range claims {
		if cl.State == api.Pending && strings.HasPrefix(cl.Reason, quotaReason) {
			overQuota = append(overQuota, cl.ID) // a node would not help it
			continue
		}
		if cl.State == api.Pending {
			pending = append(pending, alloc.Claim{Name: cl.ID, Tenant: cl.Tenant, Isolation: cl.Spec.Isolation,
				Priority: cl.Spec.Priority, Requests: cl.Spec.Requests, Constraints: cl.Spec.Constraints})
			continue
		}
		if cl.Allocation != nil {
			for _, d := range cl.Allocation.Devices {
				busy[d.Node] = true
			}
		}
	}
	pools := make([]autoscale.NodePool, len(c.Pools))
	copy(pools, c.Pools)
	used := map[string]map[string]bool{} // pool -> node names taken
	var mine []autoscale.PoolNode
	for _, n := range nodes {
		p := poolOf(n.Name, pools)
		if p == "" {
			continue
		}
		if used[p] == nil {
			used[p] = map[string]bool{}
		}
		used[p][n.Name] = true
		for i := range pools {
			if pools[i].Pool.Name == p {
				pools[i].Nodes++
			}
		}
		if busy[n.Name] {
			delete(c.emptySince, n.Name)
		} else if _, ok := c.emptySince[n.Name]; !ok {
			c.emptySince[n.Name] = now
		}
		mine = append(mine, autoscale.PoolNode{Name: n.Name, Pool: p, EmptySince: c.emptySince[n.Name]})
		delete(c.booting, n.Name) // joined
	}
	// Nodes asked for that have not joined: counted as booting, or given
	// up (deleted) past the boot timeout.
	var gaveUp []string
	for name, b := range c.booting {
		if now.Sub(b.since) > bootTimeout {
			if err := c.Provider.Delete(ctx, name); err != nil {
				c.log().Warn("deleting a node that never joined", "node", name, "err", err)
			}
			delete(c.booting, name)
			gaveUp = append(gaveUp, fmt.Sprintf("%s (asked for %s ago)", name, now.Sub(b.since).Round(time.Second)))
			continue
		}
		if used[b.pool] == nil {
			used[b.pool] = map[string]bool{}
		}
		used[b.pool][name] = true
		for i := range pools {
			if pools[i].Pool.Name == b.pool {
				pools[i].Booting++
			}
		}
	}
	np, err := autoscale.PlanNodes(pools, pending, mine, now, catalog.Default())
	if err != nil {
		return np, err
	}
	if len(gaveUp) > 0 {
		sort.Strings(gaveUp)
		np.Reasons = append(np.Reasons, fmt.Sprintf("gave up on node(s) that did not join within %s: %s", bootTimeout, strings.Join(gaveUp, ", ")))
	}
	if len(overQuota) > 0 {
		np.Reasons = append(np.Reasons, fmt.Sprintf("%d pending claim(s) wait for their tenant's quota, not for capacity: no node bought for them (%s)",
			len(overQuota), strings.Join(overQuota, ", ")))
	}
	for _, g := range np.Grow {
		var pool autoscale.NodePool
		for _, p := range pools {
			if p.Pool.Name == g.Pool {
				pool = p
			}
		}
		for k, made := 0, 0; made < g.Nodes; k++ {
			name := fmt.Sprintf("%s-%d", g.Pool, k)
			if used[g.Pool][name] {
				continue
			}
			if err := c.Provider.Create(ctx, pool, name); err != nil {
				return np, fmt.Errorf("creating node %s of pool %s: %w", name, g.Pool, err)
			}
			c.booting[name] = bootingNode{pool: g.Pool, since: now}
			c.log().Info("node added", "node", name, "pool", g.Pool, "reason", strings.Join(np.Reasons, "; "))
			made++
		}
	}
	for _, r := range np.Remove {
		if err := c.Provider.Delete(ctx, r.Node); err != nil {
			return np, fmt.Errorf("removing node %s: %w", r.Node, err)
		}
		delete(c.emptySince, r.Node)
		c.log().Info("node removed", "node", r.Node, "pool", r.Pool, "reason", r.Reason)
	}
	return np, nil
}

func (c *Controller) log() *slog.Logger {
	if c.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return c.Log
}

// SimProvider makes nodes of simulated GPUs: an in-process agent per node
// (the same internal/agent a real host runs) with the instance type's GPUs,
// registered against the control plane with an agent token bound to it.
type SimProvider struct {
	Admin *client.Client
	// Connect makes a client for an agent token.
	Connect  func(token string) (*client.Client, error)
	Interval time.Duration // agents' heartbeat (default 1s)

	mu     sync.Mutex
	agents map[string]func() // node -> stop
}

// Create starts a simulated node of the pool's instance type.
func (p *SimProvider) Create(ctx context.Context, pool autoscale.NodePool, name string) error {
	it, err := catalog.Default().InstanceType(pool.Pool.InstanceType)
	if err != nil {
		return err
	}
	var spec fake.MachineSpec
	for range it.GPUCount {
		spec.GPUs = append(spec.GPUs, fake.GPUSpec{Model: it.GPU, MIGEnabled: pool.Pool.MIG != ""})
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(name)) // GPU uuids differ per node
	m, err := fake.New(spec, fake.WithSeed(int64(h.Sum64()>>1)))
	if err != nil {
		return err
	}
	var tok api.Token
	if err := p.Admin.Do(ctx, "POST", "/v1/tokens", map[string]string{"role": string(api.RoleAgent), "node": name}, &tok); err != nil {
		return err
	}
	cl, err := p.Connect(tok.Secret)
	if err != nil {
		return err
	}
	interval := p.Interval
	if interval <= 0 {
		interval = time.Second
	}
	a, err := agent.New(agent.Config{Name: name, Client: cl, Device: m, Interval: interval, Workloads: m, Kill: m.StopProcess})
	if err != nil {
		return err
	}
	if err := a.Register(ctx); err != nil {
		return err
	}
	actx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = a.Run(actx); close(done) }()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.agents == nil {
		p.agents = map[string]func(){}
	}
	p.agents[name] = func() { cancel(); <-done }
	return nil
}

// Delete stops the node's agent and deletes the node.
func (p *SimProvider) Delete(ctx context.Context, name string) error {
	p.mu.Lock()
	stop := p.agents[name]
	delete(p.agents, name)
	p.mu.Unlock()
	if stop != nil {
		stop()
	}
	return p.Admin.Do(ctx, "DELETE", "/v1/nodes/"+name, nil, nil)
}

// Close stops every agent it started.
func (p *SimProvider) Close() {
	p.mu.Lock()
	stops := p.agents
	p.agents = nil
	p.mu.Unlock()
	for _, s := range stops {
		s()
	}
}
