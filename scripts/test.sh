#!/usr/bin/env bash
# Runs every check gpuslice has: formatting, vet, all tests, and a short
# coverage-guided run of every fuzz target. This is the README's test
# command and exactly what .ci/run calls. No GPU is needed.
#
#   FUZZTIME=30s ./scripts/test.sh   # fuzz longer (default 5000 inputs per target; 0 skips)
set -euo pipefail
cd "$(dirname "$0")/.."

# A count, not a duration, by default: a duration can end while a worker
# still runs an input, which Go reports as "context deadline exceeded".
fuzztime="${FUZZTIME:-5000x}"

echo "== gofmt"
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

echo "== go vet"
go vet ./...

echo "== control plane (etcd + kube-apiserver v1.36.3 from the Go module proxy; built once into ~/.cache/gpuslice)"
# The render integration tests validate every rendered Kubernetes object
# against a real kube-apiserver. The first build takes 10-30 minutes on 2
# cores; later runs reuse the cache. GPUSLICE_SKIP_APISERVER=1 skips them.
if [ "${GPUSLICE_SKIP_APISERVER:-}" != 1 ]; then
  scripts/controlplane.sh >/dev/null
  export GPUSLICE_REQUIRE_APISERVER=1
fi

echo "== go test"
go test -count=1 ./...

echo "== go test -race (the concurrent parts)"
go test -count=1 -race ./internal/server/... ./internal/state/... ./internal/agent/... ./internal/cli/...

if [ "$fuzztime" != "0" ]; then
  echo "== fuzz ($fuzztime per target)"
  for pkg in $(go list ./...); do
    for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
      echo "-- $pkg $target"
      go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -fuzzminimizetime 2s "$pkg" >/tmp/gpuslice-fuzz.log 2>&1 || {
        cat /tmp/gpuslice-fuzz.log; exit 1; }
    done
  done
fi

echo "all checks passed"
