#!/usr/bin/env bash
# Build the local real node's Go binaries: the kubelet from the same k8s.io/kubernetes pins as the
# control plane (tools/controlplane/go.mod already covers every package it imports: nothing is
# added there, so the control plane's build directory and hash stay as they are), and the
# pod-sandbox `pause` (./pause). (kubectl is not built: its packages need modules that go.mod
# does not pin yet, and adding them would change the control plane's pins.)
# Output:
#
#   ${IADEEP_NODE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/iadeep/node/<pins-hash>}
#
# <pins-hash> covers tools/controlplane/go.mod and go.sum, this script and pause/. Skipped when
# the directory already holds the binaries for the same pins. Also installs the Debian packages
# the node needs (deps.sh: runc, containerd, the loopback CNI plugin, buildah, debootstrap).
#
# Usage: build.sh [--print-dir|--force]
# Env:   IADEEP_NODE_DIR, GOFLAGS (-p=2 added unless it names -p), IADEEP_BUILD_NICE (default 19),
#        IADEEP_NODE_SKIP_DEPS=1 (do not check/install Debian packages)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CP="$HERE/../controlplane"

pins_hash() { cat "$CP/go.mod" "$CP/go.sum" "$HERE/build.sh" "$HERE/../lib.sh" "$HERE/pause/go.mod" "$HERE/pause/main.go" | sha256sum | cut -c1-16; }
PINS="$(pins_hash)"
OUT="${IADEEP_NODE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/iadeep/node/$PINS}"
BINARIES=(kubelet pause)

source "$HERE/../lib.sh"
build_flags --print-dir "$OUT" "$@"

[[ "${IADEEP_NODE_SKIP_DEPS:-0}" == 1 ]] || bash "$HERE/deps.sh"

have_all() {
  [[ -f "$OUT/PINS" && "$(cat "$OUT/PINS")" == "$PINS" ]] || return 1
  local b
  for b in "${BINARIES[@]}"; do [[ -x "$OUT/$b" ]] || return 1; done
}
t0=$(now_ms)
if [[ $force == 0 ]] && have_all; then
  printf 'node: up to date in %s (pins %s), skipped build in %ss\n' "$OUT" "$PINS" "$(secs_since "$t0")"
  exit 0
fi

command -v go >/dev/null || { echo "node: 'go' not on PATH (need Go >= 1.26)" >&2; exit 1; }
cd "$CP"
k8s_version="$(go list -m -f '{{.Version}}' k8s.io/kubernetes)"
k8s_minor="$(echo "$k8s_version" | cut -d. -f2)"
[[ " ${GOFLAGS:-} " == *" -p="* ]] || export GOFLAGS="${GOFLAGS:+$GOFLAGS }-p=2"
nice_n="${IADEEP_BUILD_NICE:-19}"
vpkg=k8s.io/component-base/version
k8s_ldflags="-s -w -X $vpkg.gitVersion=$k8s_version -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$k8s_minor -X $vpkg.gitTreeState=clean -X $vpkg.buildDate=1970-01-01T00:00:00Z"

mkdir -p "$OUT"
rm -f "$OUT/PINS"
echo "node: building kubelet (k8s.io/kubernetes $k8s_version) and pause into $OUT ($(go env GOVERSION), GOFLAGS=$GOFLAGS)"
for b in kubelet; do
  tb=$(now_ms)
  # -mod=readonly: the control plane's pins already cover these packages; never edit go.mod here.
  CGO_ENABLED=0 nice -n "$nice_n" go build -mod=readonly -trimpath -buildvcs=false -ldflags "$k8s_ldflags" \
    -o "$OUT/$b.tmp" "k8s.io/kubernetes/cmd/$b"
  mv -f "$OUT/$b.tmp" "$OUT/$b"
  printf 'node: built %-10s in %8ss\n' "$b" "$(secs_since "$tb")"
done
tb=$(now_ms)
(cd "$HERE/pause" && CGO_ENABLED=0 nice -n "$nice_n" go build -trimpath -buildvcs=false -ldflags "-s -w" -o "$OUT/pause.tmp" .)
mv -f "$OUT/pause.tmp" "$OUT/pause"
printf 'node: built %-10s in %8ss\n' pause "$(secs_since "$tb")"
echo "$PINS" > "$OUT/PINS"
if [[ -z "${IADEEP_NODE_DIR:-}" ]]; then
  root="$(dirname "$OUT")"
  ls -1dt "$root"/*/ 2>/dev/null | tail -n +3 | while read -r old; do
    [[ -f "$old/PINS" && "${old%/}" != "$OUT" ]] && rm -rf "${old%/}" && echo "node: removed old build ${old%/}"
  done
fi
printf 'node: total build time %ss\n' "$(secs_since "$t0")"
