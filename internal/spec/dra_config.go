package spec

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/gpuslice/gpuslice/internal/quantity"
)

// NVIDIA's opaque config (driver gpu.nvidia.com): parameters with
// apiVersion gpu.nvidia.com/v1alpha1 (the 2024 driver, as in the slides)
// or resource.nvidia.com/v1beta1, kind GpuConfig (whole GPUs) or
// MigDeviceConfig (MIG devices), and sharing:
//
//	strategy: TimeSlicing | MPS
//	timeSlicingConfig: {interval: Default | Short | Medium | Long}   GpuConfig, TimeSlicing only
//	mpsConfig:                                                        MPS only
//	  defaultActiveThreadPercentage: 0..100
//	  defaultPinnedDeviceMemoryLimit: <quantity>           rounded down to MiB; 0 MiB is invalid
//	  defaultPerDevicePinnedMemoryLimit: {<index|uuid>: <quantity>}
//	  multiUser: bool
//
// Checked as NVIDIA's driver does: an unknown strategy or interval, a
// thread percentage out of 0..100, a limit that is not a positive
// quantity, mpsConfig with TimeSlicing or timeSlicingConfig with MPS, and
// timeSlicingConfig on a MigDeviceConfig (the interval cannot be set on
// MIG) are errors. GpuConfig on a MIG request, or MigDeviceConfig on a
// whole-GPU request, is an error too: the driver fails such a claim.
//
// Mapping: the last config entry that names a request (requests: [] names
// all) applies to it; a DeviceClass's config applies when the claim's
// does not. strategy TimeSlicing gives Mode timeslice, MPS gives Mode mps
// (for a MIG request with Profile, the sharing is inside that instance).
// A config without sharing is the driver's default — the device alone,
// the claim's pods time-sliced as usual — so the mode stays exclusive or
// mig. DRA gives the device to the claim alone and the config shares it
// between the claim's pods; gpuslice's modes also let the allocator place
// other claims of the same tenant there (see alloc isolation).
//
// MPS limits: defaultPinnedDeviceMemoryLimit → Request.MemoryMiB (the
// memory each device promises). defaultActiveThreadPercentage is relative
// to the device: on a whole GPU it is Request.ComputePercent (a share of
// a whole GPU); on a MIG device it is a share of the instance, which is
// not a share of a whole GPU, so it is not carried (a warning). Per-device
// limits and a non-default time-slice interval cannot be expressed on a
// request: warnings, not carried.

// draNV is NVIDIA's opaque config as read.
type draNV struct {
	node      *yaml.Node // parameters
	path      string
	kind      string // GpuConfig or MigDeviceConfig
	strategy  string // TimeSlicing, MPS, or "" (none or invalid)
	stratNode *yaml.Node
	interval  *yaml.Node
	thread    *yaml.Node // set when the percentage is valid
	threadPct int
	pinnedMiB int64
	perDevice *yaml.Node
}

// draEntry is one config entry: the requests it names and its config.
type draEntry struct {
	node  *yaml.Node
	path  string
	names []*yaml.Node
	nv    *draNV
}

const (
	draDriver   = "gpu.nvidia.com"
	draGpuCfg   = "GpuConfig"
	draMigCfg   = "MigDeviceConfig"
	draTimeSlic = "TimeSlicing"
	draMPS      = "MPS"
)

var (
	draParamVersions = []string{"gpu.nvidia.com/v1alpha1", "resource.nvidia.com/v1beta1"}
	draNVOtherKinds  = []string{"VfioDeviceConfig", "ComputeDomainChannelConfig", "ComputeDomainDaemonConfig"}
	draIntervals     = []string{"Default", "Short", "Medium", "Long"}
	draPlaceholderRE = regexp.MustCompile(`^<[^<>]*>$`)
)

// configs reads spec.devices.config (a DeviceClass's spec.config has no
// requests). dry entries are checked, not applied.
func (d *draDoc) configs(n *yaml.Node, path string, dry bool) []draEntry {
	items := d.r.seq(n, path)
	if len(items) > draMaxList {
		d.r.errorf(n, path, "", "%d config entries; Kubernetes allows at most %d", len(items), draMaxList)
	}
	allowed := []string{"requests", "opaque"}
	if d.obj.kind == "DeviceClass" {
		allowed = allowed[1:]
	}
	var out []draEntry
	for i, it := range items {
		p := index(path, i)
		f := d.fields(it, p, fmt.Sprintf("inside config entry %d", i), allowed...)
		e := draEntry{node: it, path: p}
		for j, r := range d.r.seq(f.get("requests"), join(p, "requests")) {
			if r.Kind != yaml.ScalarNode || r.Tag == "!!null" {
				d.r.errorf(r, index(join(p, "requests"), j), "", "want a request name, found %s", kindName(r))
				continue
			}
			e.names = append(e.names, r)
		}
		if f.has("opaque") {
			e.nv = d.opaque(f.get("opaque"), join(p, "opaque"), dry)
		} else if !dry {
			hint := "write `opaque: {driver: gpu.nvidia.com, parameters: {...}}`"
			if o := d.strayOpaque; o != nil {
				hint = fmt.Sprintf("indent the `opaque` at line %d into this entry", o.Line)
			}
			d.r.errorf(it, join(p, "opaque"), hint, "config entry has no opaque")
		}
		out = append(out, e)
	}
	if dry {
		d.apply(out, true)
	}
	return out
}

func (d *draDoc) opaque(n *yaml.Node, path string, dry bool) *draNV {
	f := d.fields(n, path, "inside `opaque`", "driver", "parameters")
	drv, ok := d.r.str(f, "driver")
	if !ok && !dry {
		d.r.errorf(n, join(path, "driver"), "write driver: gpu.nvidia.com", "opaque has no driver")
	}
	if ok && !d.driver(f.get("driver"), join(path, "driver")) {
		return nil
	}
	if !f.has("parameters") {
		if !dry && drv == draDriver {
			d.r.errorf(n, join(path, "parameters"), "write parameters: {apiVersion: resource.nvidia.com/v1beta1, kind: GpuConfig, sharing: ...}", "opaque has no parameters")
		}
		return nil
	}
	return d.params(f.get("parameters"), join(path, "parameters"), dry)
}

// driver checks an opaque driver: only NVIDIA's config is read.
func (d *draDoc) driver(n *yaml.Node, path string) bool {
	if n.Kind != yaml.ScalarNode || n.Value == draDriver {
		return n.Kind == yaml.ScalarNode
	}
	d.r.warnf(n, path, draDidYouMean(n.Value, []string{draDriver}), "config for driver %q is not read (gpuslice reads %s's): not applied", n.Value, draDriver)
	return false
}

func (d *draDoc) params(n *yaml.Node, path string, dry bool) *draNV {
	f := d.fields(n, path, "inside `parameters`", "apiVersion", "kind", "sharing")
	if !f.has("apiVersion") && !dry {
		d.r.errorf(n, join(path, "apiVersion"), "valid: "+strings.Join(draParamVersions, ", "), "parameters have no apiVersion")
	} else if f.has("apiVersion") {
		d.paramsAPIVersion(f.get("apiVersion"), join(path, "apiVersion"))
	}
	kind := ""
	if !f.has("kind") && !dry {
		d.r.errorf(n, join(path, "kind"), "valid: GpuConfig, MigDeviceConfig", "parameters have no kind")
	} else if f.has("kind") {
		kind = d.paramsKind(f.get("kind"), join(path, "kind"))
	}
	nv := &draNV{node: n, path: path, kind: kind}
	if s := f.get("sharing"); s != nil {
		d.sharing(s, join(path, "sharing"), kind, nv)
	}
	if kind == "" {
		return nil
	}
	return nv
}

func (d *draDoc) paramsAPIVersion(n *yaml.Node, path string) {
	if n.Kind != yaml.ScalarNode || !contains(draParamVersions, n.Value) {
		d.r.errorf(n, path, draDidYouMean(n.Value, draParamVersions), "unknown NVIDIA config apiVersion %s", kindName(n))
	}
}

// paramsKind returns GpuConfig or MigDeviceConfig, or "".
func (d *draDoc) paramsKind(n *yaml.Node, path string) string {
	switch {
	case n.Value == draGpuCfg || n.Value == draMigCfg:
		return n.Value
	case contains(draNVOtherKinds, n.Value):
		d.r.warnf(n, path, "", "%s does not configure GPU sharing: not read", n.Value)
	default:
		d.r.errorf(n, path, draDidYouMean(n.Value, []string{draGpuCfg, draMigCfg}), "unknown NVIDIA config kind %s", kindName(n))
	}
	return ""
}

// sharing reads sharing into nv; kind is "" when not known.
func (d *draDoc) sharing(n *yaml.Node, path, kind string, nv *draNV) {
	f := d.fields(n, path, "inside `sharing`", "strategy", "timeSlicingConfig", "mpsConfig")
	if f.has("strategy") {
		nv.strategy, nv.stratNode = d.strategy(f.get("strategy"), join(path, "strategy")), f.get("strategy")
	} else if n.Kind == yaml.MappingNode {
		d.r.errorf(n, join(path, "strategy"), "valid: TimeSlicing, MPS", "sharing has no strategy")
	}
	if ts := f.get("timeSlicingConfig"); ts != nil {
		p := join(path, "timeSlicingConfig")
		into := nv
		switch {
		case kind == draMigCfg:
			d.r.errorf(f.knode["timeSlicingConfig"], p, "drop timeSlicingConfig; MIG devices time-slice with the default interval", "MigDeviceConfig has no timeSlicingConfig: the time-slice interval cannot be set on MIG devices")
			into = &draNV{}
		case nv.strategy == draMPS:
			d.r.errorf(f.knode["timeSlicingConfig"], p, "drop timeSlicingConfig, or use strategy TimeSlicing", "timeSlicingConfig cannot be used with strategy MPS")
			into = &draNV{}
		}
		d.timeSlicing(ts, p, into)
	}
	if m := f.get("mpsConfig"); m != nil {
		p := join(path, "mpsConfig")
		into := nv
		if nv.strategy == draTimeSlic {
			d.r.errorf(f.knode["mpsConfig"], p, "drop mpsConfig, or use strategy MPS", "mpsConfig cannot be used with strategy TimeSlicing")
			into = &draNV{}
		}
		d.mps(m, p, into)
	}
}

// strategy returns a valid strategy or "".
func (d *draDoc) strategy(n *yaml.Node, path string) string {
	valid := []string{draTimeSlic, draMPS}
	switch {
	case d.placeholder(n, path, "valid: TimeSlicing, MPS"):
	case n.Kind == yaml.ScalarNode && contains(valid, n.Value):
		return n.Value
	default:
		d.r.errorf(n, path, draDidYouMean(n.Value, valid), "unknown sharing strategy %s", kindName(n))
	}
	return ""
}

func (d *draDoc) timeSlicing(n *yaml.Node, path string, nv *draNV) {
	f := d.fields(n, path, "inside `timeSlicingConfig`", "interval")
	iv := f.get("interval")
	p := join(path, "interval")
	switch {
	case iv == nil:
	case d.placeholder(iv, p, "valid: "+strings.Join(draIntervals, ", ")):
	case iv.Kind == yaml.ScalarNode && contains(draIntervals, iv.Value):
		nv.interval = iv
	default:
		d.r.errorf(iv, p, draDidYouMean(iv.Value, draIntervals), "unknown time-slice interval %s", kindName(iv))
	}
}

func (d *draDoc) mps(n *yaml.Node, path string, nv *draNV) {
	f := d.fields(n, path, "inside `mpsConfig`", "defaultActiveThreadPercentage", "defaultPinnedDeviceMemoryLimit", "defaultPerDevicePinnedMemoryLimit", "multiUser")
	if t := f.get("defaultActiveThreadPercentage"); t != nil {
		p := join(path, "defaultActiveThreadPercentage")
		v, ok := draInt(t)
		switch {
		case d.placeholder(t, p, "want a whole number of percent, 0..100 (e.g. 50), not a fraction"):
		case !ok:
			d.r.errorf(t, p, "want a whole number of percent, 0..100 (e.g. 50)", "%s is not a whole number", kindName(t))
		case v < 0 || v > 100:
			d.r.errorf(t, p, "want 0..100", "active thread percentage %d is out of range", v)
		default:
			nv.thread, nv.threadPct = t, int(v)
		}
	}
	if q := f.get("defaultPinnedDeviceMemoryLimit"); q != nil {
		nv.pinnedMiB = d.quantityMiB(q, join(path, "defaultPinnedDeviceMemoryLimit"))
	}
	if m := f.get("defaultPerDevicePinnedMemoryLimit"); m != nil {
		p := join(path, "defaultPerDevicePinnedMemoryLimit")
		pf := d.r.mapping(m, p)
		for _, k := range pf.keys {
			if _, err := strconv.Atoi(k); err != nil && !strings.HasPrefix(k, "GPU-") && !strings.HasPrefix(k, "MIG-") {
				d.r.errorf(pf.knode[k], join(p, k), "keys are device indexes within the claim (0, 1, ...) or device UUIDs (GPU-..., MIG-...)", "%q is not a device index or UUID", k)
			}
			d.quantityMiB(pf.get(k), join(p, k))
		}
		nv.perDevice = m
	}
	d.r.boolean(f, "multiUser")
}

// quantityMiB reads a memory limit, rounded down to whole MiB as NVIDIA's
// driver does; 0 when invalid.
func (d *draDoc) quantityMiB(n *yaml.Node, path string) int64 {
	if d.placeholder(n, path, "want a Kubernetes quantity such as 10Gi or 500M") {
		return 0
	}
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		d.r.errorf(n, path, "want a Kubernetes quantity such as 10Gi or 500M", "want a memory limit, found %s", kindName(n))
		return 0
	}
	b, err := quantity.ParseBare(n.Value)
	switch {
	case err != nil:
		d.r.errorf(n, path, strings.TrimPrefix(quantity.Hint(n.Value)+" ", "; ")+"want a Kubernetes quantity such as 10Gi or 500M", "%q is not a Kubernetes quantity: %v", n.Value, err)
	case b <= 0:
		d.r.errorf(n, path, "want a positive limit such as 10Gi", "memory limit %s is not positive", n.Value)
	case b>>20 == 0:
		d.r.errorf(n, path, "want at least 1Mi", "memory limit %s rounds down to 0 MiB, which NVIDIA's driver rejects", n.Value)
	default:
		return b >> 20
	}
	return 0
}

// placeholder reports a slide placeholder such as `<fraction>`.
func (d *draDoc) placeholder(n *yaml.Node, path, want string) bool {
	if n.Kind != yaml.ScalarNode || !draPlaceholderRE.MatchString(strings.TrimSpace(n.Value)) {
		return false
	}
	d.r.errorf(n, path, want, "%q is a placeholder from the slides, not a value", n.Value)
	return true
}

// draInt reads a whole number scalar.
func draInt(n *yaml.Node) (int64, bool) {
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!str") {
		return 0, false
	}
	v, err := strconv.ParseInt(strings.TrimSpace(n.Value), 10, 64)
	return v, err == nil
}
