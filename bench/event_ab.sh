#!/usr/bin/env bash
# bench/event_ab.sh - the event path of two builds of urxe's libibverbs.so.1, in alternating
# rounds on loopback, beside the platform's own wake-up in the same round. A benchmark, not a
# test.
#
#   bench/event_ab.sh LIB_DIR_A LIB_DIR_B [ROUNDS]     # ROUNDS=4
#
# Each round runs, for A then B: `ib_send_lat -e -s 2` (typical one-way, µs) and
# `ibv_rc_pingpong -e -s 64` (µs per iteration, a round trip), server on CPU 1 and client on
# CPU 0; then bench/ceiling's `pingpong_block` (UDP ping-pong with both sides asleep in a
# blocking recv(): one-way and round-trip p50). Alternating rounds, because this VM's speed
# changes by up to 2x within a minute: compare A and B within a round, and each against the
# round's ceiling. Settings: N=5000 iterations per run, URXE_DEV=urxe0, GID_INDEX=1.
# Exit status 1 if a figure could not be had.
set -u -o pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ $# -ge 2 ] || { echo "usage: $0 LIB_DIR_A LIB_DIR_B [ROUNDS]" >&2; exit 2; }
A=$1 B=$2 ROUNDS=${3:-4} N=${N:-5000} DEV=${URXE_DEV:-urxe0} GIDX=${GID_INDEX:-1}
for d in "$A" "$B"; do
  [ -e "$d/libibverbs.so.1" ] || { echo "no $d/libibverbs.so.1" >&2; exit 2; }
done
# CEIL and build_ceiling
source "$BENCH/common.sh"
build_ceiling /dev/null || { echo "bench/ceiling did not build" >&2; exit 1; }
status=0

# pair LIB TOOL ARGS... -> the client's output (server on CPU 1, client on CPU 0, loopback)
pair() {
  local lib=$1 tool=$2 port
  shift 2
  port=$((20000 + RANDOM % 20000))
  LD_LIBRARY_PATH=$lib timeout 60 taskset -c 1 "$tool" "$@" -p "$port" >/dev/null 2>&1 &
  local spid=$!
  sleep 0.5
  LD_LIBRARY_PATH=$lib timeout 60 taskset -c 0 "$tool" "$@" -p "$port" 127.0.0.1 2>&1
  wait "$spid" 2>/dev/null
}

for r in $(seq 1 "$ROUNDS"); do
  for side in A B; do
    lib=$([ "$side" = A ] && echo "$A" || echo "$B")
    s=$(pair "$lib" ib_send_lat -d "$DEV" -x "$GIDX" -F -s 2 -n "$N" -e | awk '/^ *2 /{print $5}')
    p=$(pair "$lib" ibv_rc_pingpong -d "$DEV" -g "$GIDX" -e -n "$N" -s 64 | awk '/usec\/iter/{print $(NF-1)}')
    [ -n "$s" ] && [ -n "$p" ] || status=1
    echo "round $r $side: ib_send_lat -e ${s:-error} us, ibv_rc_pingpong -e ${p:-error} us/iter"
  done
  c=$(timeout 120 "$CEIL" -t 3 -n "$N" -c 0,1 pingpong_block | grep -o 'ow_p50_us=[0-9.]*\|rtt_p50_us=[0-9.]*' | tr '\n' ' ')
  [ -n "$c" ] || status=1
  echo "round $r ceiling (both asleep): ${c:-error}"
done
exit $status
