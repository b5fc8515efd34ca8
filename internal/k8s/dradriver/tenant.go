package dradriver

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
)

// SystemNamespaces get no tenant copies unless their tenant is named in
// the driver's --tenants or they are labelled gpuslice.dev/tenant-copies:
// "true": Kubernetes' own namespaces, where nothing claims GPUs, each of
// which would otherwise add one shared device per GPU to every node.
// (default is not one: users do put workloads there.)
var SystemNamespaces = []string{"kube-system", "kube-public", "kube-node-lease"}

// TenantCopies says whether the tenant of namespace ns (TenantOf) gets
// copies of the shared GPUs on the driver's behalf, and why not when it
// does not. The rule, first match wins:
//
//  1. its tenant is in static (the driver's --tenants): copies;
//  2. labelled gpuslice.dev/tenant-copies "true": copies;
//  3. labelled gpuslice.dev/tenant-copies "false": none;
//  4. its name is in SystemNamespaces or in excluded (the driver's
//     --no-tenant-namespaces): none;
//  5. otherwise: copies.
//
// The driver publishes no copies for a tenant only no namespace gives
// copies to (unless a claim holds one: TenantsHolding); the webhook
// refuses shared-GPU claims in a namespace without copies. Pure.
func TenantCopies(ns *corev1.Namespace, static, excluded []string) (bool, string) {
	if slices.Contains(static, TenantOf(ns)) {
		return true, ""
	}
	switch ns.Labels[dranames.TenantCopiesKey] {
	case "true":
		return true, ""
	case "false":
		return false, fmt.Sprintf("namespace %s is labelled %s=false", ns.Name, dranames.TenantCopiesKey)
	}
	if slices.Contains(SystemNamespaces, ns.Name) {
		return false, fmt.Sprintf("namespace %s is a Kubernetes system namespace", ns.Name)
	}
	if slices.Contains(excluded, ns.Name) {
		return false, fmt.Sprintf("namespace %s is in the driver's --no-tenant-namespaces", ns.Name)
	}
	return true, ""
}

// HowToEnableCopies is what a refusal for a namespace without copies
// says to do.
func HowToEnableCopies(ns string) string {
	return fmt.Sprintf("to give it shared GPUs, label it %s=true (kubectl label namespace %s %s=true --overwrite), or name its tenant in the driver's --tenants (chart: driver.tenants)",
		dranames.TenantCopiesKey, ns, dranames.TenantCopiesKey)
}

// ParseNamespaces reads a comma-separated namespace list (the driver's
// --no-tenant-namespaces): blanks dropped, duplicates merged, each a
// DNS label; sorted.
func ParseNamespaces(s string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if errs := validation.IsDNS1123Label(p); len(errs) > 0 {
			return nil, fmt.Errorf("namespace %q: %s", p, strings.Join(errs, "; "))
		}
		out = append(out, p)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// MaxTenants bounds the tenants one node publishes copies for: each is one
// device per GPU (a DGX with 8 GPUs and 128 tenants publishes 1,024 shared
// copies in 16 slices), and the stock allocator walks them all for every
// shared claim.
const MaxTenants = 128

// Options say how Slices publishes the shared whole GPUs.
type Options struct {
	// TenantIsolation publishes, instead of one untainted shared device
	// per GPU, one copy per tenant in Tenants, tainted
	// gpuslice.dev/tenant=<tenant>:NoSchedule. All copies of a GPU consume
	// the GPU's whole counter set, which the stock allocator takes once
	// per device however many claims share it: once one tenant's copy
	// holds the GPU, no other tenant's copy (nor the whole GPU, nor a MIG
	// instance) can be allocated, while claims of the same tenant still
	// share its copy by consumable capacity. With no tenants, no shared
	// device is published at all (claims wait rather than mix).
	TenantIsolation bool
	// Tenants are the tenants copies are published for (deduplicated and
	// sorted; at most MaxTenants).
	Tenants []string
	// MIGProfiles, when not nil, are the only MIG profiles published
	// (ParseMIGProfiles; a GPU lacking one just has the others): fewer
	// devices, and often fewer counters, per node, which the stock
	// scheduler pays for on every node it filters. Empty: none, the
	// GPUs are published as whole and shared GPUs only.
	MIGProfiles []string
}

// TenantOf is the tenant of a namespace: its gpuslice.dev/tenant label,
// else its name.
func TenantOf(ns *corev1.Namespace) string {
	if t := ns.Labels[dranames.TenantKey]; t != "" {
		return t
	}
	return ns.Name
}

// CheckTenant says whether name can be a tenant: it becomes a taint's
// value and an attribute, so it must be a label value (at most 63
// characters of letters, digits, '-', '_', '.', beginning and ending with
// a letter or digit) and not empty.
func CheckTenant(name string) error {
	if name == "" {
		return fmt.Errorf("tenant %q: empty; want a label value such as team-a", name)
	}
	if errs := validation.IsValidLabelValue(name); len(errs) > 0 {
		return fmt.Errorf("tenant %q: %s", name, strings.Join(errs, "; "))
	}
	return nil
}

// ParseTenants reads a comma-separated tenant list (the driver's
// --tenants): blanks are dropped, duplicates merged, each checked with
// CheckTenant; the result is sorted.
func ParseTenants(s string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if err := CheckTenant(p); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return normTenants(out)
}

func normTenants(ts []string) ([]string, error) {
	out := slices.Clone(ts)
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) > MaxTenants {
		return nil, fmt.Errorf("tenants: %d given, at most %d per node (each is one shared device per GPU)", len(out), MaxTenants)
	}
	for _, t := range out {
		if err := CheckTenant(t); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// TenantToleration is the toleration a claim of tenant needs for its
// copies of the shared GPUs.
func TenantToleration(tenant string) resourceapi.DeviceToleration {
	return resourceapi.DeviceToleration{Key: dranames.TenantKey, Operator: resourceapi.DeviceTolerationOpEqual, Value: tenant,
		Effect: resourceapi.DeviceTaintEffectNoSchedule}
}

// tenantCopies turns a GPU's untainted shared device into one tainted
// copy per tenant, with the same capacity and counters.
func tenantCopies(shared resourceapi.Device, index int, tenants []string) []resourceapi.Device {
	out := make([]resourceapi.Device, 0, len(tenants))
	for _, t := range tenants {
		d := *shared.DeepCopy()
		d.Name = dranames.SharedDeviceName(index, t)
		d.Attributes[dranames.AttrTenant] = strAttr(t)
		d.Taints = []resourceapi.DeviceTaint{{Key: dranames.TenantKey, Value: t, Effect: resourceapi.DeviceTaintEffectNoSchedule}}
		out = append(out, d)
	}
	return out
}

// AllocatedTenants is the tenants whose copies of pool's shared GPUs
// claims hold: a result of this driver in pool on a device named
// dranames.SharedDeviceName(i, t), where t is a tenant the claim's requests
// tolerate (the webhook gives each claim its own tenant's toleration and
// refuses others). A driver keeps publishing these copies whatever the
// namespaces say now: dropping a held copy would free the GPU's counters
// under a claim that is allocated, prepared or not. Sorted. Pure.
func AllocatedTenants(claims []*resourceapi.ResourceClaim, pool string) []string {
	var out []string
	for _, c := range claims {
		if c.Status.Allocation == nil {
			continue
		}
		var tolerated []string
		add := func(ts []resourceapi.DeviceToleration) {
			for _, t := range ts {
				if t.Key == dranames.TenantKey && t.Operator == resourceapi.DeviceTolerationOpEqual && t.Value != "" {
					tolerated = append(tolerated, t.Value)
				}
			}
		}
		for _, r := range c.Spec.Devices.Requests {
			if r.Exactly != nil {
				add(r.Exactly.Tolerations)
			}
			for _, sub := range r.FirstAvailable {
				add(sub.Tolerations)
			}
		}
		for _, res := range c.Status.Allocation.Devices.Results {
			if res.Driver != dranames.DriverName || res.Pool != pool {
				continue
			}
			name, err := dranames.ParseDeviceName(res.Device)
			if err != nil || name.TenantHash == "" {
				continue
			}
			for _, t := range tolerated {
				if dranames.TenantHash(t) == name.TenantHash {
					out = append(out, t)
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TenantsOf is the tenants a node publishes copies for: static (the
// driver's --tenants) and the tenant of every namespace TenantCopies
// gives copies (excluded: the driver's --no-tenant-namespaces), in name
// order, the first MaxTenants kept and the rest returned as dropped
// (their claims find no shared GPU: they wait, they never mix). Names that
// are no valid tenant are dropped too. Pure.
func TenantsOf(namespaces []*corev1.Namespace, static, excluded []string) (kept, dropped []string) {
	return TenantsHolding(namespaces, static, excluded, nil)
}

// TenantsHolding is TenantsOf with held (AllocatedTenants) kept first:
// a tenant whose copy a claim holds is never the one dropped for room,
// nor for a namespace without copies (TenantCopies).
func TenantsHolding(namespaces []*corev1.Namespace, static, excluded, held []string) (kept, dropped []string) {
	all := slices.Clone(static)
	for _, ns := range namespaces {
		if ok, _ := TenantCopies(ns, static, excluded); ok {
			all = append(all, TenantOf(ns))
		}
	}
	all = append(all, held...)
	slices.Sort(all)
	all = slices.Compact(all)
	room := MaxTenants
	for _, t := range all {
		if slices.Contains(held, t) && CheckTenant(t) == nil {
			room--
		}
	}
	for _, t := range all {
		switch {
		case CheckTenant(t) != nil:
			dropped = append(dropped, t)
		case slices.Contains(held, t):
			kept = append(kept, t)
		case room > 0:
			kept = append(kept, t)
			room--
		default:
			dropped = append(dropped, t)
		}
	}
	return kept, dropped
}
