#!/bin/bash
# tests/interop/hosts.sh — what two hosts meet that loopback never shows (issue 38), urxe
# against kernel rdma_rxe over the lab bridge:
#   v6_*      RoCEv2 over IPv6 GIDs (br0 fd00:77::1 = urxe, the VM's eth0 fd00:77::2; the tools'
#             out-of-band TCP over IPv4): ibv_rc_pingpong and ib_write_bw 64 KiB, both ways;
#   v6_burst  ip -6 neigh flush on urxe's side, then urxe's first message is 128 packets of 1 KiB
#             toward the VM: none may be lost in the kernel's unresolved-neighbour queue (the
#             capture's retrans must be 0);
#   mtu_*     rdma_cm (rping, 16 KiB messages) between ends of different MTUs: the passive side
#             takes the REQ's path MTU when its link carries it; urxe as server refuses a REQ
#             above its own with REJ 26 (the client must print RDMA_CM_EVENT_REJECTED, error 26).
# Every case is captured on br0 and must pass `urxe check` (ICRC of every packet).
#
# usage: hosts.sh [-o OUTDIR] [-s CASE,CASE]     exit status: 0 = every case passed
# env: URXE_LIB_DIR, URXE_CHECK, IX_NS, IX_RUN, IX_CACHE as the other lab scripts;
#      HX_LIMIT (60 s per tool run)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LAB_NAME=hosts LAB_CASES=1
# shellcheck source=lib/common.sh
. "$HERE/lib/common.sh"
lab_args "$@"
HOST6=fd00:77::1 VM6=fd00:77::2 LIMIT=${HX_LIMIT:-60} CNP_GAP_US=50
lab_require librdmacm.so.1 image

# shellcheck source=lib/cm_image.sh
. "$HERE/lib/cm_image.sh"
cm_image

lab_up
# lab.sh turns IPv6 off in its netns; on for lo (local delivery) and br0 (the bridge ports stay without).
ip netns exec "$IX_NS" sysctl -qw net.ipv6.conf.lo.disable_ipv6=0 net.ipv6.conf.br0.disable_ipv6=0
ip -n "$IX_NS" addr add "$HOST6/64" dev br0 nodad

# The guest's prefix for IPv6 cases: its address, then G = the index of its RoCEv2 GID for it
# (waited for, bounded).
V6_PREFIX="echo 0 >/proc/sys/net/ipv6/conf/eth0/accept_dad; ip -6 addr add $VM6/64 dev eth0; G=; n=0; \
while [ -z \"\$G\" ] && [ \$n -lt 100 ]; do for i in 0 1 2 3 4 5 6 7 8 9; do \
[ \"\$(cat /sys/class/infiniband/rxe0/ports/1/gids/\$i 2>/dev/null)\" = fd00:0077:0000:0000:0000:0000:0000:0002 ] && \
[ \"\$(cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/\$i 2>/dev/null)\" = 'RoCE v2' ] && G=\$i; done; \
[ -z \"\$G\" ] && sleep 0.05; n=\$((n + 1)); done; echo \"rxe0 GID index \$G for $VM6\"; "

# CASE: name | direction (hs: urxe serves, the VM is the client; vs: the VM serves) | VM MTU |
# br0 MTU (= urxe's interface) | family (4|6) | command (DEV, GIDX: the side's) | expect
# (pass | rej26 | noresend: pass and the capture's retrans 0 | gso6: pass, and urxe's WRITE
# packets left in GSO trains: an IPv6 train carries the UDP checksum, a lone datagram 0 |
# cnp: every RoCE packet from the VM is marked CE on urxe's input (nft `ip ecn set ce`); urxe
# must send CNPs (np_cnp_sent > 0 in `urxe stat`), to each QP at most one per
# min_time_between_cnps (CNP_GAP_US, set for urxe): at most 5 % of the capture's gaps between
# CNPs to one QP under 80 % of it (the capture stamps a CNP when it leaves, so one delayed on
# its way out shortens the gap after it; without the limit, a CNP per marked packet, most gaps
# would be the data's, 61 % of them under 40 µs in the first run); kernel rxe ignores the CNPs
# and the transfer completes)
CASES=(
  "v6_rc_pingpong|hs|1500|9000|6|ibv_rc_pingpong -d DEV -g GIDX -m 1024 -s 4096 -n 20 -c|pass"
  "v6_rc_pingpong|vs|1500|9000|6|ibv_rc_pingpong -d DEV -g GIDX -m 1024 -s 4096 -n 20 -c|pass"
  "v6_write_bw_64k|hs|1500|9000|6|ib_write_bw -d DEV -x GIDX -F -m 1024 -s 65536 -n 100|pass"
  "v6_write_bw_64k|vs|1500|9000|6|ib_write_bw -d DEV -x GIDX -F -m 1024 -s 65536 -n 100|gso6"
  "v6_burst|vs|1500|9000|6|ibv_rc_pingpong -d DEV -g GIDX -m 1024 -s 131072 -n 1 -c|noresend"
  "ce_cnp|hs|1500|1500|4|ib_write_bw -d DEV -x GIDX -F -m 1024 -s 65536 -n 100|cnp"
  "mtu_vm9000_urxe1500|hs|9000|1500|4|rping -S 16384 -C 10 -v -V|rej26"
  "mtu_vm1500_urxe9000|hs|1500|9000|4|rping -S 16384 -C 10 -v -V|pass"
  "mtu_urxe1500_vm9000|vs|9000|1500|4|rping -S 16384 -C 10 -v -V|pass"
)

ROWS=() NFAIL=0
run_case() {  # the fields of one CASES entry
  local name=$1 dir=$2 vmtu=$3 bmtu=$4 fam=$5 tmpl=$6 expect=$7
  local id=$name.$dir t0=$SECONDS
  local log=$OUT/logs/$id cap=$OUT/pcaps/$id.pcap
  ip -n "$IX_NS" link set br0 mtu "$bmtu"
  local haddr=$HOST_IP pre=""
  [ "$fam" = 6 ] && haddr=$HOST6 pre=$V6_PREFIX
  [ "$fam" = 4 ] && pre="G=1; "
  local hcmd=${tmpl//DEV/urxe0} vcmd=${tmpl//DEV/rxe0}
  hcmd=${hcmd//GIDX/1} vcmd=${vcmd//GIDX/\$G}
  # rping: the server names its own address, the client the server's
  local rp=0; [[ $tmpl == rping* ]] && rp=1
  ip netns exec "$IX_NS" ip -6 neigh flush all 2>/dev/null || true
  ip netns exec "$IX_NS" dumpcap -q -P -i br0 -f 'udp port 4791' -a "duration:$((LIMIT + 90))" \
    -w "$cap" >"$log.dumpcap.log" 2>&1 &
  local dc=$!; PIDS+=("$dc")
  local n; for n in $(seq 1 50); do [ -s "$cap" ] && break; sleep 0.1; done
  local urxe_pid vm_pid urxe_rc=0 vm_rc=0 slimit=$((LIMIT + 40))
  # a server refused at once ends by its time limit: keep that short
  [ "$expect" = rej26 ] && slimit=45
  local env=(env LD_LIBRARY_PATH="$URXE_LIB_DIR" URXE_ADDR="$haddr") statp=
  if [ "$expect" = cnp ]; then
    env+=(URXE_DCQCN_MIN_TIME_BETWEEN_CNPS=$CNP_GAP_US)
    ip netns exec "$IX_NS" nft -f - <<NFT
table ip hx_ce {
  chain in { type filter hook input priority 0; ip saddr $VM_IP udp dport 4791 ip ecn set ce; }
}
NFT
    # urxe's counters while the tool runs; the last answer is kept
    ( for n in $(seq 1 $((LIMIT * 2))); do
        ip netns exec "$IX_NS" timeout 5 "$URXE_CHECK" stat >"$log.stat.tmp" 2>/dev/null &&
          grep -q np_cnp_sent "$log.stat.tmp" && cp "$log.stat.tmp" "$log.stat"
        sleep 0.5
      done ) & statp=$!; PIDS+=("$statp")
  fi
  rm -f "$IX_RUN/vm-r/serial.log"
  if [ "$dir" = hs ]; then
    [ "$rp" = 1 ] && hcmd="$hcmd -s -a $HOST_IP" && vcmd="$vcmd -c -a $HOST_IP"
    [ "$rp" = 1 ] || vcmd="oob-retry 80 $vcmd $HOST_IP"
    ip netns exec "$IX_NS" "${env[@]}" timeout -k 5 "$slimit" $hcmd >"$log.urxe.log" 2>&1 & urxe_pid=$!
    sleep 0.5
    IX_VM_MTU=$vmtu IX_CACHE=$CM_CACHE IX_VM_TIMEOUT=$((LIMIT + 60)) \
      "$HERE/vm.sh" r "$VM_IP" "$pre timeout $LIMIT $vcmd" >"$log.vm.log" 2>&1 & vm_pid=$!
  else
    [ "$rp" = 1 ] && vcmd="$vcmd -s -a $VM_IP" && hcmd="$hcmd -c -a $VM_IP"
    IX_VM_MTU=$vmtu IX_CACHE=$CM_CACHE IX_VM_TIMEOUT=$((LIMIT + 60)) \
      "$HERE/vm.sh" r "$VM_IP" "$pre timeout $((LIMIT + 10)) $vcmd" >"$log.vm.log" 2>&1 & vm_pid=$!
    # the client waits until the VM's server is up (its log says the guest is ready)
    for n in $(seq 1 300); do grep -q "GID index\|ready" "$IX_RUN/vm-r/serial.log" 2>/dev/null && break; sleep 0.2; done
    sleep 2
    if [ "$rp" = 1 ]; then
      local tries=0
      while :; do
        ip netns exec "$IX_NS" "${env[@]}" timeout -k 5 "$LIMIT" $hcmd >"$log.urxe.log" 2>&1 && urxe_rc=0 || urxe_rc=$?
        tries=$((tries + 1))
        # rping's connect refused (REJ 8 before the VM listens): again, bounded
        grep -q "REJECTED\|ECONNREFUSED" "$log.urxe.log" && [ $tries -lt 20 ] && { sleep 1; continue; }
        break
      done
      urxe_pid=
    else
      ip netns exec "$IX_NS" "${env[@]}" timeout -k 5 "$LIMIT" "$HERE/guest/oob-retry" 80 $hcmd "$VM_IP" \
        >"$log.urxe.log" 2>&1 & urxe_pid=$!
    fi
  fi
  wait "$vm_pid" || vm_rc=$?
  # refused, the VM's client is done: urxe's server (our child) has nothing more to wait for
  [ "$expect" = rej26 ] && [ -n "$urxe_pid" ] && { sleep 1; kill "$urxe_pid" 2>/dev/null || true; }
  [ -n "$urxe_pid" ] && { wait "$urxe_pid" || urxe_rc=$?; }
  if [ -n "$statp" ]; then
    kill "$statp" 2>/dev/null || true; wait "$statp" 2>/dev/null || true
    ip netns exec "$IX_NS" nft delete table ip hx_ce 2>/dev/null || true
  fi
  sleep 0.3
  kill -INT "$dc" 2>/dev/null || true
  wait "$dc" 2>/dev/null || true
  local check retrans=? stat result
  python3 "$HERE/lib/roce_pcap.py" "$cap" >"$log.pcapcheck.log" 2>&1 || true
  stat=$(tail -n 1 "$log.pcapcheck.log")
  [[ $stat =~ retrans=([0-9]+) ]] && retrans=${BASH_REMATCH[1]}
  if "$URXE_CHECK" check "$cap" >"$log.check.log" 2>&1; then check=ok; else check=FAIL; fi
  local cli_log=$log.vm.log; [ "$dir" = vs ] && cli_log=$log.urxe.log
  case $expect in
    pass|noresend|gso6|cnp)
      if [ "$urxe_rc" = 0 ] && [ "$vm_rc" = 0 ]; then result=pass; else result="FAIL (urxe $urxe_rc, vm $vm_rc)"; fi
      [ "$expect" = noresend ] && [ "$result" = pass ] && [ "$retrans" != 0 ] && result="FAIL ($retrans resent)"
      if [ "$expect" = gso6 ] && [ "$result" = pass ]; then
        local trained
        trained=$(tshark -r "$cap" -Y "ipv6.src == $HOST6 && udp.checksum != 0" -T fields -e frame.number 2>/dev/null | wc -l)
        if [ "$trained" -gt 0 ]; then result="pass ($trained in GSO trains)"; else result="FAIL (no GSO train)"; fi
      fi
      if [ "$expect" = cnp ] && [ "$result" = pass ]; then
        local sent cnps gaps short gap
        sent=$(awk '/np_cnp_sent/ { n += $2 } END { print n + 0 }' "$log.stat" 2>/dev/null || echo 0)
        # CNPs (BTH opcode 0x81) from urxe: count, gaps to one QP, those under 80 % of the
        # limit, the smallest (µs)
        read -r cnps gaps short gap < <(tshark -r "$cap" -Y "ip.src == $HOST_IP && infiniband.bth.opcode == 0x81" \
          -T fields -e frame.time_epoch -e infiniband.bth.destqp 2>/dev/null |
          awk -v n="$CNP_GAP_US" '{ if ($2 in last) { g = ($1 - last[$2]) * 1e6; k++; if (g < 0.8 * n) s++
                 if (min == "" || g < min) min = g } last[$2] = $1; c++ }
               END { printf "%d %d %d %s\n", c, k, s, (min == "" ? "-" : sprintf("%.1f", min)) }')
        local what="np_cnp_sent $sent, $cnps CNPs captured, $short of $gaps gaps < 80 % of ${CNP_GAP_US} us (min $gap us)"
        if [ "${sent:-0}" -gt 0 ] && [ "${cnps:-0}" -gt 0 ] && [ $((short * 100)) -le $((gaps * 5)) ]; then
          result="pass ($what)"
        else
          result="FAIL ($what)"
        fi
      fi ;;
    rej26)
      if grep -q "RDMA_CM_EVENT_REJECTED, error 26" "$cli_log"; then result="pass (REJ 26)"; else result="FAIL (no REJ 26; urxe $urxe_rc, vm $vm_rc)"; fi ;;
  esac
  local row="$name|$dir|VM $vmtu, urxe $bmtu|$result|$retrans|$check|$((SECONDS - t0))s"
  ROWS+=("$row")
  if [[ $result != pass* ]] || [ "$check" != ok ]; then
    NFAIL=$((NFAIL + 1)); say "FAIL $id: logs in $log.*"
    tail -n 5 "$log.urxe.log" "$log.vm.log" >&2 || true
  fi
  say "$row"
}

T0=$SECONDS
for c in "${CASES[@]}"; do
  IFS='|' read -r -a f <<<"$c"
  if [ -n "$ONLY" ] && [[ ",$ONLY," != *",${f[0]},"* ]] && [[ ",$ONLY," != *",${f[0]}.${f[1]},"* ]]; then continue; fi
  run_case "${f[@]}"
done
{
  echo "| case | direction | MTU | result | retrans | check | time |"
  echo "| --- | --- | --- | --- | ---: | --- | ---: |"
  for r in "${ROWS[@]}"; do echo "| ${r//|/ | } |"; done
} >"$OUT/table.md"
cat "$OUT/table.md"
echo "$((${#ROWS[@]} - NFAIL))/${#ROWS[@]} passed in $((SECONDS - T0))s; logs and captures: $OUT"
[ "$NFAIL" = 0 ]
