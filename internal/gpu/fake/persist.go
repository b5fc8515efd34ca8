package fake

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/mig"
)

// WithStateFile keeps the machine's hardware state — MIG mode, MIG
// instances with their GPU-instance ids (so their uuids), compute modes,
// time-slice levels — in path, as real GPUs keep theirs across a restart
// of the software that drives them: New restores it when the file describes the same GPUs (same
// uuids), and every change is written back (atomically: a temporary file,
// then a rename). A file for other GPUs (other uuids or models), one that
// does not parse, or one whose layout the GPUs cannot hold is ignored and
// overwritten at the first change. Processes, faults and
// utilization are not kept: they belong to the processes that ran.
func WithStateFile(path string) Option { return func(c *config) { c.stateFile = path } }

type savedMachine struct {
	GPUs []savedGPU `json:"gpus"`
}

type savedGPU struct {
	UUID        string          `json:"uuid"`
	Model       string          `json:"model"`
	MIGEnabled  bool            `json:"migEnabled"`
	ComputeMode gpu.ComputeMode `json:"computeMode"`
	TimeSlice   gpu.TimeSlice   `json:"timeSlice,omitempty"`
	Instances   []savedInstance `json:"instances,omitempty"`
}

type savedInstance struct {
	Profile string `json:"profile"`
	Start   int    `json:"start"`
	GIID    int    `json:"giid"`
}

// restore applies a saved state to a machine built from its spec. The
// caller holds no lock (New).
func (m *Machine) restore(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	var s savedMachine
	if err := json.Unmarshal(data, &s); err != nil || len(s.GPUs) != len(m.gpus) {
		return nil // not this machine's: start from the spec
	}
	for i, g := range s.GPUs {
		if g.UUID != m.gpus[i].uuid || g.Model != m.gpus[i].model.ID {
			return nil
		}
	}
	for i, g := range s.GPUs {
		d := m.gpus[i]
		d.insts, d.occ = nil, mig.Occupancy{}
		d.migOn, d.mode = g.MIGEnabled && d.geo != nil, g.ComputeMode
		if g.TimeSlice.Valid() {
			d.slice = g.TimeSlice
		}
		for _, in := range g.Instances {
			if _, err := m.createAs(d, in.Profile, in.Start, in.GIID); err != nil {
				return fmt.Errorf("fake: restoring GPU %d from %s: %w", i, path, err)
			}
		}
	}
	return nil
}

// save writes the hardware state to the state file, if any. The caller
// holds m.mu.
func (m *Machine) save() {
	if m.stateFile == "" {
		return
	}
	var s savedMachine
	for _, d := range m.gpus {
		g := savedGPU{UUID: d.uuid, Model: d.model.ID, MIGEnabled: d.migOn, ComputeMode: d.mode, TimeSlice: d.slice}
		for _, in := range d.insts {
			g.Instances = append(g.Instances, savedInstance{Profile: in.Profile, Start: in.Start, GIID: in.GIID})
		}
		s.GPUs = append(s.GPUs, g)
	}
	data, err := json.MarshalIndent(s, "", " ")
	if err != nil {
		m.saveErr = err
		return
	}
	tmp, err := os.CreateTemp(filepath.Dir(m.stateFile), ".simulated-gpus-*")
	if err != nil {
		m.saveErr = err
		return
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), m.stateFile)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	m.saveErr = err
}

// SaveError is the last error writing the state file (nil when the last
// write succeeded or there is no state file).
func (m *Machine) SaveError() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.saveErr
}
