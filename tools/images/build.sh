#!/usr/bin/env bash
# Build the services' container images from images/*/Dockerfile without a registry or a Docker
# daemon, and write them as one OCI image archive that the local node imports
# (`ctr -n k8s.io images import`, see iadeep.dev.Node.import_images):
#
#   1. a Debian bookworm root filesystem with Python 3.11 (debootstrap --variant=minbase from the
#      machine's Debian mirror) becomes the image localhost/iadeep/debian-python:bookworm;
#   2. buildah (Debian's package; chroot isolation, overlay or vfs storage, no daemon) builds
#      images/base/Dockerfile on it (BASE_IMAGE build argument), then one image per service;
#   3. the base image is pushed into one OCI layout (gzip level 1), the services' images are added
#      to it as configurations over the same layers, and the layout is tarred.
#
# Cached by content hash: <hash> covers this script, images/, .dockerignore, pyproject.toml,
# constraints.txt, README.md and every file under iadeep/ (as the build context sees it); an
# unchanged tree reuses the archive without calling buildah. Output:
#
#   ${IADEEP_IMAGES_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/iadeep/images}/builds/<hash>/images.tar
#
# Usage: build.sh [--print-archive|--force]
# Env:   IADEEP_IMAGES_DIR, IADEEP_IMAGES_STORAGE_DRIVER (overlay|vfs), IADEEP_IMAGE_PREFIX (default localhost/iadeep), IADEEP_IMAGE_TAG
#        (default dev), IADEEP_DEBIAN_MIRROR (default: the machine's apt source), IADEEP_BUILD_NICE
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
cd "$ROOT"
SERVICES=(extender deviceplugin coordinator tuner)
PREFIX="${IADEEP_IMAGE_PREFIX:-localhost/iadeep}"
TAG="${IADEEP_IMAGE_TAG:-dev}"
CACHE="${IADEEP_IMAGES_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/iadeep/images}"
SUITE=bookworm
ROOTFS_PACKAGES=python3,python3-venv,ca-certificates

context_hash() {
  {
    echo "$PREFIX $TAG $SUITE $ROOTFS_PACKAGES"
    find images iadeep -type f ! -name '*.pyc' ! -path '*/__pycache__/*' -print0 | LC_ALL=C sort -z |
      xargs -0 sha256sum
    sha256sum "$HERE/build.sh" "$HERE/../lib.sh" .dockerignore pyproject.toml constraints.txt README.md
  } | sha256sum | cut -c1-16
}
HASH="$(context_hash)"
OUT="$CACHE/builds/$HASH"
ARCHIVE="$OUT/images.tar"

source "$HERE/../lib.sh"
build_flags --print-archive "$ARCHIVE" "$@"

t0=$(now_ms)
if [[ $force == 0 && -f "$OUT/DONE" && -f "$ARCHIVE" ]]; then
  printf 'images: up to date in %s (context %s), skipped build in %ss\n' "$OUT" "$HASH" "$(secs_since "$t0")"
  exit 0
fi
if [[ $(id -u) != 0 ]]; then
  # Without root (debootstrap, buildah's chroot isolation) there is no local build; the tests of
  # the images then skip, or fail under CI, where the machines are root.
  echo "images: the local build (debootstrap, buildah with chroot isolation) needs root; skipped" >&2
  [[ -z "${CI:-}" ]] || exit 1
  exit 0
fi
bash "$ROOT/tools/node/deps.sh"
nice_n="${IADEEP_BUILD_NICE:-19}"

mirror="${IADEEP_DEBIAN_MIRROR:-}"
if [[ -z "$mirror" ]]; then
  mirror="$(grep -hsE '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v security | head -1)"
  [[ -n "$mirror" ]] || mirror="$(grep -hsE '^deb ' /etc/apt/sources.list | awk '{print $2}' | head -1)"
  mirror="${mirror:-http://deb.debian.org/debian}"
fi

# 1. Root filesystem (kept across builds; keyed by suite and packages).
rootfs_key="$(echo "$SUITE $ROOTFS_PACKAGES" | sha256sum | cut -c1-12)"
ROOTFS="$CACHE/rootfs/$SUITE-$rootfs_key"
if [[ ! -f "$ROOTFS/.complete" ]]; then
  tb=$(now_ms)
  rm -rf "$ROOTFS.tmp" && mkdir -p "$(dirname "$ROOTFS")"
  echo "images: debootstrap $SUITE ($ROOTFS_PACKAGES) from $mirror"
  nice -n "$nice_n" debootstrap --variant=minbase --include="$ROOTFS_PACKAGES" "$SUITE" "$ROOTFS.tmp" "$mirror" \
    > "$CACHE/debootstrap.log" 2>&1 || { tail -20 "$CACHE/debootstrap.log" >&2; exit 1; }
  rm -rf "$ROOTFS.tmp"/var/cache/apt/archives/*.deb "$ROOTFS.tmp"/var/lib/apt/lists/*
  rm -rf "$ROOTFS" && mv "$ROOTFS.tmp" "$ROOTFS" && touch "$ROOTFS/.complete"
  printf 'images: root filesystem in %ss\n' "$(secs_since "$tb")"
fi

# overlay: layers are diffs (fast commits and pushes); vfs (IADEEP_IMAGES_STORAGE_DRIVER=vfs) copies
# the whole tree per layer and works where overlay mounts do not (about 3x slower here).
driver="${IADEEP_IMAGES_STORAGE_DRIVER:-overlay}"
BUILDAH=(nice -n "$nice_n" buildah --root "$CACHE/storage-$driver" --runroot "$CACHE/runroot-$driver" --storage-driver "$driver")
export BUILDAH_ISOLATION=chroot
os_image="$PREFIX/debian-python:$SUITE-$rootfs_key"
if ! "${BUILDAH[@]}" inspect --type image "$os_image" >/dev/null 2>&1; then
  tb=$(now_ms)
  ctr="$("${BUILDAH[@]}" from --pull=false scratch)"
  mnt="$("${BUILDAH[@]}" mount "$ctr")"
  tar -C "$ROOTFS" --exclude=./.complete -cf - . | tar -C "$mnt" -xf -
  "${BUILDAH[@]}" umount "$ctr" >/dev/null
  "${BUILDAH[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --cmd python3 --label org.opencontainers.image.title="debian-$SUITE-python3" "$ctr"
  "${BUILDAH[@]}" commit -q --rm "$ctr" "$os_image" >/dev/null
  printf 'images: %s in %ss\n' "$os_image" "$(secs_since "$tb")"
fi

# 2. The Dockerfiles. pip in the build trusts the CAs the host's pip trusts (a TLS-inspecting
# proxy's CA, say): passed as the build secret `cacert`, never stored in an image.
cacert="${IADEEP_IMAGE_CA_BUNDLE:-$(python3 -m pip config get global.cert 2>/dev/null || true)}"
[[ -s "$cacert" ]] || cacert=/etc/ssl/certs/ca-certificates.crt
# Each build also tags its images with its own content hash and pushes those tags: worktrees of one
# repository share this storage and build at the same time, and `$PREFIX/<image>:$TAG` may name
# another checkout's image by the time this one pushes.
BUILD_TAG="build-$HASH"
build() { # name dockerfile base
  local tb; tb=$(now_ms)
  "${BUILDAH[@]}" build --pull=false --isolation chroot --layers -q -f "$2" --build-arg "BASE_IMAGE=$3" \
    --secret "id=cacert,src=$cacert" \
    -t "$PREFIX/$1:$TAG" -t "$PREFIX/$1:$BUILD_TAG" . > "$CACHE/build-$1.$HASH.log" 2>&1 ||
    { tail -30 "$CACHE/build-$1.$HASH.log" >&2; exit 1; }
  mv -f "$CACHE/build-$1.$HASH.log" "$CACHE/build-$1.log"
  printf 'images: built %-30s in %8ss\n' "$PREFIX/$1:$TAG" "$(secs_since "$tb")"
}
build base images/base/Dockerfile "$os_image"
for s in "${SERVICES[@]}"; do build "$s" "images/$s/Dockerfile" "$PREFIX/base:$BUILD_TAG"; done

# 3. One OCI layout holding every image (gzip level 1: fast to write and to unpack), then a tar.
# `buildah push` exports and compresses every layer of the image it pushes (about a minute for the
# base image here), and the services' images are the base image's layers with their own
# configuration (entry point, title): so only the base image is pushed, and each service image is
# added to the layout as its own configuration (exactly as buildah stored it) plus a manifest that
# names the base image's pushed layers. A service image with layers of its own is pushed instead.
tb=$(now_ms)
rm -rf "$OUT" && mkdir -p "$OUT/layout"
"${BUILDAH[@]}" push -q --compression-format gzip --compression-level 1 "$PREFIX/base:$BUILD_TAG" "oci:$OUT/layout:$PREFIX/base:$TAG"
for s in "${SERVICES[@]}"; do
  "${BUILDAH[@]}" inspect --type image "$PREFIX/$s:$BUILD_TAG" > "$OUT/inspect-$s.json"
  python3 - "$OUT/layout" "$PREFIX/base:$TAG" "$PREFIX/$s:$TAG" "$OUT/inspect-$s.json" <<'PY' ||
import hashlib, json, os, sys
layout, base_ref, ref, inspect = sys.argv[1:]
def blob(digest):
    return os.path.join(layout, "blobs", *digest.split(":"))
def put(data):
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    with open(blob(digest), "wb") as f:
        f.write(data)
    return digest
index = json.load(open(os.path.join(layout, "index.json")))
(base,) = [m for m in index["manifests"] if m["annotations"]["org.opencontainers.image.ref.name"] == base_ref]
manifest = json.load(open(blob(base["digest"])))
base_config = json.load(open(blob(manifest["config"]["digest"])))
config = json.loads(json.load(open(inspect))["Config"])
if config["rootfs"]["diff_ids"] != base_config["rootfs"]["diff_ids"]:
    sys.exit(1)  # layers of its own: push it
data = json.dumps(config, separators=(",", ":")).encode()
manifest["config"] = {**manifest["config"], "digest": put(data), "size": len(data)}
data = json.dumps(manifest, separators=(",", ":")).encode()
index["manifests"].append({**base, "digest": put(data), "size": len(data),
                           "annotations": {"org.opencontainers.image.ref.name": ref}})
json.dump(index, open(os.path.join(layout, "index.json"), "w"))
PY
  "${BUILDAH[@]}" push -q --compression-format gzip --compression-level 1 "$PREFIX/$s:$BUILD_TAG" "oci:$OUT/layout:$PREFIX/$s:$TAG"
  rm -f "$OUT/inspect-$s.json"
done
# containerd's importer names an image after io.containerd.image.name (the full reference).
python3 - "$OUT/layout/index.json" <<'PY'
import json, sys
path = sys.argv[1]
index = json.load(open(path))
for m in index["manifests"]:
    ann = m.setdefault("annotations", {})
    ann["io.containerd.image.name"] = ann["org.opencontainers.image.ref.name"]
json.dump(index, open(path, "w"))
PY
tar -C "$OUT/layout" -cf "$ARCHIVE.tmp" . && mv "$ARCHIVE.tmp" "$ARCHIVE" && rm -rf "$OUT/layout"
# The build's own tags go again (the images keep their $TAG names unless a newer build took them).
for s in base "${SERVICES[@]}"; do "${BUILDAH[@]}" rmi "$PREFIX/$s:$BUILD_TAG" >/dev/null 2>&1 || true; done
printf '%s\n' base "${SERVICES[@]}" | sed "s|.*|$PREFIX/&:$TAG|" > "$OUT/IMAGES"
touch "$OUT/DONE"
printf 'images: archive %s (%s) in %ss\n' "$ARCHIVE" "$(du -h "$ARCHIVE" | cut -f1)" "$(secs_since "$tb")"
# Keep this build and the newest five before it (worktrees of one repository share this cache, and
# each archive is about 0.25 GB).
ls -1dt "$CACHE"/builds/*/ 2>/dev/null | tail -n +7 | while read -r old; do
  [[ "${old%/}" != "$OUT" ]] && rm -rf "${old%/}" && echo "images: removed old archive ${old%/}"
done
# containers/storage's overlay driver bind-mounts its layer folder onto itself (and an interrupted
# build can leave a container's root mounted below it): undo them, deepest first.
awk -v root="$CACHE/storage-$driver/" 'index($5, root) == 1 {print $5}' /proc/self/mountinfo | sort -r |
  while read -r m; do umount "$m" 2>/dev/null || true; done
printf 'images: total %ss\n' "$(secs_since "$t0")"
