// Package gputest is a contract test suite for gpu.Device implementations.
// The same suite runs against the simulated machine (gpu/fake) and the NVML
// adapter over go-nvml's mock, so both behave alike where the agent can
// tell: enumeration, MIG mode rules, instances at explicit placements
// (checked against the catalog's real placement rules through internal/mig,
// including NVIDIA's 3-2-1-1 example on A100-40GB), destruction, in-use
// refusals, processes, utilization and health events.
//
// Contract needs a way to start processes and inject XIDs that gpu.Device
// does not offer; the Controls interface carries them.
package gputest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/catalog"
	"github.com/gpuslice/gpuslice/internal/gpu"
	"github.com/gpuslice/gpuslice/internal/mig"
)

// Controls are the test-only knobs the suite turns. A method that an
// implementation cannot offer returns an error wrapping
// errors.ErrUnsupported; the subtests that need it are then skipped.
type Controls interface {
	// StartProcess starts a process pid holding memoryMiB on a GPU or MIG
	// instance (by uuid).
	StartProcess(uuid string, pid int, memoryMiB int64) error
	// StopProcess ends it.
	StopProcess(pid int) error
	// InjectXID raises an XID on GPU index, making it unhealthy when the
	// XID is fatal (79, 48, 94, 95, 119).
	InjectXID(index, xid int) error
}

// eventTimeout bounds how long the suite waits for an event.
const eventTimeout = 5 * time.Second

// Contract runs the suite. newDevice is called once per subtest and must
// return a fresh device: every GPU healthy and idle (no processes), at
// least one MIG-capable GPU whose model is in the catalog (an A100-40GB for
// the NVIDIA example; that subtest is skipped without one). MIG may start on
// or off and instances may exist: the suite sets the mode it needs and
// destroys what is there. Subtests that need a GPU without MIG support
// are skipped when there is none. Utilization of a MIG instance may fail
// with an error wrapping errors.ErrUnsupported (NVML cannot sample it).
func Contract(t *testing.T, newDevice func(t *testing.T) (gpu.Device, Controls)) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(*suite)
	}{
		{"Info", testInfo},
		{"Enumerate", testEnumerate},
		{"DeepCopy", testDeepCopy},
		{"UnknownIndexAndUUID", testUnknown},
		{"MIGModeOnOff", testMIGMode},
		{"MIGModeUnsupported", testMIGUnsupported},
		{"MIGModeRefusedWhileProcessesRun", testMIGModeProcesses},
		{"CreateNeedsMIG", testCreateNeedsMIG},
		{"EveryStartOfEveryProfile", testEveryStart},
		{"NVIDIAExample3211", testNVIDIA3211},
		{"InvalidStartRejected", testInvalidStart},
		{"OverlapRejected", testOverlap},
		{"CountLimits", testCountLimits},
		{"UnknownProfile", testUnknownProfile},
		{"Destroy", testDestroy},
		{"DestroyRefusedWhileProcessesRun", testDestroyInUse},
		{"ProcessesOnGPU", testProcessesGPU},
		{"ProcessesOnInstance", testProcessesInstance},
		{"ComputeMode", testComputeMode},
		{"EventsNonFatalXID", testEventNonFatal},
		{"EventsFatalXID", testEventFatal},
		{"EventsCloseWithContext", testEventsClose},
		{"Concurrent", testConcurrent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dev, ctl := newDevice(t)
			if dev == nil {
				t.Fatal("newDevice returned a nil device")
			}
			tc.fn(&suite{t: t, dev: dev, ctl: ctl, ctx: t.Context()})
		})
	}
}

// suite is one subtest's device.
type suite struct {
	t   *testing.T
	dev gpu.Device
	ctl Controls
	ctx context.Context
}

func (s *suite) gpus() []gpu.GPU {
	s.t.Helper()
	gs, err := s.dev.GPUs(s.ctx)
	if err != nil {
		s.t.Fatalf("GPUs: %v", err)
	}
	return gs
}

func (s *suite) gpu(index int) gpu.GPU {
	s.t.Helper()
	for _, g := range s.gpus() {
		if g.Index == index {
			return g
		}
	}
	s.t.Fatalf("GPU %d is not listed", index)
	return gpu.GPU{}
}

// migGPU is a MIG-capable GPU with its geometry.
type migGPU struct {
	gpu.GPU
	geo *mig.Geometry
}

// geometry returns the catalog geometry of a GPU, nil without MIG.
func geometry(g gpu.GPU) *mig.Geometry {
	for _, name := range []string{g.Model, g.Name} {
		if name == "" {
			continue
		}
		if m, err := catalog.Default().GPU(name); err == nil && m.MIG != nil {
			if geo, err := mig.New(m); err == nil {
				return geo
			}
		}
	}
	return nil
}

// migReady picks a MIG-capable GPU (model first when given and present),
// turns MIG on and destroys its instances.
func (s *suite) migReady(model string) migGPU {
	s.t.Helper()
	var pick *migGPU
	for _, g := range s.gpus() {
		if !g.MIGCapable {
			continue
		}
		geo := geometry(g)
		if geo == nil {
			continue
		}
		if model != "" && g.Model != model {
			continue
		}
		pick = &migGPU{GPU: g, geo: geo}
		break
	}
	if pick == nil {
		if model != "" {
			s.t.Skipf("no %s GPU", model)
		}
		s.t.Fatal("the contract needs a MIG-capable GPU whose model is in the catalog")
	}
	s.must(s.dev.SetMIGMode(s.ctx, pick.Index, true), "SetMIGMode(%d, true)", pick.Index)
	for _, in := range s.gpu(pick.Index).Instances {
		s.must(s.dev.DestroyInstance(s.ctx, pick.Index, in.UUID), "DestroyInstance(%s)", in.UUID)
	}
	pick.GPU = s.gpu(pick.Index)
	if !pick.MIGEnabled || len(pick.Instances) != 0 {
		s.t.Fatalf("GPU %d after enabling MIG and destroying instances: migEnabled=%v, %d instances", pick.Index, pick.MIGEnabled, len(pick.Instances))
	}
	return *pick
}

// plainGPU returns a GPU with MIG off, turning it off on a MIG-capable one
// when no other is at hand.
func (s *suite) plainGPU() gpu.GPU {
	s.t.Helper()
	gs := s.gpus()
	for _, g := range gs {
		if !g.MIGEnabled {
			return g
		}
	}
	g := gs[0]
	for _, in := range g.Instances {
		s.must(s.dev.DestroyInstance(s.ctx, g.Index, in.UUID), "DestroyInstance(%s)", in.UUID)
	}
	s.must(s.dev.SetMIGMode(s.ctx, g.Index, false), "SetMIGMode(%d, false)", g.Index)
	return s.gpu(g.Index)
}

func (s *suite) must(err error, format string, args ...any) {
	s.t.Helper()
	if err != nil {
		s.t.Fatalf("%s: %v", fmt.Sprintf(format, args...), err)
	}
}

// want checks that err wraps target.
func (s *suite) want(err, target error, format string, args ...any) {
	s.t.Helper()
	if !errors.Is(err, target) {
		s.t.Errorf("%s: got error %v, want one wrapping %q", fmt.Sprintf(format, args...), err, target)
	}
}

// control runs a Controls call, skipping the subtest when it is
// unsupported.
func (s *suite) control(err error, format string, args ...any) {
	s.t.Helper()
	if errors.Is(err, errors.ErrUnsupported) {
		s.t.Skipf("%s: %v", fmt.Sprintf(format, args...), err)
	}
	s.must(err, format, args...)
}

func (s *suite) create(g migGPU, profile string, start int) gpu.Instance {
	s.t.Helper()
	in, err := s.dev.CreateInstance(s.ctx, g.Index, profile, start)
	s.must(err, "CreateInstance(%d, %s, %d)", g.Index, profile, start)
	p, err := g.geo.Profile(profile)
	s.must(err, "profile %s", profile)
	shape := g.geo.Shapes[p]
	switch {
	case !strings.HasPrefix(in.UUID, "MIG-"):
		s.t.Errorf("instance uuid %q, want a MIG- prefix", in.UUID)
	case !strings.EqualFold(in.Profile, shape.Name):
		s.t.Errorf("instance profile %q, want %q", in.Profile, shape.Name)
	case in.Start != start || in.Size != shape.Size:
		s.t.Errorf("instance %s at %d+%d, want %d+%d", in.Profile, in.Start, in.Size, start, shape.Size)
	case in.MemoryMiB <= 0:
		s.t.Errorf("instance %s has %d MiB", in.UUID, in.MemoryMiB)
	case in.GIID < 0 || in.CIID < 0:
		s.t.Errorf("instance %s: GI %d CI %d", in.UUID, in.GIID, in.CIID)
	}
	return in
}

// layout reads a GPU's instances as a mig layout.
func (s *suite) layout(index int) mig.Layout {
	s.t.Helper()
	var l mig.Layout
	for _, in := range s.gpu(index).Instances {
		l = append(l, mig.Instance{Profile: in.Profile, Start: in.Start})
	}
	return l.Sorted()
}

func testInfo(s *suite) {
	info := s.dev.Info()
	if info.Backend == "" {
		s.t.Error("Info().Backend is empty")
	}
}

func testEnumerate(s *suite) {
	gs := s.gpus()
	if len(gs) == 0 {
		s.t.Fatal("GPUs returned none")
	}
	uuids := map[string]bool{}
	for i, g := range gs {
		if i > 0 && g.Index <= gs[i-1].Index {
			s.t.Errorf("GPU indexes not ascending: %d after %d", g.Index, gs[i-1].Index)
		}
		if !strings.HasPrefix(g.UUID, "GPU-") || uuids[g.UUID] {
			s.t.Errorf("GPU %d: uuid %q is not a unique GPU- uuid", g.Index, g.UUID)
		}
		uuids[g.UUID] = true
		if g.Name == "" || g.MemoryMiB <= 0 {
			s.t.Errorf("GPU %d: name %q, %d MiB", g.Index, g.Name, g.MemoryMiB)
		}
		if !g.Healthy {
			s.t.Errorf("GPU %d starts unhealthy", g.Index)
		}
		if g.MIGEnabled && !g.MIGCapable {
			s.t.Errorf("GPU %d: MIG enabled on a GPU that is not MIG-capable", g.Index)
		}
		if g.Model != "" {
			m, err := catalog.Default().GPU(g.Model)
			if err != nil {
				s.t.Errorf("GPU %d: model %q is not in the catalog: %v", g.Index, g.Model, err)
			} else if g.MIGCapable != (m.MIG != nil) {
				s.t.Errorf("GPU %d (%s): MIGCapable=%v, the catalog says %v", g.Index, g.Model, g.MIGCapable, m.MIG != nil)
			}
		}
		for _, in := range g.Instances {
			if !strings.HasPrefix(in.UUID, "MIG-") || uuids[in.UUID] {
				s.t.Errorf("GPU %d: instance uuid %q is not a unique MIG- uuid", g.Index, in.UUID)
			}
			uuids[in.UUID] = true
		}
	}
}

func testDeepCopy(s *suite) {
	g := s.migReady("")
	in := s.create(g, g.geo.Shapes[smallest(g.geo)].Name, g.geo.Shapes[smallest(g.geo)].Starts[0])
	gs := s.gpus()
	for i := range gs {
		gs[i].Name = "scribbled"
		gs[i].Healthy = false
		for j := range gs[i].Instances {
			gs[i].Instances[j].UUID = "scribbled"
		}
	}
	again := s.gpu(g.Index)
	if again.Name == "scribbled" || !again.Healthy || len(again.Instances) != 1 || again.Instances[0] != in {
		s.t.Errorf("GPUs does not return copies: after scribbling, GPU %d reads %+v", g.Index, again)
	}
}

func testUnknown(s *suite) {
	gs := s.gpus()
	bad := gs[len(gs)-1].Index + 100
	s.want(s.dev.SetMIGMode(s.ctx, bad, true), gpu.ErrNotFound, "SetMIGMode(%d)", bad)
	s.want(s.dev.SetMIGMode(s.ctx, -1, false), gpu.ErrNotFound, "SetMIGMode(-1)")
	_, err := s.dev.CreateInstance(s.ctx, bad, "1g.5gb", 0)
	s.want(err, gpu.ErrNotFound, "CreateInstance(%d)", bad)
	s.want(s.dev.DestroyInstance(s.ctx, bad, "MIG-nope"), gpu.ErrNotFound, "DestroyInstance(%d)", bad)
	s.want(s.dev.SetComputeMode(s.ctx, bad, gpu.ComputeDefault), gpu.ErrNotFound, "SetComputeMode(%d)", bad)
	s.want(s.dev.SetTimeSlice(s.ctx, bad, gpu.TimeSliceLong), gpu.ErrNotFound, "SetTimeSlice(%d)", bad)
	_, err = s.dev.Processes(s.ctx, "GPU-no-such-uuid")
	s.want(err, gpu.ErrNotFound, "Processes(unknown uuid)")
	_, err = s.dev.Utilization(s.ctx, "GPU-no-such-uuid")
	s.want(err, gpu.ErrNotFound, "Utilization(unknown uuid)")
}

func testMIGMode(s *suite) {
	g := s.migReady("")
	s.must(s.dev.SetMIGMode(s.ctx, g.Index, true), "enabling MIG twice")
	sh := g.geo.Shapes[smallest(g.geo)]
	in := s.create(g, sh.Name, sh.Starts[0])
	s.want(s.dev.SetMIGMode(s.ctx, g.Index, false), gpu.ErrInUse, "disabling MIG with an instance")
	if !s.gpu(g.Index).MIGEnabled {
		s.t.Error("a refused SetMIGMode(false) turned MIG off")
	}
	s.must(s.dev.DestroyInstance(s.ctx, g.Index, in.UUID), "DestroyInstance")
	s.must(s.dev.SetMIGMode(s.ctx, g.Index, false), "disabling MIG on an empty GPU")
	if got := s.gpu(g.Index); got.MIGEnabled {
		s.t.Error("MIG still enabled after SetMIGMode(false)")
	}
	s.must(s.dev.SetMIGMode(s.ctx, g.Index, false), "disabling MIG twice")
	s.must(s.dev.SetMIGMode(s.ctx, g.Index, true), "enabling MIG again")
	if got := s.gpu(g.Index); !got.MIGEnabled {
		s.t.Error("MIG not enabled after SetMIGMode(true)")
	}
}

func testMIGUnsupported(s *suite) {
	for _, g := range s.gpus() {
		if g.MIGCapable {
			continue
		}
		s.want(s.dev.SetMIGMode(s.ctx, g.Index, true), gpu.ErrNoMIG, "SetMIGMode(true) on %s", g.Name)
		_, err := s.dev.CreateInstance(s.ctx, g.Index, "1g.5gb", 0)
		s.want(err, gpu.ErrNoMIG, "CreateInstance on %s", g.Name)
		return
	}
	s.t.Skip("every GPU is MIG-capable")
}

func testMIGModeProcesses(s *suite) {
	g := s.migReady("")
	s.must(s.dev.SetMIGMode(s.ctx, g.Index, false), "SetMIGMode(false)")
	s.control(s.ctl.StartProcess(g.UUID, 4101, 512), "StartProcess")
	s.want(s.dev.SetMIGMode(s.ctx, g.Index, true), gpu.ErrInUse, "enabling MIG while a process runs")
	if s.gpu(g.Index).MIGEnabled {
		s.t.Error("a refused SetMIGMode(true) turned MIG on")
	}
	s.control(s.ctl.StopProcess(4101), "StopProcess")
	s.must(s.dev.SetMIGMode(s.ctx, g.Index, true), "enabling MIG after the process ended")
}

func testCreateNeedsMIG(s *suite) {
	g := s.migReady("")
	s.must(s.dev.SetMIGMode(s.ctx, g.Index, false), "SetMIGMode(false)")
	sh := g.geo.Shapes[smallest(g.geo)]
	_, err := s.dev.CreateInstance(s.ctx, g.Index, sh.Name, sh.Starts[0])
	s.want(err, gpu.ErrNoMIG, "CreateInstance with MIG off")
}

// testEveryStart tries every profile at every slice of an empty GPU: the
// allowed starts succeed, the others fail with ErrPlacement.
func testEveryStart(s *suite) {
	g := s.migReady("")
	for _, sh := range g.geo.Shapes {
		for start := range g.geo.Slices {
			in, err := s.dev.CreateInstance(s.ctx, g.Index, sh.Name, start)
			if !slices.Contains(sh.Starts, start) {
				s.want(err, gpu.ErrPlacement, "%s@%d (allowed %s)", sh.Name, start, startsOf(sh))
				if err == nil {
					s.must(s.dev.DestroyInstance(s.ctx, g.Index, in.UUID), "DestroyInstance")
				}
				continue
			}
			if err != nil {
				s.t.Errorf("%s@%d on an empty %s: %v", sh.Name, start, g.Model, err)
				continue
			}
			if in.Start != start || in.Size != sh.Size {
				s.t.Errorf("%s@%d created at %d+%d, want %d+%d", sh.Name, start, in.Start, in.Size, start, sh.Size)
			}
			s.must(s.dev.DestroyInstance(s.ctx, g.Index, in.UUID), "DestroyInstance(%s@%d)", sh.Name, start)
		}
	}
	if l := s.layout(g.Index); len(l) != 0 {
		s.t.Errorf("instances left behind: %s", l)
	}
}

// testNVIDIA3211 builds the MIG user guide's 3-2-1-1 A100 layout with
// explicit starts, in the order that fails with automatic placement.
func testNVIDIA3211(s *suite) {
	g := s.migReady("A100-40GB")
	want := mig.Layout{{Profile: "2g.10gb", Start: 0}, {Profile: "1g.5gb", Start: 2}, {Profile: "1g.5gb", Start: 3}, {Profile: "3g.20gb", Start: 4}}
	var made []gpu.Instance
	for _, in := range want {
		made = append(made, s.create(g, in.Profile, in.Start))
	}
	if got := s.layout(g.Index); got.String() != want.Sorted().String() {
		s.t.Errorf("layout %s, want %s", got, want.Sorted())
	}
	gis := map[int]bool{}
	for _, in := range made {
		if gis[in.GIID] {
			s.t.Errorf("GI id %d used twice", in.GIID)
		}
		gis[in.GIID] = true
	}
	listed := s.gpu(g.Index).Instances
	for _, in := range made {
		if !slices.Contains(listed, in) {
			s.t.Errorf("created %+v, GPUs lists %+v", in, listed)
		}
	}
	// Every memory slice is taken: no 1g.5gb fits at any of its starts.
	for start := range 7 {
		_, err := s.dev.CreateInstance(s.ctx, g.Index, "1g.5gb", start)
		s.want(err, gpu.ErrPlacement, "1g.5gb@%d on a full 3-2-1-1", start)
	}
}

func testInvalidStart(s *suite) {
	g := s.migReady("")
	for _, sh := range g.geo.Shapes {
		for start := range g.geo.Slices {
			if slices.Contains(sh.Starts, start) {
				continue
			}
			_, err := s.dev.CreateInstance(s.ctx, g.Index, sh.Name, start)
			s.want(err, gpu.ErrPlacement, "%s@%d (allowed %s)", sh.Name, start, startsOf(sh))
			if l := s.layout(g.Index); len(l) != 0 {
				s.t.Fatalf("a rejected create left %s", l)
			}
			return
		}
	}
	s.t.Skip("every profile may start anywhere")
}

func testOverlap(s *suite) {
	g := s.migReady("")
	big := largestWithTwoStarts(g.geo)
	if big < 0 {
		s.t.Skip("no profile with two placements")
	}
	sh := g.geo.Shapes[big]
	first := s.create(g, sh.Name, sh.Starts[0])
	for _, other := range g.geo.Shapes {
		for _, st := range other.Starts {
			if st >= sh.Starts[0]+sh.Size || st+other.Size <= sh.Starts[0] {
				continue
			}
			_, err := s.dev.CreateInstance(s.ctx, g.Index, other.Name, st)
			s.want(err, gpu.ErrPlacement, "%s@%d over %s@%d", other.Name, st, sh.Name, sh.Starts[0])
		}
	}
	if got := s.gpu(g.Index).Instances; len(got) != 1 || got[0] != first {
		s.t.Errorf("rejected overlaps changed the layout: %+v", got)
	}
	// The other placement is free.
	s.create(g, sh.Name, sh.Starts[1])
}

func testCountLimits(s *suite) {
	g := s.migReady("")
	for _, sh := range g.geo.Shapes {
		if !sh.ME || len(sh.Starts) < 2 {
			continue
		}
		s.create(g, sh.Name, sh.Starts[0])
		_, err := s.dev.CreateInstance(s.ctx, g.Index, sh.Name, sh.Starts[len(sh.Starts)-1])
		s.want(err, gpu.ErrPlacement, "a second %s", sh.Name)
		return
	}
	s.t.Skip("no +me profile with two placements")
}

func testUnknownProfile(s *suite) {
	g := s.migReady("")
	if _, err := s.dev.CreateInstance(s.ctx, g.Index, "9g.999gb", 0); err == nil {
		s.t.Error("CreateInstance of an unknown profile succeeded")
	}
	if l := s.layout(g.Index); len(l) != 0 {
		s.t.Errorf("an unknown profile left %s", l)
	}
}

func testDestroy(s *suite) {
	g := s.migReady("")
	big := largestWithTwoStarts(g.geo)
	if big < 0 {
		big = smallest(g.geo)
	}
	sh := g.geo.Shapes[big]
	in := s.create(g, sh.Name, sh.Starts[0])
	s.want(s.dev.DestroyInstance(s.ctx, g.Index, "MIG-no-such-instance"), gpu.ErrNotFound, "destroying an unknown uuid")
	s.must(s.dev.DestroyInstance(s.ctx, g.Index, in.UUID), "DestroyInstance")
	if l := s.layout(g.Index); len(l) != 0 {
		s.t.Errorf("after destroy: %s", l)
	}
	s.want(s.dev.DestroyInstance(s.ctx, g.Index, in.UUID), gpu.ErrNotFound, "destroying twice")
	_, err := s.dev.Processes(s.ctx, in.UUID)
	s.want(err, gpu.ErrNotFound, "Processes of a destroyed instance")
	// The slices are free again.
	again := s.create(g, sh.Name, sh.Starts[0])
	s.must(s.dev.DestroyInstance(s.ctx, g.Index, again.UUID), "DestroyInstance")
}

func testDestroyInUse(s *suite) {
	g := s.migReady("")
	sh := g.geo.Shapes[smallest(g.geo)]
	in := s.create(g, sh.Name, sh.Starts[0])
	s.control(s.ctl.StartProcess(in.UUID, 4201, 256), "StartProcess on %s", in.UUID)
	s.want(s.dev.DestroyInstance(s.ctx, g.Index, in.UUID), gpu.ErrInUse, "destroying an instance with a process")
	if len(s.gpu(g.Index).Instances) != 1 {
		s.t.Error("a refused destroy removed the instance")
	}
	s.control(s.ctl.StopProcess(4201), "StopProcess")
	s.must(s.dev.DestroyInstance(s.ctx, g.Index, in.UUID), "destroying after the process ended")
}

func testProcessesGPU(s *suite) {
	g := s.plainGPU()
	ps, err := s.dev.Processes(s.ctx, g.UUID)
	s.must(err, "Processes")
	if len(ps) != 0 {
		s.t.Fatalf("a fresh GPU runs %+v", ps)
	}
	s.control(s.ctl.StartProcess(g.UUID, 4302, 2048), "StartProcess")
	s.control(s.ctl.StartProcess(g.UUID, 4301, 1024), "StartProcess")
	ps, err = s.dev.Processes(s.ctx, g.UUID)
	s.must(err, "Processes")
	slices.SortFunc(ps, func(a, b gpu.Process) int { return a.PID - b.PID })
	want := []gpu.Process{{PID: 4301, MemoryMiB: 1024}, {PID: 4302, MemoryMiB: 2048}}
	if !sameProcesses(ps, want) {
		s.t.Errorf("Processes = %+v, want %+v", ps, want)
	}
	for _, p := range ps {
		if p.SMPercent != nil && (*p.SMPercent < 0 || *p.SMPercent > 100) {
			s.t.Errorf("pid %d: SM utilization %d%%, want 0..100", p.PID, *p.SMPercent)
		}
	}
	u, err := s.dev.Utilization(s.ctx, g.UUID)
	s.must(err, "Utilization")
	if u.Time.IsZero() || u.SMPercent < 0 || u.SMPercent > 100 || u.MemoryPercent < 0 || u.MemoryPercent > 100 {
		s.t.Errorf("Utilization = %+v", u)
	}
	s.control(s.ctl.StopProcess(4301), "StopProcess")
	s.control(s.ctl.StopProcess(4302), "StopProcess")
	ps, err = s.dev.Processes(s.ctx, g.UUID)
	s.must(err, "Processes")
	if len(ps) != 0 {
		s.t.Errorf("after stopping: %+v", ps)
	}
}

func testProcessesInstance(s *suite) {
	g := s.migReady("")
	sh := g.geo.Shapes[smallest(g.geo)]
	a := s.create(g, sh.Name, sh.Starts[0])
	b := s.create(g, sh.Name, sh.Starts[len(sh.Starts)-1])
	s.control(s.ctl.StartProcess(a.UUID, 4401, 128), "StartProcess on %s", a.UUID)
	ps, err := s.dev.Processes(s.ctx, a.UUID)
	s.must(err, "Processes(%s)", a.UUID)
	if want := []gpu.Process{{PID: 4401, MemoryMiB: 128}}; !sameProcesses(ps, want) {
		s.t.Errorf("Processes(a) = %+v, want %+v", ps, want)
	}
	// NVML keeps no per-process samples for MIG devices. GPM (Hopper and
	// newer) measures an instance between two reads: nothing on the
	// first, a share of the instance's utilization on the next.
	for _, p := range ps {
		if p.SMPercent != nil {
			s.t.Errorf("pid %d on MIG instance %s has an SM utilization (%d%%) on the first read", p.PID, a.UUID, *p.SMPercent)
		}
	}
	ps, err = s.dev.Processes(s.ctx, a.UUID)
	s.must(err, "Processes(%s)", a.UUID)
	gpm := false
	if m, err := catalog.Default().GPU(g.Model); err == nil {
		gpm = m.HasGPM()
	}
	for _, p := range ps {
		switch {
		case gpm && (p.SMPercent == nil || *p.SMPercent < 0 || *p.SMPercent > 100):
			s.t.Errorf("pid %d on a %s MIG instance: SM utilization %v on the second read; want GPM's 0..100", p.PID, g.Model, p.SMPercent)
		case !gpm && p.SMPercent != nil:
			s.t.Errorf("pid %d on a %s MIG instance has an SM utilization (%d%%); without GPM NVML samples none", p.PID, g.Model, *p.SMPercent)
		}
	}
	ps, err = s.dev.Processes(s.ctx, b.UUID)
	s.must(err, "Processes(%s)", b.UUID)
	if len(ps) != 0 {
		s.t.Errorf("Processes(b) = %+v, want none", ps)
	}
	// NVML cannot sample utilization in MIG mode; an implementation may
	// say so with errors.ErrUnsupported.
	if _, err := s.dev.Utilization(s.ctx, a.UUID); err != nil && !errors.Is(err, errors.ErrUnsupported) {
		s.t.Errorf("Utilization(%s): %v", a.UUID, err)
	}
	s.want(s.dev.SetMIGMode(s.ctx, g.Index, false), gpu.ErrInUse, "disabling MIG with a busy instance")
	s.control(s.ctl.StopProcess(4401), "StopProcess")
}

// sameProcesses compares pids and memory, in order (SMPercent is a
// sample, checked separately).
func sameProcesses(got, want []gpu.Process) bool {
	return slices.EqualFunc(got, want, func(a, b gpu.Process) bool { return a.PID == b.PID && a.MemoryMiB == b.MemoryMiB })
}

func testComputeMode(s *suite) {
	g := s.plainGPU()
	for _, mode := range []gpu.ComputeMode{gpu.ComputeExclusiveProcess, gpu.ComputeProhibited, gpu.ComputeDefault} {
		s.must(s.dev.SetComputeMode(s.ctx, g.Index, mode), "SetComputeMode(%d)", mode)
		if got := s.gpu(g.Index).ComputeMode; got != mode {
			s.t.Errorf("compute mode %d after setting %d", got, mode)
		}
	}
	if err := s.dev.SetComputeMode(s.ctx, g.Index, gpu.ComputeMode(42)); err == nil {
		s.t.Error("SetComputeMode(42) succeeded")
	}
	for _, bad := range []gpu.TimeSlice{-1, 4} {
		if err := s.dev.SetTimeSlice(s.ctx, g.Index, bad); err == nil || !strings.Contains(err.Error(), "Long") {
			s.t.Errorf("SetTimeSlice(%d) = %v: want an error naming the valid levels", bad, err)
		}
	}
}

// next waits for an event.
func (s *suite) next(ch <-chan gpu.Event) gpu.Event {
	s.t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			s.t.Fatal("event channel closed early")
		}
		return ev
	case <-time.After(eventTimeout):
		s.t.Fatal("no event")
	}
	return gpu.Event{}
}

func testEventNonFatal(s *suite) {
	g := s.gpus()[0]
	ch, err := s.dev.Events(s.ctx)
	s.must(err, "Events")
	s.control(s.ctl.InjectXID(g.Index, 13), "InjectXID(%d, 13)", g.Index)
	ev := s.next(ch)
	if ev.Kind != gpu.EventXID || ev.XID != 13 || ev.Index != g.Index || ev.Fatal || ev.UUID != g.UUID {
		s.t.Errorf("event %+v, want a non-fatal XID 13 on GPU %d (%s)", ev, g.Index, g.UUID)
	}
	if !s.gpu(g.Index).Healthy {
		s.t.Error("XID 13 made the GPU unhealthy")
	}
}

func testEventFatal(s *suite) {
	gs := s.gpus()
	g := gs[len(gs)-1]
	ch, err := s.dev.Events(s.ctx)
	s.must(err, "Events")
	s.control(s.ctl.InjectXID(g.Index, 79), "InjectXID(%d, 79)", g.Index)
	ev := s.next(ch)
	if ev.Kind != gpu.EventXID || ev.XID != 79 || ev.Index != g.Index || !ev.Fatal {
		s.t.Errorf("event %+v, want a fatal XID 79 on GPU %d", ev, g.Index)
	}
	if ev.Time.IsZero() {
		s.t.Error("event has no time")
	}
	if s.gpu(g.Index).Healthy {
		s.t.Error("XID 79 left the GPU healthy")
	}
	for _, other := range s.gpus() {
		if other.Index != g.Index && !other.Healthy {
			s.t.Errorf("XID 79 on GPU %d made GPU %d unhealthy", g.Index, other.Index)
		}
	}
}

func testEventsClose(s *suite) {
	ctx, cancel := context.WithCancel(s.ctx)
	ch, err := s.dev.Events(ctx)
	s.must(err, "Events")
	cancel()
	deadline := time.After(eventTimeout)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			s.t.Fatal("the event channel stayed open after its context ended")
		}
	}
}

// testConcurrent reads while another goroutine reshapes a GPU; run it
// with -race.
func testConcurrent(s *suite) {
	g := s.migReady("")
	sh := g.geo.Shapes[smallest(g.geo)]
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 20 {
			in, err := s.dev.CreateInstance(s.ctx, g.Index, sh.Name, sh.Starts[0])
			if err != nil {
				s.t.Errorf("CreateInstance: %v", err)
				return
			}
			if err := s.dev.DestroyInstance(s.ctx, g.Index, in.UUID); err != nil {
				s.t.Errorf("DestroyInstance: %v", err)
				return
			}
		}
	})
	for range 4 {
		wg.Go(func() {
			for range 20 {
				gs, err := s.dev.GPUs(s.ctx)
				if err != nil {
					s.t.Errorf("GPUs: %v", err)
					return
				}
				for _, x := range gs {
					if _, err := s.dev.Utilization(s.ctx, x.UUID); err != nil && !errors.Is(err, errors.ErrUnsupported) {
						s.t.Errorf("Utilization: %v", err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

// smallest is the index of the plain (non-+me) profile with the fewest
// memory slices and the most placements.
func smallest(g *mig.Geometry) int {
	best := -1
	for i, sh := range g.Shapes {
		if sh.ME {
			continue
		}
		if best < 0 || sh.Size < g.Shapes[best].Size ||
			(sh.Size == g.Shapes[best].Size && len(sh.Starts) > len(g.Shapes[best].Starts)) {
			best = i
		}
	}
	return best
}

// largestWithTwoStarts is the index of the biggest plain profile with at
// least two placements, -1 when there is none.
func largestWithTwoStarts(g *mig.Geometry) int {
	best := -1
	for i, sh := range g.Shapes {
		if sh.ME || len(sh.Starts) < 2 {
			continue
		}
		if best < 0 || sh.Size > g.Shapes[best].Size {
			best = i
		}
	}
	return best
}

func startsOf(sh mig.Shape) string {
	parts := make([]string, len(sh.Starts))
	for i, st := range sh.Starts {
		parts[i] = fmt.Sprint(st)
	}
	return "{" + strings.Join(parts, ",") + "}:" + fmt.Sprint(sh.Size)
}
