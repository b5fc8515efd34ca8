#!/usr/bin/env bash
# Builds, once, a real Kubernetes control plane for gpuslice's integration
# tests (internal/k8s/apitest) and prints the directory holding it:
#
#   ${GPUSLICE_CACHE:-$HOME/.cache/gpuslice}/k8s/$K8S_VERSION/
#     etcd                          go.etcd.io/etcd/server/v3 (the version Kubernetes pins: 3.6.8 for v1.36, 3.7.0 for v1.37)
#     kube-apiserver                k8s.io/kubernetes/cmd/kube-apiserver $K8S_VERSION
#     kube-scheduler                k8s.io/kubernetes/cmd/kube-scheduler $K8S_VERSION
#     kube-controller-manager       k8s.io/kubernetes/cmd/kube-controller-manager $K8S_VERSION
#                                   (apitest.StartControllerManager: device-taint
#                                   eviction, ResourceClaim templates, ReplicaSets)
#     karpenter.sh_nodepools.yaml   CRDs copied from the Go module sigs.k8s.io/karpenter
#     karpenter.sh_nodeclaims.yaml
#
# Kubernetes versions (the first argument, else $K8S_VERSION, default
# v1.36.3; keep the default in sync with internal/k8s/apitest):
#   v1.36.3   test/controlplane/go.mod       (etcd v3.6.8)
#   v1.37.2   test/controlplane/go.1.37.mod  (etcd v3.7.0)
# Each version has its own go.mod for the one tools module (go build
# -modfile=...), with its own go.sum beside it (go.1.37.sum): the same
# tools.go pins the same commands, and only the build lists differ. The
# version chosen is the one the modfile requires; any other is refused.
#
#   K8S_VERSION=v1.37.2 scripts/controlplane.sh   # or: scripts/controlplane.sh v1.37.2
#
# Everything comes from the Go module proxy; the build runs inside the
# separate tools module test/controlplane, so the main module's go.mod and
# go.sum are never touched. Only what is missing is built: a second run
# returns at once. A lock stops two runs building at the same time.
#
# A cold kube-apiserver build takes several minutes and ~2 GB of memory on
# 2 cores (and 3-4 GB of Go build cache); the binaries are then cached.
#
#   dir=$(scripts/controlplane.sh)        # progress goes to stderr
#   GPUSLICE_K8S_BIN=$dir go test ./internal/k8s/apitest/
#
# Environment:
#   GPUSLICE_CACHE     cache root (default $HOME/.cache/gpuslice)
#   KARPENTER_VERSION  sigs.k8s.io/karpenter module to copy the CRDs from
#                      (default v1.14.1: v1.14.3 and v1.15.0 need Go >= 1.26.9)
#   LOCK_TIMEOUT       seconds to wait for another run's lock (default 3600)
set -euo pipefail

# The default: keep in sync with internal/k8s/apitest (DefaultKubernetesVersion)
# and test/controlplane/go.mod.
K8S_VERSION="${1:-${K8S_VERSION:-v1.36.3}}"
KARPENTER_VERSION="${KARPENTER_VERSION:-v1.14.1}"

root="$(cd "$(dirname "$0")/.." && pwd)"
tools="$root/test/controlplane"
cache="${GPUSLICE_CACHE:-$HOME/.cache/gpuslice}"
dir="$cache/k8s/$K8S_VERSION"

log() { echo "controlplane.sh: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

command -v go >/dev/null 2>&1 || die "go is not on PATH (Go 1.26 is needed)"
command -v flock >/dev/null 2>&1 || die "flock is not on PATH (util-linux)"
[ -f "$tools/go.mod" ] || die "$tools/go.mod is missing"
case "$K8S_VERSION" in
  v1.[0-9]*.[0-9]*) ;;
  *) die "K8S_VERSION '$K8S_VERSION' is not a Kubernetes release like v1.36.3 or v1.37.2" ;;
esac
# go.mod holds the default version; go.1.MINOR.mod each other one.
minor="${K8S_VERSION#v1.}"
minor="${minor%%.*}"
modfile=""
for m in go.mod "go.1.$minor.mod"; do
  if [ -f "$tools/$m" ] && grep -q "k8s.io/kubernetes $K8S_VERSION\$" "$tools/$m"; then
    modfile="$m"
    break
  fi
done
[ -n "$modfile" ] || die "neither $tools/go.mod nor $tools/go.1.$minor.mod requires k8s.io/kubernetes $K8S_VERSION" \
  "(supported: $(cd "$tools" && grep -ho 'k8s.io/kubernetes v[0-9.]*$' go.mod go.1.*.mod 2>/dev/null | cut -d' ' -f2 | paste -sd' '))"

mkdir -p "$dir" || die "cannot create $dir"

complete() {
  [ -x "$dir/etcd" ] && [ -x "$dir/kube-apiserver" ] && [ -x "$dir/kube-scheduler" ] &&
    [ -x "$dir/kube-controller-manager" ] &&
    [ -s "$dir/karpenter.sh_nodepools.yaml" ] && [ -s "$dir/karpenter.sh_nodeclaims.yaml" ]
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
if complete; then # the other run finished it
  echo "$dir"
  exit 0
fi

work="$(mktemp -d "$dir/.build.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# The tools module must build from its own go.mod/go.sum only: no workspace,
# no inherited -mod flags, no cgo (static binaries, no C toolchain needed).
export GOWORK=off CGO_ENABLED=0 GOFLAGS="-buildvcs=false"

gobuild() { # gobuild NAME PACKAGE [go build flags...]
  local name="$1" pkg="$2"
  shift 2
  log "building $name ($pkg); this can take several minutes"
  local start=$SECONDS
  (cd "$tools" && go build -modfile="$modfile" -trimpath "$@" -o "$work/$name" "$pkg") ||
    die "building $name failed (go build -modfile=$modfile $pkg in $tools); see the compiler output above"
  mv -f "$work/$name" "$dir/$name" || die "cannot install $dir/$name"
  log "built $dir/$name in $((SECONDS - start)) s"
}

if [ ! -x "$dir/etcd" ]; then
  gobuild etcd go.etcd.io/etcd/server/v3 -ldflags "-s -w"
fi

buildk8s() { # buildk8s NAME: k8s.io/kubernetes/cmd/NAME stamped with K8S_VERSION
  local name="$1" v=k8s.io/component-base/version
  local major="${K8S_VERSION#v}"
  local minor="${major#*.}"
  major="${major%%.*}"
  minor="${minor%%.*}"
  gobuild "$name" "k8s.io/kubernetes/cmd/$name" -ldflags \
    "-s -w -X $v.gitVersion=$K8S_VERSION -X $v.gitMajor=$major -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
  local got
  got="$("$dir/$name" --version 2>&1 || true)"
  case "$got" in
    *"$K8S_VERSION"*) ;;
    *)
      rm -f "$dir/$name"
      die "built $name reports '$got', want $K8S_VERSION"
      ;;
  esac
}

if [ ! -x "$dir/kube-apiserver" ]; then
  buildk8s kube-apiserver
fi

# The stock scheduler: render tests bind rendered pods and allocate rendered
# DRA claims with it, as a cluster would.
if [ ! -x "$dir/kube-scheduler" ]; then
  buildk8s kube-scheduler
fi

# The stock controller manager: its device-taint-eviction controller evicts
# the pods of claims on devices the DRA driver tainted NoExecute, and its
# resourceclaim and replicaset controllers replace them.
if [ ! -x "$dir/kube-controller-manager" ]; then
  buildk8s kube-controller-manager
fi

if [ ! -s "$dir/karpenter.sh_nodepools.yaml" ] || [ ! -s "$dir/karpenter.sh_nodeclaims.yaml" ]; then
  log "fetching sigs.k8s.io/karpenter@$KARPENTER_VERSION for its CRDs"
  # Run outside any module so nothing's go.mod/go.sum changes; the download is
  # still checked against the checksum database.
  json="$(cd "$work" && go mod download -json "sigs.k8s.io/karpenter@$KARPENTER_VERSION" 2>&1)" ||
    die "go mod download sigs.k8s.io/karpenter@$KARPENTER_VERSION failed: $json"
  src="$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
  [ -n "$src" ] && [ -d "$src/pkg/apis/crds" ] ||
    die "sigs.k8s.io/karpenter@$KARPENTER_VERSION has no pkg/apis/crds: $json"
  for f in karpenter.sh_nodepools.yaml karpenter.sh_nodeclaims.yaml; do
    [ -s "$src/pkg/apis/crds/$f" ] || die "$src/pkg/apis/crds/$f is missing"
    install -m 0644 "$src/pkg/apis/crds/$f" "$work/$f" && mv -f "$work/$f" "$dir/$f" ||
      die "cannot install $dir/$f"
  done
  echo "$KARPENTER_VERSION" >"$dir/karpenter.version"
fi

complete || die "build finished but $dir is incomplete"
log "ready: $dir"
echo "$dir"
