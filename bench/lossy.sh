#!/usr/bin/env bash
# bench/lossy.sh - urxe between two real processes on a lossy link, beside the loss-free run of
# the same invocation. A benchmark, not a test: it prints figures and ratios, it asserts nothing
# about speed.
#
#   bench/lossy.sh                    # ib_write_bw 64 KiB -n 5000, each case under a time limit
#   ITERS=2000 bench/lossy.sh
#
# It creates a network namespace with two addresses on its loopback device (server 10.78.0.1,
# client 10.78.0.2) and runs perftest over urxe's libibverbs.so.1 there (LD_LIBRARY_PATH,
# URXE_ADDR), in these cases:
#   clean     no impairment
#   drop1     nftables drops 1 % of RoCEv2 packets at random (numgen random mod 100 < 1 drop,
#             udp dport 4791: both directions, requests and ACKs)
#   drop10    the same at 10 %
#   harsh     bench/impair (our own NFQUEUE program, built here): 10 % loss, 5 % duplication,
#             25 % of packets sent at once while the others are held 1 ms (netem's "delay 1ms
#             reorder 25%"): heavy reordering
# and prints, per case, the wall time, perftest's average bandwidth and the ratio to the clean
# run. Every command runs under `timeout`; a case that does not finish reads "error: ..." and
# the exit status is 1. Needs root, ip, nft, iptables, gcc and libnetfilter-queue-dev
# (scripts/deps.sh).
#
# Settings (environment):
#   TOOL=ib_write_bw   SIZE=65536   ITERS=5000   perftest program, message size, iterations
#   TMO=120            seconds one case may take
#   HARSH="10 5 25 1000"  impair's LOSS DUP REORDER DELAY_US for the harsh case
#   CASES="clean drop1 drop10 harsh"   which cases, in order (clean first: the ratios need it)
#   URXE_GSO=0         per-packet datagrams, so loss, duplication and reordering apply to single
#                      packets (1: urxe's loopback GSO trains, which nftables sees as one packet)
#   URXE_LIB_DIR       directory holding urxe's libibverbs.so.1 (default <repo>/target/urxe/lib)
#   OUT                logs (default /tmp/urxe-bench/lossy-<UTC time>)
set -u -o pipefail

BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$BENCH/.." && pwd)
TOOL=${TOOL:-ib_write_bw}
SIZE=${SIZE:-65536}
ITERS=${ITERS:-5000}
TMO=${TMO:-120}
HARSH=${HARSH:-10 5 25 1000}
CASES=${CASES:-clean drop1 drop10 harsh}
URXE_GSO=${URXE_GSO:-0}
URXE_LIB_DIR=${URXE_LIB_DIR:-$REPO/target/urxe/lib}
OUT=${OUT:-/tmp/urxe-bench/lossy-$(date -u +%Y%m%dT%H%M%SZ)}
NS=urxe-lossy-$$
SRV=10.78.0.1
CLI=10.78.0.2
PORT=18720
TABLE=urxe_lossy

die() { echo "lossy.sh: $*" >&2; exit 2; }
for v in SIZE ITERS TMO; do
  case ${!v} in '' | *[!0-9]*) die "$v must be a whole number, got '${!v}'" ;; esac
done
[ "$(id -u)" = 0 ] || die "must run as root (network namespace, nftables, NFQUEUE)"
for t in ip nft iptables gcc timeout "$TOOL"; do command -v "$t" >/dev/null || die "$t not found (scripts/deps.sh installs it)"; done
[ -e "$URXE_LIB_DIR/libibverbs.so.1" ] || die "no $URXE_LIB_DIR/libibverbs.so.1: build it with bash provider/build.sh --release"
mkdir -p "$OUT" || die "cannot create $OUT"

IMPAIR=$OUT/impair
timeout 120 gcc -O2 -Wall -Wextra -Werror -o "$IMPAIR" "$BENCH/impair/impair.c" -lnetfilter_queue \
  >"$OUT/impair-build.log" 2>&1 || die "building bench/impair failed (libnetfilter-queue-dev?): $(head -c 400 "$OUT/impair-build.log")"

IMPAIR_PID=
cleanup() {
  if [ -n "$IMPAIR_PID" ]; then kill "$IMPAIR_PID" 2>/dev/null; wait "$IMPAIR_PID" 2>/dev/null; fi
  ip netns del "$NS" 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM

inns() { ip netns exec "$NS" "$@"; }
ip netns add "$NS" || die "cannot create network namespace $NS"
ip -n "$NS" link set lo up
ip -n "$NS" addr add "$SRV/32" dev lo
ip -n "$NS" addr add "$CLI/32" dev lo
inns nft -f - <<EOF || die "nftables setup failed"
table inet $TABLE {
  chain out { type filter hook output priority 0; policy accept; }
}
EOF

# impairment CASE: sets the rules (and starts impair) for one case
impairment() {
  timeout 10 ip netns exec "$NS" nft flush chain inet "$TABLE" out || return 1
  case $1 in
    clean) ;;
    drop*)
      timeout 10 ip netns exec "$NS" nft add rule inet "$TABLE" out udp dport 4791 numgen random mod 100 \< "${1#drop}" drop || return 1 ;;
    harsh)
      # shellcheck disable=SC2086 # HARSH is four numbers
      ip netns exec "$NS" timeout -k 2 $((TMO + 30)) "$IMPAIR" $HARSH 0 >"$OUT/impair.out" 2>"$OUT/impair.log" &
      IMPAIR_PID=$!
      sleep 0.3
      kill -0 "$IMPAIR_PID" 2>/dev/null || { echo "impair did not start: $(cat "$OUT/impair.log")" >&2; IMPAIR_PID=; return 1; }
      # nftables' own "queue" statement needs CONFIG_NFT_QUEUE, which not every kernel has;
      # iptables' NFQUEUE target (xtables) is the more widely built one.
      timeout 10 ip netns exec "$NS" iptables -A OUTPUT -p udp --dport 4791 -m mark ! --mark 0x77 \
        -j NFQUEUE --queue-num 0 || return 1 ;;
    *) echo "unknown case $1" >&2; return 1 ;;
  esac
}

stop_impair() {
  [ -n "$IMPAIR_PID" ] || return 0
  timeout 10 ip netns exec "$NS" iptables -F OUTPUT
  kill "$IMPAIR_PID" 2>/dev/null
  wait "$IMPAIR_PID" 2>/dev/null
  IMPAIR_PID=
}

wait_listen() {  # PORT PID SECONDS
  local i
  for i in $(seq 1 $(($3 * 10))); do
    kill -0 "$2" 2>/dev/null || return 1
    inns ss -Hltn "sport = :$1" 2>/dev/null | grep -q . && return 0
    sleep 0.1
  done
  return 1
}

# run_case NAME -> "secs=... gbps=..." or "error=..."
run_case() {
  local name=$1 port=$((PORT + RANDOM % 200)) slog=$OUT/$1.server.log clog=$OUT/$1.client.log spid crc t0 t1 res
  local args=(-d urxe0 -x 1 -p "$port" -F -s "$SIZE" -n "$ITERS")
  local env=(env "LD_LIBRARY_PATH=$URXE_LIB_DIR" "URXE_GSO=$URXE_GSO")
  inns "${env[@]}" URXE_ADDR=$SRV timeout -k 3 "$((TMO + 5))" "$TOOL" "${args[@]}" >"$slog" 2>&1 &
  spid=$!
  if ! wait_listen "$port" "$spid" 15; then
    kill "$spid" 2>/dev/null
    wait "$spid" 2>/dev/null
    echo "error=server did not start: $(tail -c 300 "$slog" | tr '\n' ' ')"
    return
  fi
  t0=$(date +%s.%N)
  inns "${env[@]}" URXE_ADDR=$CLI timeout -k 3 "$TMO" "$TOOL" "${args[@]}" "$SRV" >"$clog" 2>&1
  crc=$?
  t1=$(date +%s.%N)
  local i
  for i in $(seq 1 50); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
  kill "$spid" 2>/dev/null
  wait "$spid" 2>/dev/null
  local secs
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
  res=$(awk -f "$BENCH/parse_perftest.awk" "$clog")
  local bw
  bw=$(tr ' ' '\n' <<<"$res" | awk -F= '$1 == "bw_avg_gbps" { print $2 }')
  if [ "$crc" = 124 ] || [ "$crc" = 137 ]; then
    echo "error=did not finish in ${TMO}s secs=$secs"
  elif [ "$crc" != 0 ]; then
    echo "error=client exit $crc after ${secs}s: $(tail -c 300 "$clog" | tr '\n' ' ')"
  elif [ -z "$bw" ]; then
    echo "error=no bandwidth in perftest output secs=$secs"
  else
    echo "secs=$secs gbps=$bw"
  fi
}

kv() { tr ' ' '\n' <<<"$1" | awk -F= -v k="$2" '$1 == k { print $2; exit }'; }

echo "lossy.sh: $TOOL -s $SIZE -n $ITERS over urxe ($(cd "$REPO" && git rev-parse --short HEAD 2>/dev/null)), URXE_GSO=$URXE_GSO, logs in $OUT"
CLEAN=
STATUS=0
printf '%-8s %-44s %9s %12s %9s\n' case impairment seconds "Gb/s" "x clean"
for c in $CASES; do
  case $c in
    clean) what="none" ;;
    drop*) what="nftables numgen random drop ${c#drop} %" ;;
    harsh) read -r l d r us <<<"$HARSH"; what="impair loss $l % dup $d % reorder $r % / ${us} us" ;;
    *) what="?" ;;
  esac
  if ! impairment "$c"; then
    printf '%-8s %-44s error: could not set up the impairment\n' "$c" "$what"
    STATUS=1
    continue
  fi
  r=$(run_case "$c")
  counts=
  if [ -n "$IMPAIR_PID" ]; then
    stop_impair
    counts=$(cat "$OUT/impair.out")
  fi
  if [ -n "$(kv "$r" error)" ]; then
    printf '%-8s %-44s %9s error: %s\n' "$c" "$what" "$(kv "$r" secs)" "${r#error=}"
    STATUS=1
  else
    bw=$(kv "$r" gbps)
    [ "$c" = clean ] && CLEAN=$bw
    ratio=$([ -n "$CLEAN" ] && awk -v a="$bw" -v b="$CLEAN" 'BEGIN { printf "%.3f", a / b }' || echo "-")
    printf '%-8s %-44s %9s %12s %9s\n' "$c" "$what" "$(kv "$r" secs)" "$bw" "$ratio"
  fi
  [ -n "$counts" ] && echo "         $counts"
done
exit $STATUS
