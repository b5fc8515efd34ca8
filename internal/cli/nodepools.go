package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpuslice/gpuslice/internal/autoscale"
	"github.com/gpuslice/gpuslice/internal/client"
	"github.com/gpuslice/gpuslice/internal/nodescale"
	"github.com/gpuslice/gpuslice/internal/server"
	"github.com/gpuslice/gpuslice/internal/spec"
	"github.com/gpuslice/gpuslice/internal/state"
)

// readNodePools reads the pools serve may grow from a gpuslice spec file
// (its pools; instance types required): each pool with the TTL given and
// its minimum from the spec's compose-style minimumNodesInPool, if any: a
// workload that names its pool sets that pool's minimum, one that names
// none sets every pool's.
func readNodePools(path string, ttl time.Duration) ([]autoscale.NodePool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--node-pools: %w", err)
	}
	s, diags := spec.Read(filepath.Base(path), data, "")
	if err := diags.Err(); err != nil {
		return nil, fmt.Errorf("--node-pools %s: %w", path, err)
	}
	if len(s.Pools) == 0 {
		return nil, fmt.Errorf("--node-pools %s: no pools; give pools with an instanceType, e.g. {name: l4, instanceType: g6.xlarge}", path)
	}
	warm, warmIn := 0, map[string]int{}
	for _, w := range s.Workloads {
		switch {
		case w.Autoscaling == nil:
		case w.Pool != "":
			warmIn[w.Pool] = max(warmIn[w.Pool], w.Autoscaling.MinimumNodesInPool)
		default:
			warm = max(warm, w.Autoscaling.MinimumNodesInPool)
		}
	}
	var out []autoscale.NodePool
	for _, p := range s.Pools {
		if p.InstanceType == "" {
			return nil, fmt.Errorf("--node-pools %s: pool %s has no instanceType: nodes are made of instance types (gpuslice catalog instances lists them)", path, p.Name)
		}
		out = append(out, autoscale.NodePool{Pool: p, MinNodes: max(warm, warmIn[p.Name]), EmptyTTL: ttl})
	}
	return out, nil
}

// startNodePools runs the node autoscaler in serve: every interval it
// plans the pending claims on new nodes of the pools and removes nodes
// empty past the TTL, with simulated nodes (in-process agents) as its
// provider.
func startNodePools(ctx context.Context, srv *server.Server, store state.Store, dataDir string, pools []autoscale.NodePool, interval time.Duration, log *slog.Logger) error {
	tok, err := controllerToken(ctx, srv, store, dataDir)
	if err != nil {
		return err
	}
	inproc := &http.Client{Transport: handlerTransport{srv.Handler()}}
	admin, err := client.New("http://in-process", tok, inproc)
	if err != nil {
		return err
	}
	prov := &nodescale.SimProvider{Admin: admin, Interval: 2 * time.Second,
		Connect: func(t string) (*client.Client, error) { return client.New("http://in-process", t, inproc) }}
	ctl := &nodescale.Controller{Client: admin, Pools: pools, Provider: prov, Clock: time.Now, Log: log.With("nodepools", len(pools))}
	names := make([]string, len(pools))
	for i, p := range pools {
		names[i] = p.Pool.Name + " (" + p.Pool.InstanceType + ")"
	}
	log.Info("node autoscaler on, with simulated nodes", "pools", strings.Join(names, ", "), "interval", interval)
	go func() {
		defer prov.Close()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if _, err := ctl.Step(ctx); err != nil && ctx.Err() == nil {
				log.Warn("node autoscaler step failed", "err", err)
			}
		}
	}()
	return nil
}
