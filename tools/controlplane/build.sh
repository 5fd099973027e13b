#!/usr/bin/env bash
# Build the local Kubernetes control plane used by iadeep's tests and `iadeep dev cluster`:
# kube-apiserver, kube-controller-manager, kube-scheduler (k8s.io/kubernetes, pinned in go.mod),
# kwok (sigs.k8s.io/kwok, pinned in go.mod) and etcd (go.etcd.io/etcd/server/v3 at the version
# k8s.io/kubernetes pins; ./cmd/etcd), built from Go modules into a cache directory outside the
# repository:
#
#   ${IADEEP_CONTROLPLANE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/iadeep/controlplane/<pins-hash>}
#
# <pins-hash> covers go.mod, go.sum and this script (flags). The build is skipped when that
# directory already holds all five binaries for the same pins (the PINS file there matches).
# The Go build and module caches stay in their default locations, so a rebuild after a pin
# change only recompiles what changed.
#
# Usage: build.sh            build (or skip) and print timings
#        build.sh --print-dir print the binary directory for the current pins and exit
#        build.sh --force     rebuild even when the binaries are present
# Env:   IADEEP_CONTROLPLANE_DIR  binary directory (overrides the cache path above)
#        GOFLAGS                  passed through (-p=2 is added unless it names -p)
#        IADEEP_BUILD_NICE        niceness of the go processes (default 19)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE"

BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kwok etcd)
declare -A PKG=(
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
  [kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
  [kwok]=sigs.k8s.io/kwok/cmd/kwok
  [etcd]=./cmd/etcd
)

pins_hash() { cat go.mod go.sum build.sh ../lib.sh cmd/etcd/main.go | sha256sum | cut -c1-16; }
PINS="$(pins_hash)"
OUT="${IADEEP_CONTROLPLANE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/iadeep/controlplane/$PINS}"

source "$HERE/../lib.sh"
build_flags --print-dir "$OUT" "$@"

have_all() {
  [[ -f "$OUT/PINS" && "$(cat "$OUT/PINS")" == "$PINS" ]] || return 1
  local b
  for b in "${BINARIES[@]}"; do [[ -x "$OUT/$b" ]] || return 1; done
}

t0=$(now_ms)
if [[ $force == 0 ]] && have_all; then
  printf 'controlplane: up to date in %s (pins %s), skipped build in %ss\n' \
    "$OUT" "$PINS" "$(secs_since "$t0")"
  exit 0
fi

command -v go >/dev/null || { echo "controlplane: 'go' not on PATH (need Go >= 1.26)" >&2; exit 1; }
k8s_version="$(go list -m -f '{{.Version}}' k8s.io/kubernetes)"
kwok_version="$(go list -m -f '{{.Version}}' sigs.k8s.io/kwok)"
etcd_version="$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)"
k8s_minor="$(echo "$k8s_version" | cut -d. -f2)"
# -p=2: two compile jobs at most, so the 2-core machines stay usable (unless GOFLAGS names -p).
[[ " ${GOFLAGS:-} " == *" -p="* ]] || export GOFLAGS="${GOFLAGS:+$GOFLAGS }-p=2"
nice_n="${IADEEP_BUILD_NICE:-19}"

vpkg=k8s.io/component-base/version
k8s_ldflags="-s -w -X $vpkg.gitVersion=$k8s_version -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$k8s_minor -X $vpkg.gitTreeState=clean -X $vpkg.buildDate=1970-01-01T00:00:00Z"
plain_ldflags="-s -w"

mkdir -p "$OUT"
rm -f "$OUT/PINS"
echo "controlplane: building k8s.io/kubernetes $k8s_version, sigs.k8s.io/kwok $kwok_version and etcd $etcd_version into $OUT ($(go env GOVERSION), GOFLAGS=$GOFLAGS)"
for b in "${BINARIES[@]}"; do
  tb=$(now_ms)
  case $b in kwok | etcd) ldf="$plain_ldflags" ;; *) ldf="$k8s_ldflags" ;; esac
  # CGO off: static binaries, and no C toolchain needed.
  CGO_ENABLED=0 nice -n "$nice_n" go build -trimpath -buildvcs=false -ldflags "$ldf" -o "$OUT/$b.tmp" "${PKG[$b]}"
  mv -f "$OUT/$b.tmp" "$OUT/$b"
  printf 'controlplane: built %-24s in %8ss\n' "$b" "$(secs_since "$tb")"
done
echo "$PINS" > "$OUT/PINS"
# Keep the default cache small: this build and the newest one before it (~450 MB each).
if [[ -z "${IADEEP_CONTROLPLANE_DIR:-}" ]]; then
  root="$(dirname "$OUT")"
  ls -1dt "$root"/*/ 2>/dev/null | tail -n +3 | while read -r old; do
    [[ -f "$old/PINS" && "${old%/}" != "$OUT" ]] && rm -rf "${old%/}" && echo "controlplane: removed old build ${old%/}"
  done
fi
printf 'controlplane: total build time %ss\n' "$(secs_since "$t0")"
