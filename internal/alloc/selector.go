package alloc

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/ext"

	"github.com/gpuslice/gpuslice/internal/quantity"
)

// Selectors are CEL expressions, as in Kubernetes DRA, over two variables:
//
//	device.driver                         "gpu.nvidia.com"
//	device.attributes['gpu.nvidia.com']   type ("gpu" or "mig"), uuid, parentUUID,
//	                                      model, productName, architecture,
//	                                      cudaComputeCapability, index, profile,
//	                                      memoryMiB, computePercent, migCapable
//	device.capacity['gpu.nvidia.com']     memory (bytes), memoryMiB
//	node                                  name, labels, instanceType
//
// e.g. device.attributes['gpu.nvidia.com'].profile == '1g.5gb' or
// node.labels['zone'] == 'a' && device.attributes['gpu.nvidia.com'].memoryMiB >= 40000.
//
// Kubernetes' quantity functions work as in DRA selectors, so claims
// written for NVIDIA's driver read unchanged:
// device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('10Gi')) >= 0.
// Here a quantity is its integer value (bytes for memory): quantity(s),
// isQuantity(s), and on a value compareTo, isGreaterThan, isLessThan,
// asInteger. A quantity() literal that does not parse is an error when
// the selector is compiled.
//
// The string, set, list, two-variable comprehension and binding
// extensions of Kubernetes' CEL base environment are in too
// ('...'.lowerAscii(), sets.contains, cel.bind, ...); the libraries that
// live in Kubernetes (regex find, semver, ip, url, format) are added by
// the Kubernetes edge with AddSelectorLibraries.
const driverName = "gpu.nvidia.com"

var (
	extraMu  sync.Mutex
	extraLib []cel.EnvOption
	envBuilt bool
)

// AddSelectorLibraries adds CEL environment options (libraries) to the
// selector environment. It must be called before the first selector is
// compiled (an init function); later calls return an error.
func AddSelectorLibraries(opts ...cel.EnvOption) error {
	extraMu.Lock()
	defer extraMu.Unlock()
	if envBuilt {
		return fmt.Errorf("alloc: selector libraries added after the first selector was compiled")
	}
	extraLib = append(extraLib, opts...)
	return nil
}

var celEnv = sync.OnceValues(func() (*cel.Env, error) {
	extraMu.Lock()
	envBuilt = true
	extra := extraLib
	extraMu.Unlock()
	compare := func(a, b ref.Val) int64 {
		x, y := a.(types.Int), b.(types.Int)
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	}
	return cel.NewEnv(append([]cel.EnvOption{
		ext.Strings(ext.StringsVersion(2)),
		ext.Sets(),
		ext.Lists(ext.ListsVersion(3)),
		ext.TwoVarComprehensions(),
		ext.Bindings(ext.BindingsVersion(0)),
		cel.Variable("device", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("node", cel.MapType(cel.StringType, cel.DynType)),
		cel.Function("quantity", cel.Overload("quantity_string", []*cel.Type{cel.StringType}, cel.IntType,
			cel.UnaryBinding(func(v ref.Val) ref.Val {
				n, err := quantity.Parse(string(v.(types.String)))
				if err != nil {
					return types.NewErr("quantity: %v", err)
				}
				return types.Int(n)
			}))),
		cel.Function("isQuantity", cel.Overload("isQuantity_string", []*cel.Type{cel.StringType}, cel.BoolType,
			cel.UnaryBinding(func(v ref.Val) ref.Val {
				_, err := quantity.ParseBare(string(v.(types.String)))
				return types.Bool(err == nil)
			}))),
		cel.Function("compareTo", cel.MemberOverload("int_compareTo_int", []*cel.Type{cel.IntType, cel.IntType}, cel.IntType,
			cel.BinaryBinding(func(a, b ref.Val) ref.Val { return types.Int(compare(a, b)) }))),
		cel.Function("isGreaterThan", cel.MemberOverload("int_isGreaterThan_int", []*cel.Type{cel.IntType, cel.IntType}, cel.BoolType,
			cel.BinaryBinding(func(a, b ref.Val) ref.Val { return types.Bool(compare(a, b) > 0) }))),
		cel.Function("isLessThan", cel.MemberOverload("int_isLessThan_int", []*cel.Type{cel.IntType, cel.IntType}, cel.BoolType,
			cel.BinaryBinding(func(a, b ref.Val) ref.Val { return types.Bool(compare(a, b) < 0) }))),
		cel.Function("asInteger", cel.MemberOverload("int_asInteger", []*cel.Type{cel.IntType}, cel.IntType,
			cel.UnaryBinding(func(v ref.Val) ref.Val { return v }))),
	}, extra...)...)
})

// checkQuantities reports the first quantity('…') literal that does not
// parse, with what would be valid.
func checkQuantities(expr string, a *cel.Ast) error {
	var bad error
	celast.PreOrderVisit(a.NativeRep().Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		if bad != nil || e.Kind() != celast.CallKind {
			return
		}
		c := e.AsCall()
		if (c.FunctionName() != "quantity") || len(c.Args()) != 1 || c.Args()[0].Kind() != celast.LiteralKind {
			return
		}
		if s, ok := c.Args()[0].AsLiteral().Value().(string); ok {
			if _, err := quantity.ParseBare(s); err != nil {
				// Once each: the value, what is wrong, the fix.
				bad = fmt.Errorf("selector %q: quantity(%s): %w%s", expr, strconv.Quote(s), err, quantity.Hint(s))
			}
		}
	}))
	return bad
}

// CompileSelector checks a selector and returns why it is invalid.
func CompileSelector(expr string) (cel.Program, error) {
	prg, _, err := compileSelector(expr)
	return prg, err
}

// programs are compiled selectors shared by every State of the process
// (a cel.Program is safe for concurrent use): a scheduler keeps one State
// per node, and compiling each claim's selector once per node cost more
// than deciding. Bounded: past maxPrograms new expressions are compiled
// and not kept.
var programs sync.Map // expr -> *program

const maxPrograms = 4096

var programCount atomic.Int64

type program struct {
	prg cel.Program
	ast *cel.Ast
	err error
}

func compileSelector(expr string) (cel.Program, *cel.Ast, error) {
	if p, ok := programs.Load(expr); ok {
		pr := p.(*program)
		return pr.prg, pr.ast, pr.err
	}
	prg, ast, err := compileSelectorOnce(expr)
	if programCount.Load() < maxPrograms {
		if _, loaded := programs.LoadOrStore(expr, &program{prg, ast, err}); !loaded {
			programCount.Add(1)
		}
	}
	return prg, ast, err
}

func compileSelectorOnce(expr string) (cel.Program, *cel.Ast, error) {
	env, err := celEnv()
	if err != nil {
		return nil, nil, err
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, nil, fmt.Errorf("selector %q: %w", expr, iss.Err())
	}
	if t := ast.OutputType(); t != cel.BoolType && t != cel.DynType {
		return nil, nil, fmt.Errorf("selector %q: evaluates to %s, want bool", expr, t)
	}
	if err := checkQuantities(expr, ast); err != nil {
		return nil, nil, err
	}
	prg, err := env.Program(ast, cel.CostLimit(100000))
	if err != nil {
		return nil, nil, fmt.Errorf("selector %q: %w", expr, err)
	}
	return prg, ast, nil
}

// selectorCache remembers compiled selectors and their answers per device.
// A device's attributes never change, and every device and GPU gets a
// generation number unique across a State and its clones (a device index
// may be reused after an undone decision or a removed node, its generation
// never), so answers are kept by generation and clones share the cache.
type selectorCache struct {
	mu   sync.Mutex
	sels map[string]*compiled
	// last is the selector asked for last: a decision asks for its
	// request's selector once per candidate, and hashing a long
	// expression each time costs more than comparing it.
	lastExpr string
	last     *compiled
	gens     atomic.Uint64
	classes  map[string]int // node class key -> number (State.classOf)
}

func (c *selectorCache) classOf(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.classes[key]
	if !ok {
		n = len(c.classes)
		c.classes[key] = n
	}
	return n
}

type compiled struct {
	prg cel.Program
	// byDev[di] is 0 when unknown, else the device's generation << 1,
	// plus 1 when it matches.
	byDev   []uint64
	virtual map[virtKey]bool
	// byClass holds a class-level selector's answers by device class.
	byClass map[classKey]bool
	// classLevel is set when the expression reads only what every device
	// of one index class shares: the device's shape (model, profile,
	// memory, ...) and its node's labels and instance type (classes are
	// per node class too). One device's answer then holds for its class.
	classLevel bool
	evals      int // evaluations made (tests read it)
}

// perDeviceAttributes are the device attributes that differ between
// devices of one class.
var perDeviceAttributes = map[string]bool{"uuid": true, "parentUUID": true, "index": true}

// classLevel reports whether a selector reads only class attributes (see
// compiled.classLevel). Anything it cannot account for (comprehensions,
// whole maps, node.name) makes it per-device.
func classLevel(e celast.Expr) bool {
	if p := MemberPath(e); p != nil {
		switch {
		case p[0] == "node":
			return len(p) >= 2 && (p[1] == "labels" || p[1] == "instanceType")
		case p[0] != "device" || len(p) < 2:
			return false
		case p[1] == "driver" || p[1] == "capacity":
			return true
		case p[1] == "attributes":
			return len(p) >= 4 && !perDeviceAttributes[p[3]]
		}
		return false
	}
	switch e.Kind() {
	case celast.LiteralKind:
		return true
	case celast.CallKind:
		c := e.AsCall()
		if c.IsMemberFunction() && !classLevel(c.Target()) {
			return false
		}
		for _, a := range c.Args() {
			if !classLevel(a) {
				return false
			}
		}
		return true
	case celast.ListKind:
		for _, el := range e.AsList().Elements() {
			if !classLevel(el) {
				return false
			}
		}
		return true
	case celast.SelectKind:
		return classLevel(e.AsSelect().Operand())
	}
	return false
}

// classKey is what a class-level selector can see of a device: its
// model, MIG profile (-1: a whole GPU) and node class.
type classKey struct {
	model   string
	profile int
	class   int
}

type virtKey struct {
	gpuGen  uint64
	profile int
}

func newSelectorCache() *selectorCache {
	return &selectorCache{sels: map[string]*compiled{}, classes: map[string]int{}}
}

// nextGen hands out a generation for a new device or GPU.
func (c *selectorCache) nextGen() uint64 { return c.gens.Add(1) }

func (c *selectorCache) get(expr string) (*compiled, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last != nil && expr == c.lastExpr {
		return c.last, nil
	}
	if sc, ok := c.sels[expr]; ok {
		c.lastExpr, c.last = expr, sc
		return sc, nil
	}
	prg, ast, err := compileSelector(expr)
	if err != nil {
		return nil, err
	}
	sc := &compiled{prg: prg, virtual: map[virtKey]bool{}, byClass: map[classKey]bool{}, classLevel: classLevel(ast.NativeRep().Expr())}
	c.sels[expr] = sc
	return sc, nil
}

func (sc *compiled) eval(dev, node map[string]any) bool {
	sc.evals++
	return eval(sc.prg, dev, node)
}

func eval(prg cel.Program, dev, node map[string]any) bool {
	out, _, err := prg.Eval(map[string]any{"device": dev, "node": node})
	if err != nil {
		return false // a missing attribute does not match, as in DRA
	}
	b, ok := out.Value().(bool)
	return ok && b
}

// selectorPerDevice reports whether a selector's answer may differ
// between devices of one shape.
func (s *State) selectorPerDevice(expr string) bool {
	if expr == "" {
		return false
	}
	sc, err := s.sel.get(expr)
	return err != nil || !sc.classLevel
}

// matchDevice evaluates a request's selector on an existing device.
func (s *State) matchDevice(expr string, di int) bool {
	if expr == "" {
		return true
	}
	sc, err := s.sel.get(expr)
	if err != nil {
		return false
	}
	s.sel.mu.Lock()
	defer s.sel.mu.Unlock()
	d := &s.devs[di]
	if sc.classLevel {
		g := &s.gpus[d.gpu]
		k := classKey{model: g.model.ID, profile: -1, class: s.nodes[g.node].class}
		if d.isMIG {
			k.profile = d.profile
		}
		v, ok := sc.byClass[k]
		if !ok {
			if d.attrs == nil {
				d.attrs = s.deviceAttrs(d)
			}
			v = sc.eval(d.attrs, s.nodes[g.node].attrs)
			sc.byClass[k] = v
		}
		return v
	}
	for len(sc.byDev) <= di {
		sc.byDev = append(sc.byDev, 0)
	}
	if sc.byDev[di]>>1 != d.gen {
		sc.byDev[di] = d.gen << 1
		if d.attrs == nil {
			d.attrs = s.deviceAttrs(d)
		}
		if sc.eval(d.attrs, s.nodes[s.gpus[d.gpu].node].attrs) {
			sc.byDev[di]++
		}
	}
	return sc.byDev[di]&1 == 1
}

// matchVirtual evaluates a selector on a MIG instance of profile p that
// GPU gi would get (profile -1: the whole GPU after a mode switch).
func (s *State) matchVirtual(expr string, gi, p int) bool {
	if expr == "" {
		return true
	}
	sc, err := s.sel.get(expr)
	if err != nil {
		return false
	}
	s.sel.mu.Lock()
	defer s.sel.mu.Unlock()
	g := &s.gpus[gi]
	ck := classKey{model: g.model.ID, profile: p, class: s.nodes[g.node].class}
	if sc.classLevel {
		if v, ok := sc.byClass[ck]; ok {
			return v
		}
	}
	k := virtKey{g.gen, p}
	if v, ok := sc.virtual[k]; ok {
		return v
	}
	var d devState
	if p < 0 {
		g := &s.gpus[gi]
		d = devState{gpu: gi, id: g.spec.UUID, memMiB: g.model.MemoryMiB, compute: 100}
	} else {
		d = s.migDevice(gi, p, 0, "", Sharing{})
	}
	v := sc.eval(s.deviceAttrs(&d), s.nodes[s.gpus[gi].node].attrs)
	if sc.classLevel {
		sc.byClass[ck] = v
	} else {
		sc.virtual[k] = v
	}
	return v
}

// deviceAttrs builds the `device` variable of a device.
func (s *State) deviceAttrs(d *devState) map[string]any {
	g := &s.gpus[d.gpu]
	a := map[string]any{
		"type":                  "gpu",
		"uuid":                  d.id,
		"model":                 g.model.ID,
		"productName":           firstOr(g.model.ProductNames, g.model.Name),
		"architecture":          g.model.Arch,
		"cudaComputeCapability": g.model.ComputeCapability,
		"index":                 int64(g.spec.Index),
		"memoryMiB":             d.memMiB,
		"computePercent":        int64(d.compute),
		"migCapable":            g.model.MIG != nil,
	}
	if d.isMIG {
		a["type"] = "mig"
		a["parentUUID"] = g.spec.UUID
		a["profile"] = g.geo.Shapes[d.profile].Name
	} else {
		a["parentUUID"] = g.spec.UUID
	}
	return map[string]any{
		"driver":     driverName,
		"attributes": map[string]any{driverName: a},
		"capacity":   map[string]any{driverName: map[string]any{"memory": d.memMiB << 20, "memoryMiB": d.memMiB}},
	}
}

func nodeAttrs(n *Node) map[string]any {
	labels := map[string]any{}
	for k, v := range n.Labels {
		labels[k] = v
	}
	return map[string]any{"name": n.Name, "labels": labels, "instanceType": n.InstanceType}
}

func firstOr(xs []string, def string) string {
	if len(xs) > 0 {
		return xs[0]
	}
	return def
}

// SelectorNames lists the attribute and capacity names a selector reads
// under the driver ("device.attributes['gpu.nvidia.com'].model" gives
// attribute "model"), each once, in order of appearance. Renderers use it
// to tell which names another driver does not publish.
func SelectorNames(expr string) (attributes, capacities []string, err error) {
	env, err := celEnv()
	if err != nil {
		return nil, nil, err
	}
	parsed, iss := env.Parse(expr)
	if iss.Err() != nil {
		return nil, nil, fmt.Errorf("selector %q: %w", expr, iss.Err())
	}
	seen := map[string]bool{}
	celast.PreOrderVisit(parsed.NativeRep().Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		path := MemberPath(e)
		if len(path) != 4 || path[0] != "device" || path[2] != driverName || seen[path[1]+"/"+path[3]] {
			return
		}
		seen[path[1]+"/"+path[3]] = true
		switch path[1] {
		case "attributes":
			attributes = append(attributes, path[3])
		case "capacity":
			capacities = append(capacities, path[3])
		}
	}))
	return attributes, capacities, nil
}

// MemberPath flattens a chain of field selections and constant string
// indexes from an identifier ("device", "attributes", "gpu.nvidia.com",
// "model"); nil when e is not such a chain. Renderers that rewrite
// selectors use it to find attribute reads.
func MemberPath(e celast.Expr) []string {
	switch e.Kind() {
	case celast.IdentKind:
		return []string{e.AsIdent()}
	case celast.SelectKind:
		s := e.AsSelect()
		if p := MemberPath(s.Operand()); p != nil {
			return append(p, s.FieldName())
		}
	case celast.CallKind:
		c := e.AsCall()
		if c.FunctionName() != "_[_]" || len(c.Args()) != 2 || c.Args()[1].Kind() != celast.LiteralKind {
			return nil
		}
		key, ok := c.Args()[1].AsLiteral().Value().(string)
		if p := MemberPath(c.Args()[0]); p != nil && ok {
			return append(p, key)
		}
	}
	return nil
}
