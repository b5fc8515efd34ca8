package buildlist

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// goList runs go list in dir with the build scripts' settings and returns
// its output; skip reports an environment that cannot load the module
// (no network for a module the cache lacks), which is no verdict.
func goList(t *testing.T, dir, modfile string, args ...string) (out string, skip bool) {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-modfile=" + modfile}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly", "CGO_ENABLED=0")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := stderr.String()
		if strings.Contains(msg, "module lookup disabled") || strings.Contains(msg, "dial tcp") {
			t.Logf("go list %s in %s: %v\n%s", strings.Join(args, " "), dir, err, msg)
			return "", true
		}
		t.Fatalf("go list %s in %s: %v\n%s", strings.Join(args, " "), dir, err, msg)
	}
	return stdout.String(), false
}

// modules parses "path version[ => replacement-version]" lines.
func modules(out string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if path, v, ok := strings.Cut(line, " "); ok {
			m[path] = v
		}
	}
	return m
}

// TestBuildListMatchesControlPlane: for each Kubernetes release (go.mod:
// v1.36.3; go.1.37.mod: v1.37.2, built with go build -modfile), every
// module that provides a package to gpuslice-scheduler and is also in the
// control plane tools module's build list for that release (the modfile of
// the same name in test/controlplane) is selected at the same version,
// with the same replacement. The Go
// build cache keys a package compiled with -trimpath by its module's path
// and selected version (and, through its imports, by every dependency's),
// so one differing version anywhere below kube-scheduler, or k8s.io/api
// selected as v0.37.2 and replaced by v0.36.3 where the control plane
// selects v0.36.3, makes scripts/gpuslice-scheduler.sh recompile the whole
// scheduler tree that scripts/controlplane.sh already compiled.
func TestBuildListMatchesControlPlane(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go is not on PATH")
	}
	const module = `{{.Path}} {{.Version}}{{with .Replace}} => {{.Version}}{{end}}`
	self, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	controlplane := filepath.Join(self, "..", "..", "test", "controlplane")
	modfiles, err := filepath.Glob(filepath.Join(self, "go.*.mod"))
	if err != nil {
		t.Fatal(err)
	}
	modfiles = append([]string{filepath.Join(self, "go.mod")}, modfiles...)
	if len(modfiles) < 2 {
		t.Fatalf("want go.mod and go.1.37.mod in %s, found %v", self, modfiles)
	}
	for _, mf := range modfiles {
		name := filepath.Base(mf)
		t.Run(name, func(t *testing.T) { checkBuildList(t, self, controlplane, name) })
	}
}

// kubernetesRequire is the k8s.io/kubernetes version a go.mod requires.
func kubernetesRequire(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "k8s.io/kubernetes" && strings.HasPrefix(f[1], "v1.") {
			return f[1]
		}
	}
	t.Fatalf("%s does not require k8s.io/kubernetes", path)
	return ""
}

func checkBuildList(t *testing.T, self, controlplane, modfile string) {
	const module = `{{.Path}} {{.Version}}{{with .Replace}} => {{.Version}}{{end}}`
	// go test caches a result by the files the test itself opens inside
	// this module, not by what go list reads: opening the modfiles makes a
	// change to them rerun the test. Changes to test/controlplane's
	// modfiles or the main module's go.mod (outside this module) are not
	// seen by that cache; scripts/test.sh runs this with -count=1.
	ourK8s := kubernetesRequire(t, filepath.Join(self, modfile))
	if _, err := os.Stat(filepath.Join(controlplane, modfile)); err != nil {
		t.Fatalf("test/controlplane has no %s to build the %s control plane this %s pairs with: %v", modfile, ourK8s, modfile, err)
	}
	if cpK8s := kubernetesRequire(t, filepath.Join(controlplane, modfile)); cpK8s != ourK8s {
		t.Fatalf("%s requires k8s.io/kubernetes %s, test/controlplane/%s %s: they must be the same release", modfile, ourK8s, modfile, cpK8s)
	}

	cpOut, skip := goList(t, controlplane, modfile, "-m", "-f", module, "all")
	if skip {
		t.Skip("the control plane tools module cannot be loaded here (see the log)")
	}
	ourOut, skip := goList(t, self, modfile, "-deps", "-f", "{{with .Module}}"+module+"{{end}}", ".")
	if skip {
		t.Skip("this module's packages cannot be loaded here (see the log)")
	}
	cp, ours := modules(cpOut), modules(ourOut)
	if len(ours) < 50 {
		t.Fatalf("go list -deps gave %d modules, want kube-scheduler's (100+):\n%s", len(ours), ourOut)
	}

	var diffs []string
	shared := 0
	for path, v := range ours {
		want, ok := cp[path]
		if !ok {
			continue
		}
		shared++
		if v != want {
			diffs = append(diffs, fmt.Sprintf("  %s: control plane %s, gpuslice-scheduler %s", path, want, v))
		}
	}
	if shared < 50 {
		t.Fatalf("only %d modules shared with the control plane; want kube-scheduler's (100+)", shared)
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		t.Errorf("gpuslice-scheduler's build list differs from the control plane's in %d modules, so its build "+
			"recompiles kube-scheduler instead of reusing scripts/controlplane.sh's packages:\n%s\n"+
			"In cmd/gpuslice-scheduler, for a version newer than the control plane's: "+
			"go mod edit -modfile=%s -exclude=PATH@NEWER -require=PATH@CONTROLPLANE; for an older one: "+
			"go mod edit -modfile=%s -require=PATH@CONTROLPLANE (then check that go build -modfile=%s still passes).",
			len(diffs), strings.Join(diffs, "\n"), modfile, modfile, modfile)
	}
}
