package drabench

import (
	"errors"
	"fmt"

	"github.com/gpuslice/gpuslice/internal/alloc"
)

// decider makes one decision at a time on a fleet and can empty it again.
type decider interface {
	// decide allocates claim i of the sequence and commits it; ok is false
	// when nothing fits (not an error).
	decide(i int) (ok bool, err error)
	// model is the GPU model the last successful decision got.
	lastModel() string
	// reset releases everything decided so far.
	reset() error
}

type gpusliceSide struct {
	state  *alloc.State
	claims []*alloc.Claim
	models map[string]string // GPU uuid -> model
	done   []string          // claims allocated since the last reset
	last   string
}

func newGPUSliceSide(f *fleetSpec) (*gpusliceSide, error) {
	g := &gpusliceSide{models: map[string]string{}}
	var fleet alloc.Fleet
	for _, n := range f.nodes {
		node := alloc.Node{Name: n.name}
		for i := range GPUsPerNode {
			uuid := gpuUUID(n.name, i)
			g.models[uuid] = n.model.ID
			node.GPUs = append(node.GPUs, alloc.GPU{UUID: uuid, Index: i, Model: n.model.ID,
				Healthy: true, Sharing: alloc.Sharing{Mode: alloc.Exclusive}})
		}
		fleet.Nodes = append(fleet.Nodes, node)
	}
	s, err := alloc.NewState(fleet, nil, alloc.Options{})
	if err != nil {
		return nil, err
	}
	g.state = s
	for i, m := range f.claims {
		g.claims = append(g.claims, &alloc.Claim{Name: fmt.Sprintf("claim-%d", i), Tenant: "bench",
			Requests: []alloc.Request{{Name: "gpu", Mode: alloc.Exclusive,
				Selector: fmt.Sprintf("device.attributes['%s'].model == '%s'", Driver, m)}}})
	}
	return g, nil
}

func (g *gpusliceSide) decide(i int) (bool, error) {
	c := g.claims[i]
	a, err := g.state.Allocate(c)
	if err != nil {
		if nofit := (*alloc.NoFitError)(nil); errors.As(err, &nofit) {
			return false, nil
		}
		return false, err
	}
	if err := g.state.Apply(a); err != nil {
		return false, err
	}
	g.done = append(g.done, c.Name)
	g.last = g.models[a.Devices[0].GPU]
	return true, nil
}

func (g *gpusliceSide) lastModel() string { return g.last }

func (g *gpusliceSide) reset() error {
	for _, name := range g.done {
		if err := g.state.Release(name); err != nil {
			return err
		}
	}
	g.done = g.done[:0]
	return nil
}
