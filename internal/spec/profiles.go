package spec

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/model"
)

// The keys of a Profiles file (`gpuslice advise`, `gpuslice simulate`).
var (
	profileTopKeys      = []string{"apiVersion", "kind", "fleet", "workloads", "simulation"}
	profileFleetKeys    = []string{"instanceType", "gpu", "gpusPerNode", "nodes"}
	profileWorkloadKeys = []string{"name", "kind", "tenant", "memory", "utilization", "smOccupancy", "latencySensitive",
		"isolation", "replicas", "arrivalsPerHour", "duration", "trace"}
	profileSimKeys = []string{"duration", "seed", "sampleEvery"}
)

// ReadProfiles reads a Profiles file: the fleet's GPUs, one description
// per workload and the simulation's settings. Traces are named, not read:
// the caller loads each TracePath with ReadTrace.
func ReadProfiles(file string, data []byte) (*model.Profiles, Diagnostics) {
	w := &walker{file: file}
	p := &model.Profiles{Sources: []string{file}}
	docs := w.parseDocs(trimBOM(data))
	if len(docs) == 0 && len(w.diags) == 0 {
		w.errorf(nil, "", "start with apiVersion: "+NativeAPIVersion+" and kind: Profiles", "the file is empty")
	}
	if len(docs) > 1 {
		w.errorf(docs[1], "", "put every workload in one document", "a Profiles file has one YAML document, found %d", len(docs))
		docs = docs[:1]
	}
	for _, doc := range docs {
		w.profiles(doc, p)
	}
	return p, w.diags
}

func (w *walker) profiles(doc *yaml.Node, p *model.Profiles) {
	top := w.mapping(doc, "", profileTopKeys...)
	if v, ok := w.str(top, "apiVersion"); !ok || v != NativeAPIVersion {
		w.errorf(top.get("apiVersion"), "apiVersion", "want "+NativeAPIVersion, "apiVersion %q is not gpuslice's", v)
	}
	if v, ok := w.str(top, "kind"); !ok || v != "Profiles" {
		w.errorf(top.get("kind"), "kind", "want Profiles", "kind %q", v)
	}
	w.profileFleet(top, p)
	names := map[string]int{}
	wls := w.seq(top.get("workloads"), "workloads")
	if top.get("workloads") == nil {
		w.errorf(doc, "workloads", "list at least one workload: name, kind, memory, utilization", "no workloads")
	}
	for i, n := range wls {
		path := index("workloads", i)
		pr := w.profile(n, path)
		if pr.Name != "" {
			if j, dup := names[pr.Name]; dup {
				w.errorf(n, join(path, "name"), "give every workload its own name", "workload %q is also workloads[%d]", pr.Name, j)
			}
			names[pr.Name] = i
		}
		p.Workloads = append(p.Workloads, pr)
	}
	p.Sim = model.SimulationConfig{Duration: 24 * time.Hour, Seed: 1}
	if n := top.get("simulation"); n != nil {
		f := w.mapping(n, "simulation", profileSimKeys...)
		if d, ok := w.duration(f, "duration", time.Minute, 366*24*time.Hour); ok && d > 0 {
			p.Sim.Duration = d
		}
		if v := f.get("seed"); v != nil {
			s, err := strconv.ParseUint(strings.TrimSpace(v.Value), 10, 64)
			if v.Kind != yaml.ScalarNode || err != nil {
				w.errorf(v, "simulation.seed", "want a whole number ≥ 0", "%s is not a seed", kindName(v))
			} else {
				p.Sim.Seed = s
			}
		}
		if d, ok := w.duration(f, "sampleEvery", time.Second, 366*24*time.Hour); ok && d > 0 {
			p.Sim.SampleEvery = d
		}
	}
	if p.Sim.SampleEvery == 0 {
		p.Sim.SampleEvery = max(time.Minute, (p.Sim.Duration / 200).Round(time.Minute))
	}
}

func (w *walker) profileFleet(top *fields, p *model.Profiles) {
	n := top.get("fleet")
	if n == nil {
		w.errorf(top.node, "fleet", "add fleet: {instanceType: p4d.24xlarge} or fleet: {gpu: A100-80GB, gpusPerNode: 8}", "no fleet: which GPUs should the workloads share?")
		return
	}
	f := w.mapping(n, "fleet", profileFleetKeys...)
	fl := &p.Fleet
	fl.Where = w.pos(n)
	fl.InstanceType, _ = w.str(f, "instanceType")
	fl.GPU, _ = w.str(f, "gpu")
	per, _ := w.integer(f, "gpusPerNode", 1, 64)
	nodes, _ := w.integer(f, "nodes", 0, 1_000_000)
	fl.GPUsPerNode, fl.Nodes = int(per), int(nodes)
	cat := catalog.Default()
	switch {
	case fl.InstanceType != "" && fl.GPU != "":
		w.errorf(f.get("gpu"), "fleet.gpu", "give instanceType, or gpu with gpusPerNode", "both instanceType and gpu are set")
	case fl.InstanceType != "":
		it, err := cat.InstanceType(fl.InstanceType)
		if err != nil {
			w.errorf(f.get("instanceType"), "fleet.instanceType", "see gpuslice catalog instances", "%v", err)
			return
		}
		if fl.GPUsPerNode != 0 && fl.GPUsPerNode != it.GPUCount {
			w.errorf(f.get("gpusPerNode"), "fleet.gpusPerNode", fmt.Sprintf("%s has %d; leave gpusPerNode out", it.Name, it.GPUCount), "%d GPUs per node", fl.GPUsPerNode)
		}
		fl.GPUsPerNode = it.GPUCount
	case fl.GPU != "":
		g, err := cat.GPU(fl.GPU)
		if err != nil {
			w.errorf(f.get("gpu"), "fleet.gpu", "see gpuslice catalog gpus", "%v", err)
			return
		}
		fl.GPU = g.ID
		if fl.GPUsPerNode == 0 {
			fl.GPUsPerNode = 1
		}
	default:
		w.errorf(n, "fleet", "add instanceType: p4d.24xlarge, or gpu: A100-80GB with gpusPerNode", "the fleet names neither instanceType nor gpu")
	}
}

func (w *walker) profile(n *yaml.Node, path string) model.Profile {
	f := w.mapping(n, path, profileWorkloadKeys...)
	p := model.Profile{Where: w.pos(n), Replicas: 1, Tenant: "default"}
	p.Name, _ = w.str(f, "name")
	if p.Name == "" {
		w.errorf(n, join(path, "name"), "", "a workload needs a name")
	}
	kind, ok := w.str(f, "kind")
	valid := make([]string, len(model.WorkloadKinds))
	for i, k := range model.WorkloadKinds {
		valid[i] = string(k)
	}
	switch {
	case !ok:
		w.errorf(n, join(path, "kind"), "valid: "+strings.Join(valid, ", "), "a workload needs a kind")
	case !contains(valid, kind):
		hint := "valid: " + strings.Join(valid, ", ")
		if s := catalog.Suggest(kind, valid); s != "" {
			hint = fmt.Sprintf("did you mean %q? %s", s, hint)
		}
		w.errorf(f.get("kind"), join(path, "kind"), hint, "unknown kind %q", kind)
	default:
		p.Kind = model.WorkloadKind(kind)
	}
	if t, ok := w.str(f, "tenant"); ok {
		if t == "" {
			w.errorf(f.get("tenant"), join(path, "tenant"), "leave it out for tenant \"default\"", "empty tenant")
		} else {
			p.Tenant = t
		}
	}
	p.MemoryMiB = w.memory(f, "memory")
	if u, ok := w.integer(f, "utilization", 1, 100); ok {
		p.Utilization = int(u)
	}
	if o, ok := w.integer(f, "smOccupancy", 1, 100); ok {
		p.SMOccupancy = int(o)
	}
	p.LatencySensitive = p.Kind == model.KindOnlineInference || p.Kind == model.KindNotebook
	if b, ok := w.boolean(f, "latencySensitive"); ok {
		p.LatencySensitive = b
	}
	if iso, ok := w.str(f, "isolation"); ok {
		switch iso {
		case "tenant":
		case "hardware":
			p.HardwareIsolation = true
		default:
			w.errorf(f.get("isolation"), join(path, "isolation"), "valid: tenant (default), hardware", "unknown isolation %q", iso)
		}
	}
	if r, ok := w.integer(f, "replicas", 0, 1_000_000); ok {
		p.Replicas = int(r)
	}
	if a, ok := w.float(f, "arrivalsPerHour", 0, 1e6); ok {
		p.ArrivalsPerHour = a
	}
	if d, ok := w.duration(f, "duration", time.Second, 366*24*time.Hour); ok && d > 0 {
		p.Duration = d
	}
	p.TracePath, _ = w.str(f, "trace")
	if p.TracePath == "" {
		if !f.has("memory") {
			w.errorf(n, join(path, "memory"), "e.g. memory: 8Gi (GPU memory at its peak), or a trace", "workload %q says no memory", p.Name)
		}
		if !f.has("utilization") {
			w.errorf(n, join(path, "utilization"), "percent of time a whole GPU is busy with one replica alone (1..100), or a trace", "workload %q says no utilization", p.Name)
		}
	}
	return p
}

// float reads a number within [lo, hi].
func (w *walker) float(f *fields, key string, lo, hi float64) (float64, bool) {
	n := f.get(key)
	if n == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(n.Value), 64)
	if n.Kind != yaml.ScalarNode || err != nil || math.IsNaN(v) {
		w.errorf(n, join(f.path, key), fmt.Sprintf("want a number from %g to %g", lo, hi), "%s is not a number", kindName(n))
		return 0, false
	}
	if v < lo || v > hi {
		w.errorf(n, join(f.path, key), fmt.Sprintf("want %g..%g", lo, hi), "%g is out of range", v)
		return 0, false
	}
	return v, true
}

// duration reads a Go duration ("90m", "2h30m") or a number of days or
// weeks ("7d", "1w") within [lo, hi].
func (w *walker) duration(f *fields, key string, lo, hi time.Duration) (time.Duration, bool) {
	n := f.get(key)
	if n == nil {
		return 0, false
	}
	hint := fmt.Sprintf("want a duration from %v to %v, e.g. 90m, 2h, 7d, 1w", lo, hi)
	if n.Kind != yaml.ScalarNode {
		w.errorf(n, join(f.path, key), hint, "%s is not a duration", kindName(n))
		return 0, false
	}
	d, err := ParseDuration(n.Value)
	if err != nil {
		w.errorf(n, join(f.path, key), hint, "%v", err)
		return 0, false
	}
	if d < lo || d > hi {
		w.errorf(n, join(f.path, key), hint, "%v is out of range", d)
		return 0, false
	}
	return d, true
}

// ParseDuration reads a Go duration, or a whole or decimal number of days
// ("7d") or weeks ("1w").
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	for suffix, unit := range map[string]time.Duration{"d": 24 * time.Hour, "w": 7 * 24 * time.Hour} {
		if num, ok := strings.CutSuffix(s, suffix); ok {
			v, err := strconv.ParseFloat(num, 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > 1e5 {
				return 0, fmt.Errorf("%q is not a duration", s)
			}
			return time.Duration(v * float64(unit)), nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration", s)
	}
	return d, nil
}

// maxTraceLines bounds a trace.
const maxTraceLines = 1_000_000

// ReadTrace reads a measured trace: CSV lines "time,utilization,memory"
// with an optional header line. time is seconds from the start (or a
// duration such as 90s), strictly increasing; utilization a percent
// (0..100); memory a size (8Gi) or MiB. Errors name the file and line.
func ReadTrace(file string, data []byte) (*model.Trace, error) {
	r := csv.NewReader(bytes.NewReader(trimBOM(data)))
	r.FieldsPerRecord = -1
	r.Comment = '#'
	r.TrimLeadingSpace = true
	t := &model.Trace{File: file}
	var errs []error
	bad := func(line int, format string, args ...any) {
		if len(errs) < 20 {
			errs = append(errs, fmt.Errorf("%s:%d: %s", file, line, fmt.Sprintf(format, args...)))
		}
	}
	first := true
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			line := 0
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				line = pe.Line
				err = pe.Err
			}
			bad(line, "%v (want time,utilization,memory)", err)
			break
		}
		line, _ := r.FieldPos(0)
		if first {
			first = false
			if len(rec) > 0 && strings.EqualFold(strings.TrimSpace(rec[0]), "time") {
				continue
			}
		}
		if len(rec) != 3 {
			bad(line, "%d fields; want 3: time,utilization,memory (e.g. 60,35,8Gi)", len(rec))
			continue
		}
		var s model.TraceSample
		at, err := traceTime(rec[0])
		if err != nil {
			bad(line, "time %q: want seconds from the start (e.g. 60) or a duration (1m)", rec[0])
			continue
		}
		s.At = at
		u, err := strconv.ParseFloat(strings.TrimSpace(rec[1]), 64)
		if err != nil || math.IsNaN(u) || u < 0 || u > 100 {
			bad(line, "utilization %q: want a percent from 0 to 100", rec[1])
			continue
		}
		s.Utilization = u
		m, err := traceMemory(rec[2])
		if err != nil {
			bad(line, "memory %q: want a size such as 8Gi or 512Mi, or a number of MiB", rec[2])
			continue
		}
		s.MemoryMiB = m
		if n := len(t.Samples); n > 0 && s.At <= t.Samples[n-1].At {
			bad(line, "time %v is not after the previous line's %v: times must increase", s.At, t.Samples[n-1].At)
			continue
		}
		if len(t.Samples) >= maxTraceLines {
			bad(line, "more than %d samples; thin the trace", maxTraceLines)
			break
		}
		t.Samples = append(t.Samples, s)
	}
	if len(errs) == 0 && len(t.Samples) < 2 {
		errs = append(errs, fmt.Errorf("%s: %d samples; a trace needs at least 2 lines time,utilization,memory", file, len(t.Samples)))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return t, nil
}

func traceTime(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if v, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(v) || v < 0 || v > 1e9 {
			return 0, errors.New("out of range")
		}
		return time.Duration(v * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, errors.New("not a time")
	}
	return d, nil
}

func traceMemory(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if v, err := strconv.ParseInt(s, 10, 64); err == nil {
		if v < 0 || v > 1<<30 {
			return 0, errors.New("out of range")
		}
		return v, nil
	}
	return ParseMemoryMiB(s)
}
