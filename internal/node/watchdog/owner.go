package watchdog

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
)

// ClaimEnv is the variable every process of a claim carries (the
// allocation's environment sets it).
const ClaimEnv = "GPUSLICE_CLAIM"

// EnvOwner is a PIDOwner that reads a process's environment from
// <procRoot>/<pid>/environ (procRoot "" is /proc) and names the claim in
// its GPUSLICE_CLAIM. It sees every process the allocation's environment
// was given to — by gpuslice run, a CDI spec or by hand — but needs the
// right to read other users' environments (root, or CAP_SYS_PTRACE).
func EnvOwner(procRoot string) PIDOwner {
	if procRoot == "" {
		procRoot = "/proc"
	}
	prefix := []byte(ClaimEnv + "=")
	return func(pid int) (string, bool) {
		b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "environ"))
		if err != nil {
			return "", false
		}
		for _, kv := range bytes.Split(b, []byte{0}) {
			if id, ok := bytes.CutPrefix(kv, prefix); ok && len(id) > 0 {
				return string(id), true
			}
		}
		return "", false
	}
}
