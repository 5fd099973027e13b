# Shell helpers of the build scripts under tools/ (sourced by them, never run on its own).
# It is part of each script's content hash: a change here rebuilds what they build.

# build_flags PRINT_FLAG VALUE [ARG]: the one optional argument of a build script. PRINT_FLAG
# prints VALUE (where the build's output lives) and exits 0; --force sets force=1 (rebuild even
# when up to date); none leaves force=0; anything else prints the usage and exits 2.
build_flags() {
  local print_flag=$1 value=$2
  shift 2
  force=0
  case "${1:-}" in
    "$print_flag") echo "$value"; exit 0 ;;
    --force) force=1 ;;
    "") ;;
    *) echo "usage: $0 [$print_flag|--force]" >&2; exit 2 ;;
  esac
}

# now_ms: wall clock in milliseconds; secs_since T0: seconds since now_ms gave T0 ("12.34").
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
secs_since() { local d=$(( $(now_ms) - $1 )); printf '%d.%02d' $((d / 1000)) $(((d % 1000) / 10)); }
