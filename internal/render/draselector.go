package render

import (
	"fmt"
	"strconv"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/parser"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
)

// nvidiaSelector rewrites a gpuslice selector into the names NVIDIA's DRA
// driver publishes, where the meaning carries over exactly:
//
//   - attribute model compared with string literals (==, !=, in a list)
//     becomes productName in the product names the catalog knows for those
//     models (a model has several: SXM and PCIe, NVML's spellings);
//   - attribute or capacity memoryMiB compared with a number (==, !=, <,
//     <=, >, >=, either side) becomes
//     device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('NMi')) OP 0.
//
// Everything else is kept as written (foreignNames then names what is
// still not NVIDIA's). A model the catalog does not know is kept too. An
// expression that does not parse is returned unchanged with the error.
func nvidiaSelector(expr string, cat *catalog.Catalog) (string, error) {
	env, err := cel.NewEnv()
	if err != nil {
		return expr, err
	}
	parsed, iss := env.Parse(expr)
	if iss.Err() != nil {
		return expr, fmt.Errorf("selector %q: %w", expr, iss.Err())
	}
	native := parsed.NativeRep()
	root := native.Expr()
	next := int64(0)
	celast.PostOrderVisit(root, celast.NewExprVisitor(func(e celast.Expr) { next = max(next, e.ID()) }))
	fac := celast.NewExprFactory()
	id := func() int64 { next++; return next }
	var calls []celast.Expr
	celast.PreOrderVisit(root, celast.NewExprVisitor(func(e celast.Expr) {
		if e.Kind() == celast.CallKind {
			calls = append(calls, e)
		}
	}))
	changed := false
	for _, e := range calls {
		if to := rewriteComparison(e, fac, id, cat); to != nil {
			e.SetKindCase(to)
			changed = true
		}
	}
	if !changed {
		return expr, nil
	}
	out, err := parser.Unparse(root, native.SourceInfo())
	if err != nil {
		return expr, err
	}
	return out, nil
}

// flipped is the operator with its operands swapped (5 < x is x > 5).
var flipped = map[string]string{
	"_==_": "_==_", "_!=_": "_!=_", "_<_": "_>_", "_<=_": "_>=_", "_>_": "_<_", "_>=_": "_<=_",
}

// rewriteComparison returns the NVIDIA form of one comparison, or nil when
// it is not one nvidiaSelector translates.
func rewriteComparison(e celast.Expr, fac celast.ExprFactory, id func() int64, cat *catalog.Catalog) celast.Expr {
	call := e.AsCall()
	args := call.Args()
	fn := call.FunctionName()
	if len(args) != 2 || call.IsMemberFunction() {
		return nil
	}
	if fn == "@in" {
		path := alloc.MemberPath(args[0])
		if !isGPUField(path, "attributes", "model") || args[1].Kind() != celast.ListKind {
			return nil
		}
		var models []string
		for _, el := range args[1].AsList().Elements() {
			s, ok := stringLiteral(el)
			if !ok {
				return nil
			}
			models = append(models, s)
		}
		return productNameIn(models, fac, id, cat)
	}
	if _, ok := flipped[fn]; !ok {
		return nil
	}
	member, other, op := args[0], args[1], fn
	if alloc.MemberPath(member) == nil {
		member, other, op = args[1], args[0], flipped[fn]
	}
	path := alloc.MemberPath(member)
	switch {
	case isGPUField(path, "attributes", "model") && (op == "_==_" || op == "_!=_"):
		s, ok := stringLiteral(other)
		if !ok {
			return nil
		}
		in := productNameIn([]string{s}, fac, id, cat)
		if in == nil || op == "_==_" {
			return in
		}
		return fac.NewCall(id(), "!_", in)
	case isGPUField(path, "attributes", "memoryMiB") || isGPUField(path, "capacity", "memoryMiB"):
		mib, ok := numberLiteral(other)
		if !ok || mib < 0 {
			return nil
		}
		capacity := fac.NewCall(id(), "_[_]", fac.NewSelect(id(), fac.NewIdent(id(), "device"), "capacity"),
			fac.NewLiteral(id(), types.String(gpuClass)))
		cmp := fac.NewMemberCall(id(), "compareTo", fac.NewSelect(id(), capacity, "memory"),
			fac.NewCall(id(), "quantity", fac.NewLiteral(id(), types.String(strconv.FormatInt(mib, 10)+"Mi"))))
		return fac.NewCall(id(), op, cmp, fac.NewLiteral(id(), types.Int(0)))
	}
	return nil
}

// productNameIn is device.attributes['gpu.nvidia.com'].productName in the
// product names of models; nil when a model is not in the catalog.
func productNameIn(models []string, fac celast.ExprFactory, id func() int64, cat *catalog.Catalog) celast.Expr {
	var names []celast.Expr
	for _, m := range models {
		g, err := cat.GPU(m)
		if err != nil || len(g.ProductNames) == 0 {
			return nil
		}
		for _, p := range g.ProductNames {
			names = append(names, fac.NewLiteral(id(), types.String(p)))
		}
	}
	attrs := fac.NewCall(id(), "_[_]", fac.NewSelect(id(), fac.NewIdent(id(), "device"), "attributes"),
		fac.NewLiteral(id(), types.String(gpuClass)))
	return fac.NewCall(id(), "@in", fac.NewSelect(id(), attrs, "productName"), fac.NewList(id(), names, nil))
}

func isGPUField(path []string, kind, field string) bool {
	return len(path) == 4 && path[0] == "device" && path[1] == kind && path[2] == gpuClass && path[3] == field
}

func stringLiteral(e celast.Expr) (string, bool) {
	if e.Kind() != celast.LiteralKind {
		return "", false
	}
	s, ok := e.AsLiteral().Value().(string)
	return s, ok
}

// numberLiteral reads an integer literal (int or uint; a double only when
// it is whole).
func numberLiteral(e celast.Expr) (int64, bool) {
	if e.Kind() != celast.LiteralKind {
		return 0, false
	}
	switch v := e.AsLiteral().Value().(type) {
	case int64:
		return v, true
	case uint64:
		if v <= 1<<62 {
			return int64(v), true
		}
	case float64:
		if v == float64(int64(v)) {
			return int64(v), true
		}
	}
	return 0, false
}
