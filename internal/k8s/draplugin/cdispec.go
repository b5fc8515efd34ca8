package draplugin

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/node/cdi"
)

// specName is the name of a claim's CDI spec file (cdi.WriteFile):
// <dir>/gpuslice-dra-<claim uid>.yaml.
func specName(uid string) string { return "dra-" + uid }

// cdiName is the CDI device name of one device of a claim; the claim uid
// keeps names unique over time, so a runtime's cached spec is never
// mistaken for a new one.
func cdiName(uid, device string) string { return uid + "-" + device }

// cdiID is the fully qualified CDI device id the kubelet hands the
// runtime.
func cdiID(uid, device string) string { return cdi.Kind + "=" + cdiName(uid, device) }

// claimEnv is the environment of every container using the claim: the
// devices (CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES, GPU or MIG
// uuids), the claim's identity (GPUSLICE_CLAIM is its uid, which the
// memory watchdog reads back from /proc to tell which claim a process
// belongs to), the memory it was given and, for MPS, the pipe directory
// and the client's limits. Each device's CDI edits carry all of it, so the
// result is the same whichever of the claim's devices a container gets.
func claimEnv(rec claimRecord) (map[string]string, error) {
	env := map[string]string{
		"GPUSLICE_CLAIM":      rec.UID,
		"GPUSLICE_CLAIM_NAME": rec.Namespace + "/" + rec.Name,
		"GPUSLICE_TENANT":     rec.Namespace,
	}
	var ids, mem, pinned []string
	var total int64
	for _, d := range rec.Devices {
		if d.ID == "" {
			return nil, fmt.Errorf("device %s has no uuid yet", d.Device)
		}
		if !slices.Contains(ids, d.ID) {
			ids = append(ids, d.ID)
		}
		mem = append(mem, d.ID+"="+strconv.FormatInt(d.PromisedMiB, 10)+"M")
		total += d.PromisedMiB
		if d.Mode != alloc.MPS {
			continue
		}
		_, pipe, err := pipeDirs(alloc.MPSPipeRoot, d.ID)
		if err != nil {
			return nil, err
		}
		env["CUDA_MPS_PIPE_DIRECTORY"] = pipe
		env["CUDA_MPS_LOG_DIRECTORY"] = pipe + "/log"
		if d.ThreadPercent > 0 {
			env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = strconv.Itoa(d.ThreadPercent)
		}
		if d.PinnedMiB > 0 {
			pinned = append(pinned, d.ID+"="+strconv.FormatInt(d.PinnedMiB, 10)+"M")
		}
	}
	env["CUDA_VISIBLE_DEVICES"] = strings.Join(ids, ",")
	env["NVIDIA_VISIBLE_DEVICES"] = strings.Join(ids, ",")
	env["GPUSLICE_MEMORY_LIMITS"] = strings.Join(mem, ",")
	env["GPUSLICE_MEMORY_LIMIT_MIB"] = strconv.FormatInt(total, 10)
	if len(pinned) > 0 {
		env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = strings.Join(pinned, ",")
	}
	if err := alloc.CheckEnv(env); err != nil {
		return nil, err
	}
	return env, nil
}

// cdiSpec is the CDI spec of a prepared claim: one CDI device per
// allocated device (named by cdiName), each with the claim's environment
// (claimEnv), the control device nodes and the device's own
// (cdi.DeviceNodes: /dev/nvidia<minor>, MIG capabilities), and for MPS the
// daemon's pipe directory bound at alloc.MPSPipeRoot/<device>. It returns
// the spec and each DRA device's CDI ids.
func cdiSpec(rec claimRecord, host cdi.Host) (*specs.Spec, map[string][]string, error) {
	env, err := claimEnv(rec)
	if err != nil {
		return nil, nil, fmt.Errorf("claim %s/%s: %w", rec.Namespace, rec.Name, err)
	}
	envList := make([]string, 0, len(env))
	for k, v := range env {
		envList = append(envList, k+"="+v)
	}
	slices.Sort(envList)
	spec := &specs.Spec{Kind: cdi.Kind}
	ids := map[string][]string{}
	for _, d := range rec.Devices {
		if _, done := ids[d.Device]; done {
			continue // two shares of one device: one CDI device
		}
		nodes, err := cdi.DeviceNodes(host, d.GPU, d.ID)
		if err != nil {
			return nil, nil, fmt.Errorf("claim %s/%s: %w", rec.Namespace, rec.Name, err)
		}
		edits := specs.ContainerEdits{Env: slices.Clone(envList)}
		for _, p := range append(slices.Clone(cdi.ControlNodes), nodes...) {
			edits.DeviceNodes = append(edits.DeviceNodes, &specs.DeviceNode{Path: p})
		}
		if d.Mode == alloc.MPS {
			if d.PipeDir == "" {
				return nil, nil, fmt.Errorf("claim %s/%s: device %s: MPS without a pipe directory", rec.Namespace, rec.Name, d.Device)
			}
			_, inside, err := pipeDirs(alloc.MPSPipeRoot, d.ID)
			if err != nil {
				return nil, nil, err
			}
			edits.Mounts = append(edits.Mounts, &specs.Mount{HostPath: d.PipeDir, ContainerPath: inside,
				Options: []string{"rbind", "rw", "nosuid", "nodev"}})
		}
		spec.Devices = append(spec.Devices, specs.Device{Name: cdiName(rec.UID, d.Device), ContainerEdits: edits})
		ids[d.Device] = []string{cdiID(rec.UID, d.Device)}
	}
	v, err := specs.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, nil, err
	}
	spec.Version = v
	return spec, ids, nil
}
