#!/usr/bin/env bash
# Build Helm (helm.sh/helm/v4/cmd/helm, pinned in go.mod as a `tool`) from Go modules into a
# cache directory outside the repository (no binary download):
#
#   ${IADEEP_HELM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/iadeep/helm/<version>-<pins-hash>}/helm
#
# <pins-hash> covers go.mod, go.sum and this script (flags). The build is skipped when that
# directory already holds the binary for the same pins (the PINS file there matches).
#
# Usage: build.sh            build (or skip) and print timings
#        build.sh --print-dir print the binary directory for the current pins and exit
#        build.sh --force     rebuild even when the binary is present
# Env:   IADEEP_HELM_DIR    binary directory (overrides the cache path above)
#        GOFLAGS            passed through (-p=2 is added unless it names -p)
#        IADEEP_BUILD_NICE  niceness of the go processes (default 19)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE"

PKG=helm.sh/helm/v4/cmd/helm
# The version is read from go.mod without the go command, so that --print-dir works without Go.
VERSION="$(awk '$1 == "helm.sh/helm/v4" {print $2}' go.mod)"
[[ -n "$VERSION" ]] || { echo "helm: no helm.sh/helm/v4 requirement in $HERE/go.mod" >&2; exit 1; }
pins_hash() { cat go.mod go.sum build.sh ../lib.sh | sha256sum | cut -c1-16; }
PINS="$(pins_hash)"
OUT="${IADEEP_HELM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/iadeep/helm/$VERSION-$PINS}"

source "$HERE/../lib.sh"
build_flags --print-dir "$OUT" "$@"

t0=$(now_ms)
if [[ $force == 0 && -f "$OUT/PINS" && "$(cat "$OUT/PINS")" == "$PINS" && -x "$OUT/helm" ]]; then
  printf 'helm: up to date in %s (%s, pins %s), skipped build in %ss\n' "$OUT" "$VERSION" "$PINS" "$(secs_since "$t0")"
  exit 0
fi

command -v go >/dev/null || { echo "helm: 'go' not on PATH (need Go >= 1.26)" >&2; exit 1; }
# -p=2: two compile jobs at most, so the 2-core machines stay usable (unless GOFLAGS names -p).
[[ " ${GOFLAGS:-} " == *" -p="* ]] || export GOFLAGS="${GOFLAGS:+$GOFLAGS }-p=2"
nice_n="${IADEEP_BUILD_NICE:-19}"
ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=$VERSION -X helm.sh/helm/v4/internal/version.gitTreeState=clean"

mkdir -p "$OUT"
rm -f "$OUT/PINS"
echo "helm: building $PKG $VERSION into $OUT ($(go env GOVERSION), GOFLAGS=$GOFLAGS)"
# CGO off: a static binary, and no C toolchain needed.
CGO_ENABLED=0 nice -n "$nice_n" go build -trimpath -buildvcs=false -ldflags "$ldflags" -o "$OUT/helm.tmp" "$PKG"
mv -f "$OUT/helm.tmp" "$OUT/helm"
echo "$PINS" > "$OUT/PINS"
# Keep the default cache small: this build and the newest one before it.
if [[ -z "${IADEEP_HELM_DIR:-}" ]]; then
  root="$(dirname "$OUT")"
  ls -1dt "$root"/*/ 2>/dev/null | tail -n +3 | while read -r old; do
    [[ -f "$old/PINS" && "${old%/}" != "$OUT" ]] && rm -rf "${old%/}" && echo "helm: removed old build ${old%/}"
  done
fi
printf 'helm: built %s in %ss\n' "$("$OUT/helm" version --short)" "$(secs_since "$t0")"
