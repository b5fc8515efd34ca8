// Package consumers checks gpuslice's renders with the parsers of the
// tools that consume them, at the versions named in go.mod: NVIDIA's
// k8s-device-plugin (api/config/v1, plus the start-up checks of its
// main package, which cannot be imported and are mirrored here), NVIDIA's
// mig-parted (api/spec/v1), Karpenter's NodePool types (with
// RuntimeValidate), KEDA's ScaledObject (with its webhook's offline
// checks) and k8s.io/api with strict decoding. NVIDIA's DRA driver
// module is not served by the module proxy, so its GpuConfig and
// MigDeviceConfig rules are checked by draconfig_test.go, written from its
// source at v25.12.0.
//
// It is a separate module so the main module does not depend on these
// versions, and it runs the gpuslice binary built from the main module
// (not an import of it), so what is checked is exactly what a user runs:
// an import would compile the main module against this module's newer
// k8s.io and NVIDIA versions (minimal version selection takes the highest),
// which is not the build users get.
package consumers

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// root is the main module's directory.
const root = "../.."

// bin is the gpuslice binary under test.
var bin string

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	bin = os.Getenv("GPUSLICE_BIN")
	if bin == "" {
		dir, err := os.MkdirTemp("", "gpuslice-consumers")
		if err != nil {
			return 0, err
		}
		defer os.RemoveAll(dir)
		bin = filepath.Join(dir, "gpuslice")
		// -mod=readonly: building never changes the main module's go.mod or
		// go.sum. GOTOOLCHAIN=local: no toolchain switch for the build (the
		// Go running this test is new enough for the main module).
		cmd := exec.Command("go", "build", "-mod=readonly", "-o", bin, "./cmd/gpuslice")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly", "GOTOOLCHAIN=local")
		if out, err := cmd.CombinedOutput(); err != nil {
			return 0, fmt.Errorf("building gpuslice: %v\n%s", err, out)
		}
	}
	return m.Run(), nil
}

// input is one set of files gpuslice reads together.
type input struct {
	name  string
	files []string
}

// inputs lists every example and every golden input of the main module:
// examples/*.yaml, the render goldens' compose seeds, and each case of
// internal/render/testdata/imports (a spec with NVIDIA configs).
func inputs(t *testing.T) []input {
	t.Helper()
	var out []input
	for _, pattern := range []string{"examples/*.yaml", "internal/spec/testdata/compose/seed-*.yaml"} {
		files, _ := filepath.Glob(filepath.Join(root, pattern))
		for _, f := range files {
			out = append(out, input{name: strings.TrimPrefix(f, root+"/"), files: []string{f}})
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(root, "internal/render/testdata/imports/*"))
	for _, d := range dirs {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			continue
		}
		var files []string
		for _, ext := range []string{"*.yaml", "*.json"} {
			fs, _ := filepath.Glob(filepath.Join(d, ext))
			for _, f := range fs {
				if !strings.Contains(f, ".golden.") {
					files = append(files, f)
				}
			}
		}
		sort.Strings(files)
		out = append(out, input{name: strings.TrimPrefix(d, root+"/"), files: files})
	}
	if len(out) < 6 {
		t.Fatalf("found only %d inputs; is the main module at %s?", len(out), root)
	}
	return out
}

// targets asks the binary which render targets it has.
func targets(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command(bin, "render", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("render --help: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`what to write: ([a-z, -]+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("render --help names no targets:\n%s", out)
	}
	var ts []string
	for _, s := range strings.Split(string(m[1]), ",") {
		ts = append(ts, strings.TrimSpace(s))
	}
	return ts
}

// render runs gpuslice render and returns its output.
func render(t *testing.T, in input, target string, extra ...string) []byte {
	t.Helper()
	args := append(append([]string{"render"}, in.files...), append([]string{"--target", target}, extra...)...)
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("gpuslice %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes()
}

// checkers parse one target's output with the upstream packages.
var checkers = map[string]func(t *testing.T, out []byte){
	"nvidia-device-plugin": checkDevicePlugin,
	"mig-parted":           checkMIGParted,
	"dra":                  checkDRA,
	"kubernetes":           checkKubernetes,
	"karpenter":            checkKarpenter,
	"hpa":                  checkHPA,
	"keda":                 checkKEDA,
	"serverless":           checkServerless,
}

// TestEveryRenderParses renders every input with every target and parses
// the output with the consumer's own packages.
func TestEveryRenderParses(t *testing.T) {
	ts := targets(t)
	for _, target := range ts {
		if checkers[target] == nil {
			t.Errorf("render target %s has no consumer check here", target)
		}
	}
	for _, in := range inputs(t) {
		for _, target := range ts {
			check := checkers[target]
			if check == nil {
				continue
			}
			t.Run(in.name+"/"+target, func(t *testing.T) {
				check(t, render(t, in, target))
			})
		}
		t.Run(in.name+"/dra-with-device-classes", func(t *testing.T) {
			out := render(t, in, "dra", "--dra-device-classes")
			if n := bytes.Count(out, []byte("kind: DeviceClass")); n != 2 {
				t.Errorf("%d DeviceClasses with --dra-device-classes, want 2", n)
			}
			checkDRA(t, out)
		})
		t.Run(in.name+"/karpenter-gpuslice", func(t *testing.T) {
			checkKarpenter(t, render(t, in, "karpenter", "--dra-driver", "gpuslice"))
		})
		t.Run(in.name+"/dra-gpuslice", func(t *testing.T) {
			out := render(t, in, "dra", "--dra-driver", "gpuslice", "--dra-device-classes")
			if n := bytes.Count(out, []byte("kind: DeviceClass")); n != 3 {
				t.Errorf("%d DeviceClasses with --dra-device-classes, want 3", n)
			}
			if bytes.Contains(out, []byte("nvidia.com/v1")) || bytes.Contains(out, []byte("'gpu.nvidia.com'")) {
				t.Error("the render for gpuslice's driver names NVIDIA's configs or attributes")
			}
			checkDRAGpuslice(t, out)
		})
	}
}

// documents splits a YAML stream into its non-empty documents.
func documents(out []byte) [][]byte {
	var docs [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(out), -1) {
		var body []string
		for _, l := range strings.Split(d, "\n") {
			if strings.TrimSpace(l) != "" && !strings.HasPrefix(strings.TrimSpace(l), "#") {
				body = append(body, l)
			}
		}
		if len(body) > 0 {
			docs = append(docs, []byte(d))
		}
	}
	return docs
}
