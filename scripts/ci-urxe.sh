#!/usr/bin/env bash
# CI recipe (docs/ci.md): install urxe from a checkout and run verbs programs under it.
# Only the package install needs root (sudo); installing urxe and running programs do not.
#
#   bash scripts/ci-urxe.sh [packages|install|run|all]      (default: all)
#
# packages  the Debian/Ubuntu packages of the example programs (sudo apt-get), and gcc
# install   cargo install --locked --path $URXE_SRC/cli (default: this checkout) --root $URXE_PREFIX
#           (default: $HOME/.local): one binary, which carries its two libraries
# run       urxe doctor, `urxe run -- ibv_devinfo`, and ibv_rc_pingpong server + client over
#           urxe on this host, as the user running it
set -euo pipefail
SRC=${URXE_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
PREFIX=${URXE_PREFIX:-$HOME/.local}
STEP=${1:-all}
SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
if [ "$STEP" = packages ] || [ "$STEP" = all ]; then
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc ibverbs-utils rdmacm-utils >/dev/null
fi
if [ "$STEP" = install ] || [ "$STEP" = all ]; then
  cargo install --locked --path "$SRC/cli" --root "$PREFIX"
fi
if [ "$STEP" = run ] || [ "$STEP" = all ]; then
  export PATH=$PREFIX/bin:$PATH
  urxe --version
  urxe doctor || true                      # findings for the log; not a gate
  urxe run -- ibv_devinfo | grep -q 'hca_id:.*urxe0'
  urxe run -- ibv_rc_pingpong -g 1 -n 1000 &
  server=$!
  sleep 1
  urxe run -- ibv_rc_pingpong -g 1 -n 1000 127.0.0.1
  wait "$server"
  echo "ci-urxe: ibv_rc_pingpong over urxe passed"
fi
