#!/usr/bin/env bash
# Runs every check gpuslice has: formatting, vet, all tests, and a short
# coverage-guided run of every fuzz target. This is the README's test
# command and exactly what .ci/run calls. No GPU is needed.
#
#   FUZZTIME=30s ./scripts/test.sh   # fuzz longer (default 5000 inputs per target; 0 skips)
#   GPUSLICE_SKIP_K8S_137=1 ./scripts/test.sh   # skip the Kubernetes v1.37.2 phase
set -euo pipefail
cd "$(dirname "$0")/.."

# A count, not a duration, by default: a duration can end while a worker
# still runs an input, which Go reports as "context deadline exceeded".
fuzztime="${FUZZTIME:-5000x}"

# Each phase says what it does when it starts and how long it took when it
# ends; the total comes last. SECONDS is bash's own wall-clock counter.
phase_name=""
phase_start=0
phase() { # phase "NAME: what it does" (ends the previous phase)
  phase_end
  phase_name="${1%%:*}"
  phase_start=$SECONDS
  echo "== $1"
}
phase_end() {
  if [ -n "$phase_name" ]; then
    echo "   $phase_name took $((SECONDS - phase_start)) s"
  fi
  phase_name=""
}

phase "gofmt: checking formatting of every .go file"
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

# Temporary directories this run makes, removed when it ends.
tmpdirs=""
trap 'rm -rf $tmpdirs' EXIT

phase "go vet: static checks of every package"
go vet ./...

phase "gpuslice binary: go build -o gpuslice ./cmd/gpuslice (the README's build command), once for every later phase"
# Every test that runs the gpuslice binary as a process takes this one
# (GPUSLICE_BIN, read by internal/testkit.GpusliceBinary, test/consumers
# and test/helmchart) instead of building its own: the README walk's
# build line, internal/cli's signal tests, the consumers and the chart,
# in every phase. Built without -race, as those tests built it; the race
# phase's race-built code is the test binaries, which internal/cli also
# runs as serve, agent and the CLI.
bindir="$(mktemp -d /tmp/gpuslice-bin.XXXXXX)"
tmpdirs="$tmpdirs $bindir"
export GPUSLICE_BIN="$bindir/gpuslice"
go build -o "$GPUSLICE_BIN" ./cmd/gpuslice
echo "   $GPUSLICE_BIN"

phase "control plane: etcd + kube-apiserver v1.36.3 (the default release) from the Go module proxy, built once into ~/.cache/gpuslice"
# The render integration tests validate every rendered Kubernetes object
# against a real kube-apiserver. The first build takes 10-30 minutes on 2
# cores; later runs reuse the cache. GPUSLICE_SKIP_APISERVER=1 skips them.
if [ "${GPUSLICE_SKIP_APISERVER:-}" != 1 ]; then
  echo "   (a cached build returns at once; a cold one takes minutes, progress follows)"
  # controlplane.sh writes its progress to stderr, which reaches the terminal;
  # its stdout is only the directory it built, shown here.
  k8sdir=$(scripts/controlplane.sh)
  echo "   control plane in $k8sdir"
  export GPUSLICE_REQUIRE_APISERVER=1
else
  echo "   skipped (GPUSLICE_SKIP_APISERVER=1)"
fi

phase "gpuslice-scheduler: build it (cmd/gpuslice-scheduler, its own go.mod), vet its module and run its plugin's unit tests"
# kube-scheduler v1.36.3 with gpuslice's plugin; it reuses the control
# plane's compiled kube-scheduler packages, so it builds in seconds.
# internal/k8s/schedtest runs the binary against the control plane
# (GPUSLICE_SCHEDULER_BIN overrides it; skipped with the API server tests).
# vet and test with the build's flags (-trimpath, CGO_ENABLED=0) compile
# against those same packages too, instead of compiling kube-scheduler's
# tree a second time (BENCHMARKS.md, "Build times").
if [ "${GPUSLICE_SKIP_APISERVER:-}" != 1 ]; then
  GPUSLICE_SCHEDULER_BIN="$(scripts/gpuslice-scheduler.sh)"
  export GPUSLICE_SCHEDULER_BIN
  (cd cmd/gpuslice-scheduler && export GOWORK=off GOFLAGS="-mod=readonly -trimpath" CGO_ENABLED=0 &&
    go vet ./... && go test -count=1 ./...)
else
  echo "   skipped (GPUSLICE_SKIP_APISERVER=1)"
fi

phase "real node: kubelet v1.36.3 + containerd v2.4.2 (scripts/realnode.sh) and the images (scripts/images.sh), for pods on a real node"
# internal/k8s/nodetest starts a real one-node cluster in its own network
# and mount namespaces; test/helmchart/realnode installs the chart on it and
# runs GPU workloads. Needs root with CAP_SYS_ADMIN, CAP_NET_ADMIN and
# CAP_MKNOD: required (GPUSLICE_REQUIRE_NODE=1) when run as root, skipped
# otherwise. realnode.sh installs Debian's runc, CNI plugins and
# busybox-static; the binaries are cached like the control plane's.
# GPUSLICE_SKIP_NODE=1 skips all of it.
if [ "${GPUSLICE_SKIP_APISERVER:-}" != 1 ] && [ "${GPUSLICE_SKIP_NODE:-}" != 1 ] && [ "$(id -u)" = 0 ]; then
  export GPUSLICE_NODE_BIN="$(scripts/realnode.sh)"
  echo "   node binaries in $GPUSLICE_NODE_BIN"
  GPUSLICE_IMAGES_DIR="$(mktemp -d /tmp/gpuslice-images.XXXXXX)"
  export GPUSLICE_IMAGES_DIR
  tmpdirs="$tmpdirs $GPUSLICE_IMAGES_DIR"
  scripts/images.sh --test-images "$GPUSLICE_IMAGES_DIR" >/dev/null
  echo "   images in $GPUSLICE_IMAGES_DIR"
  export GPUSLICE_REQUIRE_NODE=1
else
  echo "   skipped (not root, or GPUSLICE_SKIP_NODE=1 / GPUSLICE_SKIP_APISERVER=1): the real-node tests skip"
fi

phase "chromium: a headless browser for the dashboard's end-to-end tests (Debian's chromium, installed once)"
# scripts/chromium.sh installs it with apt-get when missing and prints its
# path; the browser tests (internal/web) then fail rather than skip.
# GPUSLICE_SKIP_BROWSER=1 neither installs nor requires it (the browser
# tests then skip when no browser is there).
if [ "${GPUSLICE_SKIP_BROWSER:-}" != 1 ]; then
  chromium=$(scripts/chromium.sh)
  export GPUSLICE_CHROMIUM="$chromium"
  export GPUSLICE_REQUIRE_BROWSER=1
  echo "   browser $GPUSLICE_CHROMIUM; screenshots of the dashboard tests go to a temp dir (go test -v ./internal/web prints it)"
else
  echo "   skipped (GPUSLICE_SKIP_BROWSER=1)"
fi

phase "go test: every package (go test -count=1 ./...)"
go test -count=1 ./...

phase "race: go test -race of the concurrent parts"
# One command, so go test runs these packages side by side (the DRA
# kubelet plugin's Prepare, Unprepare, watchdog and /metrics at once among
# them) rather than the plugin after the rest.
go test -count=1 -race ./internal/server/... ./internal/state/... ./internal/agent/... ./internal/node/... ./internal/cli/... ./internal/web/... ./internal/services/... ./internal/nodescale/... ./internal/k8s/scalezero/... ./internal/k8s/draplugin/...

phase "consumers: every render parsed by the tools that consume it (test/consumers, its own go.mod)"
# A separate module so the main module does not depend on these versions:
# k8s-device-plugin v0.19.3, mig-parted v0.13.1, Karpenter v1.15.0 (which
# needs Go >= 1.26.9: GOTOOLCHAIN takes go1.27.3 from the module proxy, a
# few seconds once per machine), k8s.io/api strict decoding. It runs the
# gpuslice binary built above (GPUSLICE_BIN; without it, it builds one with
# -mod=readonly, so neither go.mod nor go.sum of the main module changes).
(cd test/consumers && GOTOOLCHAIN=go1.27.3 GOFLAGS=-mod=readonly go test -count=1 ./...)

phase "helm chart: deploy/helm/gpuslice linted and rendered through Helm's Go packages (test/helmchart, its own go.mod)"
# helm.sh/helm/v3 v3.22.0 from the module proxy, in its own module so the
# main module does not depend on Helm. Every rendered object is decoded
# strictly with k8s.io/api; the DeviceClasses must equal `gpuslice dra classes`;
# every object passes a dry-run on the control plane above (skipped with it).
(cd test/helmchart && GOFLAGS=-mod=readonly go test -count=1 ./...)

phase "kubernetes v1.37.2: its control plane and gpuslice-scheduler, then the Kubernetes packages against them"
# The matrix's second release (docs/kubernetes-versions.md): the same
# tools module with test/controlplane/go.1.37.mod (etcd v3.7.0), the
# plugin from cmd/gpuslice-scheduler/go.1.37.mod, vetted and unit-tested
# with it, then every package that starts a control plane, with
# GPUSLICE_K8S_VERSION=v1.37.2 (apitest fails if the binaries report
# another release). internal/render is pure and runs above; the real node
# stays on v1.36.3 (its tests skip here: no v1.37.2 kubelet is built).
# A cold run builds a second control plane (about as long as the first);
# GPUSLICE_SKIP_K8S_137=1 skips the phase.
if [ "${GPUSLICE_SKIP_APISERVER:-}" != 1 ] && [ "${GPUSLICE_SKIP_K8S_137:-}" != 1 ]; then
  k8s137=$(scripts/controlplane.sh v1.37.2)
  echo "   control plane in $k8s137"
  sched137=$(scripts/gpuslice-scheduler.sh v1.37.2)
  (cd cmd/gpuslice-scheduler && export GOWORK=off GOFLAGS="-mod=readonly -trimpath" CGO_ENABLED=0 &&
    go vet -modfile=go.1.37.mod ./... && go test -modfile=go.1.37.mod -count=1 ./...)
  (
    export GPUSLICE_K8S_VERSION=v1.37.2 GPUSLICE_SCHEDULER_BIN="$sched137"
    unset GPUSLICE_K8S_BIN GPUSLICE_NODE_BIN GPUSLICE_REQUIRE_NODE
    go test -count=1 ./internal/k8s/apitest/ ./internal/k8s/dradriver/ ./internal/k8s/draplugin/ \
      ./internal/k8s/drawebhook/ ./internal/k8s/scalezero/ ./internal/k8s/schedtest/
    go test -count=1 -run '^TestDRADriverCommand$' ./internal/cli/
    cd test/helmchart && GOFLAGS=-mod=readonly go test -count=1 .
  )
else
  echo "   skipped (GPUSLICE_SKIP_K8S_137=1 or GPUSLICE_SKIP_APISERVER=1)"
fi

if [ "$fuzztime" != "0" ]; then
  phase "fuzz: every fuzz target, $fuzztime each"
  for pkg in $(go list ./...); do
    for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
      echo "-- $pkg $target"
      go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -fuzzminimizetime 2s "$pkg" >/tmp/gpuslice-fuzz.log 2>&1 || {
        cat /tmp/gpuslice-fuzz.log; exit 1; }
    done
  done
fi

phase_end
echo "all checks passed in $SECONDS s"
