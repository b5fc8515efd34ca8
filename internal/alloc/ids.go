package alloc

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Device ids come from agents and end up in paths (MPS pipe directories,
// CDI specs), in process environments (CUDA_VISIBLE_DEVICES) and in logs.
// The server takes only the forms NVML produces:
//
//   - a GPU: "GPU-" and a UUID in 8-4-4-4-12 lowercase hex digits,
//     GPU-5fd4d9a8-4c6d-4e0d-9a3b-7c1a1f2e3d4c;
//   - a MIG device: "MIG-" and a UUID in the same form (R470 and later);
//   - a GPU instance without a compute instance, which has no MIG device:
//     "MIG-<parent GPU uuid>/<GPU-instance id>", the pre-R470 form the NVML
//     layer lists it under (internal/gpu/nvml);
//   - a MIG instance the allocator plans: "<GPU uuid>/<profile>@<start>".

// Limits on the free text an agent reports about a node.
const (
	maxLabels       = 64
	maxLabelKey     = 317 // a Kubernetes qualified name: 253-byte prefix, '/', 63-byte name
	maxLabelValue   = 253
	maxInstanceType = 128
	maxModel        = 64
	maxProfile      = 32
	maxName         = 253
	maxGIID         = 99
	maxStart        = 99
)

// uuidExample shows the form of a GPU uuid in error messages.
const uuidExample = "GPU-5fd4d9a8-4c6d-4e0d-9a3b-7c1a1f2e3d4c"

// ValidGPUUUID reports whether s is a GPU uuid as NVML writes it.
func ValidGPUUUID(s string) bool { return uuidProblem(s, "GPU-") == "" }

// ValidMIGUUID reports whether s is a MIG device uuid as NVML writes it
// (R470 and later: "MIG-" and a UUID).
func ValidMIGUUID(s string) bool { return uuidProblem(s, "MIG-") == "" }

// ValidDeviceID reports whether id is a device id gpuslice hands out: a GPU
// uuid, a MIG uuid, a GPU instance without a compute instance
// ("MIG-<GPU uuid>/<GI id>") or a planned instance
// ("<GPU uuid>/<profile>@<start>"). Every such id is printable ASCII from
// [A-Za-z0-9-./@+], has at most one '/' and never "..".
func ValidDeviceID(id string) bool {
	if ValidGPUUUID(id) || ValidMIGUUID(id) {
		return true
	}
	if _, ok := legacyMIGParent(id); ok {
		return true
	}
	gpu, rest, ok := strings.Cut(id, "/")
	if !ok || !ValidGPUUUID(gpu) {
		return false
	}
	profile, start, ok := strings.Cut(rest, "@")
	return ok && profileProblem(profile) == "" && smallNumber(start, maxStart)
}

// legacyMIGParent splits "MIG-<GPU uuid>/<GI id>" and returns the GPU uuid.
func legacyMIGParent(id string) (string, bool) {
	rest, ok := strings.CutPrefix(id, "MIG-")
	if !ok {
		return "", false
	}
	gpu, gi, ok := strings.Cut(rest, "/")
	if !ok || !ValidGPUUUID(gpu) || !smallNumber(gi, maxGIID) {
		return "", false
	}
	return gpu, true
}

// smallNumber reports whether s is a decimal number 0..limit written as
// strconv.Itoa writes it (no sign, no leading zeros).
func smallNumber(s string, limit int) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= 0 && n <= limit && strconv.Itoa(n) == s
}

// uuidProblem says what is wrong with s as prefix + a canonical UUID, or
// "" when nothing is.
func uuidProblem(s, prefix string) string {
	want := fmt.Sprintf("want %q and a UUID as NVML writes it, 8-4-4-4-12 lowercase hex digits (e.g. %s%s)",
		prefix, prefix, uuidExample[len("GPU-"):])
	rest, ok := strings.CutPrefix(s, prefix)
	if !ok {
		return quote(s) + ": " + want
	}
	if len(rest) != 36 {
		return quote(s) + ": " + want
	}
	upper := false
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return quote(s) + ": " + want
			}
		case '0' <= c && c <= '9', 'a' <= c && c <= 'f':
		case 'A' <= c && c <= 'F':
			upper = true
		default:
			return quote(s) + ": " + want
		}
	}
	if upper {
		return quote(s) + ": hex digits must be lowercase, as NVML writes them (e.g. " + prefix + uuidExample[len("GPU-"):] + ")"
	}
	return ""
}

// profileProblem checks a MIG profile name as the catalog spells them
// (1g.10gb, 1g.10gb+me, 1g.12gb-me), not that the catalog knows it.
func profileProblem(p string) string {
	if p == "" || len(p) > maxProfile {
		return fmt.Sprintf("%s: want a MIG profile name of 1..%d characters such as 1g.10gb", quote(p), maxProfile)
	}
	if p[0] < '0' || p[0] > '9' || strings.Contains(p, "..") {
		return quote(p) + ": want a MIG profile name such as 1g.10gb"
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || c == '.' || c == '+' || c == '-') {
			return quote(p) + ": want a MIG profile name of lowercase letters, digits, '.', '+' and '-' such as 1g.10gb"
		}
	}
	return ""
}

// textProblem checks free text: at most limit bytes of UTF-8 without
// control characters (C0, C1, DEL), format characters (bidirectional
// overrides, zero-width characters) or line and paragraph separators.
func textProblem(s string, limit int) string {
	if len(s) > limit {
		return fmt.Sprintf("%s is %d bytes: at most %d", quote(s), len(s), limit)
	}
	if !utf8.ValidString(s) {
		return quote(s) + " is not valid UTF-8"
	}
	for _, r := range s {
		if isControl(r) {
			return fmt.Sprintf("%s contains the control character %U: printable characters only", quote(s), r)
		}
	}
	return ""
}

func isControl(r rune) bool {
	return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp)
}

// quote renders a value for a message: Go-quoted (no control character
// gets through) and cut to 64 bytes.
func quote(s string) string {
	const limit = 64
	if len(s) <= limit {
		return strconv.Quote(s)
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + fmt.Sprintf("… (%d bytes)", len(s))
}

// ValidateInventory checks what an agent reports about its node before
// anything of it reaches a path, an environment or a log: every GPU uuid
// and MIG uuid in NVML's form (see ValidDeviceID), no uuid twice, and the
// free text (name, labels, instance type, models, profiles, the
// time-slice interval) bounded and printable. It does not check models,
// profiles or layouts against the catalog: NewState does. The error is a
// *FieldError naming the first field at fault, e.g. gpus[2].uuid.
func ValidateInventory(n Node) error {
	bad := func(field, msg string) error { return &FieldError{Field: field, Msg: msg} }
	if p := textProblem(n.Name, maxName); p != "" {
		return bad("name", p)
	}
	if len(n.Labels) > maxLabels {
		return bad("labels", fmt.Sprintf("%d labels: at most %d", len(n.Labels), maxLabels))
	}
	for _, k := range sortedLabelKeys(n.Labels) {
		field := "labels[" + quote(k) + "]"
		switch {
		case k == "":
			return bad(field, "the key is empty")
		case strings.ContainsFunc(k, unicode.IsSpace):
			return bad(field, quote(k)+": a key has no spaces")
		}
		if p := textProblem(k, maxLabelKey); p != "" {
			return bad(field, "key "+p)
		}
		if p := textProblem(n.Labels[k], maxLabelValue); p != "" {
			return bad(field, "value "+p)
		}
	}
	if p := textProblem(n.InstanceType, maxInstanceType); p != "" {
		return bad("instanceType", p)
	}
	seen := map[string]string{} // uuid → the field that has it
	for i := range n.GPUs {
		g := &n.GPUs[i]
		f := func(name string) string { return fmt.Sprintf("gpus[%d].%s", i, name) }
		if p := uuidProblem(g.UUID, "GPU-"); p != "" {
			return bad(f("uuid"), p)
		}
		if other, dup := seen[g.UUID]; dup {
			return bad(f("uuid"), fmt.Sprintf("%s is also %s: every uuid once", g.UUID, other))
		}
		seen[g.UUID] = f("uuid")
		if p := textProblem(g.Model, maxModel); p != "" {
			return bad(f("model"), p)
		}
		if p := textProblem(g.Sharing.Interval, maxProfile); p != "" {
			return bad(f("sharing.interval"), p)
		}
		for j := range g.Instances {
			in := &g.Instances[j]
			fi := func(name string) string { return fmt.Sprintf("gpus[%d].instances[%d].%s", i, j, name) }
			if parent, ok := legacyMIGParent(in.UUID); ok {
				if parent != g.UUID {
					return bad(fi("uuid"), fmt.Sprintf("%s names GPU %s, not its own GPU %s", in.UUID, parent, g.UUID))
				}
			} else if p := uuidProblem(in.UUID, "MIG-"); p != "" {
				return bad(fi("uuid"), p+"; or MIG-<GPU uuid>/<GPU-instance id> for a GPU instance without a compute instance")
			}
			if other, dup := seen[in.UUID]; dup {
				return bad(fi("uuid"), fmt.Sprintf("%s is also %s: every uuid once", in.UUID, other))
			}
			seen[in.UUID] = fi("uuid")
			if p := profileProblem(in.Profile); p != "" {
				return bad(fi("profile"), p)
			}
			if p := textProblem(in.Sharing.Interval, maxProfile); p != "" {
				return bad(fi("sharing.interval"), p)
			}
		}
	}
	return nil
}

// sortedLabelKeys lists the keys in order, so that the first fault
// reported is always the same one.
func sortedLabelKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }
