#!/bin/bash
# tests/conform/run.sh — `urxe conform` against a real peer, with one capture per scenario.
#
#   run.sh self   urxe against urxe in a second process: a private netns, IPv6 on lo
#                 (fd77::1 = urxe conform, fd77::2 = conform-peer over urxe's libibverbs);
#                 strict profile, every scenario must pass.
#   run.sh rxe    urxe against the kernel's rdma_rxe in the interop lab's VM (tests/interop:
#                 netns urxe-ix, VM r = 10.77.0.2 runs conform-peer on rxe0, this side binds
#                 10.77.0.1:4791); profile rxe: every scenario must run and be graded, rxe's
#                 documented deviations are not failures.
# Output: $CONFORM_OUT (target/conform/<mode>) with table.txt, report.json, pcaps/<scenario>.pcap,
# peer.log; every capture is verified by `urxe check` (the icrc_corrupt capture must hold
# exactly the one packet whose ICRC the scenario broke). Exit 0 only if all of that held.
# Needs root (netns), gcc + libibverbs-dev, tcpdump; target/release/urxe and (self)
# target/urxe/lib built. Env: URXE_BIN, URXE_LIB_DIR, CONFORM_OUT, CONFORM_PORT (18600).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
MODE=${1:-}
URXE=${URXE_BIN:-$REPO/target/release/urxe}
LIB=${URXE_LIB_DIR:-$REPO/target/urxe/lib}
OUT=${CONFORM_OUT:-$REPO/target/conform/$MODE}
PORT=${CONFORM_PORT:-18600}
die() { printf 'conform: ERROR: %s\n' "$*" >&2; exit 2; }
[ "$MODE" = self ] || [ "$MODE" = rxe ] || { sed -n '2,17p' "$0" >&2; exit 2; }
[ "$(id -u)" = 0 ] || die "must run as root (network namespaces)"
[ -x "$URXE" ] || die "no $URXE: cargo build --release"
command -v tcpdump >/dev/null || die "tcpdump not installed (scripts/deps.sh installs it)"
rm -rf "$OUT"; mkdir -p "$OUT/pcaps"
PEER_BIN=$OUT/conform-peer
gcc -O2 -Wall -Wextra -Werror -o "$PEER_BIN" "$HERE/peer.c" -libverbs

# Every capture passes `urxe check`, except icrc_corrupt: exactly one ICRC failure there.
check_captures() {
  local f name rc=0 line
  for f in "$OUT"/pcaps/*.pcap; do
    name=$(basename "$f" .pcap)
    line=$("$URXE" check --quiet "$f" 2>&1 | tail -n 1) || true
    if [ "$name" = icrc_corrupt ]; then
      if [[ $line == *": FAIL: "*" 1 bad (icrc 1, header 0,"* ]]; then
        echo "capture $name: ok (the one corrupted packet, as sent)"
      else
        echo "capture $name: WRONG: $line"; rc=1
      fi
    elif [[ $line == *": PASS: "* ]] && [[ $line != *": PASS: 0 RoCEv2"* ]]; then
      echo "capture $name: ok (${line#*PASS: })" | cut -c1-110
    else
      echo "capture $name: WRONG: $line"; rc=1
    fi
  done
  return $rc
}

run_conform() {  # ns, args...
  local ns=$1 rc=0; shift
  timeout 600 ip netns exec "$ns" "$URXE" conform --json "$OUT/report.json" --pcap-dir "$OUT/pcaps" "$@" \
    >"$OUT/table.txt" 2>"$OUT/progress.log" || rc=$?
  cat "$OUT/table.txt"
  return $rc
}

case $MODE in
self)
  [ -f "$LIB/libibverbs.so.1" ] || die "no $LIB/libibverbs.so.1: bash provider/build.sh --release"
  NS=urxe-conform-$$
  PEER_PID=
  cleanup() {
    [ -n "$PEER_PID" ] && kill "$PEER_PID" 2>/dev/null || true
    ip netns del "$NS" 2>/dev/null || true
  }
  trap cleanup EXIT
  ip netns add "$NS"
  ip -n "$NS" link set lo up
  ip -n "$NS" addr add fd77::1/64 dev lo nodad
  ip -n "$NS" addr add fd77::2/64 dev lo nodad
  ip netns exec "$NS" env LD_LIBRARY_PATH="$LIB" URXE_ADDR=fd77::2 \
    timeout 300 "$PEER_BIN" urxe0 1 "$PORT" >"$OUT/peer.log" 2>&1 &
  PEER_PID=$!
  crc=0
  run_conform "$NS" --peer "127.0.0.1:$PORT" --local fd77::1 --iface lo --profile strict || crc=$?
  wait "$PEER_PID" || { echo "conform: the peer program failed:"; cat "$OUT/peer.log"; crc=1; }
  PEER_PID=
  check_captures || crc=1
  echo "conform self: exit $crc (report $OUT/report.json)"
  exit $crc
  ;;
rxe)
  IX=$REPO/tests/interop
  RUN=${IX_RUN:-/tmp/urxe-interop}
  NS=${IX_NS:-urxe-ix}
  "$IX/lab.sh" up >/dev/null
  VM_PID=
  cleanup() {
    [ -n "$VM_PID" ] && kill "$VM_PID" 2>/dev/null || true
    "$IX/lab.sh" down >/dev/null 2>&1 || true
  }
  trap cleanup EXIT
  SHARE=$RUN/vm-r/share
  rm -f "$SHARE/job.sh"   # vm.sh recreates the share and writes job.sh: wait for that one
  # The VM waits (bounded) for the peer program to appear in its share, then serves one run.
  IX_VM_TIMEOUT=${IX_VM_TIMEOUT:-240} "$IX/vm.sh" r 10.77.0.2 \
    "i=0; while [ ! -x ./conform-peer ] && [ \$i -lt 300 ]; do sleep 0.1; i=\$((i+1)); done; \
     timeout 200 ./conform-peer rxe0 1 $PORT" >"$OUT/peer.log" 2>&1 &
  VM_PID=$!
  for _ in $(seq 1 100); do [ -f "$SHARE/job.sh" ] && break; sleep 0.1; done
  [ -f "$SHARE/job.sh" ] || die "the VM's share $SHARE did not appear"
  cp "$PEER_BIN" "$SHARE/conform-peer.tmp"
  mv "$SHARE/conform-peer.tmp" "$SHARE/conform-peer"   # appears whole, by rename
  crc=0
  run_conform "$NS" --peer "10.77.0.2:$PORT" --local 10.77.0.1 --iface br0 --profile rxe \
    --wait-ms 1500 --quiet-ms 400 || crc=$?
  wait "$VM_PID" || { echo "conform: the VM's peer program failed:"; cat "$OUT/peer.log"; crc=1; }
  VM_PID=
  check_captures || crc=1
  echo "conform rxe: exit $crc (report $OUT/report.json)"
  exit $crc
  ;;
esac
