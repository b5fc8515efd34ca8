package controlplane

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// DefaultKubernetesVersion is the Kubernetes release the tests run against
// when GPUSLICE_K8S_VERSION is unset: what scripts/controlplane.sh builds by
// default (test/controlplane/go.mod).
const DefaultKubernetesVersion = "v1.36.3"

// EnvVersion selects the Kubernetes release (one of SupportedVersions) the
// control plane is started from: its binaries in
// ${GPUSLICE_CACHE:-$HOME/.cache/gpuslice}/k8s/VERSION (built by
// `K8S_VERSION=VERSION scripts/controlplane.sh`), its feature gates, and
// the gpuslice-scheduler built against it.
const EnvVersion = "GPUSLICE_K8S_VERSION"

// SupportedVersions are the releases scripts/controlplane.sh can build:
// test/controlplane/go.mod (the default) and go.1.MINOR.mod for the others.
var SupportedVersions = []string{DefaultKubernetesVersion, "v1.37.2"}

// Version is a Kubernetes release, e.g. v1.37.2. Tests branch on Minor
// where a release legitimately behaves differently.
type Version struct {
	// Git is the release as its binaries report it ("v1.37.2").
	Git string
	// Major, Minor and Patch are its numbers (1, 37, 2).
	Major, Minor, Patch int
}

func (v Version) String() string { return v.Git }

// AtLeast reports whether v is release 1.minor or later.
func (v Version) AtLeast(minor int) bool { return v.Major > 1 || v.Major == 1 && v.Minor >= minor }

// ParseVersion parses a release such as v1.37.2 (a suffix after the patch
// number, as in v1.37.2-dirty, is kept in Git and otherwise ignored).
func ParseVersion(s string) (Version, error) {
	bad := func() (Version, error) {
		return Version{}, fmt.Errorf("Kubernetes version %q: want vMAJOR.MINOR.PATCH such as %s", s, DefaultKubernetesVersion)
	}
	rest, ok := strings.CutPrefix(s, "v")
	if !ok {
		return bad()
	}
	parts := strings.SplitN(rest, ".", 3)
	if len(parts) != 3 {
		return bad()
	}
	// The patch may carry a pre-release or build suffix (v1.37.0-rc.1).
	patch := parts[2]
	if i := strings.IndexAny(patch, "-+"); i >= 0 {
		patch = patch[:i]
	}
	var n [3]int
	for i, p := range []string{parts[0], parts[1], patch} {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 || p == "" || p[0] == '+' || p[0] == '-' {
			return bad()
		}
		n[i] = v
	}
	return Version{Git: s, Major: n[0], Minor: n[1], Patch: n[2]}, nil
}

// SelectedVersion is the release $GPUSLICE_K8S_VERSION names, else
// DefaultKubernetesVersion. A value that is not one of SupportedVersions is
// an error naming them (a typo must not quietly run another release).
func SelectedVersion() (Version, error) {
	s := os.Getenv(EnvVersion)
	if s == "" {
		s = DefaultKubernetesVersion
	}
	return supportedVersion(EnvVersion, s)
}

// SelectedVersionName is $GPUSLICE_K8S_VERSION, else
// DefaultKubernetesVersion, unchecked: for naming directories and
// messages (SelectedVersion checks it).
func SelectedVersionName() string {
	if s := os.Getenv(EnvVersion); s != "" {
		return s
	}
	return DefaultKubernetesVersion
}

func supportedVersion(field, s string) (Version, error) {
	for _, ok := range SupportedVersions {
		if s == ok {
			return ParseVersion(s)
		}
	}
	return Version{}, fmt.Errorf("%s=%q: not a Kubernetes release apitest runs; Supported: %s", field, s, strings.Join(SupportedVersions, ", "))
}

// featureGates are the --feature-gates each minor release runs with: every
// DRA gate that release has and that can be switched on without another
// API group (DRAWorkloadResourceClaims needs the GenericWorkload API).
// Gates that are GA and locked on are left out, since they cannot be
// switched (setting one only warns; setting it false fails the start).
// Read from pkg/features/kube_features.go of k8s.io/kubernetes at each
// release; docs/kubernetes-versions.md lists them.
var featureGates = map[int][]string{
	// 1.36: DynamicResourceAllocation and DRAAdminAccess are GA and locked.
	36: {
		"DRAConsumableCapacity", "DRADeviceBindingConditions", "DRADeviceTaintRules", "DRADeviceTaints",
		"DRAExtendedResource", "DRAListTypeAttributes", "DRANodeAllocatableResources", "DRAPartitionableDevices",
		"DRAPrioritizedList", "DRAResourceClaimDeviceStatus", "DRAResourceClaimGranularStatusAuthorization",
		"DRAResourcePoolStatus",
	},
	// 1.37: DRAExtendedResource, DRAPrioritizedList and
	// DRAResourceClaimDeviceStatus are GA and locked too; DRADeviceTaints
	// and DRADeviceTaintRules are GA (on, not yet locked);
	// DRAFractionalCapacityRange (beta) and four alpha gates are new.
	// DRAOptionalNodeOperations also needs NodeDeclaredFeatures (alpha),
	// a node-side gate, so it stays off.
	37: {
		"DRAConsumableCapacity", "DRADerivedAttributes", "DRADeviceBindingConditions",
		"DRADeviceCompatibilityGroups", "DRADeviceTaintRules", "DRADeviceTaints", "DRAFractionalCapacityRange",
		"DRAListTypeAttributes", "DRANodeAllocatableResources", "DRAPartitionableDevices",
		"DRAPartitionableDevicesType", "DRAResourceClaimGranularStatusAuthorization", "DRAResourcePoolStatus",
	},
}

// FeatureGatesFor returns the --feature-gates value the control plane of
// release v runs with ("" for a release apitest does not know).
func FeatureGatesFor(v Version) string {
	gates := featureGates[v.Minor]
	if v.Major != 1 || len(gates) == 0 {
		return ""
	}
	var b strings.Builder
	for i, g := range gates {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(g + "=true")
	}
	return b.String()
}
