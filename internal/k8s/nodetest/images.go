package nodetest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sync"
	"testing"
	"time"
)

// EnvImagesDir names a directory holding scripts/images.sh --test-images'
// archives; without it, Images runs the script once per test binary.
const EnvImagesDir = "GPUSLICE_IMAGES_DIR"

// ImageSet is the archives of scripts/images.sh --test-images and their
// tags (Version is the Helm chart's appVersion, the chart's default tag).
type ImageSet struct {
	Dir, Version string
}

// Archive and tag of each image.
func (s ImageSet) Gpuslice() string    { return s.archive("gpuslice") }
func (s ImageSet) Scheduler() string   { return s.archive("gpuslice-scheduler") }
func (s ImageSet) Pause() string       { return s.archive("test-pause") }
func (s ImageSet) Busybox() string     { return s.archive("test-busybox") }
func (s ImageSet) PauseTag() string    { return "gpuslice.dev/test/pause:" + s.Version }
func (s ImageSet) BusyboxTag() string  { return "gpuslice.dev/test/busybox:" + s.Version }
func (s ImageSet) GpusliceTag() string { return "ghcr.io/gpuslice/gpuslice:" + s.Version }
func (s ImageSet) SchedulerTag() string {
	return "ghcr.io/gpuslice/gpuslice-scheduler:" + s.Version
}

// All is every archive, for Options.Images.
func (s ImageSet) All() []string {
	return []string{s.Pause(), s.Busybox(), s.Gpuslice(), s.Scheduler()}
}

func (s ImageSet) archive(name string) string {
	return filepath.Join(s.Dir, name+"-"+s.Version+".tar")
}

var (
	imagesOnce sync.Once
	imagesSet  ImageSet
	imagesErr  error
)

// Images returns the test images: from $GPUSLICE_IMAGES_DIR, else built by
// scripts/images.sh --test-images into a directory shared by the test
// binary's tests (removed with the binary's temp dir by the OS, not by a
// test's cleanup, so later tests reuse it).
func Images(t testing.TB) ImageSet {
	t.Helper()
	imagesOnce.Do(func() { imagesSet, imagesErr = buildImages() })
	if imagesErr != nil {
		t.Fatalf("nodetest: %v", imagesErr)
	}
	return imagesSet
}

func buildImages() (ImageSet, error) {
	repo, err := repoRoot()
	if err != nil {
		return ImageSet{}, err
	}
	chart, err := os.ReadFile(filepath.Join(repo, "deploy", "helm", "gpuslice", "Chart.yaml"))
	if err != nil {
		return ImageSet{}, err
	}
	m := regexp.MustCompile(`(?m)^appVersion:\s*"?([^"\s]+)"?\s*$`).FindSubmatch(chart)
	if m == nil {
		return ImageSet{}, fmt.Errorf("no appVersion in the chart's Chart.yaml")
	}
	set := ImageSet{Dir: os.Getenv(EnvImagesDir), Version: string(m[1])}
	if set.Dir == "" {
		set.Dir, err = os.MkdirTemp("", "gpuslice-images-")
		if err != nil {
			return set, err
		}
		start := time.Now()
		cmd := exec.Command(filepath.Join(repo, "scripts", "images.sh"), "--test-images", set.Dir)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if out, err := cmd.Output(); err != nil {
			return set, fmt.Errorf("scripts/images.sh --test-images %s: %v\n%s%s", set.Dir, err, out, stderr.String())
		}
		fmt.Fprintf(os.Stderr, "nodetest: built the test images in %s into %s\n", time.Since(start).Round(time.Second), set.Dir)
	}
	for _, a := range set.All() {
		if _, err := os.Stat(a); err != nil {
			return set, fmt.Errorf("%s: %w (scripts/images.sh --test-images %s makes it)", a, err, set.Dir)
		}
	}
	return set, nil
}

// repoRoot is the checkout this package was compiled from.
func repoRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("cannot locate the nodetest package's source")
	}
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	if _, err := os.Stat(filepath.Join(root, "scripts", "images.sh")); err != nil {
		return "", fmt.Errorf("%s is not a gpuslice checkout: %w", root, err)
	}
	return root, nil
}
