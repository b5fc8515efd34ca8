package lint

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/gpuslice/gpuslice"

type pkg struct {
	Dir        string
	ImportPath string
	Name       string
	GoFiles    []string
	Imports    []string
	Deps       []string
}

// packages lists every package of the module with its direct imports and
// transitive dependencies.
func packages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps=false", "-json", "./...")
	cmd.Dir = "../.."
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(out)
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 4 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	return pkgs
}

func TestEveryPackageHasOneDocComment(t *testing.T) {
	for _, p := range packages(t) {
		var withDoc []string
		for _, f := range p.GoFiles {
			file, err := parser.ParseFile(token.NewFileSet(), filepath.Join(p.Dir, f), nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			if file.Doc != nil {
				withDoc = append(withDoc, f)
				want := "Package " + p.Name + " "
				if p.Name == "main" {
					want = "Command "
				}
				if !strings.HasPrefix(file.Doc.Text(), want) {
					t.Errorf("%s/%s: doc comment should start with %q", p.ImportPath, f, want)
				}
			}
		}
		if len(withDoc) != 1 {
			t.Errorf("%s: %d files carry a package doc comment (%v), want exactly 1", p.ImportPath, len(withDoc), withDoc)
		}
	}
}

// pure packages make decisions; they must not reach the outside world.
var pure = []string{
	module + "/internal/catalog",
	module + "/internal/mig",
	module + "/internal/alloc",
	module + "/internal/plan",
	module + "/internal/plan/plantest",
	module + "/internal/sim",
	module + "/internal/advise",
	module + "/internal/packing",
	module + "/internal/model",
	module + "/internal/render",
	module + "/internal/autoscale",
	module + "/internal/admit",
	module + "/internal/k8s/dranames",
}

// forbiddenInPure are dependencies (direct or transitive) a pure package
// may not have. A rule ending in "=" matches that package alone (net/url
// and net/netip are plain data types and stay allowed); one ending in "/"
// matches a prefix; any other matches the package and its subpackages.
var forbiddenInPure = []string{
	"os/exec", "net=", "net/http", "database/sql", "os/signal",
	"k8s.io/", "sigs.k8s.io/controller-runtime", "github.com/NVIDIA/go-nvml",
	"modernc.org/sqlite", "google.golang.org/grpc",
}

func matches(dep, rule string) bool {
	if exact, ok := strings.CutSuffix(rule, "="); ok {
		return dep == exact
	}
	if strings.HasSuffix(rule, "/") {
		return strings.HasPrefix(dep, rule)
	}
	return dep == rule || strings.HasPrefix(dep, rule+"/")
}

func TestPurePackagesDoNoIO(t *testing.T) {
	for _, p := range packages(t) {
		if !slices.Contains(pure, p.ImportPath) {
			continue
		}
		cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", p.ImportPath)
		cmd.Dir = "../.."
		out, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, rule := range forbiddenInPure {
				if matches(dep, rule) {
					t.Errorf("pure package %s depends on %s", p.ImportPath, dep)
				}
			}
		}
		// Direct use of os is I/O too (embed is how pure packages read data).
		if slices.Contains(p.Imports, "os") {
			t.Errorf("pure package %s imports os", p.ImportPath)
		}
	}
}

// kubeEdges are the packages that may import Kubernetes: internal/k8s,
// and pkg/karpenterdra, the public package that hands node autoscalers
// written in Go (Karpenter cloud providers) gpuslice's devices as
// k8s.io/api objects.
var kubeEdges = []string{module + "/internal/k8s", module + "/pkg/karpenterdra"}

func kubeEdge(path string) bool {
	for _, e := range kubeEdges {
		if path == e || strings.HasPrefix(path, e+"/") {
			return true
		}
	}
	return false
}

// Only the NVML adapter talks to go-nvml and only the Kubernetes edges
// talk to Kubernetes.
func TestEdgeImportsStayAtTheirEdge(t *testing.T) {
	for _, p := range packages(t) {
		for _, imp := range p.Imports {
			if matches(imp, "github.com/NVIDIA/go-nvml") && !strings.HasPrefix(p.ImportPath, module+"/internal/gpu/nvml") {
				t.Errorf("%s imports %s; only internal/gpu/nvml may", p.ImportPath, imp)
			}
			if (matches(imp, "k8s.io/") || matches(imp, "sigs.k8s.io/controller-runtime")) && !kubeEdge(p.ImportPath) {
				t.Errorf("%s imports %s; only internal/k8s/... and pkg/karpenterdra may", p.ImportPath, imp)
			}
		}
	}
}

// main only wires: it imports the command tree and the standard library,
// and fits on a screen.
func TestMainOnlyWires(t *testing.T) {
	for _, p := range packages(t) {
		if p.Name != "main" {
			continue
		}
		for _, imp := range p.Imports {
			if strings.Contains(imp, ".") && !strings.HasPrefix(imp, module+"/internal/cli") {
				t.Errorf("%s imports %s; main should only wire internal/cli", p.ImportPath, imp)
			}
		}
		for _, f := range p.GoFiles {
			b, err := os.ReadFile(filepath.Join(p.Dir, f))
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(string(b), "\n"); n > 80 {
				t.Errorf("%s/%s has %d lines; main should fit on a screen", p.ImportPath, f, n)
			}
		}
	}
}

// The server is reached only from the command tree: the agent, the client
// and every other package speak to it through the wire types of
// internal/api, never by importing it (directly or through another
// package). internal/cli wires `gpuslice serve`.
func TestOnlyTheCommandTreeImportsTheServer(t *testing.T) {
	server := module + "/internal/server"
	mayImport := func(p pkg) bool {
		return p.Name == "main" || p.ImportPath == module+"/internal/cli" || strings.HasPrefix(p.ImportPath, server+"/")
	}
	checked := 0
	for _, p := range packages(t) {
		if p.ImportPath == server || mayImport(p) {
			continue
		}
		if strings.HasPrefix(p.ImportPath, module+"/internal/agent") || p.ImportPath == module+"/internal/client" {
			checked++
		}
		if slices.Contains(p.Deps, server) {
			t.Errorf("%s depends on %s; use the wire types of internal/api", p.ImportPath, server)
		}
	}
	if checked < 2 {
		t.Fatalf("found %d of the agent's and client's packages; the test no longer sees them", checked)
	}
}

// The HTTP API's bodies have one home, internal/api: the packages on
// either side of the wire declare no exported type with JSON field tags.
func TestWireTypesLiveInAPI(t *testing.T) {
	sides := []string{"/internal/server", "/internal/client", "/internal/agent", "/internal/cli"}
	for _, p := range packages(t) {
		if !slices.Contains(sides, strings.TrimPrefix(p.ImportPath, module)) {
			continue
		}
		for _, f := range p.GoFiles {
			file, err := parser.ParseFile(token.NewFileSet(), filepath.Join(p.Dir, f), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, decl := range file.Decls {
				gd, ok := decl.(*ast.GenDecl)
				if !ok || gd.Tok != token.TYPE {
					continue
				}
				for _, spec := range gd.Specs {
					ts := spec.(*ast.TypeSpec)
					st, ok := ts.Type.(*ast.StructType)
					if !ok || !ts.Name.IsExported() {
						continue
					}
					for _, field := range st.Fields.List {
						if field.Tag != nil && strings.Contains(field.Tag.Value, `json:"`) {
							t.Errorf("%s/%s: %s carries JSON tags; wire types belong in internal/api", p.ImportPath, f, ts.Name.Name)
							break
						}
					}
				}
			}
		}
	}
}

// Each metric is declared once (prometheus.NewDesc or a collector's
// Opts.Name), so two exporters of one series cannot drift apart in help
// or labels: those both export share the declaration (internal/slicemetrics).
func TestEachMetricIsDeclaredOnce(t *testing.T) {
	where := map[string][]string{}
	for _, p := range packages(t) {
		for _, f := range p.GoFiles {
			path := filepath.Join(p.Dir, f)
			file, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(file, func(n ast.Node) bool {
				var lit ast.Expr
				switch n := n.(type) {
				case *ast.CallExpr:
					if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "NewDesc" && len(n.Args) > 0 {
						lit = n.Args[0]
					}
				case *ast.CompositeLit:
					if sel, ok := n.Type.(*ast.SelectorExpr); ok && strings.HasSuffix(sel.Sel.Name, "Opts") {
						for _, e := range n.Elts {
							if kv, ok := e.(*ast.KeyValueExpr); ok {
								if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Name" {
									lit = kv.Value
								}
							}
						}
					}
				}
				if b, ok := lit.(*ast.BasicLit); ok && b.Kind == token.STRING {
					where[b.Value] = append(where[b.Value], p.ImportPath+"/"+f)
				}
				return true
			})
		}
	}
	if len(where) < 10 {
		t.Fatalf("found %d metric declarations; the test no longer sees them", len(where))
	}
	for name, at := range where {
		if len(at) > 1 {
			t.Errorf("metric %s is declared %d times (%v); declare it once and share it", name, len(at), at)
		}
	}
}

// The binaries link no test kit: `testing`, internal/testkit and the
// Kubernetes test harnesses (apitest, nodetest) stay out of cmd/gpuslice
// (`gpuslice bench scheduler` starts its control plane through
// internal/k8s/controlplane, which imports no testing).
func TestBinariesLinkNoTestKit(t *testing.T) {
	forbidden := []string{"testing", module + "/internal/testkit", module + "/internal/k8s/apitest", module + "/internal/k8s/nodetest"}
	found := false
	for _, p := range packages(t) {
		if p.Name != "main" || !strings.HasPrefix(p.ImportPath, module+"/cmd/") {
			continue
		}
		found = true
		for _, f := range forbidden {
			if slices.Contains(p.Deps, f) {
				t.Errorf("%s links %s", p.ImportPath, f)
			}
		}
	}
	if !found {
		t.Fatal("found no binary under cmd/; the test no longer sees them")
	}
}

// testkit is the one test kit (golden files, Eventually, the gpuslice
// binary); it imports testing.
const testkit = module + "/internal/testkit"

// Only _test.go files and test harness packages (those whose own files
// import testing, such as internal/k8s/apitest) import internal/testkit
// (TestBinariesLinkNoTestKit keeps it out of the binaries as well).
func TestTestkitOnlyInTests(t *testing.T) {
	for _, p := range packages(t) {
		if slices.Contains(p.Imports, testkit) && !slices.Contains(p.Imports, "testing") {
			t.Errorf("%s imports %s outside its _test.go files; only tests and test harness packages (which import testing) may", p.ImportPath, testkit)
		}
	}
}
