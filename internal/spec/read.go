package spec

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
)

// Format names an input format.
type Format string

// Input formats.
const (
	FormatNative       Format = "gpuslice"
	FormatCompose      Format = "compose"
	FormatDRA          Format = "dra"
	FormatDevicePlugin Format = "nvidia-device-plugin"
	FormatMIGParted    Format = "mig-parted"
)

var (
	reNative  = regexp.MustCompile(`(?m)^apiVersion:\s*["']?gpuslice\.dev/`)
	reDRA     = regexp.MustCompile(`(?m)^apiVersion:\s*["']?resource\.k8s\.io/`)
	reCompose = regexp.MustCompile(`(?m)^services:`)
	reParted  = regexp.MustCompile(`(?m)^mig-configs:`)
	reDP      = regexp.MustCompile(`(?m)^(sharing|flags|resources):|"sharing"\s*:|(?m)^kind:\s*ConfigMap`)
)

// Detect guesses a file's format from its content.
func Detect(data []byte) (Format, bool) {
	switch {
	case reNative.Match(data):
		return FormatNative, true
	case reDRA.Match(data):
		return FormatDRA, true
	case reParted.Match(data):
		return FormatMIGParted, true
	case reCompose.Match(data):
		return FormatCompose, true
	case reDP.Match(data):
		return FormatDevicePlugin, true
	}
	return "", false
}

// Formats lists the formats ReadFile understands.
func Formats() []Format {
	return []Format{FormatNative, FormatCompose, FormatDRA, FormatDevicePlugin, FormatMIGParted}
}

// Merge folds b into a: pools, tenants and workloads are appended, the
// policy of a wins unless unset.
func Merge(a, b *Spec) *Spec {
	out := *a
	out.Sources = append(append([]string(nil), a.Sources...), b.Sources...)
	if out.Policy == (a.Policy) && a.Policy.Placement == "" {
		out.Policy = b.Policy
	}
	out.Pools = append(append([]Pool(nil), a.Pools...), b.Pools...)
	out.Tenants = append(append([]Tenant(nil), a.Tenants...), b.Tenants...)
	out.Workloads = append(append([]Workload(nil), a.Workloads...), b.Workloads...)
	out.Imported = append(append([]ImportedSharing(nil), a.Imported...), b.Imported...)
	return &out
}

// trimBOM drops a UTF-8 byte-order mark.
func trimBOM(b []byte) []byte { return bytes.TrimPrefix(b, []byte("\xef\xbb\xbf")) }

// Read reads one input file in any supported format, detected from its
// content (see Detect) unless format is given.
func Read(file string, data []byte, format Format) (*Spec, Diagnostics) {
	data = trimBOM(data)
	if format == "" {
		f, ok := Detect(data)
		if !ok {
			names := make([]string, 0, len(Formats()))
			for _, f := range Formats() {
				names = append(names, string(f))
			}
			return &Spec{Sources: []string{file}}, Diagnostics{{Severity: Error, Pos: Pos{File: file},
				Message: "cannot tell the format of this file",
				Hint:    "it should be one of " + strings.Join(names, ", ") + " (gpuslice: apiVersion gpuslice.dev/v1alpha1; compose: services:; DRA: apiVersion resource.k8s.io/...; mig-parted: mig-configs:; device plugin: version: v1 with sharing:)"}}
		}
		format = f
	}
	switch format {
	case FormatNative:
		return ReadNative(file, data)
	case FormatCompose:
		return ReadCompose(file, data)
	case FormatDRA:
		return ReadDRA(file, data)
	case FormatDevicePlugin:
		return ReadDevicePluginConfig(file, data)
	case FormatMIGParted:
		return ReadMIGPartedConfig(file, data)
	}
	return &Spec{Sources: []string{file}}, Diagnostics{{Severity: Error, Pos: Pos{File: file}, Message: fmt.Sprintf("unknown format %q", format)}}
}
