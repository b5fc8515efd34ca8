package draplugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// CheckpointFile is the name of the driver's checkpoint in its state
// directory.
const CheckpointFile = "checkpoint.json"

// checkpointVersion is the format written; a file of another version is
// refused rather than misread.
const checkpointVersion = 1

// checkpoint is the file's content: every claim prepared (or being
// prepared) on the node.
type checkpoint struct {
	Version int                     `json:"version"`
	Node    string                  `json:"node"`
	Claims  map[string]*claimRecord `json:"claims"`
}

// loadCheckpoint reads path; a missing file is an empty checkpoint. A
// file that does not parse, is of another version or node, or holds a
// record that makes no sense is an error naming the file and the field:
// the driver will not start on a checkpoint it cannot trust (move it away
// to start afresh, after checking what the node runs).
func loadCheckpoint(path, node string) (map[string]*claimRecord, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]*claimRecord{}, nil
	}
	if err != nil {
		return nil, err
	}
	return parseCheckpoint(path, data, node)
}

func parseCheckpoint(path string, data []byte, node string) (map[string]*claimRecord, error) {
	var c checkpoint
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("checkpoint %s: trailing data after the object", path)
	}
	if c.Version != checkpointVersion {
		return nil, fmt.Errorf("checkpoint %s: version %d: this driver reads version %d", path, c.Version, checkpointVersion)
	}
	if c.Node != node {
		return nil, fmt.Errorf("checkpoint %s: node %q: this driver serves node %q", path, c.Node, node)
	}
	if c.Claims == nil {
		c.Claims = map[string]*claimRecord{}
	}
	for uid, r := range c.Claims {
		if err := r.check(uid); err != nil {
			return nil, fmt.Errorf("checkpoint %s: claims[%q]: %w", path, uid, err)
		}
	}
	return c.Claims, nil
}

// check validates a record read back: everything its teardown will use.
func (r *claimRecord) check(uid string) error {
	switch {
	case r == nil:
		return errors.New("null record")
	case r.UID != uid || uid == "":
		return fmt.Errorf("uid %q under key %q", r.UID, uid)
	case r.State != statePreparing && r.State != statePrepared && r.State != stateBinding:
		return fmt.Errorf("state %q: valid are %s, %s, %s", r.State, stateBinding, statePreparing, statePrepared)
	}
	for i, d := range r.Devices {
		f := fmt.Sprintf("devices[%d]", i)
		switch d.Type {
		case dranames.TypeGPU, dranames.TypeShared, dranames.TypeMIG:
		default:
			return fmt.Errorf("%s.type %q: valid are gpu, shared, mig", f, d.Type)
		}
		switch d.Mode {
		case alloc.Exclusive, alloc.TimeSlice, alloc.MPS:
		default:
			return fmt.Errorf("%s.mode %q: valid are exclusive, timeslice, mps", f, d.Mode)
		}
		if !alloc.ValidGPUUUID(d.GPU) || d.GPUIndex < 0 {
			return fmt.Errorf("%s: gpu %q index %d: want a GPU uuid and an index", f, d.GPU, d.GPUIndex)
		}
		if d.ID != "" && !alloc.ValidDeviceID(d.ID) {
			return fmt.Errorf("%s.id %q: not a GPU or MIG uuid", f, d.ID)
		}
		if d.Type == dranames.TypeMIG && (d.Profile == "" || d.Start < 0) {
			return fmt.Errorf("%s: a MIG device needs a profile and a start", f)
		}
		if r.State == statePrepared && d.ID == "" {
			return fmt.Errorf("%s: prepared without a device uuid", f)
		}
	}
	return nil
}

// saveCheckpoint writes the claims to path atomically and durably: a
// temporary file in the same directory, fsync, rename over the old one,
// fsync of the directory. A crash leaves the old file or the new one.
func saveCheckpoint(path, node string, claims map[string]*claimRecord) error {
	data, err := json.MarshalIndent(checkpoint{Version: checkpointVersion, Node: node, Claims: claims}, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	_, err = tmp.Write(append(data, '\n'))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("checkpoint %s: %w", path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("checkpoint %s: syncing the directory: %w", path, err)
	}
	return nil
}
