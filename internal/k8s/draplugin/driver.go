package draplugin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/gpuslice/gpuslice/internal/alloc"
	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/k8s/dradriver"
	"github.com/gpuslice/gpuslice/internal/k8s/dranames"
	"github.com/gpuslice/gpuslice/internal/node"
	"github.com/gpuslice/gpuslice/internal/node/cdi"
	"github.com/gpuslice/gpuslice/internal/node/mps"
	"github.com/gpuslice/gpuslice/internal/node/watchdog"
)

// Default paths on a node.
const (
	DefaultCDIDir       = kubeletplugin.DefaultCDIDir
	DefaultRegistrarDir = kubeletplugin.KubeletRegistryDir
)

// DefaultStateDir is where the kubelet expects the driver's socket, and
// where the checkpoint lives.
var DefaultStateDir = filepath.Join(kubeletplugin.KubeletPluginsDir, dranames.DriverName)

// Steps the driver reports to Config.Observe after each effect of a
// prepare, in order.
const (
	StepIntent     = "intent-saved" // the claim's plan is in the checkpoint (state preparing)
	StepMIGCreated = "mig-created"  // a MIG instance was created
	StepMPSReady   = "mps-ready"    // the claim's MPS daemons run
	StepCDIWritten = "cdi-written"  // the claim's CDI spec is written
	StepPrepared   = "checkpointed" // the claim is in the checkpoint as prepared
	StepUnprepared = "unprepared"   // the claim is gone from the checkpoint
)

// Config configures a Driver. Node, Device and (for Start) Kube are
// required; the rest has defaults.
type Config struct {
	// Node is the Kubernetes node name; the driver's pool is named after it.
	Node   string
	Device gpu.Device
	Kube   kubernetes.Interface
	// CDIDir receives a CDI spec per prepared claim (default /var/run/cdi).
	CDIDir string
	// StateDir holds the DRA socket and the checkpoint (default
	// /var/lib/kubelet/plugins/gpu.gpuslice.dev); RegistrarDir the
	// registration socket the kubelet watches (default
	// /var/lib/kubelet/plugins_registry).
	StateDir, RegistrarDir string
	// MPSRoot is the host directory of the MPS pipe directories (default
	// alloc.MPSPipeRoot); containers see each at alloc.MPSPipeRoot/<device>.
	MPSRoot string
	// MPSControl is the MPS control binary; "" runs no daemons (simulated
	// GPUs: the pipe directory is made, the environment set). MPSRunner
	// runs it (default mps.ExecRunner).
	MPSControl string
	MPSRunner  mps.Runner
	// MIGMinors is the nvidia-caps table for MIG device nodes (nil: left
	// out of the CDI edits).
	MIGMinors cdi.MIGMinors
	// MIGBindingConditions publishes MIG devices with binding conditions
	// (dradriver.WithMIGBindingConditions), so that StartBinding creates
	// their instances before the scheduler binds the pod.
	// BindingWorkers is how many claims StartBinding works on at once
	// (default 2; the hardware changes are serialized all the same).
	MIGBindingConditions bool
	BindingWorkers       int
	// Sharing decodes opaque parameters (default StrictSharingDecoder).
	Sharing SharingDecoder
	// Isolation says how the shared GPUs are published
	// (dradriver.SlicesFor): with TenantIsolation, one tainted copy per
	// tenant in Tenants; the zero value, one untainted shared device per
	// GPU.
	Isolation dradriver.Options
	Catalog   *catalog.Catalog
	Log       *slog.Logger
	Clock     func() time.Time
	// Observe, when set, is called after each step of a prepare (Step*)
	// with the claim's uid; a test stops the process there to simulate a
	// crash.
	Observe func(step, claimUID string)

	// Memory watchdog (Watch): Owner tells which claim a process on a
	// shared device belongs to (real hosts: watchdog.EnvOwner("")); Kill
	// ends one under memoryPolicy kill (nil: warn only) after MemoryGrace
	// (default 30s).
	Owner       watchdog.PIDOwner
	Kill        func(pid int) error
	MemoryGrace time.Duration

	// Health decides which health events (XIDs, a lost GPU) taint the
	// node's devices in the published slices (nil:
	// dradriver.DefaultHealthPolicy). Start subscribes to
	// Device.Events; a fatal XID taints NoExecute.
	Health *dradriver.HealthPolicy
	// HealthResend is how often the kubelet's health streams
	// (WatchHealthStatus) get the devices' health again when nothing
	// changed (default DefaultHealthResend); the kubelet holds each report
	// for three of them.
	HealthResend time.Duration
}

// Driver is gpuslice's DRA kubelet plugin: it publishes the node's
// devices and prepares and unprepares claims. It implements
// kubeletplugin.DRAPlugin.
type Driver struct {
	cfg Config
	inv alloc.Node // the node's GPUs, for SetTenants
	// slices and table change with SetTenants, under mu and hmu both
	// (Prepare reads the table under mu, publish the slices under hmu).
	slices []resourceapi.ResourceSlice
	table  map[string]deviceInfo
	models map[int]*catalog.GPU
	// node drives the GPUs, the MPS daemons, the CDI specs and the
	// watchdog by the rules the standalone agent follows too.
	node *node.Node

	mu     sync.Mutex
	claims map[string]*claimRecord // the checkpoint's content
	usage  map[string]claimUsage
	// lastWatch is when Watch last ran.
	lastWatch time.Time
	helper    *kubeletplugin.Helper

	// hmu guards health, the slices last published with its taints and
	// watching (health events arrive).
	hmu       sync.Mutex
	health    dradriver.Health
	published []resourceapi.ResourceSlice
	watching  bool
	// hub wakes the kubelet's health streams when health may have changed.
	hub       healthHub
	stopWatch context.CancelFunc
	watchDone chan struct{}
}

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)

// New reads the node's GPUs, computes the slices it publishes
// (dradriver.Slices) and loads the checkpoint. It starts nothing.
func New(ctx context.Context, cfg Config) (*Driver, error) {
	if cfg.Node == "" || cfg.Device == nil {
		return nil, errors.New("draplugin: Node and Device are required")
	}
	cfg.CDIDir = cmp.Or(cfg.CDIDir, DefaultCDIDir)
	cfg.StateDir = cmp.Or(cfg.StateDir, DefaultStateDir)
	cfg.RegistrarDir = cmp.Or(cfg.RegistrarDir, DefaultRegistrarDir)
	cfg.MPSRoot = cmp.Or(cfg.MPSRoot, alloc.MPSPipeRoot)
	if cfg.Sharing == nil {
		cfg.Sharing = StrictSharingDecoder
	}
	if cfg.Catalog == nil {
		cfg.Catalog = catalog.Default()
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.MemoryGrace <= 0 {
		cfg.MemoryGrace = 30 * time.Second
	}
	if cfg.Observe == nil {
		cfg.Observe = func(string, string) {}
	}
	if cfg.Health == nil {
		p := dradriver.DefaultHealthPolicy()
		cfg.Health = &p
	}
	if err := cfg.Health.Validate(); err != nil {
		return nil, fmt.Errorf("draplugin: Config.Health: %w", err)
	}
	if cfg.BindingWorkers <= 0 {
		cfg.BindingWorkers = 2
	}
	if cfg.HealthResend <= 0 {
		cfg.HealthResend = DefaultHealthResend
	}
	gpus, err := cfg.Device.GPUs(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing GPUs: %w", err)
	}
	inv, err := node.Inventory(cfg.Node, gpus)
	if err != nil {
		return nil, err
	}
	sl, err := dradriver.SlicesFor(inv, 0, cfg.Device.Info().DriverVersion, cfg.Catalog, cfg.Isolation)
	if err != nil {
		return nil, err
	}
	if cfg.MIGBindingConditions {
		sl = dradriver.WithMIGBindingConditions(sl)
	}
	table, err := deviceTable(sl)
	if err != nil {
		return nil, err
	}
	claims, err := loadCheckpoint(filepath.Join(cfg.StateDir, CheckpointFile), cfg.Node)
	if err != nil {
		return nil, err
	}
	d := &Driver{cfg: cfg, inv: inv, slices: sl, table: table, claims: claims, models: map[int]*catalog.GPU{},
		usage: map[string]claimUsage{}, health: dradriver.InitialHealth(gpus, cfg.Clock())}
	d.published = dradriver.TaintSlices(sl, d.health)
	for _, g := range inv.GPUs {
		if m, err := cfg.Catalog.GPU(g.Model); err == nil {
			d.models[g.Index] = m
		}
	}
	var daemons *mps.Manager // nil: no daemons
	if cfg.MPSControl != "" {
		daemons = mps.NewManager(mps.Config{Runner: cfg.MPSRunner, Binary: cfg.MPSControl, Compute: cfg.Device,
			Root: cfg.MPSRoot, Clock: cfg.Clock, Log: cfg.Log})
	}
	owner := cfg.Owner
	if owner == nil {
		owner = func(int) (string, bool) { return "", false }
	}
	if d.node, err = node.New(node.Config{Device: cfg.Device, Catalog: cfg.Catalog, Log: cfg.Log, Clock: cfg.Clock, MPS: daemons,
		CDIDir: cfg.CDIDir, Owner: owner, Kill: cfg.Kill, MemoryGrace: cfg.MemoryGrace}); err != nil {
		return nil, fmt.Errorf("draplugin: %w", err)
	}
	return d, nil
}

// Slices are the ResourceSlices the driver publishes (names are the
// helper's), without health taints.
func (d *Driver) Slices() []resourceapi.ResourceSlice {
	d.hmu.Lock()
	defer d.hmu.Unlock()
	return d.slices
}

// SetTenants publishes the shared GPUs' copies for tenants (with tenant
// isolation on; without it nothing changes) and the tenants of the
// claims prepared on the node, whose devices must stay known. It reports
// whether the slices changed; when the driver is started they are
// published again (the helper updates the pool's slices in place). Lock
// order: d.mu, then d.hmu (slices and table change under both).
func (d *Driver) SetTenants(ctx context.Context, tenants []string) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.cfg.Isolation.TenantIsolation {
		return false, nil
	}
	all := slices.Clone(tenants)
	for _, r := range d.claims {
		for _, dv := range r.Devices {
			if dv.Tenant != "" {
				all = append(all, dv.Tenant)
			}
		}
	}
	slices.Sort(all)
	all = slices.Compact(all)
	if slices.Equal(all, d.cfg.Isolation.Tenants) {
		return false, nil
	}
	opts := d.cfg.Isolation
	opts.Tenants = all
	sl, err := dradriver.SlicesFor(d.inv, 0, d.cfg.Device.Info().DriverVersion, d.cfg.Catalog, opts)
	if err != nil {
		return false, err
	}
	if d.cfg.MIGBindingConditions {
		sl = dradriver.WithMIGBindingConditions(sl)
	}
	table, err := deviceTable(sl)
	if err != nil {
		return false, err
	}
	d.hmu.Lock()
	defer d.hmu.Unlock()
	d.cfg.Isolation, d.slices, d.table = opts, sl, table
	d.hub.notify() // the kubelet's health streams list the new devices
	if d.helper != nil {
		if err := d.publish(ctx); err != nil {
			return true, fmt.Errorf("publishing ResourceSlices: %w", err)
		}
	}
	d.cfg.Log.Info("tenants published", "tenants", len(all), "devices", len(table))
	return true, nil
}

// Faults are the GPUs' and MIG placements' faults the published slices
// carry as device taints.
func (d *Driver) Faults() []dradriver.Fault {
	d.hmu.Lock()
	defer d.hmu.Unlock()
	return d.health.Faults()
}

// Start adopts what the checkpoint says runs (the MPS daemons of prepared
// claims; stray daemons under MPSRoot are stopped), then registers with
// the kubelet, serves the DRA gRPC service and publishes the slices.
func (d *Driver) Start(ctx context.Context) error {
	if d.cfg.Kube == nil {
		return errors.New("draplugin: Start needs a Kubernetes client")
	}
	d.mu.Lock()
	if err := d.reconcileMPS(ctx, nil); err != nil {
		d.cfg.Log.Warn("MPS daemons at start", "err", err)
	}
	d.mu.Unlock()
	for _, dir := range []string{d.cfg.StateDir, d.cfg.RegistrarDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return err
		}
	}
	// Subscribe to health events before the first publish, so no event
	// falls between, and before the health service starts, so the
	// kubelet's first report already knows whether events arrive.
	wctx, cancel := context.WithCancel(ctx)
	d.stopWatch = cancel
	events, everr := d.cfg.Device.Events(wctx)
	if everr != nil {
		cancel()
		d.cfg.Log.Warn("no health events from the device layer: devices are never tainted and the kubelet sees their health Unknown", "err", everr)
	} else {
		d.hmu.Lock()
		d.watching = true
		d.hmu.Unlock()
	}
	h, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.DriverName(dranames.DriverName),
		kubeletplugin.NodeName(d.cfg.Node),
		kubeletplugin.KubeClient(d.cfg.Kube),
		kubeletplugin.PluginDataDirectoryPath(d.cfg.StateDir),
		kubeletplugin.RegistrarDirectoryPath(d.cfg.RegistrarDir),
		kubeletplugin.CDIDirectory(d.cfg.CDIDir),
	)
	if err != nil {
		cancel()
		return fmt.Errorf("starting the kubelet plugin: %w", err)
	}
	d.helper = h
	if everr == nil {
		d.watchDone = make(chan struct{})
		go func() {
			defer close(d.watchDone)
			d.watchHealth(wctx, events)
		}()
	}
	d.hmu.Lock()
	err = d.publish(ctx)
	d.hmu.Unlock()
	if err != nil {
		d.Stop()
		return fmt.Errorf("publishing ResourceSlices: %w", err)
	}
	d.cfg.Log.Info("gpuslice DRA driver started", "driver", dranames.DriverName, "node", d.cfg.Node,
		"devices", len(d.table), "claims", len(d.claims), "socket", filepath.Join(d.cfg.StateDir, "dra.sock"))
	return nil
}

// Stop stops serving and watching health events (prepared claims stay as
// they are).
func (d *Driver) Stop() {
	if d.stopWatch != nil {
		d.stopWatch()
	}
	if d.watchDone != nil {
		<-d.watchDone
	}
	if d.helper != nil {
		d.helper.Stop()
	}
}

// publish hands the slices, tainted by the current health, to the
// helper's ResourceSlice controller, which creates or updates them in the
// background. d.hmu must be held.
func (d *Driver) publish(ctx context.Context) error {
	d.published = dradriver.TaintSlices(d.slices, d.health)
	pool := resourceslice.Pool{}
	for _, s := range d.published {
		pool.Slices = append(pool.Slices, resourceslice.Slice{Devices: s.Spec.Devices, SharedCounters: s.Spec.SharedCounters})
	}
	return d.helper.PublishResources(ctx, resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{d.cfg.Node: pool}})
}

// watchHealth applies each health event (Config.Health's decision, on the
// GPUs as listed now) and republishes the slices when the taints change:
// a fatal XID taints the GPU's devices NoExecute (the stock
// kube-controller-manager then evicts the pods whose claims use them), a
// recovered GPU loses its taints. Each change wakes the kubelet's health
// streams. Should the device layer end the events before ctx ends, the
// health the kubelet sees turns Unknown where no fault is known.
func (d *Driver) watchHealth(ctx context.Context, events <-chan gpu.Event) {
	defer func() {
		if ctx.Err() != nil {
			return // stopping: the health service stops with the driver
		}
		d.hmu.Lock()
		d.watching = false
		d.hmu.Unlock()
		d.hub.notify()
		d.cfg.Log.Error("the device layer ended its health events: device taints no longer change and the kubelet sees untainted devices' health Unknown")
	}()
	for ev := range events {
		gpus, err := d.cfg.Device.GPUs(ctx)
		if err != nil {
			gpus = nil // a lost GPU may fail the listing: decide on the table
		}
		d.hmu.Lock() // SetTenants replaces the table under d.mu and d.hmu
		// A lost GPU leaves the listing (and the events of a GPU queued
		// before it was lost come after): the GPUs the driver publishes
		// are found in the table.
		for _, info := range d.table {
			if !slices.ContainsFunc(gpus, func(g gpu.GPU) bool { return g.UUID == info.GPU }) {
				gpus = append(gpus, gpu.GPU{Index: info.GPUIndex, UUID: info.GPU})
			}
		}
		next, changed, err := d.cfg.Health.Apply(d.health, ev, gpus)
		if err != nil {
			d.hmu.Unlock()
			d.cfg.Log.Warn("health event", "err", err)
			continue
		}
		if !changed {
			d.hmu.Unlock()
			d.cfg.Log.Info("health event taints nothing", "gpu", ev.Index, "uuid", ev.UUID, "kind", ev.Kind, "xid", ev.XID)
			continue
		}
		d.health = next
		err = d.publish(ctx)
		d.hmu.Unlock()
		d.hub.notify()
		if err != nil {
			d.cfg.Log.Error("republishing ResourceSlices after a health event", "err", err)
			continue
		}
		d.cfg.Log.Warn("GPU health changed: device taints republished", "gpu", ev.Index, "uuid", ev.UUID, "kind", ev.Kind,
			"xid", ev.XID, "message", ev.Message, "faults", len(d.Faults()))
	}
}

// HandleError logs background errors (publishing slices, gRPC); none is
// fatal to the node's running claims.
func (d *Driver) HandleError(_ context.Context, err error, msg string) {
	d.cfg.Log.Error(msg, "err", err, "recoverable", errors.Is(err, kubeletplugin.ErrRecoverable))
}

// PrepareResourceClaims prepares each claim (see Prepare).
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		devs, err := d.Prepare(ctx, c)
		if err != nil {
			d.cfg.Log.Error("prepare", "claim", c.Namespace+"/"+c.Name, "uid", c.UID, "err", err)
		}
		out[c.UID] = kubeletplugin.PrepareResult{Devices: devs, Err: err}
	}
	return out, nil
}

// UnprepareResourceClaims unprepares each claim (see Unprepare).
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		err := d.Unprepare(ctx, string(c.UID))
		if err != nil {
			d.cfg.Log.Error("unprepare", "claim", c.Namespace+"/"+c.Name, "uid", c.UID, "err", err)
		}
		out[c.UID] = err
	}
	return out, nil
}

// Prepare makes a claim's devices usable and returns their CDI devices.
// A claim already prepared gets the same answer again. Otherwise its plan
// (planClaim) is saved in the checkpoint first, then made true: MIG mode
// and the instance at the allocated placement (an instance found there is
// adopted: a driver killed after creating it left it behind), whole GPUs
// out of MIG mode, compute modes (DEFAULT unless MPS), the time-slice
// interval of a time-sliced GPU (timeSliceLevels), the MPS daemon of each
// MPS device (started, or joined when running), the CDI spec; the
// checkpoint then records the claim as prepared.
func (d *Driver) Prepare(ctx context.Context, claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	uid := string(claim.UID)
	if rec := d.claims[uid]; rec != nil && rec.State == statePrepared {
		return d.result(*rec)
	}
	rec, err := planClaim(claim, d.cfg.Node, d.table, d.cfg.Sharing)
	if err != nil {
		return nil, err
	}
	if err := conflict(rec, d.claims); err != nil {
		return nil, err
	}
	if old := d.claims[uid]; old != nil {
		d.cfg.Log.Info("finishing a prepare begun before", "claim", rec.Namespace+"/"+rec.Name, "uid", uid)
	}
	d.claims[uid] = &rec
	if err := d.save(); err != nil {
		return nil, err
	}
	d.cfg.Observe(StepIntent, uid)
	if err := d.makeDevices(ctx, &rec, func(preparedDevice) bool { return true }); err != nil {
		return nil, err
	}
	for i := range rec.Devices {
		dev := &rec.Devices[i]
		if dev.Mode == alloc.MPS {
			if dev.PipeDir, _, err = pipeDirs(d.cfg.MPSRoot, dev.ID); err != nil {
				return nil, err
			}
		}
	}
	if err := d.save(); err != nil { // the instances' uuids
		return nil, err
	}
	if err := d.reconcileMPS(ctx, &rec); err != nil {
		return nil, fmt.Errorf("claim %s/%s: %w", rec.Namespace, rec.Name, err)
	}
	if slices.ContainsFunc(rec.Devices, func(dev preparedDevice) bool { return dev.Mode == alloc.MPS }) {
		d.cfg.Observe(StepMPSReady, uid)
	}
	gpus, err := d.cfg.Device.GPUs(ctx)
	if err != nil {
		return nil, err
	}
	spec, _, err := cdiSpec(rec, cdi.Host{GPUs: gpus, MIGMinors: d.cfg.MIGMinors})
	if err != nil {
		return nil, err
	}
	if _, err := d.node.WriteSpec(specName(uid), spec); err != nil {
		return nil, fmt.Errorf("claim %s/%s: writing the CDI spec: %w", rec.Namespace, rec.Name, err)
	}
	d.cfg.Observe(StepCDIWritten, uid)
	rec.State = statePrepared
	if err := d.save(); err != nil {
		return nil, err
	}
	d.cfg.Observe(StepPrepared, uid)
	d.cfg.Log.Info("prepared", "claim", rec.Namespace+"/"+rec.Name, "uid", uid, "devices", len(rec.Devices))
	return d.result(rec)
}

// result is a prepared claim's answer to the kubelet.
func (d *Driver) result(rec claimRecord) ([]kubeletplugin.Device, error) {
	var out []kubeletplugin.Device
	for _, dev := range rec.Devices {
		kd := kubeletplugin.Device{Requests: []string{dev.Request}, PoolName: dev.Pool, DeviceName: dev.Device,
			CDIDeviceIDs: []string{cdiID(rec.UID, dev.Device)}}
		if dev.ShareID != "" {
			id := types.UID(dev.ShareID)
			kd.ShareID = &id
		}
		out = append(out, kd)
	}
	return out, nil
}

// wantDaemons lists one MPS daemon per device that a claim in the
// checkpoint uses with MPS (plus extra, being prepared).
func (d *Driver) wantDaemons(extra *claimRecord) []mps.Daemon {
	seen := map[string]bool{}
	var out []mps.Daemon
	add := func(r *claimRecord) {
		for _, dev := range r.Devices {
			if dev.Mode != alloc.MPS || dev.ID == "" || dev.PipeDir == "" || seen[dev.ID] {
				continue
			}
			seen[dev.ID] = true
			out = append(out, mps.Daemon{Device: dev.ID, GPU: dev.GPU, GPUIndex: dev.GPUIndex,
				MIG: dev.Type == dranames.TypeMIG, PipeDir: dev.PipeDir, LogDir: filepath.Join(dev.PipeDir, "log")})
		}
	}
	for _, r := range sortedRecords(d.claims) {
		add(r)
	}
	if extra != nil {
		add(extra)
	}
	return out
}

// reconcileMPS makes the MPS daemons match the claims: started or joined
// for every MPS device, stopped where the last claim left. Without a
// control binary (simulated GPUs) the pipe directories are only made. An
// error is returned for extra's devices; others' are logged.
func (d *Driver) reconcileMPS(ctx context.Context, extra *claimRecord) error {
	rep, err := d.node.Daemons(ctx, d.wantDaemons(extra))
	if !d.node.RunsDaemons() {
		return err // the pipe directories
	}
	if err == nil || extra == nil {
		if err != nil {
			d.cfg.Log.Warn("MPS daemons", "err", err)
		}
		return nil
	}
	var mine []error
	for _, f := range rep.Failed {
		if slices.ContainsFunc(extra.Devices, func(dev preparedDevice) bool { return dev.ID == f.Device }) {
			mine = append(mine, fmt.Errorf("MPS daemon for %s: %w", f.Device, f.Err))
		}
	}
	for _, r := range rep.Restarted {
		if r.Err != nil && slices.ContainsFunc(extra.Devices, func(dev preparedDevice) bool { return dev.ID == r.Device }) {
			mine = append(mine, fmt.Errorf("MPS daemon for %s: %w", r.Device, r.Err))
		}
	}
	if len(mine) == 0 {
		d.cfg.Log.Warn("MPS daemons", "err", err)
	}
	return errors.Join(mine...)
}

// Unprepare undoes a claim: its CDI spec removed, its MIG instances
// destroyed (unless another claim holds the placement), its MPS daemon
// stopped when it was the last client claim, and the claim dropped from
// the checkpoint. A claim the driver does not know is already unprepared.
// A claim whose prepare did not finish is torn down the same way, its MIG
// instance found by placement when its uuid was never recorded.
func (d *Driver) Unprepare(ctx context.Context, uid string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	rec := d.claims[uid]
	if rec == nil {
		return nil
	}
	if err := d.node.RemoveSpec(specName(uid)); err != nil {
		return fmt.Errorf("claim %s/%s: removing the CDI spec: %w", rec.Namespace, rec.Name, err)
	}
	// Its MIG instances destroyed, its time-sliced GPUs back to the level
	// the claims left name (Default once none names one).
	if err := d.releaseDevices(ctx, uid, rec, ""); err != nil {
		return err
	}
	delete(d.claims, uid)
	delete(d.usage, uid)
	if err := d.reconcileMPS(ctx, nil); err != nil {
		d.cfg.Log.Warn("MPS daemons after unprepare", "err", err)
	}
	if err := d.save(); err != nil {
		d.claims[uid] = rec // try again next time
		return err
	}
	d.cfg.Observe(StepUnprepared, uid)
	d.cfg.Log.Info("unprepared", "claim", rec.Namespace+"/"+rec.Name, "uid", uid)
	return nil
}

func (d *Driver) save() error {
	return saveCheckpoint(filepath.Join(d.cfg.StateDir, CheckpointFile), d.cfg.Node, d.claims)
}
