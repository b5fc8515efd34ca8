package alloc

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// maxPathElement is the longest file name Linux takes (NAME_MAX).
const maxPathElement = 255

// maxDeviceName is the longest device id PipeDirectory takes: far above
// any id ValidDeviceID accepts (at most 40 + 1 + 32 + 1 + 2 bytes).
const maxDeviceName = 200

// SafeJoin returns root/elem when elem is one safe path element: not
// empty, at most 255 bytes, not "." or "..", no '/' or '\', no NUL or
// other control character; and the joined, cleaned path must lie below
// root (filepath.Rel finds no way out). It is the one way gpuslice builds
// a path from an id it was sent (a device id, a claim id).
func SafeJoin(root, elem string) (string, error) {
	switch {
	case elem == "":
		return "", errors.New("empty path element")
	case len(elem) > maxPathElement:
		return "", fmt.Errorf("path element %s is %d bytes: at most %d", quote(elem), len(elem), maxPathElement)
	case elem == "." || elem == "..":
		return "", fmt.Errorf("path element %s would leave %s", quote(elem), root)
	case strings.ContainsAny(elem, `/\`):
		return "", fmt.Errorf("path element %s has a path separator", quote(elem))
	}
	if p := textProblem(elem, maxPathElement); p != "" {
		return "", errors.New("path element " + p)
	}
	joined := filepath.Join(root, elem)
	if err := within(root, joined, false); err != nil {
		return "", err
	}
	return joined, nil
}

// Within checks that path, cleaned, is root or lies below it, and that it
// holds no control character.
func Within(root, path string) error { return within(root, path, true) }

func within(root, path string, rootToo bool) error {
	if p := textProblem(path, 4096); p != "" {
		return errors.New("path " + p)
	}
	if root == "" {
		return fmt.Errorf("path %s: no root to hold it", quote(path))
	}
	if filepath.IsAbs(root) != filepath.IsAbs(path) {
		return fmt.Errorf("path %s is not inside %s", quote(path), root)
	}
	rel, err := filepath.Rel(filepath.Clean(root), filepath.Clean(path))
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) ||
		(rel == "." && !rootToo) {
		return fmt.Errorf("path %s is not inside %s", quote(path), root)
	}
	return nil
}

// pipeNamer makes a device id one path element (immutable): a planned id
// "<gpu>/<profile>@<start>" becomes "<gpu>_<profile>_<start>".
var pipeNamer = strings.NewReplacer("/", "_", "@", "_", ":", "_")

// PipeDirectory is the MPS pipe directory of a device: the control daemon,
// its server and every client of the device use it. It is one directory
// below MPSPipeRoot, named after the device id with '/', '@' and ':'
// mapped to '_'. It refuses an id that is not 1..200 characters from
// [A-Za-z0-9._+-:@/], has more than the one '/' a planned id needs, or
// holds ".." anywhere: every id ValidDeviceID accepts passes, and so do
// the synthetic ids of a planner's fleet ("GPU-<node>-<index>").
func PipeDirectory(device string) (string, error) {
	if err := deviceNameProblem(device); err != nil {
		return "", fmt.Errorf("MPS pipe directory of device %s: %w", quote(device), err)
	}
	dir, err := SafeJoin(MPSPipeRoot, pipeNamer.Replace(device))
	if err != nil {
		return "", fmt.Errorf("MPS pipe directory of device %s: %w", quote(device), err)
	}
	return dir, nil
}

// deviceNameProblem is what PipeDirectory asks of a device id.
func deviceNameProblem(id string) error {
	switch {
	case id == "":
		return errors.New("the device id is empty")
	case len(id) > maxDeviceName:
		return fmt.Errorf("the device id is %d bytes: at most %d", len(id), maxDeviceName)
	case strings.Contains(id, ".."):
		return errors.New(`a device id never holds ".."`)
	case strings.Count(id, "/") > 1:
		return errors.New("a device id holds at most one '/' (<gpu>/<profile>@<start>)")
	}
	for i := 0; i < len(id); i++ {
		if !deviceByte(id[i]) {
			return fmt.Errorf("a device id is made of letters, digits and . _ + - : @ /, not %q", id[i])
		}
	}
	return nil
}

func deviceByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '.' || c == '_' || c == '+' || c == '-' || c == ':' || c == '@' || c == '/'
}

// CheckPipeDirectory checks a pipe directory sent with an allocation: an
// absolute, clean path exactly one safe element below MPSPipeRoot.
func CheckPipeDirectory(dir string) error {
	if dir == "" {
		return errors.New("the MPS pipe directory is empty")
	}
	if filepath.Clean(dir) != dir {
		return fmt.Errorf("MPS pipe directory %s is not a clean path", quote(dir))
	}
	if filepath.Dir(dir) != MPSPipeRoot {
		return fmt.Errorf("MPS pipe directory %s is not a directory of %s", quote(dir), MPSPipeRoot)
	}
	if _, err := SafeJoin(MPSPipeRoot, filepath.Base(dir)); err != nil {
		return fmt.Errorf("MPS pipe directory: %w", err)
	}
	return nil
}

// Limits on a process environment built from an allocation.
const (
	maxEnvKey   = 64
	maxEnvValue = 4096
)

// CheckEnv checks an environment before a process (or a container) gets
// it: names are [A-Z_][A-Z0-9_]*, values at most 4096 bytes of
// [A-Za-z0-9._+-:@/,=] — what device ids, paths, tenant and claim names
// and numbers produce, so never a newline, NUL, space, quote or '$'.
// CUDA_VISIBLE_DEVICES must list valid device ids (ValidDeviceID), and
// CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY must be clean
// absolute paths. Where they lie is the caller's to check (see
// CheckProcessEnv).
func CheckEnv(env map[string]string) error {
	for _, k := range sortedLabelKeys(env) {
		v := env[k]
		if !envName(k) {
			return fmt.Errorf("environment variable name %s: want [A-Z_][A-Z0-9_]*, at most %d characters", quote(k), maxEnvKey)
		}
		if len(v) > maxEnvValue {
			return fmt.Errorf("%s is %d bytes: at most %d", k, len(v), maxEnvValue)
		}
		for i := 0; i < len(v); i++ {
			if c := v[i]; !deviceByte(c) && c != ',' && c != '=' {
				return fmt.Errorf("%s=%s: the byte %q is not one a device id, path, name or number produces", k, quote(v), c)
			}
		}
		switch k {
		case "CUDA_VISIBLE_DEVICES":
			for _, id := range strings.Split(v, ",") {
				if !ValidDeviceID(id) {
					return fmt.Errorf("CUDA_VISIBLE_DEVICES lists %s: not a GPU or MIG uuid as NVML writes them", quote(id))
				}
			}
		case "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY":
			if !filepath.IsAbs(v) || filepath.Clean(v) != v {
				return fmt.Errorf("%s=%s: want a clean absolute path", k, quote(v))
			}
		}
	}
	return nil
}

// CheckProcessEnv is CheckEnv for the environment of an allocation's
// process (Allocation.Env): on top, the MPS pipe directory must be one of
// MPSPipeRoot's (CheckPipeDirectory) and the log directory inside it.
func CheckProcessEnv(env map[string]string) error {
	if err := CheckEnv(env); err != nil {
		return err
	}
	pipe, hasPipe := env["CUDA_MPS_PIPE_DIRECTORY"]
	log, hasLog := env["CUDA_MPS_LOG_DIRECTORY"]
	if !hasPipe && !hasLog {
		return nil
	}
	if err := CheckPipeDirectory(pipe); err != nil {
		return fmt.Errorf("CUDA_MPS_PIPE_DIRECTORY: %w", err)
	}
	if err := Within(pipe, log); err != nil {
		return fmt.Errorf("CUDA_MPS_LOG_DIRECTORY: %w", err)
	}
	return nil
}

func envName(k string) bool {
	if k == "" || len(k) > maxEnvKey || ('0' <= k[0] && k[0] <= '9') {
		return false
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; !('A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}
