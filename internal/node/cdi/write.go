package cdi

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"sigs.k8s.io/yaml"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

// Write stores spec as <dir>/gpuslice-<claim>.yaml and returns the path.
// The file is replaced atomically (a temporary file without a .yaml or
// .json extension, which CDI caches ignore, renamed over it) and only when
// its content changes; the new content is checked with the CDI library's
// own validation first, so a runtime never sees an invalid spec.
func Write(dir string, spec *specs.Spec) (string, error) {
	path, _, err := write(dir, spec)
	return path, err
}

// WriteFile stores a spec of any number of devices as
// <dir>/gpuslice-<name>.yaml, as Write does (atomic, only when changed,
// validated first). name must be a CDI device name (see Path). The DRA
// driver writes one such file per ResourceClaim.
func WriteFile(dir, name string, spec *specs.Spec) (string, error) {
	path, _, err := writeNamed(dir, name, spec)
	return path, err
}

func write(dir string, spec *specs.Spec) (path string, changed bool, err error) {
	id, err := claimOf(spec)
	if err != nil {
		return "", false, err
	}
	return writeNamed(dir, id, spec)
}

func writeNamed(dir, id string, spec *specs.Spec) (path string, changed bool, err error) {
	data, err := yaml.Marshal(spec)
	if err != nil {
		return "", false, err
	}
	path, err = Path(dir, id)
	if err != nil {
		return "", false, err
	}
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return path, false, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", false, err
	}
	tmp, err := os.CreateTemp(dir, "."+FileName(id)+".*.tmp")
	if err != nil {
		return "", false, err
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", false, err
	}
	if _, err := cdiapi.ReadSpec(tmp.Name(), 0); err != nil {
		return "", false, fmt.Errorf("spec of claim %s: %w", id, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", false, err
	}
	if d, err := os.Open(dir); err == nil { // make the rename durable
		_ = d.Sync()
		_ = d.Close()
	}
	return path, true, nil
}

// Remove deletes a claim's spec from dir (no error when there is none).
// A claim id Path refuses is an error: nothing outside dir is touched.
func Remove(dir, claimID string) error {
	path, err := Path(dir, claimID)
	if err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// SyncReport says what Sync changed, by claim id.
type SyncReport struct {
	Written []string
	Removed []string
}

// Sync makes dir hold a spec for every live claim with devices on node and
// no other gpuslice-*.yaml. A claim whose MIG instance is not created yet
// gets its spec on a later Sync; a claim whose spec cannot be built keeps
// the spec it had. Errors are per claim and joined.
func Sync(dir string, claims []api.Claim, node string, host Host) (SyncReport, error) {
	var rep SyncReport
	var errs []error
	live := map[string]bool{}
	for _, c := range claims {
		if c.Allocation == nil || c.State.Final() ||
			!slices.ContainsFunc(c.Allocation.Devices, func(d alloc.Assigned) bool { return d.Node == node }) {
			continue
		}
		live[c.ID] = true
		spec, err := SpecFor(c, node, host)
		if errors.Is(err, ErrNotCreated) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		_, changed, err := write(dir, spec)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if changed {
			rep.Written = append(rep.Written, c.ID)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasPrefix(name, "gpuslice-") || !strings.HasSuffix(name, ".yaml") {
			continue
		}
		id := strings.TrimSuffix(strings.TrimPrefix(name, "gpuslice-"), ".yaml")
		if live[id] {
			continue
		}
		if _, err := Path(dir, id); err != nil {
			continue // no claim's: Write never makes such a name
		}
		if err := Remove(dir, id); err != nil {
			errs = append(errs, err)
			continue
		}
		rep.Removed = append(rep.Removed, id)
	}
	slices.Sort(rep.Written)
	slices.Sort(rep.Removed)
	return rep, errors.Join(errs...)
}
