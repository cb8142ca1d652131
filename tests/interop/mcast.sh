#!/bin/bash
# tests/interop/mcast.sh — UD multicast between urxe and kernel rdma_rxe: Debian's unmodified
# `mckey` (rdma_join_multicast, UD SENDs to QPN 0xFFFFFF) in both directions:
#   hs: urxe (netns, 10.77.0.1) sends to the group, mckey on the rxe VM receives;
#   vs: the rxe VM sends, two urxe mckey processes on 10.77.0.1 (one shared address) receive.
# Each receiver exits 0 only after it took all COUNT messages; the bridge is captured and must
# pass `urxe check` with exactly COUNT UD SENDs to the group (QPN 0xFFFFFF) from the sender.
#
# The VM image of setup.sh has no rdma_cm: lib/cm_image.sh adds rdma_ucm and rdmacm-utils.
#
# usage: mcast.sh [-o OUTDIR]        exit status: 0 = both directions passed
# env: URXE_LIB_DIR (<repo>/target/urxe/lib), URXE_CHECK (<repo>/target/release/urxe),
#      IX_NS, IX_RUN, IX_CACHE as the other lab scripts; MC_COUNT (20), MC_GROUP (239.77.0.1)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LAB_NAME=mcast
# shellcheck source=lib/common.sh
. "$HERE/lib/common.sh"
lab_args "$@"
LIMIT=90
COUNT=${MC_COUNT:-20} GROUP=${MC_GROUP:-239.77.0.1}
command -v mckey >/dev/null || die "mckey missing (rdmacm-utils)"
lab_require librdmacm.so.1 image

# ---------------------------------------------------------------- the image with rdma_cm
# shellcheck source=lib/cm_image.sh
. "$HERE/lib/cm_image.sh"
cm_image
CACHE=$CM_CACHE

# ---------------------------------------------------------------- the lab
lab_up
"$HERE/lab.sh" loss 0 >/dev/null
vm() { IX_CACHE=$CACHE IX_VM_TIMEOUT=$((LIMIT + 60)) "$HERE/vm.sh" r "$VM_IP" "$1"; }

run_dir() {  # $1 = hs | vs
  local dir=$1 cap="$OUT/pcaps/$1.pcap" rc=0 vm_rc=0 i pids=() vmpid
  local mk="mckey -m $GROUP -C $COUNT"
  ip netns exec "$IX_NS" dumpcap -q -P -i br0 -f 'udp port 4791' -a "duration:$((LIMIT + 90))" \
    -w "$cap" >"$OUT/logs/$dir.dumpcap.log" 2>&1 &
  local dc=$!
  PIDS+=("$dc")
  for i in $(seq 1 50); do [ -s "$cap" ] && break; sleep 0.1; done
  if [ "$dir" = hs ]; then
    # The VM receives; urxe sends once the VM's receiver has joined (it says so in its output,
    # which only shows at the end: wait for the guest to be ready, then for its join).
    rm -f "$IX_RUN/vm-r/share/ready"
    vm "timeout $LIMIT $mk -b $VM_IP" >"$OUT/logs/$dir.vm.log" 2>&1 &
    vmpid=$!
    PIDS+=("$vmpid")
    for i in $(seq 1 600); do [ -f "$IX_RUN/vm-r/share/ready" ] && break; sleep 0.2; done
    [ -f "$IX_RUN/vm-r/share/ready" ] || say "$dir: the VM did not get ready"
    sleep 5   # mckey's join in a TCG guest (its own sender side pauses 3 s more)
    in_ns timeout -k 5 "$LIMIT" $mk -b "$HOST_IP" -s >"$OUT/logs/$dir.urxe0.log" 2>&1 || rc=1
  else
    # Two urxe receivers on one shared address, then the VM sends.
    for i in 0 1; do
      in_ns timeout -k 5 "$((LIMIT + 60))" $mk -b "$HOST_IP" >"$OUT/logs/$dir.urxe$i.log" 2>&1 &
      pids+=($!)
    done
    PIDS+=("${pids[@]}")
    sleep 2
    vm "timeout $LIMIT $mk -b $VM_IP -s" >"$OUT/logs/$dir.vm.log" 2>&1 &
    vmpid=$!
    PIDS+=("$vmpid")
  fi
  wait "$vmpid" || vm_rc=$?
  for i in "${!pids[@]}"; do wait "${pids[$i]}" || { rc=1; say "$dir: urxe receiver $i failed"; }; done
  sleep 0.5
  kill -INT "$dc" 2>/dev/null || true
  wait "$dc" 2>/dev/null || true
  local src=$HOST_IP checked sent bad
  [ "$dir" = vs ] && src=$VM_IP
  checked=$("$URXE_CHECK" check "$cap" 2>&1 || true)
  sent=$(grep -c "^[0-9]* $src:[0-9]* > $GROUP:4791 UD SEND_ONLY_WITH_IMMEDIATE qp=0xffffff .*qkey=0x1234567" <<<"$checked" || true)
  bad=$(grep -c "> $GROUP:4791" <<<"$checked" || true)
  local summary verdict=pass
  summary=$(tail -n 1 <<<"$checked")
  [ "$vm_rc" = 0 ] || verdict="FAIL (rxe side rc $vm_rc)"
  [ "$rc" = 0 ] || verdict="FAIL (urxe side)"
  [[ $summary == *PASS* ]] || verdict="FAIL (urxe check: $summary)"
  [ "$sent" = "$COUNT" ] && [ "$bad" = "$COUNT" ] ||
    verdict="FAIL ($sent UD SENDs to $GROUP QPN 0xFFFFFF from $src on the wire, $bad to the group, expected $COUNT)"
  grep -q "data transfers complete" "$OUT/logs/$dir.vm.log" || verdict="FAIL (rxe mckey did not complete)"
  printf '%s\n' "$checked" >"$OUT/logs/$dir.check.txt"
  printf 'mcast %s: %s; %s UD SENDs to %s (QPN 0xFFFFFF); urxe check: %s\n' "$dir" "$verdict" "$sent" "$GROUP" "$summary"
  [ "$verdict" = pass ]
}

fail=0
run_dir hs || fail=1
run_dir vs || fail=1
if [ "$fail" = 0 ]; then
  echo "mcast: mckey urxe <-> kernel rxe, both directions: pass"
else
  echo "mcast: FAILED (logs in $OUT/logs)"; tail -n 5 "$OUT"/logs/*.log >&2 || true
fi
exit $fail
