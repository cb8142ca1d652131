# tests/interop/lib/common.sh — the preamble the lab's scenario scripts (mcast.sh, rdmacm.sh,
# hosts.sh, group.sh) share. Sourced after `set -euo pipefail` and HERE (the script's folder),
# with LAB_NAME set (the messages' prefix and the output folder's name).
#   lab_args "$@"       -o OUTDIR, and -s CASE,CASE when LAB_CASES=1 (sets OUT, ONLY)
#   die / say           messages prefixed with LAB_NAME (die exits 2: could not run)
#   lab_require FILE [image]   root, $URXE_LIB_DIR/FILE, $URXE_CHECK, and with `image` the VM
#                       image of setup.sh; makes $OUT/logs and $OUT/pcaps
#   lab_up              the lab (lab.sh down, up), torn down at exit with every pid in PIDS
#   in_ns CMD...        CMD in the lab's netns as urxe's side (URXE_ADDR=$HOST_IP)
REPO=$(cd "$HERE/../.." && pwd)
export IX_NS=${IX_NS:-urxe-ix}
export IX_RUN=${IX_RUN:-/tmp/urxe-interop}
BASE_CACHE=${IX_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/urxe-interop}
URXE_LIB_DIR=${URXE_LIB_DIR:-$REPO/target/urxe/lib}
URXE_CHECK=${URXE_CHECK:-$REPO/target/release/urxe}
OUT=$REPO/target/interop/$LAB_NAME-$(date -u +%Y%m%dT%H%M%SZ)
ONLY=""
VM_IP=10.77.0.2 HOST_IP=10.77.0.1
PIDS=()

die() { printf '%s: ERROR: %s\n' "$LAB_NAME" "$*" >&2; exit 2; }
say() { printf '%s: %s\n' "$LAB_NAME" "$*" >&2; }

lab_args() {
  local usage="usage: $LAB_NAME.sh [-o OUTDIR]"
  [ "${LAB_CASES:-0}" = 1 ] && usage="$usage [-s CASE,CASE]"
  while [ $# -gt 0 ]; do
    case $1 in
      -o) OUT=${2:?-o needs a directory}; shift 2 ;;
      -s) [ "${LAB_CASES:-0}" = 1 ] || { echo "$usage" >&2; exit 2; }
          ONLY=${2:?-s needs case names}; shift 2 ;;
      *) echo "$usage" >&2; exit 2 ;;
    esac
  done
}

lab_require() {  # FILE [image]
  [ "$(id -u)" = 0 ] || die "must run as root"
  [ -f "$URXE_LIB_DIR/$1" ] || die "no $URXE_LIB_DIR/$1 (provider/build.sh)"
  [ -x "$URXE_CHECK" ] || die "no $URXE_CHECK (cargo build --release)"
  if [ "${2:-}" = image ]; then
    [ -f "$BASE_CACHE/initrd.gz" ] || die "no VM image in $BASE_CACHE: run tests/interop/setup.sh"
  fi
  mkdir -p "$OUT/logs" "$OUT/pcaps"
}

lab_cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  "$HERE/lab.sh" down >/dev/null 2>&1 || true
}

lab_up() {
  trap lab_cleanup EXIT
  "$HERE/lab.sh" down >/dev/null 2>&1 || true
  "$HERE/lab.sh" up >/dev/null
}

in_ns() { ip netns exec "$IX_NS" env LD_LIBRARY_PATH="$URXE_LIB_DIR" URXE_ADDR=$HOST_IP "$@"; }
