package dranames

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// DeviceName is a device's name taken apart. A node's devices are named
// after their GPU's index on the node:
//
//	gpu-<index>                           the whole GPU (TypeGPU)
//	gpu-<index>-shared                    the shared GPU (TypeShared)
//	gpu-<index>-shared-t-<10 hex digits>  a tenant's copy of the shared GPU
//	gpu-<index>-mig-<profile>-at-<start>  a MIG placement (TypeMIG)
//
// where a MIG profile is written as a DNS label (1g.5gb+me → 1g-5gb-me)
// and a tenant by the first 10 hex digits of its name's SHA-256 (a
// tenant name may be 63 characters, a device name too).
type DeviceName struct {
	Type  string // TypeGPU, TypeShared or TypeMIG
	Index int    // the GPU's index on its node, ≥ 0
	// Profile and Start place a MIG device: the profile as the catalog
	// names it (1g.5gb+me), the placement's first memory slice.
	Profile string
	Start   int
	// TenantHash marks a tenant's copy of a shared GPU (TenantHash).
	TenantHash string
}

// TenantHash is how a tenant's copy of a shared GPU names its tenant.
func TenantHash(tenant string) string {
	h := sha256.Sum256([]byte(tenant))
	return hex.EncodeToString(h[:5])
}

// SharedDeviceName is the name of tenant's copy of GPU index's shared
// device.
func SharedDeviceName(index int, tenant string) string {
	return DeviceName{Type: TypeShared, Index: index, TenantHash: TenantHash(tenant)}.String()
}

// ProfileLabel is a MIG profile as a DNS label part: 1g.5gb+me →
// 1g-5gb-me.
func ProfileLabel(profile string) string {
	return strings.NewReplacer(".", "-", "+", "-").Replace(profile)
}

// String is the device's name, the one form ParseDeviceName reads back.
func (n DeviceName) String() string {
	base := "gpu-" + strconv.Itoa(n.Index)
	switch {
	case n.Type == TypeMIG:
		return base + "-mig-" + ProfileLabel(n.Profile) + "-at-" + strconv.Itoa(n.Start)
	case n.Type == TypeShared && n.TenantHash != "":
		return base + "-shared-t-" + n.TenantHash
	case n.Type == TypeShared:
		return base + "-shared"
	}
	return base
}

const wantName = "want gpu-<index>, gpu-<index>-shared, gpu-<index>-shared-t-<10 hex digits> or gpu-<index>-mig-<profile>-at-<start>"

// ParseDeviceName takes a device name apart. It accepts only the names
// DeviceName.String writes, so String(ParseDeviceName(s)) == s: numbers
// without leading zeros, a profile of the form <n>g-<m>gb[-<suffix>...]
// (read back as <n>g.<m>gb[+<suffix>...], as NVIDIA names profiles).
func ParseDeviceName(s string) (DeviceName, error) {
	bad := func(why string) (DeviceName, error) {
		return DeviceName{}, fmt.Errorf("device name %q: %s; %s", s, why, wantName)
	}
	rest, ok := strings.CutPrefix(s, "gpu-")
	if !ok {
		return bad("no gpu- prefix")
	}
	idx, rest, _ := strings.Cut(rest, "-")
	index, ok := number(idx)
	if !ok {
		return bad(fmt.Sprintf("GPU index %q is no whole number", idx))
	}
	n := DeviceName{Type: TypeGPU, Index: index}
	switch {
	case rest == "" && !strings.HasSuffix(s, "-"):
		return n, nil
	case rest == "shared":
		n.Type = TypeShared
		return n, nil
	case strings.HasPrefix(rest, "shared-t-"):
		n.Type, n.TenantHash = TypeShared, strings.TrimPrefix(rest, "shared-t-")
		if len(n.TenantHash) != 10 || strings.Trim(n.TenantHash, "0123456789abcdef") != "" {
			return bad(fmt.Sprintf("tenant hash %q is not 10 lowercase hex digits", n.TenantHash))
		}
		return n, nil
	case strings.HasPrefix(rest, "mig-"):
		label, start, found := cutLast(strings.TrimPrefix(rest, "mig-"), "-at-")
		if !found {
			return bad("a MIG device without -at-<start>")
		}
		if n.Start, ok = number(start); !ok {
			return bad(fmt.Sprintf("start %q is no whole number", start))
		}
		if n.Profile, ok = profileOf(label); !ok {
			return bad(fmt.Sprintf("profile %q: want <n>g-<m>gb with optional -<suffix>es, e.g. 1g-10gb or 1g-10gb-me", label))
		}
		n.Type = TypeMIG
		return n, nil
	}
	return bad(fmt.Sprintf("unknown kind %q after the index", rest))
}

// number reads a whole number ≥ 0 written without leading zeros.
func number(s string) (int, bool) {
	if s == "" || len(s) > 9 || (len(s) > 1 && s[0] == '0') || strings.Trim(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}

func cutLast(s, sep string) (before, after string, found bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// profileOf reads a MIG profile back from its label: <n>g-<m>gb[-x...] is
// <n>g.<m>gb[+x...], each part lowercase letters and digits.
func profileOf(label string) (string, bool) {
	parts := strings.Split(label, "-")
	if len(parts) < 2 {
		return "", false
	}
	for _, p := range parts {
		if p == "" || strings.Trim(p, "abcdefghijklmnopqrstuvwxyz0123456789") != "" {
			return "", false
		}
	}
	g, ok := strings.CutSuffix(parts[0], "g")
	if _, isNum := number(g); !ok || !isNum {
		return "", false
	}
	gb, ok := strings.CutSuffix(parts[1], "gb")
	if _, isNum := number(gb); !ok || !isNum {
		return "", false
	}
	out := parts[0] + "." + parts[1]
	for _, x := range parts[2:] {
		out += "+" + x
	}
	return out, true
}

// Attrs is how ReadDevice sees a published device (the Kubernetes side
// hands it the device's maps): a string or an integer attribute by name,
// or a capacity in its base unit (bytes for memory), and whether it is
// there with that type.
type Attrs interface {
	String(name string) (string, bool)
	Int(name string) (int64, bool)
	Capacity(name string) (int64, bool)
}

// Device is what a published device says it is.
type Device struct {
	Name string
	DeviceName
	// GPU is the GPU's uuid (AttrUUID, or AttrParentUUID on a MIG device).
	GPU string
	// Model is the catalog's id of the GPU's model (AttrModel; "" when
	// not published).
	Model string
	// Tenant is the tenant a shared GPU's copy is for ("" on others).
	Tenant string
	// MemoryMiB is the device's memory capacity (0 when not published).
	MemoryMiB int64
}

// ReadDevice is the one reader of a published device: its name taken
// apart (ParseDeviceName) and its attributes read and checked against
// the name — the type, the GPU's index, a MIG device's profile and start,
// a tenant copy's tenant. uuid names the GPU of a whole or shared GPU,
// parentUUID of a MIG device; either must be there. The error names the
// device, the attribute and what would be valid.
func ReadDevice(name string, attrs Attrs) (Device, error) {
	n, err := ParseDeviceName(name)
	if err != nil {
		return Device{}, err
	}
	d := Device{Name: name, DeviceName: n}
	bad := func(format string, args ...any) (Device, error) {
		return Device{}, fmt.Errorf("device %s: "+format, append([]any{name}, args...)...)
	}
	typ, _ := attrs.String(AttrType)
	if typ != TypeGPU && typ != TypeShared && typ != TypeMIG {
		return bad("attribute %s %q; want %s, %s or %s", AttrType, typ, TypeGPU, TypeShared, TypeMIG)
	}
	if typ != n.Type {
		return bad("attribute %s %q, but the name is a %s device's", AttrType, typ, n.Type)
	}
	if index, ok := attrs.Int(AttrIndex); !ok || index != int64(n.Index) {
		return bad("attribute %s: want %d, the index in the name", AttrIndex, n.Index)
	}
	d.Model, _ = attrs.String(AttrModel)
	uuid := AttrUUID
	if typ == TypeMIG {
		uuid = AttrParentUUID
		profile, _ := attrs.String(AttrProfile)
		start, ok := attrs.Int(AttrStart)
		if profile != n.Profile || !ok || start != int64(n.Start) {
			return bad("attributes %s %q and %s: want %s and %d, the placement in the name", AttrProfile, profile, AttrStart, n.Profile, n.Start)
		}
	}
	if d.GPU, _ = attrs.String(uuid); d.GPU == "" {
		return bad("no GPU uuid (attribute %s)", uuid)
	}
	tenant, _ := attrs.String(AttrTenant)
	switch {
	case typ == TypeShared && n.TenantHash != "" && TenantHash(tenant) != n.TenantHash:
		return bad("attribute %s %q: the name is another tenant's copy (hash %s)", AttrTenant, tenant, n.TenantHash)
	case tenant != "" && n.TenantHash == "":
		return bad("attribute %s %q on a device that is no tenant's copy", AttrTenant, tenant)
	}
	d.Tenant = tenant
	if b, ok := attrs.Capacity(CapacityMemory); ok {
		d.MemoryMiB = b >> 20
	}
	return d, nil
}
