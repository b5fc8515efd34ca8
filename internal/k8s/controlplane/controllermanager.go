package controlplane

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Controller names of kube-controller-manager v1.36
// (cmd/kube-controller-manager/names in k8s.io/kubernetes v1.36.3), for
// ControllerManagerOptions.Controllers.
const (
	// DeviceTaintEvictionController deletes the pods whose allocated
	// devices carry a NoExecute device taint they do not tolerate.
	DeviceTaintEvictionController = "device-taint-eviction-controller"
	// ResourceClaimController creates a pod's ResourceClaims from its
	// ResourceClaimTemplates and releases (deallocates) claims whose pods
	// are gone.
	ResourceClaimController  = "resourceclaim-controller"
	ReplicaSetController     = "replicaset-controller"
	DeploymentController     = "deployment-controller"
	GarbageCollectorCtrl     = "garbage-collector-controller"
	PodGarbageCollectorCtrl  = "pod-garbage-collector-controller"
	ServiceAccountController = "serviceaccount-controller"
)

// DefaultControllers are what StartControllerManager runs when the options
// name none: device-taint eviction and what replaces an evicted pod of a
// Deployment or ReplicaSet with claims from a template.
var DefaultControllers = []string{DeviceTaintEvictionController, ResourceClaimController,
	ReplicaSetController, DeploymentController, GarbageCollectorCtrl}

// ControllerManagerOptions configure StartControllerManager.
type ControllerManagerOptions struct {
	// Controllers are the controllers to run (names as above); empty
	// means DefaultControllers. Only these run: no node lifecycle, no
	// service accounts (Server.EnsureNamespace makes those).
	Controllers []string
	// FeatureGates is the --feature-gates value; empty means
	// FeatureGates, the API server's.
	FeatureGates string
	// Args are further kube-controller-manager flags, appended last.
	Args []string
}

// ControllerManager is a running stock kube-controller-manager bound to
// one Server.
type ControllerManager struct {
	// LogFile holds its stdout and stderr.
	LogFile string

	proc *process
	once sync.Once
}

// LaunchControllerManager is StartControllerManager without a test: its
// files go under tmp and the caller stops it.
func LaunchControllerManager(ctx context.Context, s *Server, tmp string, opts ControllerManagerOptions) (*ControllerManager, error) {
	return startControllerManager(ctx, s, filepath.Join(s.BinDir, "kube-controller-manager"), tmp, opts)
}

// Stop terminates the controller manager and waits for it; later calls do
// nothing.
func (cm *ControllerManager) Stop() { cm.once.Do(cm.proc.stop) }

// Tail returns up to the last n bytes of its log.
func (cm *ControllerManager) Tail(n int64) string { return cm.proc.tail(n) }

func startControllerManager(ctx context.Context, s *Server, bin, tmp string, opts ControllerManagerOptions) (*ControllerManager, error) {
	kubeconfig := filepath.Join(tmp, "controller-manager.kubeconfig")
	if err := writeKubeconfig(kubeconfig, s); err != nil {
		return nil, err
	}
	controllers := opts.Controllers
	if len(controllers) == 0 {
		controllers = DefaultControllers
	}
	for _, c := range controllers {
		if c == "" || strings.ContainsAny(c, ", ") {
			return nil, fmt.Errorf("ControllerManagerOptions.Controllers: %q is not a controller name (e.g. %s)", c, DeviceTaintEvictionController)
		}
	}
	gates := opts.FeatureGates
	if gates == "" {
		gates = s.Options.FeatureGates()
	}
	proc, logFile, err := startComponent(ctx, "kube-controller-manager", bin, tmp, "/healthz", 90*time.Second, func(port int) []string {
		return append([]string{
			"--kubeconfig=" + kubeconfig,
			"--authentication-kubeconfig=" + kubeconfig,
			"--authorization-kubeconfig=" + kubeconfig,
			"--authentication-skip-lookup=true",
			"--leader-elect=false",
			"--controllers=" + strings.Join(controllers, ","),
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(port),
			"--cert-dir=" + filepath.Join(tmp, "controller-manager-certs"),
			"--feature-gates=" + gates,
			"--kube-api-qps=200",
			"--kube-api-burst=400",
			"--profiling=false",
			"--v=2",
		}, opts.Args...)
	})
	if proc == nil {
		return nil, err
	}
	return &ControllerManager{LogFile: logFile, proc: proc}, err
}
