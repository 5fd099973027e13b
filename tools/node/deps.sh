#!/usr/bin/env bash
# Install the Debian packages the local real node and the local image build need, when missing
# (idempotent: no apt call when everything is already there):
#   runc, containerd (containerd 1.6, its runc v2 shim and ctr), containernetworking-plugins
#   (the `loopback` CNI plugin), buildah and debootstrap (the daemonless image build);
#   for the Airflow DAG tests: nfs-ganesha with its VFS backend (the user-space NFS server of
#   iadeep_nfs), libnfs-utils (nfs-ls/nfs-cat, user-space NFS clients), chromium and
#   chromium-driver (the UI test's headless browser), docker-compose (its Compose schema and
#   parser check docker-compose.yaml); podman (the compose stack brought up for real by
#   tests/compose/test_compose_stack.py with podman-compose from PyPI: Debian's 1.0.3 cannot
#   run network_mode: host).
# kubelet 1.36 accepts containerd 1.6: it speaks CRI v1; containerd 1.x lacks the RuntimeConfig
# call, so the kubelet falls back to its configured cgroupDriver (removal planned for 1.37/1.38).
set -euo pipefail
declare -A NEED=(
  [runc]=runc
  [containerd]=containerd
  [containerd-shim-runc-v2]=containerd
  [ctr]=containerd
  [buildah]=buildah
  [debootstrap]=debootstrap
  [busybox]=busybox-static
  [ganesha.nfsd]=nfs-ganesha
  [nfs-ls]=libnfs-utils
  [nfs-cat]=libnfs-utils
  [chromium]=chromium
  [chromedriver]=chromium-driver
  [docker-compose]=docker-compose
  [podman]=podman
)
missing=()
for cmd in "${!NEED[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin" command -v "$cmd" >/dev/null 2>&1 || missing+=("${NEED[$cmd]}")
done
[[ -x /usr/lib/cni/loopback || -x /opt/cni/bin/loopback ]] || missing+=(containernetworking-plugins)
compgen -G "/usr/lib/*/ganesha/libfsalvfs.so" >/dev/null || missing+=(nfs-ganesha-vfs)
if ((${#missing[@]} == 0)); then
  exit 0
fi
pkgs="$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')"
if ! command -v apt-get >/dev/null 2>&1; then
  echo "node deps: missing $pkgs and no apt-get here; install them with your package manager" >&2
  exit 1
fi
SUDO=""
[[ $(id -u) == 0 ]] || SUDO="sudo"
echo "node deps: installing Debian packages: $pkgs"
$SUDO apt-get update -qq
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq -o DPkg::Lock::Timeout=600 $pkgs >/dev/null
