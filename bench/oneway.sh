#!/usr/bin/env bash
# bench/oneway.sh - where a one-way trip of a busy-polling ping-pong goes: urxe's ib_send_lat
# beside the RC ping-pong of bench/ceiling (the same calls' shape, nothing else), each under an
# LD_PRELOAD timing shim (bench/oneway/shim.c) that reads the TSC around every socket call. A
# benchmark tool, not a test.
#
# For each side (thread) of each ping-pong, medians over its trips: the receive call that found
# the peer's datagram, the side's own time from that call's return to its next send call (for
# urxe: the engine, the provider, perftest and the poll/post calls between), the send call (on
# loopback it also carries the datagram into the peer's socket), their sum, and a busy
# poller's empty receive call with the period between two of them (a datagram that arrives
# waits about half a period before a look finds it). The one-way latency each program reports
# is printed beside. The shim's own cost (two TSC reads and a store per call) is in every
# figure alike.
#
#   bench/oneway.sh                  # N=50000 round trips each
# Settings (environment): N, URXE_LIB_DIR (default <repo>/target/urxe/lib), URXE_DEV=urxe0,
# GID_INDEX=1, PORT=18840 (the first TCP port tried for perftest), OUT (default
# /tmp/urxe-bench/oneway-<UTC time>). Sender/client on CPU 0, receiver/server on CPU 1.
# Exit status 1 if a figure could not be had.
set -u -o pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$BENCH/.." && pwd)
N=${N:-50000}
URXE_LIB_DIR=${URXE_LIB_DIR:-$REPO/target/urxe/lib}
URXE_DEV=${URXE_DEV:-urxe0}
GID_INDEX=${GID_INDEX:-1}
PORT=${PORT:-18840}
OUT=${OUT:-/tmp/urxe-bench/oneway-$(date -u +%Y%m%dT%H%M%SZ)}
[[ $N =~ ^[0-9]+$ ]] && [ "$N" -ge 2000 ] || { echo "N=$N: expected an integer >= 2000" >&2; exit 2; }
mkdir -p "$OUT"
status=0

SHIM=$OUT/oneway-shim.so
if ! gcc -O2 -Wall -Wextra -Werror -shared -fPIC -o "$SHIM" "$BENCH/oneway/shim.c" -ldl >"$OUT/shim-build.log" 2>&1; then
  echo "error: bench/oneway/shim.c did not build: $(tail -n 1 "$OUT/shim-build.log")" >&2
  exit 1
fi
# port_listening, CEIL and build_ceiling
source "$BENCH/common.sh"
if ! build_ceiling "$OUT/ceiling-build.log"; then
  echo "error: bench/ceiling did not build: $(tail -n 1 "$OUT/ceiling-build.log")" >&2
  exit 1
fi

rows=()
lat=()

# 1. the RC ping-pong
D=$OUT/rc
mkdir -p "$D"
if line=$(ONEWAY_DIR=$D LD_PRELOAD=$SHIM timeout 300 "$CEIL" -n "$N" -c 0,1 pingpong_rc 2>"$OUT/rc.err"); then
  ow=$(grep -o 'ow_p50_us=[0-9.]*' <<<"$line" | cut -d= -f2)
  lat+=("RC ping-pong (bench/ceiling pingpong_rc): one-way p50 ${ow:-?} µs")
else
  lat+=("RC ping-pong: error: $(tail -n 1 "$OUT/rc.err")")
  status=1
fi
r=$(python3 "$BENCH/oneway/analyze.py" "$D" "RC ping-pong") || status=1
rows+=("$r")

# 2. urxe's ib_send_lat, 2-byte messages
D=$OUT/urxe
mkdir -p "$D"
p=$PORT
while port_listening "$p" && [ "$p" -lt $((PORT + 40)) ]; do p=$((p + 1)); done
if [ ! -e "$URXE_LIB_DIR/libibverbs.so.1" ]; then
  lat+=("urxe ib_send_lat: error: no $URXE_LIB_DIR/libibverbs.so.1 (bash provider/build.sh)")
  status=1
else
  args=(-d "$URXE_DEV" -x "$GID_INDEX" -s 2 -n "$N" -p "$p")
  ONEWAY_DIR=$D LD_PRELOAD=$SHIM LD_LIBRARY_PATH=$URXE_LIB_DIR timeout 300 taskset -c 1 \
    ib_send_lat "${args[@]}" >"$OUT/send_lat.server.log" 2>&1 &
  srv=$!
  for _ in $(seq 1 100); do port_listening "$p" && break; kill -0 $srv 2>/dev/null || break; sleep 0.1; done
  ONEWAY_DIR=$D LD_PRELOAD=$SHIM LD_LIBRARY_PATH=$URXE_LIB_DIR timeout 300 taskset -c 0 \
    ib_send_lat "${args[@]}" 127.0.0.1 >"$OUT/send_lat.client.log" 2>&1
  wait $srv
  typ=$(awk -f "$BENCH/parse_perftest.awk" "$OUT/send_lat.client.log" | grep -o 'lat_typical_us=[0-9.]*' | cut -d= -f2)
  if [ -n "$typ" ]; then
    lat+=("urxe ib_send_lat -s 2: typical ${typ} µs (half the round trip)")
  else
    lat+=("urxe ib_send_lat: error: $(tail -n 1 "$OUT/send_lat.client.log")")
    status=1
  fi
  r=$(python3 "$BENCH/oneway/analyze.py" "$D" "urxe ib_send_lat") || status=1
  rows+=("$r")
fi

echo "## One-way trips, timed at the socket calls — $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git -C "$REPO" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
echo
echo "$N round trips each; sender/client on CPU 0, receiver/server on CPU 1; medians in µs per trip of each side (thread)."
echo
echo "| side | trips | receive call that found data | own time, receive → send | send call | sum | empty receive call / poll period |"
echo "|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
printf -- '- %s\n' "${lat[@]}"
echo
echo "logs: $OUT"
exit $status
