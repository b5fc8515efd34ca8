// Command sandbox runs gpuslice's sandbox for Kubernetes users: a real
// one-node cluster (internal/k8s/nodetest: kubelet v1.36.3 and containerd
// v2 in their own namespaces, simulated DGX A100 GPUs) with the Helm chart
// installed through its own RBAC (realnode.Install), until SIGINT or
// SIGTERM. scripts/sandbox.sh up|down|status builds and drives it; see
// docs/sandbox.md.
//
// Its files live in ${GPUSLICE_CACHE:-$HOME/.cache/gpuslice}/sandbox:
// images/ (scripts/images.sh --test-images), run/ (the cluster's state
// and logs, wiped at start), kubeconfig, example.yaml, usage.txt, and,
// while it runs, pid, slot and ready (written once the chart is
// installed; sandbox.sh waits for it).
//
//	sandbox [-repo DIR] [-images DIR]   run until SIGINT/SIGTERM
//	sandbox -sweep                      clean up after a sandbox that was killed
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpuslice/gpuslice/internal/k8s/nodetest"
	"github.com/gpuslice/gpuslice/test/helmchart/realnode"
)

func main() {
	os.Exit(run())
}

var start = time.Now()

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "sandbox: [%4ds] %s\n", int(time.Since(start).Seconds()), fmt.Sprintf(format, a...))
}

func run() int {
	repo := flag.String("repo", "", "gpuslice checkout (default: the one holding the working directory)")
	imagesDir := flag.String("images", "", "take the images from this scripts/images.sh --test-images directory instead of building them into <cache>/sandbox/images")
	sweep := flag.Bool("sweep", false, "only clean up what a killed sandbox left (its node's processes, cgroups, veth, namespace) and exit")
	flag.Parse()
	p := newPaths(cacheRoot())
	if err := os.MkdirAll(p.Dir, 0o755); err != nil {
		logf("ERROR: %v", err)
		return 1
	}

	// One sandbox at a time: the lock is held while it runs.
	lock, err := os.OpenFile(p.Lock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		logf("ERROR: %v", err)
		return 1
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		pid, _ := os.ReadFile(p.Pid)
		logf("ERROR: another sandbox is running (pid %s, lock %s); stop it with scripts/sandbox.sh down", strings.TrimSpace(string(pid)), p.Lock)
		return 1
	}
	defer lock.Close()

	if *sweep {
		sweepLeftovers(p)
		for _, f := range []string{p.Ready, p.Pid, p.Slot, p.Kubeconfig} {
			_ = os.Remove(f)
		}
		return 0
	}
	// What a killed sandbox left needs no sweep here: LaunchCluster sweeps
	// every free slot with leftovers when it takes its own.
	for _, f := range []string{p.Ready, p.Kubeconfig, p.Usage, p.Slot} {
		_ = os.Remove(f)
	}
	if err := os.WriteFile(p.Pid, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		logf("ERROR: %v", err)
		return 1
	}
	defer func() {
		for _, f := range []string{p.Ready, p.Pid, p.Slot, p.Kubeconfig} {
			_ = os.Remove(f)
		}
	}()

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer cancel()

	if why := missing(); len(why) > 0 {
		logf("ERROR: a real node cannot run here:")
		for _, w := range why {
			fmt.Fprintf(os.Stderr, "  - %s\n", w)
		}
		fmt.Fprintln(os.Stderr, "fix:")
		for _, f := range fixFor(why) {
			fmt.Fprintf(os.Stderr, "  %s\n", f)
		}
		return 1
	}

	root, err := repoRoot(*repo)
	if err != nil {
		logf("ERROR: %v", err)
		return 1
	}
	imgs, err := images(ctx, root, *imagesDir, p.Images)
	if err != nil {
		logf("ERROR: %v", err)
		return 1
	}

	if err := os.RemoveAll(p.Run); err != nil {
		logf("ERROR: wiping the last run's state: %v", err)
		return 1
	}
	logf("starting the cluster (control plane, then the node; images imported into its containerd) in %s", p.Run)
	c, stop, err := nodetest.LaunchCluster(ctx, p.Run, nodetest.Options{Images: imgs.All(), SandboxImage: imgs.PauseTag()})
	stopped := false
	shutdown := func() {
		if stopped {
			return
		}
		stopped = true
		_ = os.Remove(p.Ready)
		t := time.Now()
		logf("stopping the cluster")
		tails := stop()
		if err := os.WriteFile(filepath.Join(p.Run, "stop.log"), []byte(tails), 0o644); err != nil {
			logf("writing stop.log: %v", err)
		}
		logf("stopped in %s: processes, cgroups, veth and namespace removed; logs kept in %s", time.Since(t).Round(100*time.Millisecond), p.Run)
	}
	defer shutdown()
	if err != nil {
		logf("ERROR: starting the cluster: %v", err)
		logf("logs: %s/apiserver/{etcd,kube-apiserver}.log, %s/{controller-manager,scheduler}/, %s/node/{node,import,containerd,kubelet}.log", p.Run, p.Run, p.Run)
		return 1
	}
	if err := os.WriteFile(p.Slot, []byte(strconv.Itoa(c.Node.Slot())+"\n"), 0o644); err != nil {
		logf("ERROR: %v", err)
		return 1
	}
	logf("node %s Ready at %s (slot %d: netns gsnode-%d); API server %s", c.Node.Name, c.Node.IP, c.Node.Slot(), c.Node.Slot(), c.API.URL)

	logf("installing the chart (helm install %s -n %s --wait, simulated dgx-a100)", realnode.Release, realnode.ReleaseNS)
	chart := filepath.Join(root, "deploy", "helm", "gpuslice")
	done := make(chan error, 1)
	go func() {
		done <- realnode.Install(c.Kubeconfig, chart, realnode.SandboxValues(), func(format string, a ...any) {
			logf("helm: "+format, a...)
		})
	}()
	select {
	case err = <-done:
	case <-ctx.Done():
		err = errors.New("interrupted")
	}
	if err != nil {
		logf("ERROR: installing the chart: %v", err)
		logf("pods: %s/node/fs/pods/%s_*/*/*.log; kubelet: %s/node/kubelet.log", p.Run, realnode.ReleaseNS, p.Run)
		return 1
	}

	kc, err := os.ReadFile(c.Kubeconfig)
	if err == nil {
		err = os.WriteFile(p.Kubeconfig, kc, 0o600)
	}
	if err == nil {
		err = os.WriteFile(p.Example, []byte(exampleYAML(imgs.BusyboxTag())), 0o644)
	}
	usage := usageText(p, filepath.Join(nodetest.BinDir(), "kubectl"), imgs, c.Node.Name)
	if err == nil {
		err = os.WriteFile(p.Usage, []byte(usage), 0o644)
	}
	if err == nil {
		err = os.WriteFile(p.Ready, []byte(time.Now().Format(time.RFC3339)+"\n"), 0o644)
	}
	if err != nil {
		logf("ERROR: %v", err)
		return 1
	}
	logf("ready in %s", time.Since(start).Round(time.Second))
	fmt.Print("\n" + usage)

	<-ctx.Done()
	logf("signalled")
	shutdown()
	return 0
}

// sweepLeftovers cleans the slot of a sandbox that was killed (SIGKILL,
// OOM) before it could stop its node: the slot it recorded, or the one its
// pid took (killed before it learnt its slot).
func sweepLeftovers(p paths) {
	slots := map[int]bool{}
	if data, err := os.ReadFile(p.Slot); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil {
			slots[n] = true
		}
	}
	if data, err := os.ReadFile(p.Pid); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && pid != os.Getpid() {
			if n := nodetest.SlotOf(pid); n > 0 {
				slots[n] = true
			}
		}
	}
	for n := range slots {
		if err := nodetest.SweepSlot(n); err != nil {
			logf("the last sandbox's slot %d: %v", n, err)
		} else {
			logf("swept the last sandbox's slot %d (gsnode-%d)", n, n)
		}
	}
}

// repoRoot is dir, or the checkout holding the working directory.
func repoRoot(dir string) (string, error) {
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", err
		}
		for d := wd; ; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "scripts", "images.sh")); err == nil {
				return d, nil
			}
			if filepath.Dir(d) == d {
				return "", fmt.Errorf("%s is not inside a gpuslice checkout: pass -repo", wd)
			}
		}
	}
	for _, f := range []string{"scripts/images.sh", "deploy/helm/gpuslice/Chart.yaml"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return "", fmt.Errorf("-repo %s is not a gpuslice checkout: %w", dir, err)
		}
	}
	return dir, nil
}

// images returns the test images: from dir, or built by scripts/images.sh
// --test-images into cacheDir (quick when nothing changed).
func images(ctx context.Context, repo, dir, cacheDir string) (nodetest.ImageSet, error) {
	chartYAML, err := os.ReadFile(filepath.Join(repo, "deploy", "helm", "gpuslice", "Chart.yaml"))
	if err != nil {
		return nodetest.ImageSet{}, err
	}
	version, err := chartVersion(chartYAML)
	if err != nil {
		return nodetest.ImageSet{}, err
	}
	set := nodetest.ImageSet{Dir: dir, Version: version}
	if dir == "" {
		set.Dir = cacheDir
		logf("building the images (scripts/images.sh --test-images %s)", cacheDir)
		cmd := exec.CommandContext(ctx, filepath.Join(repo, "scripts", "images.sh"), "--test-images", cacheDir)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		cmd.Dir = repo
		if err := cmd.Run(); err != nil {
			return set, fmt.Errorf("scripts/images.sh --test-images %s: %v (its output is above)", cacheDir, err)
		}
	}
	for _, a := range set.All() {
		if _, err := os.Stat(a); err != nil {
			return set, fmt.Errorf("%w (scripts/images.sh --test-images %s makes it)", err, set.Dir)
		}
	}
	logf("images: %s", strings.Join(set.All(), " "))
	return set, nil
}
