#!/bin/sh
# The node's init: run by nodetest in the node's own network namespace and
# a fresh private mount namespace (nsenter --net=/run/netns/NS unshare
# --mount --propagation private --fork sh node.sh ROOT). It gives containerd and the
# kubelet private copies of the host paths they write (/run, /var/lib,
# /var/log, /dev with fake NVIDIA device nodes), imports the images, starts
# containerd, then the kubelet, and waits. Nothing it mounts is visible
# outside its mount namespace; the host's files are never changed.
set -eu
R="$1"
. "$R/node.env"
echo $$ >"$R/node.pid"

# /sys for the node's network namespace (its /sys/class/net), keeping the
# host's cgroup hierarchies, which the kubelet and runc use.
mkdir -p "$R/cgroup"
mount --rbind /sys/fs/cgroup "$R/cgroup"
umount -l /sys
mount -t sysfs sysfs /sys
mount --rbind "$R/cgroup" /sys/fs/cgroup

# Fresh, private /run, /var/lib and /var/log; the directories the tests
# read (the kubelet's, CDI specs, MPS pipes, pod logs) are bind mounts of
# host directories under $R.
mount -t tmpfs -o mode=0755 tmpfs /run
mount -t tmpfs -o mode=0755 tmpfs /var/lib
mount -t tmpfs -o mode=0755 tmpfs /var/log
for d in kubelet cdi gpuslice pods containers cni; do mkdir -p "$R/fs/$d"; done
mkdir -p /var/lib/kubelet /run/cdi /run/gpuslice /var/log/pods /var/log/containers /var/lib/cni /run/containerd/s
mount --bind "$R/fs/kubelet" /var/lib/kubelet
mount --bind "$R/fs/cdi" /run/cdi
mount --bind "$R/fs/gpuslice" /run/gpuslice
mount --bind "$R/fs/pods" /var/log/pods
mount --bind "$R/fs/containers" /var/log/containers
mount --bind "$R/fs/cni" /var/lib/cni

# /dev: an overlay of the host's with the NVIDIA nodes a simulated GPU's CDI
# spec names (the nodes exist only in the overlay's tmpfs upper layer).
mkdir -p "$R/dev"
mount -t tmpfs -o mode=0755 tmpfs "$R/dev"
mkdir -p "$R/dev/upper" "$R/dev/work" "$R/dev/old"
mount --rbind /dev "$R/dev/old"
mount -t overlay overlay -o "lowerdir=/dev,upperdir=$R/dev/upper,workdir=$R/dev/work" /dev
for m in pts shm mqueue hugepages; do
  if [ -d "$R/dev/old/$m" ] && mountpoint -q "$R/dev/old/$m"; then mount --rbind "$R/dev/old/$m" "/dev/$m"; fi
done
mknod -m 0666 /dev/nvidiactl c 195 255
i=0
while [ $i -lt 16 ]; do
  mknod -m 0666 "/dev/nvidia$i" c 195 $i
  i=$((i + 1))
done
mknod -m 0666 /dev/nvidia-uvm c 511 0
mknod -m 0666 /dev/nvidia-uvm-tools c 511 1
mkdir -p /dev/nvidia-caps

# The kubelet's cgroup root (its pods' subtree) in every hierarchy.
for h in /sys/fs/cgroup/*/; do
  [ -f "$h/cgroup.procs" ] && mkdir -p "$h${CGROUP_ROOT#/}"
done

# runc, the CNI plugins and the NVIDIA-less host tools are on PATH.
export PATH="$BIN:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

"$BIN/containerd" --config "$R/containerd.toml" >"$R/containerd.log" 2>&1 &
n=0
until "$BIN/ctr" --address /run/containerd/containerd.sock version >/dev/null 2>&1; do
  n=$((n + 1))
  if [ $n -gt 300 ]; then echo "containerd did not start; see $R/containerd.log" >&2; exit 1; fi
  sleep 0.1
done
for img in $IMAGES; do
  "$BIN/ctr" --address /run/containerd/containerd.sock -n k8s.io images import --platform linux/amd64 "$img" >>"$R/import.log" 2>&1 ||
    { echo "importing $img failed; see $R/import.log" >&2; exit 1; }
done
echo imported >"$R/images.ready"

"$BIN/kubelet" --config="$R/kubelet.yaml" --kubeconfig="$R/kubelet.kubeconfig" \
  --hostname-override="$NODE_NAME" --node-ip="$NODE_IP" --cert-dir="$R/kubelet-pki" \
  --root-dir=/var/lib/kubelet ${NODE_LABELS:+--node-labels="$NODE_LABELS"} --v=2 >"$R/kubelet.log" 2>&1 &
wait
