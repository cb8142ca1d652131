#!/bin/bash
# tests/interop/ci.sh — the CI entry point: prepare a fresh Debian 12 machine, build urxe,
# run the interop matrix, then (HOST_SIDE=urxe) the multicast run mcast.sh, the rdma_cm run
# rdmacm.sh and the host-to-host run hosts.sh (IPv6, mixed MTUs). Arguments go to matrix.sh.
# Exit status = matrix.sh's, or 1 if only mcast.sh, rdmacm.sh or hosts.sh failed.
#   IX_SKIP_BUILD=1   do not build (use an existing target/)
#   HOST_SIDE=vm      harness self-test without urxe (no build needed)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
"$HERE/setup.sh"
if [ "${HOST_SIDE:-urxe}" = urxe ] && [ "${IX_SKIP_BUILD:-0}" != 1 ]; then
  command -v cargo >/dev/null || { echo "ci: cargo not found (install Rust, or IX_SKIP_BUILD=1)" >&2; exit 2; }
  (cd "$REPO" && cargo build --release)
  [ -x "$REPO/provider/build.sh" ] && (cd "$REPO" && provider/build.sh)
fi
rc=0
"$HERE/matrix.sh" "$@" || rc=$?
if [ "${HOST_SIDE:-urxe}" = urxe ]; then
  "$HERE/mcast.sh" || { [ "$rc" != 0 ] || rc=1; }
  "$HERE/rdmacm.sh" || { [ "$rc" != 0 ] || rc=1; }
  "$HERE/hosts.sh" || { [ "$rc" != 0 ] || rc=1; }
fi
exit "$rc"
