package apitest

import "github.com/gpuslice/gpuslice/internal/k8s/controlplane"

// The control plane itself (launching etcd, kube-apiserver, kube-scheduler
// and kube-controller-manager, their versions, certificates and dry runs)
// lives in internal/k8s/controlplane, which does not import testing, so
// that `gpuslice bench scheduler` can start one without linking a test
// kit. Tests need one import: these names are the control plane's.

type (
	Server                   = controlplane.Server
	Options                  = controlplane.Options
	Scheduler                = controlplane.Scheduler
	SchedulerOptions         = controlplane.SchedulerOptions
	ControllerManager        = controlplane.ControllerManager
	ControllerManagerOptions = controlplane.ControllerManagerOptions
	Version                  = controlplane.Version
	ObjectError              = controlplane.ObjectError
)

const (
	EnvBinDir                     = controlplane.EnvBinDir
	EnvCache                      = controlplane.EnvCache
	EnvRequire                    = controlplane.EnvRequire
	EnvVersion                    = controlplane.EnvVersion
	DefaultKubernetesVersion      = controlplane.DefaultKubernetesVersion
	FieldManager                  = controlplane.FieldManager
	DeviceTaintEvictionController = controlplane.DeviceTaintEvictionController
	ResourceClaimController       = controlplane.ResourceClaimController
	ReplicaSetController          = controlplane.ReplicaSetController
	DeploymentController          = controlplane.DeploymentController
	GarbageCollectorCtrl          = controlplane.GarbageCollectorCtrl
	PodGarbageCollectorCtrl       = controlplane.PodGarbageCollectorCtrl
	ServiceAccountController      = controlplane.ServiceAccountController
)

var (
	DefaultControllers      = controlplane.DefaultControllers
	SupportedVersions       = controlplane.SupportedVersions
	BinDir                  = controlplane.BinDir
	BinDirFor               = controlplane.BinDirFor
	Built                   = controlplane.Built
	Launch                  = controlplane.Launch
	LaunchScheduler         = controlplane.LaunchScheduler
	LaunchControllerManager = controlplane.LaunchControllerManager
	TailFile                = controlplane.TailFile
	ParseVersion            = controlplane.ParseVersion
	SelectedVersion         = controlplane.SelectedVersion
	SelectedVersionName     = controlplane.SelectedVersionName
	FeatureGatesFor         = controlplane.FeatureGatesFor
)
