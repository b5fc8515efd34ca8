#!/usr/bin/env bash
# gpuslice's sandbox for Kubernetes users: a real one-node cluster
# (kubelet v1.36.3 and containerd v2 in their own namespaces, simulated DGX
# A100 GPUs) with the Helm chart installed, in the background, one command
# up and one command down (docs/sandbox.md):
#
#   scripts/sandbox.sh up       build what is missing, start it, wait until
#                               the chart is installed, print how to use it
#   scripts/sandbox.sh status   whether it runs (exit 0 ready, 2 starting,
#                               3 not running), and how to use it
#   scripts/sandbox.sh down     stop it and check nothing is left
#
# up runs scripts/controlplane.sh and scripts/realnode.sh (they build once,
# and install Debian packages as needed), scripts/images.sh --test-images,
# builds test/helmchart/cmd/sandbox and runs it detached; the program
# holds the cluster until SIGTERM. It needs root with CAP_SYS_ADMIN,
# CAP_NET_ADMIN and CAP_MKNOD (a privileged container or VM).
#
# Files, none in the repository: ${GPUSLICE_CACHE:-$HOME/.cache/gpuslice}/sandbox/
#   kubeconfig, example.yaml, usage.txt   what a user needs
#   sandbox.log                            the program's log
#   run/                                   the cluster's state and logs
#                                          (run/node/*.log, run/apiserver/)
#   images/, bin/sandbox                   the images and the program
#   pid, slot, ready                       while it runs
#
# Environment:
#   GPUSLICE_CACHE        cache root (default $HOME/.cache/gpuslice)
#   SANDBOX_UP_TIMEOUT    seconds up waits for the cluster (default 360)
#   SANDBOX_DOWN_TIMEOUT  seconds down waits before SIGKILL (default 90)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${GPUSLICE_CACHE:-$HOME/.cache/gpuslice}"
state="$cache/sandbox"
bin="$state/bin/sandbox"
logfile="$state/sandbox.log"
pidfile="$state/pid"
slotfile="$state/slot"
readyfile="$state/ready"
usagefile="$state/usage.txt"

log() { echo "sandbox.sh: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
usage() { echo "usage: scripts/sandbox.sh up|down|status" >&2; exit 2; }

# alive PID: the process exists and is not a zombie waiting for a reaper.
alive() {
  local st
  st="$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null)" || return 1
  [ -n "$st" ] && [ "$st" != Z ]
}

# running: prints the pid of the running sandbox program, if any.
running() {
  local pid exe
  [ -s "$pidfile" ] || return 1
  pid="$(cat "$pidfile")"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  alive "$pid" || return 1
  exe="$(readlink "/proc/$pid/exe" 2>/dev/null)" || return 1
  case "$exe" in "$bin"*) echo "$pid" ;; *) return 1 ;; esac
}

# leftovers SLOT: names what is left of the sandbox's node in slot SLOT.
leftovers() {
  local n="$1" left=() d
  [ -e "/run/netns/gsnode-$n" ] && left+=("network namespace gsnode-$n")
  ip link show "gsh-$n" >/dev/null 2>&1 && left+=("veth gsh-$n")
  for d in /sys/fs/cgroup/gsnode-"$n" /sys/fs/cgroup/*/gsnode-"$n"; do
    [ -d "$d" ] && left+=("cgroup $d")
  done
  [ ${#left[@]} -eq 0 ] || echo "${left[*]}"
}

last_progress() { grep '^sandbox: \[' "$logfile" 2>/dev/null | tail -n 1 || true; }

wait_ready() { # wait_ready PID
  local pid="$1" timeout="${SANDBOX_UP_TIMEOUT:-360}" start=$SECONDS shown="" line
  log "waiting for the cluster and the chart (up to ${timeout}s; log: $logfile)"
  while [ ! -e "$readyfile" ]; do
    if ! alive "$pid"; then
      log "the sandbox exited before it was ready; the end of $logfile:"
      tail -n 40 "$logfile" >&2 || true
      die "the sandbox did not start (full log: $logfile; the cluster's logs: $state/run/)"
    fi
    if [ $((SECONDS - start)) -ge "$timeout" ]; then
      log "not ready after ${timeout}s; the end of $logfile:"
      tail -n 40 "$logfile" >&2 || true
      log "stopping it"
      (down) >&2 || true
      die "the sandbox was not ready in ${timeout}s (SANDBOX_UP_TIMEOUT); logs: $logfile, $state/run/"
    fi
    # Each new message once (Helm repeats its wait message every 2s).
    line="$(last_progress)"
    if [ -n "$line" ] && [ "${line#*] }" != "$shown" ]; then
      echo "  $line" >&2
      shown="${line#*] }"
    fi
    sleep 1
  done
}

up() {
  local pid start=$SECONDS
  if pid="$(running)"; then
    if [ -e "$readyfile" ]; then
      log "the sandbox is already running (pid $pid)"
      cat "$usagefile"
      return 0
    fi
    log "the sandbox is starting (pid $pid)"
    wait_ready "$pid"
    cat "$usagefile"
    return 0
  fi
  command -v go >/dev/null 2>&1 || die "go is not on PATH (Go 1.26 is needed)"
  command -v setsid >/dev/null 2>&1 || die "setsid is not on PATH (util-linux)"
  [ "$(id -u)" = 0 ] || die "the sandbox runs a kubelet and containerd in namespaces of their own: run it as root (in a privileged container or VM)"

  log "control plane: scripts/controlplane.sh"
  "$root/scripts/controlplane.sh" >/dev/null || die "scripts/controlplane.sh failed (its output is above)"
  log "node: scripts/realnode.sh"
  "$root/scripts/realnode.sh" >/dev/null || die "scripts/realnode.sh failed (its output is above)"
  log "images: scripts/images.sh --test-images $state/images"
  "$root/scripts/images.sh" --test-images "$state/images" >/dev/null ||
    die "scripts/images.sh --test-images $state/images failed (its output is above)"

  log "building the sandbox program (test/helmchart/cmd/sandbox)"
  mkdir -p "$state/bin" || die "cannot create $state/bin"
  (cd "$root/test/helmchart" && GOWORK=off GOFLAGS=-mod=readonly go build -o "$bin.new" ./cmd/sandbox) ||
    die "go build ./cmd/sandbox in test/helmchart failed (the compiler's output is above)"
  mv -f "$bin.new" "$bin"

  # A sandbox killed without its stop leaves its node; the program sweeps
  # it when it starts.
  setsid nohup "$bin" -repo "$root" -images "$state/images" </dev/null >"$logfile" 2>&1 &
  pid=$!
  log "started the sandbox program (pid $pid)"
  wait_ready "$pid"
  log "up in $((SECONDS - start)) s"
  echo
  cat "$usagefile"
}

down() {
  local pid slot="" start=$SECONDS timeout="${SANDBOX_DOWN_TIMEOUT:-90}" left
  [ -s "$slotfile" ] && slot="$(cat "$slotfile")"
  if pid="$(running)"; then
    log "stopping the sandbox (pid $pid, SIGTERM)"
    kill -TERM "$pid" 2>/dev/null || true
    while alive "$pid"; do
      if [ $((SECONDS - start)) -ge "$timeout" ]; then
        log "still running after ${timeout}s: SIGKILL, then sweeping its node"
        kill -KILL "$pid" 2>/dev/null || true
        sleep 1
        break
      fi
      sleep 0.5
    done
  elif [ -e "$pidfile" ] || [ -e "$slotfile" ]; then
    log "the sandbox is not running but left its state (killed?): sweeping its node"
  else
    log "the sandbox is not running"
    return 0
  fi
  # After a clean stop this finds nothing; after a SIGKILL it removes the
  # node the program could not stop.
  if [ -e "$pidfile" ] || [ -e "$slotfile" ]; then
    [ -x "$bin" ] || die "$bin is missing: cannot sweep; a later scripts/sandbox.sh up sweeps the node"
    "$bin" -sweep >>"$logfile" 2>&1 || die "sweeping the node failed; see $logfile"
  fi
  if [ -n "$slot" ]; then
    left="$(leftovers "$slot")"
    [ -z "$left" ] || die "left after stopping: $left (see $logfile)"
    log "down in $((SECONDS - start)) s; nothing left (no gsnode-$slot namespace, veth or cgroup); logs kept in $state/run/"
  else
    log "down in $((SECONDS - start)) s; logs kept in $state/run/"
  fi
}

status() {
  local pid
  if pid="$(running)"; then
    if [ -e "$readyfile" ]; then
      log "running (pid $pid, ready since $(cat "$readyfile"))"
      cat "$usagefile"
      return 0
    fi
    log "starting (pid $pid): $(last_progress)"
    return 2
  fi
  if [ -e "$pidfile" ] || [ -e "$slotfile" ]; then
    log "not running, but a killed sandbox left its state: scripts/sandbox.sh down sweeps it"
  else
    log "not running (scripts/sandbox.sh up starts it)"
  fi
  return 3
}

[ $# -eq 1 ] || usage
case "$1" in
  up) up ;;
  down) down ;;
  status) status ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2 ;;
  *) usage ;;
esac
