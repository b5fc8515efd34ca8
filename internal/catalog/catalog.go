package catalog

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"
)

//go:embed data/catalog.yaml
var embedded []byte

// Providers are the cloud providers instance types may name.
var providers = []string{"aws", "azure", "gcp"}

// Catalog is a loaded, validated catalog. It is immutable: every accessor
// returns copies, so it is safe for concurrent use.
type Catalog struct {
	sources       map[string]string
	gpus          []GPU
	instanceTypes []InstanceType

	gpuByKey map[string]int // lower-cased id, product name or node label
	itByName map[string]int // lower-cased instance type name
	gpuIDs   []string       // sorted
	gpuKeys  []string       // every id, product name and node label
	itNames  []string       // in file order
}

// file is the YAML document.
type file struct {
	Sources       map[string]string `yaml:"sources"`
	GPUs          []GPU             `yaml:"gpus"`
	InstanceTypes []InstanceType    `yaml:"instanceTypes"`
}

var defaultCatalog = sync.OnceValue(func() *Catalog {
	c, err := Load(embedded)
	if err != nil {
		panic("catalog: embedded data is invalid: " + err.Error())
	}
	return c
})

// Default returns the catalog embedded in the binary. It is parsed once; the
// embedded data is validated by the package's tests.
func Default() *Catalog { return defaultCatalog() }

// Load parses and validates a catalog document. Decoding is strict: unknown
// keys are errors that name their line. Validation reports every problem
// found, joined, each with its line and the path of the entry. Load never
// panics.
func Load(data []byte) (c *Catalog, err error) {
	defer func() {
		if r := recover(); r != nil {
			c, err = nil, fmt.Errorf("catalog: parse: %v", r)
		}
	}()
	var f file
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("catalog: empty document")
		}
		return nil, fmt.Errorf("catalog: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("catalog: more than one YAML document")
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	v := &validator{root: &root, f: &f}
	if problems := v.run(); len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	return build(&f), nil
}

// build indexes a validated file.
func build(f *file) *Catalog {
	c := &Catalog{
		sources:       f.Sources,
		gpus:          f.GPUs,
		instanceTypes: f.InstanceTypes,
		gpuByKey:      map[string]int{},
		itByName:      map[string]int{},
	}
	for i, g := range c.gpus {
		c.gpuIDs = append(c.gpuIDs, g.ID)
		for _, k := range gpuKeys(&g) {
			c.gpuByKey[strings.ToLower(k)] = i
			c.gpuKeys = append(c.gpuKeys, k)
		}
	}
	slices.SortFunc(c.gpuIDs, func(a, b string) int {
		switch {
		case naturalLess(a, b):
			return -1
		case naturalLess(b, a):
			return 1
		}
		return strings.Compare(a, b)
	})
	for i, it := range c.instanceTypes {
		c.itByName[strings.ToLower(it.Name)] = i
		c.itNames = append(c.itNames, it.Name)
	}
	return c
}

// gpuKeys lists every name that resolves to g.
func gpuKeys(g *GPU) []string {
	keys := []string{g.ID}
	keys = append(keys, g.ProductNames...)
	return append(keys, g.NodeLabels...)
}

// Sources returns the source keys and what each one is.
func (c *Catalog) Sources() map[string]string {
	out := make(map[string]string, len(c.sources))
	for k, v := range c.sources {
		out[k] = v
	}
	return out
}

// GPUs returns every GPU model in file order.
func (c *Catalog) GPUs() []GPU {
	out := make([]GPU, len(c.gpus))
	for i := range c.gpus {
		out[i] = c.gpus[i].clone()
	}
	return out
}

// GPU resolves a GPU model by its ID, a device name NVML reports ("NVIDIA
// A100-SXM4-40GB") or a nvidia.com/gpu.product node label
// ("NVIDIA-A100-SXM4-40GB", "A100-PCIE-40GB"), ignoring case. Node labels
// that GPU feature discovery decorates with "-MIG-<profile>" or "-SHARED"
// resolve to their GPU too.
func (c *Catalog) GPU(name string) (*GPU, error) {
	if i, ok := c.gpuIndex(name); ok {
		g := c.gpus[i].clone()
		return &g, nil
	}
	return nil, &NotFoundError{Kind: "GPU model", Name: name, Valid: slices.Clone(c.gpuIDs),
		Suggestion: c.suggestGPU(name)}
}

func (c *Catalog) gpuIndex(name string) (int, bool) {
	key := strings.ToLower(strings.TrimSpace(name))
	if i, ok := c.gpuByKey[key]; ok {
		return i, true
	}
	key = strings.TrimSuffix(key, "-shared")
	if j := strings.Index(key, "-mig-"); j > 0 {
		key = key[:j]
	}
	i, ok := c.gpuByKey[key]
	return i, ok
}

// suggestGPU suggests among all names, then maps the hit to its ID when the
// hit is the ID's near twin (so "a100-40g" suggests "A100-40GB").
func (c *Catalog) suggestGPU(name string) string {
	if s := Suggest(name, c.gpuIDs); s != "" {
		return s
	}
	return Suggest(name, c.gpuKeys)
}

// Profile resolves a MIG profile of g by name, ignoring case.
func (g *GPU) Profile(name string) (*Profile, error) {
	if g.MIG == nil {
		return nil, fmt.Errorf("GPU model %s %w", g.ID, ErrNoMIG)
	}
	key := strings.ToLower(strings.TrimSpace(name))
	for i := range g.MIG.Profiles {
		if strings.ToLower(g.MIG.Profiles[i].Name) == key {
			p := g.MIG.Profiles[i].clone()
			return &p, nil
		}
	}
	names := g.ProfileNames()
	return nil, &NotFoundError{Kind: "MIG profile of " + g.ID, Name: name, Valid: names,
		Suggestion: Suggest(name, names)}
}

// ProfileNames lists g's MIG profile names in catalog order; nil when g
// cannot be partitioned.
func (g *GPU) ProfileNames() []string {
	if g.MIG == nil {
		return nil
	}
	out := make([]string, len(g.MIG.Profiles))
	for i, p := range g.MIG.Profiles {
		out[i] = p.Name
	}
	return out
}

// InstanceTypes returns the instance types of one provider ("aws", "azure",
// "gcp", any case) in file order, or all of them for "".
func (c *Catalog) InstanceTypes(provider string) ([]InstanceType, error) {
	p := strings.ToLower(strings.TrimSpace(provider))
	if p != "" && !slices.Contains(providers, p) {
		return nil, &NotFoundError{Kind: "cloud provider", Name: provider, Valid: slices.Clone(providers),
			Suggestion: Suggest(provider, providers)}
	}
	var out []InstanceType
	for _, it := range c.instanceTypes {
		if p == "" || it.Provider == p {
			out = append(out, it.clone())
		}
	}
	return out, nil
}

// InstanceType resolves an instance type by name, ignoring case.
func (c *Catalog) InstanceType(name string) (*InstanceType, error) {
	if i, ok := c.itByName[strings.ToLower(strings.TrimSpace(name))]; ok {
		it := c.instanceTypes[i].clone()
		return &it, nil
	}
	return nil, &NotFoundError{Kind: "instance type", Name: name, Valid: slices.Clone(c.itNames),
		Suggestion: Suggest(name, c.itNames)}
}

// InstanceTypesWithGPU returns, in file order, the instance types whose GPU
// model satisfies pred; pred gets a copy of the model.
func (c *Catalog) InstanceTypesWithGPU(pred func(*GPU) bool) []InstanceType {
	ok := make([]bool, len(c.gpus))
	for i := range c.gpus {
		g := c.gpus[i].clone()
		ok[i] = pred(&g)
	}
	var out []InstanceType
	for _, it := range c.instanceTypes {
		if i, found := c.gpuByKey[strings.ToLower(it.GPU)]; found && ok[i] {
			out = append(out, it.clone())
		}
	}
	return out
}

func (g GPU) clone() GPU {
	g.ProductNames = slices.Clone(g.ProductNames)
	g.NodeLabels = slices.Clone(g.NodeLabels)
	g.PCIDeviceIDs = slices.Clone(g.PCIDeviceIDs)
	if g.MIG != nil {
		m := *g.MIG
		m.Profiles = make([]Profile, len(g.MIG.Profiles))
		for i, p := range g.MIG.Profiles {
			m.Profiles[i] = p.clone()
		}
		g.MIG = &m
	}
	return g
}

func (p Profile) clone() Profile {
	p.Placement.Starts = slices.Clone(p.Placement.Starts)
	return p
}

func (it InstanceType) clone() InstanceType {
	if it.Price != nil {
		pr := *it.Price
		it.Price = &pr
	}
	return it
}

// HasGPM reports whether NVML's GPU Performance Monitoring (GPM) works on
// the model: Hopper and newer, i.e. compute capability 9.0 and up. GPM is
// what measures a MIG instance's SM utilization; NVML keeps no
// per-process samples there.
func (g *GPU) HasGPM() bool {
	major, _, _ := strings.Cut(g.ComputeCapability, ".")
	n, err := strconv.Atoi(major)
	return err == nil && n >= 9
}
