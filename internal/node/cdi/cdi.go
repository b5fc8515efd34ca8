// Package cdi writes Container Device Interface specs for the node's
// claims, so that a CDI-aware runtime (containerd, CRI-O, podman, docker)
// gives a container exactly its claim: `--device gpuslice.dev/claim=<id>`.
//
// SpecFor builds one spec per claim, of kind gpuslice.dev/claim with one
// device named after the claim id. Its container edits are:
//
//   - env: the allocation's process environment (CUDA_VISIBLE_DEVICES with
//     the GPU or MIG uuids, the MPS pipe directory and limits, the
//     GPUSLICE_* variables), sorted;
//   - device nodes: /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia<minor> of
//     each parent GPU (the minor is the GPU's NVML index unless Host.Minors
//     says otherwise), and for a MIG instance the GPU-instance and
//     compute-instance access capabilities
//     /dev/nvidia-caps/nvidia-cap<N>, whose minors come from
//     /proc/driver/nvidia-caps/mig-minors (ReadMIGMinors);
//   - mounts: an MPS claim's pipe directory, bound read-write at the same
//     path, so its clients reach the node's control daemon.
//
// Left out, on purpose or for lack of data: the driver's user-space
// libraries and binaries and the ldconfig hook (NVIDIA's container toolkit
// injects them, from its own nvidia.com/gpu spec or its runtime hook);
// /dev/nvidia-uvm-tools and /dev/nvidia-modeset (profiling and display);
// major/minor numbers and file modes of the device nodes (the runtime
// reads them from the host when it injects the device); the MIG
// capability nodes when the mig-minors table is not given or lacks the
// instance (the container then sees the MIG uuid but cannot open it
// unless the runtime adds the caps); and the IPC namespace MPS clients
// share with the daemon's server (run MPS containers with the host's IPC
// namespace, as NVIDIA's device plugin requires too).
//
// Write stores a spec as <dir>/gpuslice-<claim>.yaml atomically, after
// checking it with the CDI library's own validation; Sync keeps a spec
// directory in line with the node's claims.
package cdi

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/api"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"tags.cncf.io/container-device-interface/pkg/parser"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

// The CDI kind of every spec this package writes.
const (
	Vendor = "gpuslice.dev"
	Class  = "claim"
	Kind   = Vendor + "/" + Class
)

// ErrNotCreated reports a claim whose MIG instance the agent has not
// created yet (its device still has a planned id).
var ErrNotCreated = errors.New("device not created yet")

// DefaultMIGMinorsPath is where the NVIDIA driver lists the minors of the
// MIG capability devices.
const DefaultMIGMinorsPath = "/proc/driver/nvidia-caps/mig-minors"

// Host is what SpecFor needs to know about the machine beyond the claim:
// an allocation names its GPUs by uuid, not by device node.
type Host struct {
	// GPUs is the hardware (gpu.Device.GPUs): GPU indexes and the GPU- and
	// compute-instance ids of MIG instances.
	GPUs []gpu.GPU
	// Minors maps a GPU uuid to its device minor (/dev/nvidia<minor>,
	// NVML's minor number) where it differs from its index; nil: index.
	Minors map[string]int
	// MIGMinors is the mig-minors table (ReadMIGMinors); nil leaves the
	// MIG capability device nodes out.
	MIGMinors MIGMinors
}

// MIGMinors maps the driver's capability names ("gpu0/gi1/access",
// "gpu0/gi1/ci0/access") to the minors of /dev/nvidia-caps/nvidia-cap<N>.
type MIGMinors map[string]int

// ParseMIGMinors reads a mig-minors table: one "<name> <minor>" per line.
func ParseMIGMinors(r io.Reader) (MIGMinors, error) {
	out := MIGMinors{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("mig-minors line %d: %q: want \"<name> <minor>\"", n, sc.Text())
		}
		minor, err := strconv.Atoi(f[1])
		if err != nil || minor < 0 {
			return nil, fmt.Errorf("mig-minors line %d: minor %q: want a number", n, f[1])
		}
		out[f[0]] = minor
	}
	return out, sc.Err()
}

// ReadMIGMinors reads the mig-minors table at path (DefaultMIGMinorsPath
// when empty).
func ReadMIGMinors(path string) (MIGMinors, error) {
	f, err := os.Open(cmp.Or(path, DefaultMIGMinorsPath))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseMIGMinors(f)
}

// SpecFor builds the CDI spec of one claim's devices on node. It fails
// when the claim holds nothing on node, holds a device not created yet,
// or holds a device host does not have.
func SpecFor(claim api.Claim, node string, host Host) (*specs.Spec, error) {
	if err := parser.ValidateDeviceName(claim.ID); err != nil {
		return nil, fmt.Errorf("claim %q: %w", claim.ID, err)
	}
	if claim.Allocation == nil {
		return nil, fmt.Errorf("claim %s is not allocated", claim.ID)
	}
	nodes := slices.Clone(ControlNodes)
	var mounts []*specs.Mount
	n := 0
	for _, d := range claim.Allocation.Devices {
		if d.Node != node {
			continue
		}
		n++
		if alloc.IsPlanned(d.Device) {
			return nil, fmt.Errorf("claim %s: device %s: %w", claim.ID, d.Device, ErrNotCreated)
		}
		dn, err := DeviceNodes(host, d.GPU, d.Device)
		if err != nil {
			return nil, fmt.Errorf("claim %s: %w", claim.ID, err)
		}
		nodes = append(nodes, dn...)
		if d.MPS != nil {
			// The pipe directory is bind-mounted into the container: only
			// one of alloc.MPSPipeRoot's, never a path a claim chose.
			if err := alloc.CheckPipeDirectory(d.MPS.PipeDirectory); err != nil {
				return nil, fmt.Errorf("claim %s: device %.64q: %w", claim.ID, d.Device, err)
			}
		}
		if d.MPS != nil && !slices.ContainsFunc(mounts, func(m *specs.Mount) bool { return m.HostPath == d.MPS.PipeDirectory }) {
			mounts = append(mounts, &specs.Mount{HostPath: d.MPS.PipeDirectory, ContainerPath: d.MPS.PipeDirectory,
				Options: []string{"rbind", "rw", "nosuid", "nodev"}})
		}
	}
	if n == 0 {
		return nil, fmt.Errorf("claim %s holds no device on node %s", claim.ID, node)
	}
	// The environment reaches every process of the container: only what
	// valid device ids and paths produce (no newline, NUL, '$', quote).
	if err := alloc.CheckProcessEnv(claim.Allocation.Env); err != nil {
		return nil, fmt.Errorf("claim %s: environment: %w", claim.ID, err)
	}
	edits := specs.ContainerEdits{Env: envList(claim.Allocation.Env), Mounts: mounts}
	seen := map[string]bool{}
	for _, p := range nodes {
		if !seen[p] {
			seen[p] = true
			edits.DeviceNodes = append(edits.DeviceNodes, &specs.DeviceNode{Path: p})
		}
	}
	spec := &specs.Spec{Kind: Kind, Devices: []specs.Device{{Name: claim.ID, ContainerEdits: edits}}}
	v, err := specs.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, err
	}
	spec.Version = v
	return spec, nil
}

// ControlNodes are the device nodes every CUDA process needs besides its
// GPUs' own.
var ControlNodes = []string{"/dev/nvidiactl", "/dev/nvidia-uvm"}

// DeviceNodes lists the device nodes of one device (a GPU, or a MIG
// instance of parent, by uuid): /dev/nvidia<minor> of the GPU and, for a
// MIG instance, its GPU- and compute-instance access capabilities where
// host.MIGMinors lists them. A device host does not have is an error
// (gpu.ErrNotFound).
func DeviceNodes(host Host, parent, device string) ([]string, error) {
	g, in := find(host.GPUs, parent, device)
	if g == nil {
		return nil, fmt.Errorf("device %s is not on this host: %w", device, gpu.ErrNotFound)
	}
	minor := g.Index
	if m, ok := host.Minors[g.UUID]; ok {
		minor = m
	}
	nodes := []string{"/dev/nvidia" + strconv.Itoa(minor)}
	if in != nil && host.MIGMinors != nil {
		gi := fmt.Sprintf("gpu%d/gi%d/access", minor, in.GIID)
		ci := fmt.Sprintf("gpu%d/gi%d/ci%d/access", minor, in.GIID, in.CIID)
		for _, name := range []string{gi, ci} {
			if m, ok := host.MIGMinors[name]; ok {
				nodes = append(nodes, "/dev/nvidia-caps/nvidia-cap"+strconv.Itoa(m))
			}
		}
	}
	return nodes, nil
}

// find looks a device up: a whole GPU by uuid, or a MIG instance (by uuid)
// with its parent.
func find(gpus []gpu.GPU, parent, device string) (*gpu.GPU, *gpu.Instance) {
	for i := range gpus {
		g := &gpus[i]
		if g.UUID == device {
			return g, nil
		}
		if parent != "" && g.UUID != parent {
			continue
		}
		for j := range g.Instances {
			if g.Instances[j].UUID == device {
				return g, &g.Instances[j]
			}
		}
	}
	return nil, nil
}

func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

// FileName is the spec file of a claim in a spec directory.
func FileName(claimID string) string { return "gpuslice-" + claimID + ".yaml" }

// Path is the spec file of a claim in dir. It refuses a claim id that is
// not a CDI device name (letters, digits, '_', '-', '.', ':', starting and
// ending with a letter or digit) or whose file would not be one file of
// dir (alloc.SafeJoin).
func Path(dir, claimID string) (string, error) {
	if err := parser.ValidateDeviceName(claimID); err != nil {
		return "", fmt.Errorf("claim %.64q: %w", claimID, err)
	}
	return alloc.SafeJoin(dir, FileName(claimID))
}

// claimOf checks a spec is one of ours and returns its claim id.
func claimOf(spec *specs.Spec) (string, error) {
	if spec == nil || spec.Kind != Kind || len(spec.Devices) != 1 {
		return "", errors.New("not a gpuslice claim spec: want kind " + Kind + " with one device")
	}
	return spec.Devices[0].Name, nil
}
