#!/usr/bin/env bash
# Builds gpuslice-scheduler (cmd/gpuslice-scheduler, a module of its own
# that imports k8s.io/kubernetes v1.36.3) from this checkout and prints
# the binary's path:
#
#   ${GPUSLICE_CACHE:-$HOME/.cache/gpuslice}/gpuslice-scheduler/gpuslice-scheduler
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
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
mod="$root/cmd/gpuslice-scheduler"
cache="${GPUSLICE_CACHE:-$HOME/.cache/gpuslice}"
dir="$cache/gpuslice-scheduler"

log() { echo "gpuslice-scheduler.sh: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

command -v go >/dev/null 2>&1 || die "go is not on PATH (Go 1.26 is needed)"
command -v flock >/dev/null 2>&1 || die "flock is not on PATH (util-linux)"
[ -f "$mod/go.mod" ] || die "$mod/go.mod is missing"
mkdir -p "$dir" || die "cannot create $dir"

exec 9>"$dir/.lock"
flock -w "${LOCK_TIMEOUT:-3600}" 9 || die "timed out waiting for the lock on $dir/.lock"

# The version stamp is the Kubernetes release the scheduler is built from,
# so --version and the API server's skew checks read v1.36.3.
v=k8s.io/component-base/version
start=$SECONDS
log "building $mod (seconds after scripts/controlplane.sh; minutes with a cold Go build cache)"
(cd "$mod" && GOWORK=off CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=readonly" go build -trimpath \
  -ldflags "-s -w -X $v.gitVersion=v1.36.3 -X $v.gitMajor=1 -X $v.gitMinor=36 -X $v.gitTreeState=clean" \
  -o "$dir/gpuslice-scheduler.new" .) || die "go build failed in $mod"
mv -f "$dir/gpuslice-scheduler.new" "$dir/gpuslice-scheduler"
log "built $dir/gpuslice-scheduler in $((SECONDS - start)) s"
echo "$dir/gpuslice-scheduler"
