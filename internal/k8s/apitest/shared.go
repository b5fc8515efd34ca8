package apitest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"

	"github.com/gpuslice/gpuslice/internal/k8s/controlplane"
)

// One control plane per test package: Shared starts it on first use and
// Main stops it when the package's tests end. Tests on a shared control
// plane keep their objects apart (their own namespaces, node names and
// claim names) and may run with t.Parallel; a test that changes
// cluster-wide state (DeviceClasses it deletes, feature gates, a stopped
// API server) starts its own with Start instead.

var shared struct {
	mu         sync.Mutex
	servers    map[string]*sharedServer
	schedulers map[string]*sharedScheduler
}

type sharedScheduler struct {
	sched *Scheduler
	dir   string
	err   error
}

type sharedServer struct {
	srv  *Server
	stop func() string
	dir  string
	err  error
}

// Main runs the package's tests and then stops every control plane that
// Shared or SharedWith started. Use it as the package's TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(apitest.Main(m)) }
func Main(m *testing.M) int {
	mainStarted = true
	code := m.Run()
	StopShared()
	return code
}

// RaiseParallel sets -test.parallel to n (at least GOMAXPROCS) unless
// the command line gave it: tests on a shared control plane spend most of
// their time waiting for the API server and the scheduler, so more of
// them than there are CPUs may run at once. Call it in TestMain before
// Main; it parses the flags.
func RaiseParallel(n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		_ = flag.Set("test.parallel", fmt.Sprint(max(n, runtime.GOMAXPROCS(0))))
	}
}

// StopShared stops the shared control planes now (Main calls it; a
// TestMain that does more than Main may call it itself).
func StopShared() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	// Schedulers first: one whose API server is gone keeps retrying.
	for k, s := range shared.schedulers {
		if s.sched != nil {
			s.sched.Stop()
		}
		os.RemoveAll(s.dir)
		delete(shared.schedulers, k)
	}
	for k, s := range shared.servers {
		if s.stop != nil {
			logs := s.stop()
			if s.err != nil {
				fmt.Fprintln(os.Stderr, logs)
			}
		}
		os.RemoveAll(s.dir)
		delete(shared.servers, k)
	}
}

// Shared returns the test package's one control plane with default
// Options, starting it on first use (it skips or fails like Start when the
// binaries are not built). The package must stop it with Main in its
// TestMain; without one the processes end with the test binary's process
// group only by chance, so SharedWith fails the test instead.
func Shared(t testing.TB) *Server {
	t.Helper()
	return SharedWith(t, Options{})
}

// SharedWith is Shared for one set of options: tests asking for equal
// options share one control plane.
func SharedWith(t testing.TB, opts Options) *Server {
	t.Helper()
	if !mainRunning() {
		t.Fatal("apitest: Shared needs the package's TestMain to call apitest.Main (it stops the control plane)")
	}
	dir := BinDir()
	if opts.Version != "" && os.Getenv(EnvBinDir) == "" {
		dir = BinDirFor(opts.Version)
	}
	SkipUnlessBuilt(t, dir)
	key := fmt.Sprintf("%s|%#v", dir, opts)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.servers == nil {
		shared.servers = map[string]*sharedServer{}
	}
	s := shared.servers[key]
	if s == nil {
		s = &sharedServer{}
		s.dir, s.err = os.MkdirTemp("", "apitest-shared-")
		if s.err == nil {
			s.srv, s.stop, s.err = Launch(context.Background(), dir, s.dir, opts)
		}
		shared.servers[key] = s
	}
	if s.err != nil {
		t.Fatalf("apitest: shared control plane: %v", s.err)
	}
	return s.srv
}

// SharedScheduler returns the scheduler of srv (a Shared one) started
// with opts, starting it on first use; tests asking for equal options on
// one Server share it, and Main stops it. Its profiles' schedulerNames
// must be the sharing tests' alone: a test that restarts its scheduler,
// or needs other plugin arguments, starts its own with StartScheduler and
// a schedulerName of its own.
func SharedScheduler(t testing.TB, srv *Server, opts SchedulerOptions) *Scheduler {
	t.Helper()
	if !mainRunning() {
		t.Fatal("apitest: SharedScheduler needs the package's TestMain to call apitest.Main (it stops the scheduler)")
	}
	key := fmt.Sprintf("%p|%#v", srv, opts)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.schedulers == nil {
		shared.schedulers = map[string]*sharedScheduler{}
	}
	s := shared.schedulers[key]
	if s == nil {
		s = &sharedScheduler{}
		s.dir, s.err = os.MkdirTemp("", "apitest-scheduler-")
		if s.err == nil {
			s.sched, s.err = controlplane.LaunchScheduler(context.Background(), srv, s.dir, opts)
		}
		shared.schedulers[key] = s
	}
	if s.err != nil {
		if s.sched != nil {
			t.Logf("scheduler log (tail):\n%s", s.sched.Tail(6000))
		}
		t.Fatalf("apitest: shared scheduler: %v", s.err)
	}
	return s.sched
}

// mainRunning reports whether Main is running the tests; set by Main.
var mainStarted bool

func mainRunning() bool { return mainStarted }
