#!/usr/bin/env bash
# Builds gpuslice-scheduler (cmd/gpuslice-scheduler, a module of its own
# that imports k8s.io/kubernetes) from this checkout for one Kubernetes
# release and prints the binary's path:
#
#   ${GPUSLICE_CACHE:-$HOME/.cache/gpuslice}/gpuslice-scheduler/$K8S_VERSION/gpuslice-scheduler
#
# The release is the first argument, else $K8S_VERSION, default v1.36.3
# (as scripts/controlplane.sh): v1.36.3 builds from cmd/gpuslice-scheduler/go.mod,
# v1.37.2 from go.1.37.mod (go build -modfile; go.1.37.sum beside it).
#
# The binary is rebuilt on every run: the Go build cache makes a run with
# nothing changed take seconds. The module selects the control plane tools
# module's version of every module kube-scheduler compiles (the exclude
# block in its go.mod), and both scripts build with the same flags
# (-trimpath, CGO_ENABLED=0), so after scripts/controlplane.sh the first
# build compiles only gpuslice's packages and links (seconds); with a cold
# Go build cache it compiles kube-scheduler (minutes on 2 cores), which the
# control plane's build then reuses. A lock stops two runs writing the
# binary at once. internal/k8s/apitest.GpusliceSchedulerBinary finds it.
#
#   bin=$(scripts/gpuslice-scheduler.sh)   # progress goes to stderr
#   bin=$(K8S_VERSION=v1.37.2 scripts/gpuslice-scheduler.sh)
set -euo pipefail

K8S_VERSION="${1:-${K8S_VERSION:-v1.36.3}}"
root="$(cd "$(dirname "$0")/.." && pwd)"
mod="$root/cmd/gpuslice-scheduler"
cache="${GPUSLICE_CACHE:-$HOME/.cache/gpuslice}"
dir="$cache/gpuslice-scheduler/$K8S_VERSION"

log() { echo "gpuslice-scheduler.sh: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

command -v go >/dev/null 2>&1 || die "go is not on PATH (Go 1.26 is needed)"
command -v flock >/dev/null 2>&1 || die "flock is not on PATH (util-linux)"
[ -f "$mod/go.mod" ] || die "$mod/go.mod is missing"
case "$K8S_VERSION" in
  v1.[0-9]*.[0-9]*) ;;
  *) die "K8S_VERSION '$K8S_VERSION' is not a Kubernetes release like v1.36.3 or v1.37.2" ;;
esac
major=1
minor="${K8S_VERSION#v1.}"
minor="${minor%%.*}"
modfile=""
for m in go.mod "go.1.$minor.mod"; do
  if [ -f "$mod/$m" ] && grep -q "k8s.io/kubernetes $K8S_VERSION\$" "$mod/$m"; then
    modfile="$m"
    break
  fi
done
[ -n "$modfile" ] || die "neither $mod/go.mod nor $mod/go.1.$minor.mod requires k8s.io/kubernetes $K8S_VERSION" \
  "(supported: $(cd "$mod" && grep -ho 'k8s.io/kubernetes v[0-9.]*$' go.mod go.1.*.mod 2>/dev/null | cut -d' ' -f2 | paste -sd' '))"
mkdir -p "$dir" || die "cannot create $dir"

exec 9>"$dir/.lock"
flock -w "${LOCK_TIMEOUT:-3600}" 9 || die "timed out waiting for the lock on $dir/.lock"

# The version stamp is the Kubernetes release the scheduler is built from,
# so --version and the API server's skew checks read $K8S_VERSION.
v=k8s.io/component-base/version
start=$SECONDS
log "building $mod for $K8S_VERSION ($modfile; seconds after scripts/controlplane.sh; minutes with a cold Go build cache)"
(cd "$mod" && GOWORK=off CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=readonly" go build -modfile="$modfile" -trimpath \
  -ldflags "-s -w -X $v.gitVersion=$K8S_VERSION -X $v.gitMajor=$major -X $v.gitMinor=$minor -X $v.gitTreeState=clean" \
  -o "$dir/gpuslice-scheduler.new" .) || die "go build -modfile=$modfile failed in $mod"
mv -f "$dir/gpuslice-scheduler.new" "$dir/gpuslice-scheduler"
log "built $dir/gpuslice-scheduler in $((SECONDS - start)) s"
echo "$dir/gpuslice-scheduler"
