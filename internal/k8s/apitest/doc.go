// Package apitest runs a real kube-apiserver, backed by a real etcd, for
// integration tests that need the Kubernetes API server's own validation:
// OpenAPI schemas, strict field validation, CRD schemas and CEL rules,
// admission, and every served version of resource.k8s.io.
//
// The control plane is internal/k8s/controlplane's (which binaries, which
// release, how they start); apitest ties it to tests and re-exports its
// names, so a test needs one import.
//
// When the binaries are missing, [Start] skips the test, so `go test ./...`
// passes on a machine that never built them. With GPUSLICE_REQUIRE_APISERVER=1
// (as in CI) it fails the test instead, so a broken build cannot pass
// silently.
//
// [Shared] is one control plane per test package instead (the package's
// TestMain calls [Main], which stops it), and [SharedScheduler] one
// scheduler per options on it. [NewCluster] is a test's part of either:
// its namespaces, gpuslice's DeviceClasses, ready Nodes with the
// ResourceSlices internal/k8s/dradriver publishes ([Cluster.AddNode]),
// pods with a claim each ([Cluster.CreateClaimPod]) and waits for their
// binds ([Cluster.WaitBound], [Cluster.WaitUnschedulable]). With
// [ClusterOptions.Group] its nodes carry [GroupLabel] and its pods select
// it, so tests sharing one control plane and scheduler stay on their own
// nodes; a test whose scheduler must see no other test's nodes (a message
// counting them, a decision over every node) starts its own with Start.
//
// Each [Start] launches its own etcd and kube-apiserver on free loopback
// ports with state in the test's temporary directory, authenticates with a
// generated client certificate in system:masters (authorization mode RBAC),
// serves resource.k8s.io v1, v1beta1, v1beta2 and v1alpha3 with the DRA
// feature gates on, installs the Karpenter CRDs, and stops both processes
// (their whole process groups) when the test ends. Starting takes a few
// seconds, so tests that can share one server should use subtests.
//
//	s := apitest.Start(t)
//	for _, err := range s.DryRun(ctx, manifests) {
//		t.Error(err)
//	}
//
// [StartScheduler] adds the stock kube-scheduler of the same version (built
// beside them) with the API server's DRA feature gates and leader election
// off, optionally with a KubeSchedulerConfiguration or profiles of the
// test's own. [StartControllerManager] adds kube-controller-manager with
// only the controllers a test names (default: device-taint eviction,
// resourceclaim, replicaset, deployment, garbage collector), for tests of
// what the stock controllers do with a driver's device taints; it skips
// when an older build lacks the binary. No kubelet runs: a test creates Nodes
// with [Server.CreateReadyNode] (capacity as a device plugin would
// advertise), ResourceSlices as a DRA driver would publish, and Pods
// itself, and reads back the bindings and claim allocations. The
// scheduling tests render every example and check that the scheduler
// places the pods as the plan does.
package apitest
