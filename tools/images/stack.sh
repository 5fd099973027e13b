#!/usr/bin/env bash
# Build the images of the local Airflow stack (docker-compose.yaml) without a registry or a daemon:
#
#   airflow   images/airflow/Dockerfile on the base image (images/base, as tools/images/build.sh
#             builds it, with the `airflow` extra: the package, Airflow and its providers);
#   postgres  images/postgres/Dockerfile, Debian's PostgreSQL (stand-in for docker.io/library/postgres);
#   etcd      images/etcd/Dockerfile, Debian's etcd (stand-in for quay.io/coreos/etcd);
#   redis     images/redis/Dockerfile, Debian's Redis (the Celery broker of docker-compose.celery.yaml);
#
# the last three on the Debian root filesystem image that build.sh makes. They stay in build.sh's
# buildah storage (no export: podman reads them from there as an additional, read-only image
# store) and are tagged with this build's content hash, so that checkouts with different trees do
# not retag each other's images. Cached by content hash: build.sh's hash (the package, images/,
# constraints...) plus this script; an unchanged tree builds nothing. Output:
#
#   ${IADEEP_IMAGES_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/iadeep/images}/stack/<hash>/images.env
#
# holding AIRFLOW_IMAGE=..., POSTGRES_IMAGE=..., ETCD_IMAGE=..., REDIS_IMAGE=... (the variables
# docker-compose.yaml and docker-compose.celery.yaml read) and IMAGE_STORE=<the storage folder>. Usage: stack.sh [--print-env|--force]
# Env: those of build.sh (IADEEP_IMAGES_DIR, IADEEP_IMAGES_STORAGE_DRIVER, IADEEP_IMAGE_PREFIX,
# IADEEP_IMAGE_TAG, IADEEP_BUILD_NICE).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
cd "$ROOT"
PREFIX="${IADEEP_IMAGE_PREFIX:-localhost/iadeep}"
TAG="${IADEEP_IMAGE_TAG:-dev}"
CACHE="${IADEEP_IMAGES_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/iadeep/images}"
driver="${IADEEP_IMAGES_STORAGE_DRIVER:-overlay}"
STORE="$CACHE/storage-$driver"

base_archive="$(bash "$HERE/build.sh" --print-archive)"
HASH="$({ basename "$(dirname "$base_archive")"; sha256sum "$HERE/stack.sh"; } | sha256sum | cut -c1-16)"
OUT="$CACHE/stack/$HASH"
ENVFILE="$OUT/images.env"

source "$HERE/../lib.sh"
build_flags --print-env "$ENVFILE" "$@"

t0=$(now_ms)
if [[ $force == 0 && -f "$OUT/DONE" ]]; then
  printf 'stack images: up to date (%s), skipped build in %ss\n' "$ENVFILE" "$(secs_since "$t0")"
  exit 0
fi
if [[ $(id -u) != 0 ]]; then
  echo "stack images: the local build (buildah with chroot isolation) needs root; skipped" >&2
  [[ -z "${CI:-}" ]] || exit 1
  exit 0
fi
nice_n="${IADEEP_BUILD_NICE:-19}"
BUILDAH=(nice -n "$nice_n" buildah --root "$STORE" --runroot "$CACHE/runroot-$driver" --storage-driver "$driver")
export BUILDAH_ISOLATION=chroot
# The newest Debian root filesystem image of build.sh (localhost/iadeep/debian-python:<suite>-<key>);
# build.sh makes it when there is none (`make images` runs build.sh first anyway).
os_image() {
  "${BUILDAH[@]}" images --json | python3 -c '
import json, sys
want = sys.argv[1] + "/debian-python:"
imgs = [(i["createdatraw"], n) for i in json.load(sys.stdin) for n in i.get("names") or [] if n.startswith(want)]
print(max(imgs)[1] if imgs else "")' "$PREFIX"
}
[[ -n "$(os_image)" ]] || bash "$HERE/build.sh"
os_image="$(os_image)"
[[ -n "$os_image" ]] || { echo "stack images: no $PREFIX/debian-python image in $STORE (tools/images/build.sh)" >&2; exit 1; }

cacert="${IADEEP_IMAGE_CA_BUNDLE:-$(python3 -m pip config get global.cert 2>/dev/null || true)}"
[[ -s "$cacert" ]] || cacert=/etc/ssl/certs/ca-certificates.crt
mkdir -p "$OUT"
build() { # name dockerfile base context [build-arg...]
  local tb; tb=$(now_ms)
  local args=(); for a in "${@:5}"; do args+=(--build-arg "$a"); done
  "${BUILDAH[@]}" build --pull=false --isolation chroot --layers -q -f "$2" --build-arg "BASE_IMAGE=$3" "${args[@]}" \
    --secret "id=cacert,src=$cacert" -t "$PREFIX/$1:$HASH" "$4" > "$OUT/build-$1.log" 2>&1 ||
    { tail -30 "$OUT/build-$1.log" >&2; exit 1; }
  printf 'stack images: built %-34s in %8ss\n' "$PREFIX/$1:$HASH" "$(secs_since "$tb")"
}
# The Airflow image starts from the base image's Dockerfile with the `airflow` extra in its
# dependencies' layer (cached while pyproject.toml and constraints.txt are unchanged: a code change
# rebuilds only the package's layer), tagged with this hash: checkouts share the storage.
build base-airflow images/base/Dockerfile "$os_image" . EXTRAS=services,airflow
build postgres images/postgres/Dockerfile "$os_image" images/postgres
build etcd images/etcd/Dockerfile "$os_image" images/etcd
build redis images/redis/Dockerfile "$os_image" images/redis
build airflow images/airflow/Dockerfile "$PREFIX/base-airflow:$HASH" images/airflow
cat > "$ENVFILE" <<EOF
AIRFLOW_IMAGE=$PREFIX/airflow:$HASH
POSTGRES_IMAGE=$PREFIX/postgres:$HASH
ETCD_IMAGE=$PREFIX/etcd:$HASH
REDIS_IMAGE=$PREFIX/redis:$HASH
IMAGE_STORE=$STORE
EOF
touch "$OUT/DONE"
# Keep this build's tags and the newest three before it (the layers stay shared in the storage).
ls -1dt "$CACHE"/stack/*/ 2>/dev/null | tail -n +5 | while read -r old; do
  old="${old%/}"; h="$(basename "$old")"
  [[ "$old" == "$OUT" ]] && continue
  for n in airflow postgres etcd redis base-airflow base; do "${BUILDAH[@]}" rmi "$PREFIX/$n:$h" >/dev/null 2>&1 || true; done
  rm -rf "$old" && echo "stack images: removed old build $h"
done
printf 'stack images: %s in %ss\n' "$ENVFILE" "$(secs_since "$t0")"
