#!/usr/bin/env bash
# bench/hosts.sh - urxe between two hosts: two network namespaces joined by a veth pair, at
# MTU 1500 and 9000 (MTUS), beside TCP (iperf3, one stream) over the same link in the same run.
#   bash bench/hosts.sh            # ib_write_bw 64 KiB vs iperf3, per MTU, IPv4
#   FAMILY=6 bash bench/hosts.sh   # the same with URXE_ADDR and iperf3 on IPv6 addresses
# Prints one line per MTU with both figures and the ratio. Needs root (namespaces), perftest,
# iperf3 (scripts/deps.sh). Uses namespaces uxh-a/uxh-b; removes them at exit.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LIB=${URXE_LIB:-$ROOT/target/urxe/lib}
MTUS=${MTUS:-"1500 9000"}
FAMILY=${FAMILY:-4}
SECS=${SECS:-5}
[ -e "$LIB/libibverbs.so.1" ] || { echo "hosts.sh: no $LIB/libibverbs.so.1 (bash provider/build.sh --release)" >&2; exit 2; }
A=uxh-a B=uxh-b
cleanup() { ip netns del $A 2>/dev/null || true; ip netns del $B 2>/dev/null || true; rm -rf /tmp/uxh-rt; }
trap cleanup EXIT
cleanup
ip netns add $A; ip netns add $B
ip link add uxh0 netns $A type veth peer name uxh1 netns $B
for n in $A $B; do ip -n $n link set lo up; done
# perftest exchanges its QP data over TCP/IPv4 (Debian 12's cannot use an IPv6 server
# address), so both ends always have IPv4 addresses; with FAMILY=6 RoCE and iperf3 use IPv6.
ip -n $A addr add 10.78.0.1/24 dev uxh0; ip -n $B addr add 10.78.0.2/24 dev uxh1
OOB=10.78.0.1
if [ "$FAMILY" = 6 ]; then
  AA=fd00:77::1 AB=fd00:77::2
  ip -n $A addr add $AA/64 dev uxh0 nodad; ip -n $B addr add $AB/64 dev uxh1 nodad
else
  AA=10.78.0.1 AB=10.78.0.2
fi
mkdir -p /tmp/uxh-rt/a /tmp/uxh-rt/b
urxe() { # NS ADDR RT CMD...
  local ns=$1 addr=$2 rt=$3; shift 3
  ip netns exec "$ns" env LD_LIBRARY_PATH="$LIB" URXE_ADDR="$addr" URXE_RUNTIME_DIR="$rt" XDG_RUNTIME_DIR="$rt" "$@"
}
gbps() { awk '/^ *65536 /{print $4}' "$1" | tail -1; }
for mtu in $MTUS; do
  ip -n $A link set uxh0 mtu "$mtu" up; ip -n $B link set uxh1 mtu "$mtu" up
  sleep 1
  # TCP: one iperf3 stream, B -> A.
  ip netns exec $A timeout 30 iperf3 -s -1 -p 5299 >/dev/null 2>&1 & sleep 0.5
  tcp=$(ip netns exec $B timeout 30 iperf3 -c "$AA" -p 5299 -t "$SECS" -J 2>/dev/null |
    python3 -c 'import json,sys; print("%.2f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9))')
  wait
  # urxe: ib_write_bw 64 KiB, B -> A, the same link.
  urxe $A "$AA" /tmp/uxh-rt/a timeout 60 ib_write_bw -d urxe0 -x 1 -F -s 65536 -D "$SECS" --report_gbits -p 18515 >/tmp/uxh-srv.txt 2>&1 & sleep 1
  urxe $B "$AB" /tmp/uxh-rt/b timeout 60 ib_write_bw -d urxe0 -x 1 -F -s 65536 -D "$SECS" --report_gbits -p 18515 "$OOB" >/tmp/uxh-cli.txt 2>&1 || true
  wait || true
  rx=$(gbps /tmp/uxh-cli.txt); rx=${rx:-0}
  ratio=$(awk -v u="$rx" -v t="$tcp" 'BEGIN{ if (t > 0) printf "%.2f", u / t; else print "-" }')
  echo "IPv$FAMILY MTU $mtu: ib_write_bw 64 KiB $rx Gb/s; iperf3 TCP $tcp Gb/s; ratio $ratio x"
done
