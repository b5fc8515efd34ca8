// Package nvml is the real device layer: a thin gpu.Device over NVIDIA's
// NVML through github.com/NVIDIA/go-nvml.
//
// Open loads libnvidia-ml.so.1 and initialises NVML through an injectable
// go-nvml Interface (WithInterface; nvml.New() by default). A host without
// the library or the kernel driver gets an error wrapping gpu.ErrNoDriver
// that tells the user to run with --simulate; nothing panics (go-nvml's
// panics are recovered and NVML's return codes checked). Close shuts NVML
// down. The package needs cgo (go-nvml dlopens the library through cgo);
// built with CGO_ENABLED=0, Open always fails with gpu.ErrNoDriver.
//
// The adapter adds no policy of its own. GPUs are read from NVML on every
// call: the product name resolves to a catalog model (by name, else by PCI
// device id), MIG GPU instances are listed per profile with their
// placements and named through the catalog (the NVML profile constant
// first, the GI profile id for profiles whose constant the catalog does not
// know), and MIG uuids come from the MIG device handles. CreateInstance
// always places explicitly: GetGpuInstanceProfileInfo, a check against
// NVML's own possible placements, CreateGpuInstanceWithPlacement, then one
// compute instance spanning the GPU instance. Placement and overlap rules
// are NVML's: the adapter does not re-check them against the catalog.
//
// NVML return codes map to the gpu errors: ERROR_IN_USE to gpu.ErrInUse,
// ERROR_NOT_SUPPORTED on MIG calls to gpu.ErrNoMIG, ERROR_INSUFFICIENT_RESOURCES
// (and ERROR_INVALID_ARGUMENT) on create to gpu.ErrPlacement, ERROR_NOT_FOUND
// and ERROR_GPU_IS_LOST to gpu.ErrNotFound; every error names the GPU and,
// on create, profile@start, and wraps the NVML return code itself. A MIG
// mode change that waits for a GPU reset fails with ErrResetPending.
//
// Health comes from XID events: Events registers an EventSet for critical
// XIDs and polls it until its context ends; a fatal XID (FatalXID: 48, 79,
// 94, 95, 119, 120) marks the GPU unhealthy in later GPUs listings. Health is
// only learnt while someone watches Events.
//
// Every method is safe for concurrent use; NVML calls that change or read
// a MIG layout are serialised.
package nvml

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/gpu"
)

// Backend is the name Info reports.
const Backend = "nvml"

// Errors the adapter adds to the gpu ones.
var (
	// ErrResetPending reports a MIG mode change that NVML accepted but
	// that only takes effect after a GPU reset (or a reboot).
	ErrResetPending = errors.New("MIG mode change is pending a GPU reset")
	// ErrClosed reports a call on a closed Device.
	ErrClosed = errors.New("nvml: device closed")
)

// Option configures Open.
type Option func(*config)

// WithClock sets the clock events and utilization samples are stamped with
// (default time.Now; nil keeps it).
func WithClock(now func() time.Time) Option {
	return func(c *config) {
		if now != nil {
			c.now = now
		}
	}
}

// WithEventPoll sets how long one wait on NVML's event set blocks
// (default 250ms): it bounds how long an Events channel stays open after
// its context ends and how long Close waits for the watchers.
func WithEventPoll(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.poll = d
		}
	}
}

// WithLibraryPath loads NVML from path instead of libnvidia-ml.so.1 (a
// driver installed under another root). WithInterface overrides it.
func WithLibraryPath(path string) Option {
	return func(c *config) { c.path = path }
}

// defaultPoll is the default event wait.
const defaultPoll = 250 * time.Millisecond

// noDriverHint is what a host without the NVIDIA library is told.
const noDriverHint = "(libnvidia-ml.so.1 could not be loaded): use --simulate"

// FatalXID reports whether an XID makes a GPU unhealthy: gpu.FatalXID, the
// one table (48, 79, 94, 95, 119, 120), which gpu/fake reads too.
func FatalXID(xid int) bool { return gpu.FatalXID(xid) }

// xidMessages names the XIDs the agent is most likely to see.
var xidMessages = map[int]string{
	13:  "graphics engine exception",
	31:  "GPU memory page fault",
	43:  "GPU stopped processing",
	48:  "double-bit ECC error",
	63:  "ECC page retirement or row remapping",
	64:  "ECC page retirement or row remapping failure",
	74:  "NVLink error",
	79:  "GPU has fallen off the bus",
	92:  "high single-bit ECC error rate",
	94:  "contained ECC error",
	95:  "uncontained ECC error",
	119: "GSP RPC timeout",
}

// xidMessage describes an XID.
func xidMessage(xid int) string {
	msg := xidMessages[xid]
	if msg == "" {
		msg = "XID error"
	}
	return fmt.Sprintf("XID %d: %s", xid, msg)
}

// nvidiaVendor is NVIDIA's PCI vendor id.
const nvidiaVendor = 0x10DE

// resolveModel finds the catalog model of a GPU: by the product name NVML
// reports, else by its PCI device id (NVML's PciInfo.PciDeviceId, device
// in the high 16 bits and vendor in the low) when exactly one model claims
// it. It returns nil when the catalog does not know the GPU.
func resolveModel(c *catalog.Catalog, name string, pciDeviceID uint32) *catalog.GPU {
	if m, err := c.GPU(name); err == nil {
		return m
	}
	if pciDeviceID&0xFFFF != nvidiaVendor {
		return nil
	}
	dev := fmt.Sprintf("0x%04X", pciDeviceID>>16)
	var hit *catalog.GPU
	for _, g := range c.GPUs() {
		for _, id := range g.PCIDeviceIDs {
			if !strings.EqualFold(id, dev) {
				continue
			}
			if hit != nil && hit.ID != g.ID {
				return nil // ambiguous
			}
			g := g
			hit = &g
		}
	}
	return hit
}

// profileName names the GPU-instance profile NVML reports for the profile
// constant nvmlConst (GPU_INSTANCE_PROFILE_*) with GI profile id giID (the
// id `nvidia-smi mig -lgip` prints): the catalog profile with that NVML
// constant, else the one with that GI profile id among the profiles whose
// constant the catalog does not know. It returns "" when neither matches.
//
// The constant comes first because it is what the adapter asked NVML for;
// go-nvml's mock also reports the constant as the GI profile id, which the
// catalog's GI ids would misname.
func profileName(m *catalog.GPU, nvmlConst, giID int) string {
	if m == nil || m.MIG == nil {
		return ""
	}
	for _, p := range m.MIG.Profiles {
		if p.NVMLProfile >= 0 && p.NVMLProfile == nvmlConst {
			return p.Name
		}
	}
	for _, p := range m.MIG.Profiles {
		if p.NVMLProfile < 0 && p.GIProfileID >= 0 && p.GIProfileID == giID {
			return p.Name
		}
	}
	return ""
}

// unnamedProfile names a profile the catalog does not know.
func unnamedProfile(giID int) string { return fmt.Sprintf("nvml-gi-profile-%d", giID) }
