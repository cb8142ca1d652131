#!/usr/bin/env bash
# bench/hosts.sh - urxe between two hosts: two network namespaces joined by a veth pair, at
# MTU 1500 and 9000 (MTUS), IPv4 and IPv6 (FAMILIES), each urxe figure beside what a user would
# pick instead over the same link in the same run:
#   ib_write_bw 64 KiB      beside TCP (iperf3, one stream), ratio = urxe / TCP (bar >= 0.8)
#   ib_send_bw 64 B         message rate (Mpps), beside the same iperf3 run's nothing: reported
#   ib_send_lat 2 B         beside the busy-poll UDP ping-pong (bench/ceiling pp-server/pp-client,
#                           20-byte datagrams), typical one-way (half round trip) latency,
#                           ratio = urxe / ping-pong (bar at MTU 9000: <= 1.5); and beside the
#                           same ping-pong in an RC engine's trip shape (pp-client -r: the message
#                           and an ACK as one 2-segment GSO train, unconnected), no bar
#   MPI ping-pong 1 MiB     tests/mpi/mpi_check --pp 1048576, one rank per namespace: Open MPI
#                           over UCX over urxe (UCX_TLS=rc_verbs,ud_verbs,self) beside Open MPI's
#                           TCP transport (--mca pml ob1 --mca btl tcp,self), same link, same
#                           run; ratio = urxe / TCP (bar >= 1.0)
#   bash bench/hosts.sh                      # all of it
#   FAMILIES=6 MTUS=1500 TESTS=write bash bench/hosts.sh
# TESTS: any of write send lat mpi (default all; mpi needs openmpi-bin, libopenmpi-dev, ucx).
# MPI_N round trips (200), MPI_SIZE bytes (1048576), MPI_TCP_MCA extra --mca words for the TCP run.
# ROUNDS (3): the latency and MPI pairs run that many times, urxe and its comparison alternating,
# and the line gives the median of the rounds' ratios with every round's figures (this VM's
# speed changes by up to 2x within a minute; one pair is a lottery). Prints one line per figure. Needs root
# (namespaces), perftest, iperf3 (scripts/deps.sh). Namespaces uxh-a/uxh-b, removed at exit.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=$ROOT/bench
# shellcheck source=common.sh
. "$BENCH/common.sh"
LIB=${URXE_LIB:-$ROOT/target/urxe/lib}
MTUS=${MTUS:-"1500 9000"}
FAMILIES=${FAMILIES:-${FAMILY:-"4 6"}}
TESTS=${TESTS:-"write send lat mpi"}
MPI_N=${MPI_N:-200}
SECS=${SECS:-5}
LAT_N=${LAT_N:-20000}
ROUNDS=${ROUNDS:-3}
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "hosts.sh: ROUNDS must be a positive count, not '$ROUNDS'" >&2; exit 2; }
[ -e "$LIB/libibverbs.so.1" ] || { echo "hosts.sh: no $LIB/libibverbs.so.1 (bash provider/build.sh --release)" >&2; exit 2; }
if [[ " $TESTS " == *" lat "* ]]; then
  build_ceiling /tmp/uxh-ceiling-build.log || { echo "hosts.sh: bench/ceiling did not build: $(tail -n 1 /tmp/uxh-ceiling-build.log)" >&2; exit 2; }
fi
A=uxh-a B=uxh-b
cleanup() { ip netns del $A 2>/dev/null || true; ip netns del $B 2>/dev/null || true; rm -rf /tmp/uxh-rt; }
trap cleanup EXIT
cleanup
ip netns add $A; ip netns add $B
ip link add uxh0 netns $A type veth peer name uxh1 netns $B
for n in $A $B; do ip -n $n link set lo up; done
# perftest exchanges its QP data over TCP/IPv4 (Debian 12's cannot use an IPv6 server
# address), so both ends always have IPv4 addresses; for IPv6 RoCE, iperf3 and the ping-pong
# use the IPv6 ones.
ip -n $A addr add 10.78.0.1/24 dev uxh0; ip -n $B addr add 10.78.0.2/24 dev uxh1
ip -n $A addr add fd00:77::1/64 dev uxh0 nodad; ip -n $B addr add fd00:77::2/64 dev uxh1 nodad
OOB=10.78.0.1
mkdir -p /tmp/uxh-rt/a /tmp/uxh-rt/b
if [[ " $TESTS " == *" mpi "* ]]; then
  mpicc -O2 -o /tmp/uxh-rt/mpi_check "$ROOT/tests/mpi/mpi_check.c"
  # mpirun's rsh launcher calls `AGENT HOST COMMAND...`, HOST a namespace here: the daemon runs
  # in it under `urxe run` (UCX's /dev/infiniband), with that namespace's RoCE address and
  # its own TMPDIR (the namespaces share /tmp and a host name).
  cat >/tmp/uxh-rt/agent <<AGENT
#!/bin/sh
host=\$1; shift
export TMPDIR=/tmp/uxh-rt/tmp-\$host URXE_RUNTIME_DIR=/tmp/uxh-rt/tmp-\$host XDG_RUNTIME_DIR=/tmp/uxh-rt/tmp-\$host
mkdir -p "\$TMPDIR"
case \$host in $A) export URXE_ADDR=\$UXH_ADDR_A ;; *) export URXE_ADDR=\$UXH_ADDR_B ;; esac
# the TCP run's daemons (UXH_PLAIN=1) without urxe: UCX would open urxe0 in every rank
[ "\$UXH_PLAIN" = 1 ] && exec ip netns exec "\$host" /bin/sh -c "\$*"
exec ip netns exec "\$host" $ROOT/target/release/urxe run --lib $LIB -- /bin/sh -c "\$*"
AGENT
  chmod +x /tmp/uxh-rt/agent
  printf '%s slots=1\n%s slots=1\n' $A $B >/tmp/uxh-rt/hostfile
fi
# mpi LABEL MCA...: the 1 MiB ping-pong between the namespaces; prints its MB/s. `--bind-to
# none`: mpirun binds each node's first rank to core 0, and both "nodes" are this machine, so
# bound, the two busy-polling ranks shared one core and each waited out the other's time slice
# (Open MPI's TCP transport took 24 ms per 64 KiB round trip that way).
mpi() {
  local label=$1; shift
  mkdir -p /tmp/uxh-rt/tmp-mpirun
  ip netns exec $A env TMPDIR=/tmp/uxh-rt/tmp-mpirun UXH_ADDR_A="$AA" UXH_ADDR_B="$AB" UXH_PLAIN="${UXH_PLAIN:-0}" \
    UCX_TLS=rc_verbs,ud_verbs,self timeout -k 5 120 mpirun --allow-run-as-root -np 2 \
    --hostfile /tmp/uxh-rt/hostfile --map-by node --bind-to none --mca plm_rsh_agent /tmp/uxh-rt/agent \
    --mca oob_tcp_if_include 10.78.0.0/24 -x PATH -x UCX_TLS -x UXH_ADDR_A -x UXH_ADDR_B "$@" \
    /tmp/uxh-rt/mpi_check "$MPI_N" --pp "${MPI_SIZE:-1048576}" >"/tmp/uxh-mpi-$label.txt" 2>&1 || true
  sed -n 's/.*x [0-9]*: \([0-9.]*\) MB\/s.*verified.*/\1/p' "/tmp/uxh-mpi-$label.txt" | tail -1
}
urxe() { # NS ADDR RT CMD...
  local ns=$1 addr=$2 rt=$3; shift 3
  ip netns exec "$ns" env LD_LIBRARY_PATH="$LIB" URXE_ADDR="$addr" URXE_RUNTIME_DIR="$rt" XDG_RUNTIME_DIR="$rt" "$@"
}
# perftest pair, B (client) -> A (server); the client's output in /tmp/uxh-cli.txt
perf() {
  urxe $A "$AA" /tmp/uxh-rt/a timeout 90 "$@" -p 18515 >/tmp/uxh-srv.txt 2>&1 & sleep 1
  urxe $B "$AB" /tmp/uxh-rt/b timeout 90 "$@" -p 18515 "$OOB" >/tmp/uxh-cli.txt 2>&1 || true
  wait || true
}
col() { awk -v s="$1" -v c="$2" '$1 == s && NF >= c { v = $c } END { print (v == "" ? 0 : v) }' /tmp/uxh-cli.txt; }
ratio() { awk -v u="$1" -v t="$2" 'BEGIN { if (t > 0) printf "%.2f", u / t; else print "-" }'; }
# median of the numbers given ("-" when one is not a number: a round failed)
median() { printf '%s\n' "$@" | sort -g | awk '!/^[0-9.]+$/ { bad = 1 } { v[NR] = $1 } END { if (bad || NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "# bench/hosts.sh $(date -u +%FT%TZ), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
for fam in $FAMILIES; do
  if [ "$fam" = 6 ]; then AA=fd00:77::1 AB=fd00:77::2; else AA=10.78.0.1 AB=10.78.0.2; fi
  for mtu in $MTUS; do
    ip -n $A link set uxh0 mtu "$mtu" up; ip -n $B link set uxh1 mtu "$mtu" up
    sleep 1
    if [[ " $TESTS " == *" write "* ]]; then
      # TCP: one iperf3 stream, B -> A.
      ip netns exec $A timeout 30 iperf3 -s -1 -p 5299 >/dev/null 2>&1 & sleep 0.5
      tcp=$(ip netns exec $B timeout 30 iperf3 -c "$AA" -p 5299 -t "$SECS" -J 2>/dev/null |
        python3 -c 'import json,sys; print("%.2f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9))' || echo 0)
      wait || true
      perf ib_write_bw -d urxe0 -x 1 -F -s 65536 -D "$SECS" --report_gbits
      rx=$(col 65536 4)
      echo "IPv$fam MTU $mtu: ib_write_bw 64 KiB $rx Gb/s; iperf3 TCP $tcp Gb/s; ratio $(ratio "$rx" "$tcp") x"
    fi
    if [[ " $TESTS " == *" send "* ]]; then
      perf ib_send_bw -d urxe0 -x 1 -F -s 64 -D "$SECS" --report_gbits
      echo "IPv$fam MTU $mtu: ib_send_bw 64 B $(col 64 5) Mpps ($(col 64 4) Gb/s)"
    fi
    if [[ " $TESTS " == *" lat "* ]]; then
      pp_addr=$AA:4792; [ "$fam" = 6 ] && pp_addr=[$AA]:4792
      # pingpong [-r] -> the ceiling pair's typical one-way µs (-r: an RC engine's trip shape)
      pingpong() {
        ip netns exec $A timeout 60 "$CEIL" pp-server "$pp_addr" -t 50 "$@" >/tmp/uxh-pps.txt 2>&1 & sleep 0.3
        ip netns exec $B timeout 60 "$CEIL" pp-client "$pp_addr" -n "$LAT_N" -t 40 "$@" 2>&1 | sed -n 's/.*half_rtt_typical_us=\([0-9.]*\).*/\1/p'
        wait || true
      }
      rounds="" ratios=() rcratios=()
      for ((r = 1; r <= ROUNDS; r++)); do
        pp=$(pingpong); pp=${pp:-0}
        pprc=$(pingpong -r); pprc=${pprc:-0}
        perf ib_send_lat -d urxe0 -x 1 -F -s 2 -n "$LAT_N"
        lat=$(col 2 5)
        ratios+=("$(ratio "$lat" "$pp")")
        rcratios+=("$(ratio "$lat" "$pprc")")
        rounds+="${rounds:+; }$lat / $pp / $pprc"
      done
      echo "IPv$fam MTU $mtu: ib_send_lat 2 B typical / busy-poll UDP ping-pong / its RC shape (one way), us: $rounds; median ratio $(median "${ratios[@]}") x (to the RC shape $(median "${rcratios[@]}") x)"
    fi
    if [[ " $TESTS " == *" mpi "* ]]; then
      rounds="" ratios=()
      for ((r = 1; r <= ROUNDS; r++)); do
        # shellcheck disable=SC2086 # MPI_TCP_MCA: extra --mca words for the TCP run
        tcpmb=$(UXH_PLAIN=1 mpi tcp-$fam-$mtu --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include 10.78.0.0/24 ${MPI_TCP_MCA:-})
        ucxmb=$(mpi ucx-$fam-$mtu --mca pml ucx --mca btl self)
        ratios+=("$(ratio "${ucxmb:-0}" "${tcpmb:-0}")")
        rounds+="${rounds:+; }${ucxmb:-0} / ${tcpmb:-0}"
      done
      echo "IPv$fam MTU $mtu: MPI ping-pong 1 MiB, UCX/urxe / Open MPI TCP, MB/s: $rounds; median ratio $(median "${ratios[@]}") x"
    fi
  done
done
