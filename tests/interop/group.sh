#!/bin/bash
# tests/interop/group.sh — four urxe processes share one address (10.77.0.1:4791, one group)
# and talk to the kernel rdma_rxe VM at the same time, in both directions:
#   vs: the VM runs 4 ibv_rc_pingpong servers, 4 urxe clients connect at once;
#   hs: 4 urxe servers, the VM runs 4 clients at once.
# Every pair validates every buffer (-c); every packet on the bridge must pass `urxe check`.
#
# usage: group.sh [-o OUTDIR]        exit status: 0 = both directions passed
# env: URXE_LIB_DIR (<repo>/target/urxe/lib), URXE_CHECK (<repo>/target/release/urxe),
#      IX_NS, IX_RUN, IX_CACHE as the other lab scripts
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LAB_NAME=group
# shellcheck source=lib/common.sh
. "$HERE/lib/common.sh"
lab_args "$@"
PAIRS=4 BASE_PORT=18601 LIMIT=120
PP="-g 1 -m 1024 -s 4096 -n 100 -c"
lab_require libibverbs.so.1

lab_up
"$HERE/lab.sh" loss 0 >/dev/null
ip -n "$IX_NS" link set br0 mtu 9000

# The VM's job (busybox sh): PAIRS pingpongs at once (servers, or clients of $1), each under
# its own timeout; exits 0 only if all pass, after printing their outputs.
vm_job() {
  local peer=${1:-} ports
  ports=$(seq -s ' ' "$BASE_PORT" $((BASE_PORT + PAIRS - 1)))
  local run="ibv_rc_pingpong -d rxe0 $PP -p \$p"
  [ -n "$peer" ] && run="oob-retry 80 $run $peer"
  printf '%s\n' \
    "pids=''; for p in $ports; do timeout $LIMIT $run >out\$p 2>&1 & pids=\"\$pids \$!\"; done" \
    "rc=0; for q in \$pids; do wait \$q || rc=1; done" \
    "for p in $ports; do cat out\$p; done; exit \$rc"
}

run_dir() {  # $1 = vs | hs
  local dir=$1
  local cap="$OUT/pcaps/$dir.pcap" rc=0 vm_rc=0 i pids=()
  ip netns exec "$IX_NS" dumpcap -q -P -i br0 -f 'udp port 4791' -a "duration:$((LIMIT + 60))" \
    -w "$cap" >"$OUT/logs/$dir.dumpcap.log" 2>&1 &
  local dc=$!
  PIDS+=("$dc")
  for i in $(seq 1 50); do [ -s "$cap" ] && break; sleep 0.1; done
  if [ "$dir" = vs ]; then
    IX_VM_TIMEOUT=$((LIMIT + 60)) "$HERE/vm.sh" r "$VM_IP" "$(vm_job)" \
      >"$OUT/logs/$dir.vm.log" 2>&1 &
    local vm=$!
    for i in $(seq 0 $((PAIRS - 1))); do
      in_ns timeout -k 5 "$LIMIT" "$HERE/guest/oob-retry" 200 ibv_rc_pingpong -d urxe0 $PP \
        -p $((BASE_PORT + i)) "$VM_IP" >"$OUT/logs/$dir.urxe$i.log" 2>&1 &
      pids+=($!)
    done
  else
    for i in $(seq 0 $((PAIRS - 1))); do
      in_ns timeout -k 5 "$((LIMIT + 60))" ibv_rc_pingpong -d urxe0 $PP -p $((BASE_PORT + i)) \
        >"$OUT/logs/$dir.urxe$i.log" 2>&1 &
      pids+=($!)
    done
    sleep 1
    IX_VM_TIMEOUT=$((LIMIT + 60)) "$HERE/vm.sh" r "$VM_IP" "$(vm_job $HOST_IP)" \
      >"$OUT/logs/$dir.vm.log" 2>&1 &
    local vm=$!
  fi
  PIDS+=("${pids[@]}" "$vm")
  wait "$vm" || vm_rc=$?
  for i in "${!pids[@]}"; do wait "${pids[$i]}" || { rc=1; echo "group: $dir urxe process $i failed" >&2; }; done
  sleep 0.5
  kill -INT "$dc" 2>/dev/null || true
  wait "$dc" 2>/dev/null || true
  local gids checked
  # The four urxe processes share one GID (the address's), as on a NIC.
  gids=$(grep -h "local address" "$OUT"/logs/$dir.urxe*.log | sed 's/.*GID //' | sort -u | wc -l)
  checked=$("$URXE_CHECK" check --quiet "$cap" 2>&1 | tail -n 1)
  local verdict=pass
  [ "$vm_rc" = 0 ] || verdict="FAIL (VM side rc $vm_rc)"
  [ "$rc" = 0 ] || verdict="FAIL (urxe side)"
  [ "$gids" = 1 ] || verdict="FAIL ($gids distinct urxe GIDs, expected 1)"
  [[ $checked == *PASS* ]] || verdict="FAIL (urxe check: $checked)"
  printf 'group %s: %s; urxe check: %s\n' "$dir" "$verdict" "$checked"
  [ "$verdict" = pass ]
}

fail=0
run_dir vs || fail=1
run_dir hs || fail=1
[ "$fail" = 0 ] && echo "group: 4 urxe processes on $HOST_IP with kernel rxe, both directions: pass" ||
  { echo "group: FAILED (logs in $OUT/logs)"; tail -n 3 "$OUT"/logs/*.log >&2 || true; }
exit $fail
