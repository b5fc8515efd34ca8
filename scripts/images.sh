#!/usr/bin/env bash
# Builds gpuslice's container images as OCI image archives, with no Docker
# daemon and no registry, and prints each archive's path (progress goes to
# stderr):
#
#   OUTDIR/gpuslice-VERSION.tar            ghcr.io/gpuslice/gpuslice:VERSION
#   OUTDIR/gpuslice-scheduler-VERSION.tar  ghcr.io/gpuslice/gpuslice-scheduler:VERSION
# and with --test-images, for the real-node tests:
#   OUTDIR/test-pause-VERSION.tar          gpuslice.dev/test/pause:VERSION
#   OUTDIR/test-busybox-VERSION.tar        gpuslice.dev/test/busybox:VERSION
#
# Each archive is an OCI image layout plus docker's manifest.json, so
# `ctr -n k8s.io images import`, `skopeo copy oci-archive:FILE ...`,
# `crane push FILE ...` and `docker load` all read it (docs/images.md).
# VERSION defaults to the Helm chart's appVersion, which is also the
# chart's default image tag. The archives are reproducible: the same
# sources, toolchain and host libraries give the same bytes
# (SOURCE_DATE_EPOCH sets every mtime; default 0).
#
#   scripts/images.sh [--test-images] [--version VERSION] OUTDIR
#
# gpuslice uses cgo (NVML through go-nvml, dlopened at run time), so its
# image carries this host's dynamic loader and the glibc libraries `ldd`
# lists, plus the ones libnvidia-ml.so.1 itself needs; the NVIDIA container
# toolkit injects libnvidia-ml (and nvidia-smi) at run time.
# gpuslice-scheduler is the static binary scripts/gpuslice-scheduler.sh
# builds. The image builder is the hidden `gpuslice image-archive`
# command of the binary built here (internal/ociimage).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
chart="$root/deploy/helm/gpuslice/Chart.yaml"

log() { echo "images.sh: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
usage() { echo "usage: scripts/images.sh [--test-images] [--version VERSION] OUTDIR" >&2; exit 2; }

test_images=0
version=""
outdir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --test-images) test_images=1 ;;
    --version) [ $# -ge 2 ] || usage; version="$2"; shift ;;
    --version=*) version="${1#--version=}" ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2; exit 0 ;;
    -*) log "unknown option $1"; usage ;;
    *) [ -z "$outdir" ] || usage; outdir="$1" ;;
  esac
  shift
done
[ -n "$outdir" ] || usage

command -v go >/dev/null 2>&1 || die "go is not on PATH (Go 1.26 is needed)"
command -v ldd >/dev/null 2>&1 || die "ldd is not on PATH (libc-bin)"
if [ -z "$version" ]; then
  version="$(sed -n 's/^appVersion:[[:space:]]*"\{0,1\}\([^"[:space:]]*\)"\{0,1\}[[:space:]]*$/\1/p' "$chart")"
  [ -n "$version" ] || die "no appVersion in $chart; pass --version"
fi
# A tag's grammar (distribution/reference), checked before minutes of building.
[[ "$version" =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] ||
  die "version \"$version\" cannot be an image tag (letters, digits, _ . -; at most 128; not starting with . or -)"
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-0}"
mkdir -p "$outdir" || die "cannot create $outdir"
outdir="$(cd "$outdir" && pwd)"

work="$(mktemp -d "${TMPDIR:-/tmp}/gpuslice-images.XXXXXX")"
trap 'rm -rf "$work"' EXIT
export GOWORK=off GOFLAGS="-buildvcs=false -mod=readonly"
start=$SECONDS

log "building gpuslice $version (cgo)"
(cd "$root" && CGO_ENABLED=1 go build -trimpath \
  -ldflags "-s -w -X github.com/gpuslice/gpuslice/internal/cli.Version=$version" \
  -o "$work/gpuslice" ./cmd/gpuslice) || die "go build ./cmd/gpuslice failed"
gs="$work/gpuslice"

# What every image has: root and nobody, a world-writable /tmp, root's home.
mkdir -p "$work/etc"
printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' 'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' >"$work/etc/passwd"
printf '%s\n' 'root:x:0:' 'nobody:x:65534:' >"$work/etc/group"
chmod 0644 "$work/etc/passwd" "$work/etc/group"
base=(--file "/etc/passwd=$work/etc/passwd" --file "/etc/group=$work/etc/group"
  --dir /tmp=1777 --dir /root=700
  --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  --label "org.opencontainers.image.version=$version"
  --label "org.opencontainers.image.source=https://github.com/gpuslice/gpuslice")
# TLS roots for clients of public endpoints (the in-cluster API server's CA
# comes from the service account, not from here).
certs=()
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  certs=(--file "/etc/ssl/certs/ca-certificates.crt=/etc/ssl/certs/ca-certificates.crt")
else
  log "warning: /etc/ssl/certs/ca-certificates.crt is missing (ca-certificates); images get no TLS roots"
fi

archive() { # archive NAME TAG [image-archive flags...]: writes OUTDIR/NAME-VERSION.tar
  local name="$1" tag="$2" t=$SECONDS
  shift 2
  local out="$outdir/$name-$version.tar"
  "$gs" image-archive "$out" --tag "$tag" "$@" >&2 || die "image-archive $name failed"
  log "$name: $(du -h "$out" | cut -f1) in $((SECONDS - t)) s"
  echo "$out"
}

# The loader and libraries: what ldd lists for gpuslice, and what
# libnvidia-ml.so.1 links (libm, and libpthread, libdl and librt, which
# glibc 2.34+ keeps as stubs) since it is dlopened into this process.
libs=()
while read -r line; do
  case "$line" in
    *"not found"*) die "ldd $gs: $line" ;;
    *"=> /"*) p="${line#*=> }"; libs+=("${p%% (*}") ;;
    /*) libs+=("${line%% (*}") ;;
    *"statically linked"*|*"not a dynamic executable"*) die "gpuslice was built without cgo (CGO_ENABLED=1 and a C compiler are needed)" ;;
  esac
done < <(ldd "$gs")
libc=""
for l in "${libs[@]}"; do case "$l" in */libc.so.6) libc="$l" ;; esac; done
[ -n "$libc" ] || die "ldd $gs lists no libc.so.6"
libdir="$(dirname "$libc")"
for l in libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1; do
  [ -f "$libdir/$l" ] && libs+=("$libdir/$l")
done
libflags=()
for l in $(printf '%s\n' "${libs[@]}" | sort -u); do libflags+=(--file "$l=$l"); done
mkdir -p "$work/ld"
printf 'include /etc/ld.so.conf.d/*.conf\n' >"$work/ld/ld.so.conf"
chmod 0644 "$work/ld/ld.so.conf"

archive gpuslice "ghcr.io/gpuslice/gpuslice:$version" "${base[@]}" "${certs[@]}" "${libflags[@]}" \
  --file "/gpuslice=$gs" --file "/etc/ld.so.conf=$work/ld/ld.so.conf" --dir /etc/ld.so.conf.d \
  --entrypoint /gpuslice \
  --label "org.opencontainers.image.title=gpuslice" \
  --label "org.opencontainers.image.description=gpuslice: the DRA driver, admission webhook and control plane for shared NVIDIA GPUs"

log "building gpuslice-scheduler (scripts/gpuslice-scheduler.sh)"
sched="$("$root/scripts/gpuslice-scheduler.sh")" || die "scripts/gpuslice-scheduler.sh failed"
archive gpuslice-scheduler "ghcr.io/gpuslice/gpuslice-scheduler:$version" "${base[@]}" "${certs[@]}" \
  --file "/gpuslice-scheduler=$sched" --entrypoint /gpuslice-scheduler \
  --label "org.opencontainers.image.title=gpuslice-scheduler" \
  --label "org.opencontainers.image.description=kube-scheduler v1.36.3 with gpuslice's DRA allocation plugin"

if [ "$test_images" = 1 ]; then
  log "building the test images' pause (static)"
  (cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$work/pause" ./internal/k8s/nodetest/pause) ||
    die "go build ./internal/k8s/nodetest/pause failed"
  archive test-pause "gpuslice.dev/test/pause:$version" "${base[@]}" \
    --file "/pause=$work/pause" --entrypoint /pause --label "org.opencontainers.image.title=gpuslice test pause"

  bb=/bin/busybox
  [ -x "$bb" ] || die "$bb is missing: apt-get install busybox-static (scripts/realnode.sh does)"
  ldd "$bb" >/dev/null 2>&1 && die "$bb is dynamically linked; the test image needs busybox-static"
  have=" $("$bb" --list | tr '\n' ' ') "
  applets=()
  for a in sh env cat ls sleep echo test grep wc stat mount id printenv timeout true false kill ps head tail sed mkdir rm touch; do
    if [[ "$have" == *" $a "* ]]; then
      applets+=(--symlink "/bin/$a=busybox")
    else
      log "note: $bb has no $a applet; the busybox image goes without it"
    fi
  done
  archive test-busybox "gpuslice.dev/test/busybox:$version" "${base[@]}" \
    --file "/bin/busybox=$bb" "${applets[@]}" --cmd sh \
    --label "org.opencontainers.image.title=gpuslice test busybox (Debian busybox-static)"
fi
log "done in $((SECONDS - start)) s; SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH"
