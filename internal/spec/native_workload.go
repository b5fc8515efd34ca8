package spec

import (
	"fmt"
	"math/big"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/quantity"
)

func (w *walker) nativeWorkload(n *yaml.Node, path string) Workload {
	f := w.mapping(n, path, nativeWorkloadKeys...)
	wl := Workload{Replicas: 1, Where: w.pos(n)}
	wl.Name, _ = w.str(f, "name")
	if wl.Name == "" {
		w.errorf(n, join(path, "name"), "", "a workload needs a name")
	}
	wl.Tenant, _ = w.str(f, "tenant")
	if wl.Tenant == "" {
		wl.Tenant = "default"
	}
	if r, ok := w.integer(f, "replicas", 0, 10000); ok {
		wl.Replicas = int(r)
	}
	wl.Pool, _ = w.str(f, "pool")
	iso, _ := w.str(f, "isolation")
	wl.Isolation = alloc.Isolation(iso)
	if iso != "" && !contains([]string{"none", "tenant", "hardware"}, iso) {
		w.errorf(f.get("isolation"), join(path, "isolation"), "want none, tenant or hardware", "%q", iso)
	}
	p, _ := w.integer(f, "priority", -1000000, 1000000)
	wl.Priority = int(p)
	wl.Image, _ = w.str(f, "image")
	for i, pn := range w.seq(f.get("ports"), join(path, "ports")) {
		var port int
		if _, err := fmt.Sscan(pn.Value, &port); err != nil || port < 1 || port > 65535 {
			w.errorf(pn, index(join(path, "ports"), i), "want 1..65535", "%s is not a port", kindName(pn))
			continue
		}
		wl.Ports = append(wl.Ports, port)
	}
	wl.CPU = w.kubeQuantity(f, "cpu", 1000) // in millicores
	wl.Mem = w.kubeQuantity(f, "memory", 1)
	wl.CPURequest = w.kubeQuantity(f, "cpuRequest", 1000)
	wl.MemRequest = w.kubeQuantity(f, "memoryRequest", 1)
	w.requestWithinLimit(f, "cpuRequest", "cpu", 1000)
	w.requestWithinLimit(f, "memoryRequest", "memory", 1)
	if e := f.get("env"); e != nil {
		ef := w.mapping(e, join(path, "env"))
		wl.Env = map[string]string{}
		for _, k := range ef.keys {
			wl.Env[k], _ = w.str(ef, k)
		}
	}
	switch {
	case f.has("gpu") && f.has("requests"):
		w.errorf(f.get("requests"), join(path, "requests"), "use gpu for one device kind or requests for several", "both gpu and requests are set")
	case f.has("gpu"):
		r := w.nativeRequest(f.get("gpu"), join(path, "gpu"))
		r.Name = "gpu"
		wl.Requests = []alloc.Request{r}
	case f.has("requests"):
		for i, rn := range w.seq(f.get("requests"), join(path, "requests")) {
			rp := index(join(path, "requests"), i)
			r := w.nativeRequest(rn, rp)
			if r.Name == "" {
				w.errorf(rn, join(rp, "name"), "", "a request needs a name when there are several")
			}
			wl.Requests = append(wl.Requests, r)
		}
	default:
		w.errorf(n, path, "add gpu: {memory: 8GiB, compute: 25}", "workload %q asks for no GPU", wl.Name)
	}
	for i, cn := range w.seq(f.get("constraints"), join(path, "constraints")) {
		cp := index(join(path, "constraints"), i)
		cf := w.mapping(cn, cp, nativeConstrKeys...)
		var c alloc.Constraint
		c.Match, _ = w.str(cf, "match")
		for _, rn := range w.seq(cf.get("requests"), join(cp, "requests")) {
			c.Requests = append(c.Requests, rn.Value)
		}
		wl.Constraints = append(wl.Constraints, c)
	}
	// The allocator's own claim validation, mapped back to this workload.
	claim := alloc.Claim{Name: wl.Name, Tenant: wl.Tenant, Isolation: wl.Isolation, Requests: wl.Requests, Constraints: wl.Constraints}
	if len(wl.Requests) > 0 {
		if err := alloc.ValidateClaim(&claim); err != nil {
			for _, e := range unjoin(err) {
				w.errorf(n, path, "", "%v", e)
			}
		}
	}
	return wl
}

func (w *walker) nativeRequest(n *yaml.Node, path string) alloc.Request {
	f := w.mapping(n, path, nativeRequestKeys...)
	var r alloc.Request
	r.Name, _ = w.str(f, "name")
	c, _ := w.integer(f, "count", 1, alloc.MaxDevicesPerClaim)
	r.Count = int(c)
	r.MemoryMiB = w.memory(f, "memory")
	comp, _ := w.integer(f, "compute", 0, 100)
	r.ComputePercent = int(comp)
	mode, _ := w.str(f, "mode")
	r.Mode = alloc.Mode(mode)
	if mode != "" && !contains([]string{"auto", "exclusive", "timeslice", "mps", "mig"}, mode) {
		w.errorf(f.get("mode"), join(path, "mode"), "want auto, exclusive, timeslice, mps or mig", "%q", mode)
		r.Mode = ""
	}
	r.Profile, _ = w.str(f, "profile")
	r.Selector, _ = w.str(f, "selector")
	wk, _ := w.str(f, "workload")
	r.Workload = alloc.Workload(wk)
	r.LatencySensitive, _ = w.boolean(f, "latencySensitive")
	instanceForProfile(&r)
	return r
}

// instanceForProfile: a request that names a MIG profile and no memory
// asks for that instance (mode mig), not for an equal share of a shared
// one, which mode auto would make of it (1/16 of the instance by default).
// A mode the input gives is kept.
func instanceForProfile(r *alloc.Request) {
	if r.Profile != "" && r.MemoryMiB == 0 && (r.Mode == "" || r.Mode == alloc.Auto) {
		r.Mode = alloc.MIG
	}
}

// unjoin splits an errors.Join error into its parts.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// crossCheck checks what spans entries: unique names, pools and tenants
// that workloads name, profiles that exist on the pool's GPU.
func (w *walker) crossCheck(s *Spec) {
	pools := map[string]*Pool{}
	for i := range s.Pools {
		p := &s.Pools[i]
		if _, dup := pools[p.Name]; dup && p.Name != "" {
			w.diags = append(w.diags, Diagnostic{Severity: Error, Pos: p.Where, Path: index("pools", i), Message: fmt.Sprintf("pool %q is defined twice", p.Name)})
		}
		pools[p.Name] = p
	}
	tenants := map[string]bool{}
	for _, t := range s.Tenants {
		tenants[t.Name] = true
	}
	seen := map[string]bool{}
	for i, wl := range s.Workloads {
		path := index("workloads", i)
		if seen[wl.Name] && wl.Name != "" {
			w.diags = append(w.diags, Diagnostic{Severity: Error, Pos: wl.Where, Path: path, Message: fmt.Sprintf("workload %q is defined twice", wl.Name)})
		}
		seen[wl.Name] = true
		if len(s.Tenants) > 0 && !tenants[wl.Tenant] {
			w.diags = append(w.diags, Diagnostic{Severity: Error, Pos: wl.Where, Path: join(path, "tenant"),
				Message: fmt.Sprintf("tenant %q is not declared", wl.Tenant), Hint: "declared: " + keys(tenants)})
		}
		if wl.Pool != "" {
			p, ok := pools[wl.Pool]
			if !ok {
				names := map[string]bool{}
				for k := range pools {
					names[k] = true
				}
				w.diags = append(w.diags, Diagnostic{Severity: Error, Pos: wl.Where, Path: join(path, "pool"),
					Message: fmt.Sprintf("pool %q does not exist", wl.Pool), Hint: "pools: " + keys(names)})
				continue
			}
			w.checkProfiles(wl, p, path)
		}
	}
	if len(s.Pools) == 0 && len(s.Workloads) > 0 {
		w.diags = append(w.diags, Diagnostic{Severity: Error, Pos: Pos{File: w.file}, Path: "pools",
			Message: "workloads but no pools to run them on", Hint: "add pools: [{name: gpus, instanceType: g5.xlarge}]"})
	}
}

func (w *walker) checkProfiles(wl Workload, p *Pool, path string) {
	gpu, err := catalog.Default().GPU(p.GPU)
	if err != nil {
		return
	}
	for i, r := range wl.Requests {
		if r.Profile == "" {
			continue
		}
		rp := join(index(join(path, "requests"), i), "profile")
		if gpu.MIG == nil {
			w.diags = append(w.diags, Diagnostic{Severity: Error, Pos: wl.Where, Path: rp,
				Message: fmt.Sprintf("profile %s on pool %s, whose %s has no MIG", r.Profile, p.Name, gpu.ID)})
			continue
		}
		if _, err := gpu.Profile(r.Profile); err != nil {
			w.diags = append(w.diags, Diagnostic{Severity: Error, Pos: wl.Where, Path: rp, Message: err.Error()})
		}
	}
}

func keys(m map[string]bool) string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	if len(out) == 0 {
		return "(none)"
	}
	return fmt.Sprint(out)
}

// kubeQuantity reads a container resource as a Kubernetes quantity
// ("500m", "2", "4Gi") and reports a malformed one with a hint.
func (w *walker) kubeQuantity(f *fields, key string, scale int64) string {
	v, present := w.str(f, key)
	if !present || v == "" {
		return v
	}
	if _, err := quantityScaled(v, scale); err != nil {
		w.errorf(f.get(key), join(f.path, key), "a Kubernetes quantity such as 500m, 2, 512Mi or 4Gi", "%v", err)
	}
	return v
}

// requestWithinLimit reports a request above its limit, which Kubernetes
// refuses.
func (w *walker) requestWithinLimit(f *fields, reqKey, limitKey string, scale int64) {
	rn, ln := f.get(reqKey), f.get(limitKey)
	if rn == nil || ln == nil {
		return
	}
	r, err1 := quantityScaled(rn.Value, scale)
	l, err2 := quantityScaled(ln.Value, scale)
	if err1 == nil && err2 == nil && r > l {
		w.errorf(rn, join(f.path, reqKey), fmt.Sprintf("at most %s = %s", limitKey, ln.Value),
			"%s %s is more than %s %s; Kubernetes refuses a request above its limit", reqKey, rn.Value, limitKey, ln.Value)
	}
}

// quantityScaled parses a Kubernetes quantity times scale (1000 reads CPU
// in millicores), rounded up.
func quantityScaled(s string, scale int64) (int64, error) {
	if scale == 1 {
		return quantity.Parse(s)
	}
	if _, err := quantity.Parse(s); err != nil {
		return 0, err
	}
	r, ok := new(big.Rat).SetString(strings.TrimSuffix(s, "m"))
	if !ok { // a binary or decimal suffix: whole units are precise enough
		v, _ := quantity.Parse(s)
		return v * scale, nil
	}
	if strings.HasSuffix(s, "m") {
		return ceilRat(r), nil
	}
	return ceilRat(r.Mul(r, big.NewRat(scale, 1))), nil
}

func ceilRat(r *big.Rat) int64 {
	q := new(big.Int).Quo(r.Num(), r.Denom())
	if new(big.Rat).SetInt(q).Cmp(r) < 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}
