#!/usr/bin/env bash
# Builds, once, what a real Kubernetes node needs for gpuslice's real-node
# tests (internal/k8s/nodetest) and the sandbox (scripts/sandbox.sh), and
# prints the directory holding it:
#
#   ${GPUSLICE_CACHE:-$HOME/.cache/gpuslice}/node/$K8S_VERSION-containerd-v2.4.2/
#     kubelet                   k8s.io/kubernetes/cmd/kubelet $K8S_VERSION (test/controlplane)
#     kubectl                   k8s.io/kubernetes/cmd/kubectl $K8S_VERSION (for the sandbox's users)
#     containerd                github.com/containerd/containerd/v2 v2.4.2 (test/noderuntime)
#     containerd-shim-runc-v2
#     ctr
#
# and installs, with apt-get when missing, Debian's runc, CNI plugins
# (containernetworking-plugins: bridge, host-local, loopback, portmap),
# busybox-static (the test workloads' image) and iproute2.
#
# Everything else (etcd, kube-apiserver, kube-scheduler,
# kube-controller-manager) comes from scripts/controlplane.sh, which this
# script runs first: the kubelet and kubectl build in the same tools module,
# so they reuse its compiled packages. containerd builds with CGO_ENABLED=0
# (no C toolchain). Only what is missing is built; a lock stops two runs
# building at once.
#
#   dir=$(scripts/realnode.sh)            # progress goes to stderr
#   GPUSLICE_NODE_BIN=$dir go test ./internal/k8s/nodetest/
#
# The Kubernetes release is the first argument, else $K8S_VERSION, default
# v1.36.3, as for scripts/controlplane.sh (v1.37.2 builds from
# test/controlplane/go.1.37.mod); the tests pick it with
# GPUSLICE_K8S_VERSION. scripts/test.sh runs the real node on v1.36.3 only.
#
# Environment:
#   GPUSLICE_CACHE     cache root (default $HOME/.cache/gpuslice)
#   GPUSLICE_NO_APT=1  never run apt-get (fail if a package is missing)
#   LOCK_TIMEOUT       seconds to wait for another run's lock (default 3600)
set -euo pipefail

# Keep in sync with internal/k8s/nodetest (ContainerdVersion),
# test/noderuntime/go.mod and scripts/controlplane.sh.
K8S_VERSION="${1:-${K8S_VERSION:-v1.36.3}}"
CONTAINERD_VERSION=v2.4.2

root="$(cd "$(dirname "$0")/.." && pwd)"
k8stools="$root/test/controlplane"
rttools="$root/test/noderuntime"
cache="${GPUSLICE_CACHE:-$HOME/.cache/gpuslice}"
dir="$cache/node/$K8S_VERSION-containerd-$CONTAINERD_VERSION"

log() { echo "realnode.sh: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

command -v go >/dev/null 2>&1 || die "go is not on PATH (Go 1.26 is needed)"
command -v flock >/dev/null 2>&1 || die "flock is not on PATH (util-linux)"
grep -q "github.com/containerd/containerd/v2 $CONTAINERD_VERSION\$" "$rttools/go.mod" ||
  die "$rttools/go.mod does not require containerd $CONTAINERD_VERSION; update CONTAINERD_VERSION in $0"

# Debian packages: the runtime's low-level parts and the test image.
need=()
for pkg in runc containernetworking-plugins busybox-static iproute2; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  [ "${GPUSLICE_NO_APT:-}" = 1 ] && die "missing Debian packages: ${need[*]} (GPUSLICE_NO_APT=1)"
  [ "$(id -u)" = 0 ] || die "missing Debian packages: ${need[*]}; run as root or: apt-get install ${need[*]}"
  log "installing Debian packages: ${need[*]}"
  exec 8>/tmp/gpuslice-apt.lock
  flock -w "${LOCK_TIMEOUT:-3600}" 8 || die "timed out waiting for /tmp/gpuslice-apt.lock"
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >&2; then
    DEBIAN_FRONTEND=noninteractive apt-get update -q >&2 || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >&2 ||
      die "apt-get install ${need[*]} failed"
  fi
  exec 8>&-
fi

# The control plane first: the kubelet reuses its build.
"$root/scripts/controlplane.sh" "$K8S_VERSION" >/dev/null
# controlplane.sh checked the release; its modfile builds the kubelet too.
minor="${K8S_VERSION#v1.}"
minor="${minor%%.*}"
k8smodfile=go.mod
grep -q "k8s.io/kubernetes $K8S_VERSION\$" "$k8stools/go.mod" || k8smodfile="go.1.$minor.mod"

mkdir -p "$dir" || die "cannot create $dir"
complete() {
  local f
  for f in kubelet kubectl containerd containerd-shim-runc-v2 ctr; do
    [ -x "$dir/$f" ] || return 1
  done
}
if complete; then
  echo "$dir"
  exit 0
fi

exec 9>"$dir/.lock"
if ! flock -n 9; then
  log "another run is building in $dir; waiting for its lock"
  flock -w "${LOCK_TIMEOUT:-3600}" 9 || die "timed out waiting for the lock on $dir/.lock"
fi
if complete; then
  echo "$dir"
  exit 0
fi

work="$(mktemp -d "$dir/.build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
export GOWORK=off CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=readonly"

gobuild() { # gobuild MODULE_DIR NAME PACKAGE [go build flags...]
  local mod="$1" name="$2" pkg="$3"
  shift 3
  log "building $name ($pkg); this can take several minutes"
  local start=$SECONDS
  (cd "$mod" && go build -trimpath "$@" -o "$work/$name" "$pkg") ||
    die "building $name failed (go build $pkg in $mod); see the compiler output above"
  mv -f "$work/$name" "$dir/$name" || die "cannot install $dir/$name"
  log "built $dir/$name in $((SECONDS - start)) s"
}

k8sflags() {
  local v=k8s.io/component-base/version major="${K8S_VERSION#v}" minor
  minor="${major#*.}"
  major="${major%%.*}"
  minor="${minor%%.*}"
  echo "-s -w -X $v.gitVersion=$K8S_VERSION -X $v.gitMajor=$major -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
}
[ -x "$dir/kubelet" ] || gobuild "$k8stools" kubelet k8s.io/kubernetes/cmd/kubelet -modfile="$k8smodfile" -ldflags "$(k8sflags)"
[ -x "$dir/kubectl" ] || gobuild "$k8stools" kubectl k8s.io/kubernetes/cmd/kubectl -modfile="$k8smodfile" -ldflags "$(k8sflags)"

ctrflags() {
  echo "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION -X github.com/containerd/containerd/v2/version.Revision=gpuslice"
}
[ -x "$dir/containerd" ] || gobuild "$rttools" containerd github.com/containerd/containerd/v2/cmd/containerd -ldflags "$(ctrflags)"
[ -x "$dir/containerd-shim-runc-v2" ] ||
  gobuild "$rttools" containerd-shim-runc-v2 github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 -ldflags "$(ctrflags)"
[ -x "$dir/ctr" ] || gobuild "$rttools" ctr github.com/containerd/containerd/v2/cmd/ctr -ldflags "$(ctrflags)"

complete || die "build finished but $dir is incomplete"
log "ready: $dir"
echo "$dir"
