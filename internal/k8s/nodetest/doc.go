// Package nodetest runs a real one-node Kubernetes cluster for gpuslice's
// end-to-end tests and sandbox: the control plane of internal/k8s/apitest
// (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) and a real
// node — kubelet v1.36.3 and containerd v2 with Debian's runc and CNI
// plugins — on which pods actually start, with CDI devices injected by
// containerd.
//
// The node lives in namespaces of its own: a network namespace joined to the
// host by a veth pair (so its kubelet and pods have a real IP and the
// standard ports are free), and a private mount namespace in which /run,
// /var/lib, /var/log and /dev are its own (/dev is an overlay holding fake
// /dev/nvidia* nodes, which simulated GPUs' CDI specs name). Its pods go in
// a cgroup subtree of their own. Stop (or the test's cleanup) kills every
// process, removes the cgroups, the veth and the namespace; a later Start
// sweeps what a killed test left behind in the same slot.
//
// The binaries come from scripts/realnode.sh (kubelet, containerd, its runc
// shim, ctr) and scripts/controlplane.sh; images are OCI archives that the
// node imports into containerd before its kubelet starts (pods use
// imagePullPolicy Never or IfNotPresent: there is no registry).
//
// Pods reach the API server without kube-proxy: the API server listens on
// port 443 of the first address of the service range, which is the
// "kubernetes" Service's ClusterIP and is assigned to the host end of the
// veth. The API server reaches webhook pods by their endpoints
// (--enable-aggregator-routing) over a route to the node's pod range. Other
// ClusterIP Services do not route: nothing in gpuslice's chart needs them.
//
// It needs root with CAP_SYS_ADMIN, CAP_NET_ADMIN and CAP_MKNOD (a
// privileged container or VM); elsewhere Start skips the test, naming what
// is missing, or fails it when GPUSLICE_REQUIRE_NODE=1.
package nodetest
