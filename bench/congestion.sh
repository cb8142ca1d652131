#!/usr/bin/env bash
# bench/congestion.sh - urxe flows through a congested 1 Gbit/s bottleneck with ECN marking in
# front of it, with DCQCN on and off in the same run (issue #42). A benchmark: it prints the
# figures and the targets beside them; the exit status is 1 only if a run failed to run.
#
#   bash bench/congestion.sh                 # 2 and 4 flows, 10 s each, DCQCN on then off
#   FLOWS="2" SECS=5 bash bench/congestion.sh
#
# The lab: two network namespaces joined by a veth pair (MTU 9000). Senders (ib_write_bw
# clients, one process per flow, each on its own address 10.79.1.N) live in namespace A,
# servers (10.79.2.N) in namespace B. On A's veth end:
#   - a tbf qdisc: rate 1 Gbit/s, burst 64 KiB, queue limit 512 KiB (the bottleneck; it drops
#     what overflows the queue, counted by `tc -s qdisc`);
#   - in front of it (a tc clsact egress program, bench/cemark.bpf.c, which runs before the
#     qdisc) a rate marker like a switch's: ECT(0) RoCEv2 packets towards B sent above
#     0.9 Gbit/s of IP packets (a token bucket of 64 KiB, MARK_BURST) get CE. Not-ECT packets
#     (DCQCN off) are never marked, as a switch would not mark them either: they queue, and
#     drop at the tbf.
#     Not nftables' `limit rate over N kbytes/second burst B bytes ip ecn set ce` (the earlier
#     marker): in bytes mode the kernel's nft_limit bucket holds a whole second of the rate on
#     top of B, so at 1 Gbit/s it marked nothing in a 10 s run (offered load 0.94 Gbit/s
#     against 0.9: 0 CE in 27,693 packets). This kernel has no RED, act_police or act_pedit.
# ACKs and CNPs return B -> A without a bottleneck.
#
# Per case (flows x DCQCN on/off) it prints: aggregate goodput (sum of the clients' ib_write_bw
# average, Gb/s, and its ratio to 1 Gbit/s), drops at the bottleneck (tbf dropped / packets
# offered = sent + dropped), Jain's fairness index (sum x)^2 / (n sum x^2) over the per-flow
# goodputs, and from `urxe stat` of every process taken 1 s before the end: CE marks seen and
# CNPs sent (servers), CNPs handled and ignored (clients). Targets with DCQCN: goodput >= 0.9x,
# drops <= 1 %, Jain >= 0.95.
#
# Settings (environment):
#   FLOWS="2 4"  SECS=10  SIZE=65536      flows per case, seconds per run, message size
#   MODES="on off"                         DCQCN on (default parameters) and off (URXE_DCQCN=0)
#   RATE_MBIT=1000                         bottleneck rate (Mbit/s); goodput ratios are to it
#   MARK_BPS=112500000                     marking threshold, bytes/s of IP packets (0.9 x RATE_MBIT)
#   MARK_BURST=65536                       the marker's bucket (bytes)
#   URXE_LIB_DIR  directory with urxe's libibverbs.so.1 (default <repo>/target/urxe/lib)
#   URXE_BIN      the urxe binary (default <repo>/target/release/urxe)
#   OUT           logs (default /tmp/urxe-bench/congestion-<UTC time>)
# Extra URXE_DCQCN_<NAME>=value variables in the environment reach the "on" runs.
# Needs root, ip, tc, clang (BPF target), ib_write_bw (scripts/deps.sh).
set -u -o pipefail

BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$BENCH/.." && pwd)
FLOWS=${FLOWS:-2 4}
SECS=${SECS:-10}
SIZE=${SIZE:-65536}
MODES=${MODES:-on off}
RATE_MBIT=${RATE_MBIT:-1000}
# CE above 0.9 x the bottleneck, in bytes per second of IP packets.
MARK_BPS=${MARK_BPS:-$(awk -v r="$RATE_MBIT" 'BEGIN { printf "%d", 0.9 * r * 1e6 / 8 }')}
URXE_LIB_DIR=${URXE_LIB_DIR:-$REPO/target/urxe/lib}
URXE_BIN=${URXE_BIN:-$REPO/target/release/urxe}
# The marker's bucket: a switch marks once its queue builds (here: 64 KiB).
MARK_BURST=${MARK_BURST:-65536}
OUT=${OUT:-/tmp/urxe-bench/congestion-$(date -u +%Y%m%dT%H%M%SZ)}
NSA=hx-cc-a$$
NSB=hx-cc-b$$
PORT=18800

die() { echo "congestion.sh: $*" >&2; exit 2; }
for v in SECS SIZE RATE_MBIT MARK_BPS MARK_BURST; do
  case ${!v} in '' | *[!0-9]*) die "$v must be a whole number, got '${!v}'" ;; esac
done
[ "$SECS" -ge 3 ] || die "SECS must be at least 3"
[ "$(id -u)" = 0 ] || die "must run as root (network namespaces, tc, nftables)"
for t in ip tc clang timeout ib_write_bw; do command -v "$t" >/dev/null || die "$t not found (scripts/deps.sh installs it)"; done
[ -e "$URXE_LIB_DIR/libibverbs.so.1" ] || die "no $URXE_LIB_DIR/libibverbs.so.1: build it with bash provider/build.sh --release"
[ -x "$URXE_BIN" ] || die "no $URXE_BIN: cargo build --release"
mkdir -p "$OUT" || die "cannot create $OUT"

cleanup() {
  local p
  for p in $(jobs -p); do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  ip netns del "$NSA" 2>/dev/null
  ip netns del "$NSB" 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ina() { ip netns exec "$NSA" "$@"; }
inb() { ip netns exec "$NSB" "$@"; }
MAXF=0
for n in $FLOWS; do [ "$n" -gt "$MAXF" ] && MAXF=$n; done
ip netns add "$NSA" || die "cannot create $NSA"
ip netns add "$NSB" || die "cannot create $NSB"
ip -n "$NSA" link set lo up
ip -n "$NSB" link set lo up
ip -n "$NSA" link add va mtu 9000 type veth peer name vb mtu 9000 netns "$NSB" || die "veth"
for i in $(seq 1 "$MAXF"); do
  ip -n "$NSA" addr add "10.79.1.$i/16" dev va
  ip -n "$NSB" addr add "10.79.2.$i/16" dev vb
done
ip -n "$NSA" link set va up
ip -n "$NSB" link set vb up
# Neighbours resolved before the first packet (ARP waits would count as a slow start).
for i in $(seq 1 "$MAXF"); do ina ping -c1 -W2 "10.79.2.$i" >/dev/null 2>&1; done
clang -O2 -g -target bpf -I"/usr/include/$(gcc -print-multiarch)" \
  -DRATE_BPS="$MARK_BPS" -DBURST="$MARK_BURST" -c "$BENCH/cemark.bpf.c" -o "$OUT/cemark.o" || die "cannot build the marker"
ina tc qdisc add dev va clsact || die "tc clsact setup failed"
ina tc filter add dev va egress bpf da obj "$OUT/cemark.o" sec tc || die "cannot load the marker (tc bpf)"
bottleneck() {  # (re)creates the tbf, so its counters start at zero
  ina tc qdisc del dev va root 2>/dev/null
  ina tc qdisc add dev va root tbf rate "${RATE_MBIT}mbit" burst 64kb limit 512kb || die "tc tbf setup failed"
}

wait_listen() {  # NS PORT PID SECONDS
  local i
  for i in $(seq 1 $(($4 * 10))); do
    kill -0 "$3" 2>/dev/null || return 1
    ip netns exec "$1" ss -Hltn "sport = :$2" 2>/dev/null | grep -q . && return 0
    sleep 0.1
  done
  return 1
}

# stat_sum NS NAME: the sum of counter NAME over every urxe process in NS (urxe stat)
stat_sum() {
  ip netns exec "$1" timeout 10 "$URXE_BIN" stat 2>/dev/null | awk -v k="$2:" '$1 == k { s += $2 } END { print s + 0 }'
}

kv() { tr ' ' '\n' <<<"$1" | awk -F= -v k="$2" '$1 == k { print $2; exit }'; }

# run_case N MODE -> one line of key=value
run_case() {
  local n=$1 mode=$2 tag="$1-$2" i spids=() cpids=() env
  env=(env "LD_LIBRARY_PATH=$URXE_LIB_DIR")
  [ "$mode" = off ] && env+=(URXE_DCQCN=0)
  bottleneck
  for i in $(seq 1 "$n"); do
    inb "${env[@]}" URXE_ADDR="10.79.2.$i" timeout -k 3 $((SECS + 40)) ib_write_bw -d urxe0 -x 1 -F \
      -p $((PORT + i)) -s "$SIZE" -D "$SECS" --report_gbits >"$OUT/$tag.server$i.log" 2>&1 &
    spids+=($!)
  done
  for i in $(seq 1 "$n"); do
    wait_listen "$NSB" $((PORT + i)) "${spids[$((i - 1))]}" 15 || { echo "error=server $i did not start"; return; }
  done
  for i in $(seq 1 "$n"); do
    ina "${env[@]}" URXE_ADDR="10.79.1.$i" timeout -k 3 $((SECS + 30)) ib_write_bw -d urxe0 -x 1 -F \
      -p $((PORT + i)) -s "$SIZE" -D "$SECS" --report_gbits "10.79.2.$i" >"$OUT/$tag.client$i.log" 2>&1 &
    cpids+=($!)
  done
  # Counters near the end of the run, while every process still has its device open.
  sleep $((SECS + 1))
  local marked cnp_sent handled ignored
  marked=$(stat_sum "$NSB" np_ecn_marked_roce_packets)
  cnp_sent=$(stat_sum "$NSB" np_cnp_sent)
  handled=$(stat_sum "$NSA" rp_cnp_handled)
  ignored=$(stat_sum "$NSA" rp_cnp_ignored)
  local bad=0
  for p in "${cpids[@]}" "${spids[@]}"; do wait "$p" || bad=1; done
  local tcs
  tcs=$(ina tc -s qdisc show dev va)
  echo "$tcs" >"$OUT/$tag.tc.txt"
  local sent dropped
  sent=$(awk '/Sent/ { print $4; exit }' <<<"$tcs")
  dropped=$(awk '/dropped/ { for (i = 1; i <= NF; i++) if ($i == "(dropped") { v = $(i + 1); sub(/,/, "", v); print v; exit } }' <<<"$tcs")
  local bws=() bw
  for i in $(seq 1 "$n"); do
    bw=$(awk -f "$BENCH/parse_perftest.awk" "$OUT/$tag.client$i.log" | tr ' ' '\n' | awk -F= '$1 == "bw_avg_gbps" { print $2 }')
    [ -n "$bw" ] || { echo "error=flow $i reported no bandwidth (exit status: $bad; see $OUT/$tag.client$i.log)"; return; }
    bws+=("$bw")
  done
  awk -v bws="${bws[*]}" -v sent="${sent:-0}" -v dropped="${dropped:-0}" -v marked="$marked" -v cnp="$cnp_sent" \
    -v handled="$handled" -v ignored="$ignored" 'BEGIN {
      n = split(bws, x, " "); s = 0; s2 = 0
      for (i = 1; i <= n; i++) { s += x[i]; s2 += x[i] * x[i] }
      printf "goodput=%.3f jain=%.3f drops=%.2f sent=%d dropped=%d marked=%d cnp=%d handled=%d ignored=%d flows=%s\n",
        s, (s2 > 0 ? s * s / (n * s2) : 0), (sent + dropped > 0 ? 100 * dropped / (sent + dropped) : 0),
        sent, dropped, marked, cnp, handled, ignored, bws
    }'
}

echo "congestion.sh: ib_write_bw -s $SIZE -D $SECS over urxe ($(cd "$REPO" && git rev-parse --short HEAD 2>/dev/null)), bottleneck tbf ${RATE_MBIT} Mbit/s, CE above $MARK_BPS B/s (bucket $MARK_BURST B), logs in $OUT"
printf '%-5s %-6s %9s %7s %7s %8s %9s %8s %9s %8s  %s\n' flows dcqcn "Gb/s" "x btl" drops Jain "CE seen" "CNPs" "handled" ignored "per flow Gb/s"
STATUS=0
for n in $FLOWS; do
  for m in $MODES; do
    r=$(run_case "$n" "$m")
    if [ -n "$(kv "$r" error)" ]; then
      printf '%-5s %-6s error: %s\n' "$n" "$m" "${r#error=}"
      STATUS=1
      continue
    fi
    g=$(kv "$r" goodput)
    printf '%-5s %-6s %9s %7s %6s%% %8s %9s %8s %9s %8s  %s\n' "$n" "$m" "$g" \
      "$(awk -v g="$g" -v r="$RATE_MBIT" 'BEGIN { printf "%.3f", g * 1000 / r }')" "$(kv "$r" drops)" "$(kv "$r" jain)" \
      "$(kv "$r" marked)" "$(kv "$r" cnp)" "$(kv "$r" handled)" "$(kv "$r" ignored)" "$(sed 's/.*flows=//' <<<"$r")"
  done
done
echo "targets with DCQCN on: goodput >= 0.9 x bottleneck, drops <= 1 %, Jain >= 0.95"
exit $STATUS
