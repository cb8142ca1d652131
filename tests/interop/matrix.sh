#!/bin/bash
# tests/interop/matrix.sh — run Debian's unmodified verbs tools between a kernel rdma_rxe
# VM and the host side, in both directions, capture every case on the bridge, verify every
# packet, and print the table  scenario | direction | result | packets | retrans | ...
# (loss rows: drops, urxe's own retransmitted_pkts and retransmissions per drop)
#
# usage: matrix.sh [-o OUTDIR] [-s NAME[,NAME...]] [-d hs|vs|hs,vs] [--no-loss|--loss-only] [--list]
#   -s    scenarios (see --list); NAME+loss selects a loss variant only
#   -d    hs = host side is the server (VM client), vs = VM is the server (host-side client)
#   -o    output directory (default: target/interop/<HOST_SIDE>-<UTC time> in the repo)
# env:
#   HOST_SIDE=urxe  (default) the host side is an unmodified Debian binary in netns $IX_NS,
#                   LD_LIBRARY_PATH=$URXE_LIB_DIR URXE_ADDR=10.77.0.1, device urxe0
#   HOST_SIDE=vm    a second rxe VM (10.77.0.3) plays the host side: proves the harness
#   URXE_LIB_DIR    (<repo>/target/urxe/lib)   must contain libibverbs.so.1
#   URXE_CHECK      (<repo>/target/release/urxe)  "URXE_CHECK check FILE.pcap" must exit 0
#   IX_LOSS_PCT     (5) random drop percentage of the loss variants
#   IX_CASE_TIMEOUT (60 s; loss variants: 2x) per tool invocation
#   IX_TAIL_WAIT    (30 s) how long the server may run on after its client ended
#   IX_NO_PREFLIGHT=1  skip the "ibv_devinfo -d urxe0" probe (to test the harness's failure paths)
# exit status: 0 = every row passed, 1 = a row failed, 2 = could not run
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
export IX_NS=${IX_NS:-urxe-ix}
export IX_RUN=${IX_RUN:-/tmp/urxe-interop}
export IX_CACHE=${IX_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/urxe-interop}
HOST_SIDE=${HOST_SIDE:-urxe}
URXE_LIB_DIR=${URXE_LIB_DIR:-$REPO/target/urxe/lib}
URXE_CHECK=${URXE_CHECK:-$REPO/target/release/urxe}
LOSS_PCT=${IX_LOSS_PCT:-5}
CASE_TIMEOUT=${IX_CASE_TIMEOUT:-60}
TAIL_WAIT=${IX_TAIL_WAIT:-30}
FAIL_GRACE=5
VM_IP=10.77.0.2
die() { printf 'matrix: ERROR: %s\n' "$*" >&2; exit 2; }
say() { printf 'matrix: %s\n' "$*" >&2; }

# ------------------------------------------------------------------ scenarios
# Command line of both sides ("@DEV@" = the side's device, the client appends the
# server's address), Ethernet MTU of the VMs, and whether it is RC (gets a loss variant).
# -g 1 / -x 1: GID index 1 = the RoCEv2 IPv4 GID on rxe (urxe: indices 0-3 are all it).
# The pingpongs run with -c: each side validates every received buffer.
NAMES=(rc_pingpong_1024 rc_pingpong_4096 uc_pingpong ud_pingpong srq_pingpong send_bw
       write_bw read_bw send_bw_q8 write_bw_q8 write_bw_64k atomic_fetch_add atomic_cmp_swap
       write_lat read_lat)
# RC=tail: an RC pingpong. These tools end without a final barrier: the client destroys its
# QPs as soon as it has its last message, so a lost final ACK leaves the server retransmitting
# into a QP that no longer exists (a property of the tool, not of the transport). Their loss
# variants therefore spare RC ACK packets; everything else (data, read responses, atomic
# ACKs, and the perftest rows' ACKs) is dropped at random.
# LOSS_N: iterations of the loss variant, chosen so that it offers ~300 droppable packets
# (P(no drop at 5%) ~ 1e-7: a loss row whose rules dropped nothing fails).
declare -A CMD MTU RC LOSS_N
def() { CMD[$1]=$2; MTU[$1]=$3; RC[$1]=$4; LOSS_N[$1]=${5:-}; }
PT='-d @DEV@ -x 1 -F -m 1024'
def rc_pingpong_1024 "ibv_rc_pingpong -d @DEV@ -g 1 -m 1024 -s 4096 -n 20 -c"  1500 tail 40
def rc_pingpong_4096 "ibv_rc_pingpong -d @DEV@ -g 1 -m 4096 -s 16384 -n 20 -c" 9000 tail 40
def uc_pingpong      "ibv_uc_pingpong -d @DEV@ -g 1 -m 1024 -s 4096 -n 20 -c"  1500 no
def ud_pingpong      "ibv_ud_pingpong -d @DEV@ -g 1 -s 512 -n 20 -c"           1500 no
def srq_pingpong     "ibv_srq_pingpong -d @DEV@ -g 1 -m 1024 -q 4 -s 4096 -n 10 -c" 1500 tail 40
def send_bw          "ib_send_bw $PT -s 4096 -n 20"                            1500 yes 60
def write_bw         "ib_write_bw $PT -s 4096 -n 20"                           1500 yes 60
def read_bw          "ib_read_bw $PT -s 4096 -n 20"                            1500 yes 60
# Eight QPs at once (issue #15: a slow peer under this load made a fixed 128-PSN window per
# QP time out and re-send everything until RETRY_EXC_ERR); the default timeout (-u 14).
def send_bw_q8       "ib_send_bw $PT -q 8 -s 4096 -n 200"                      1500 yes 20
def write_bw_q8      "ib_write_bw $PT -q 8 -s 4096 -n 200"                     1500 yes 20
# Bandwidth between hosts (issue 38): 64 KiB writes at MTU 1500, urxe -> rxe (vs) and rxe -> urxe
# (hs), with URXE_GSO at its default (on): every segment of a GSO train toward a non-loopback
# peer must carry an ICRC kernel rxe accepts; the loss variant drops ~320 of them.
def write_bw_64k     "ib_write_bw $PT -s 65536 -n 100"                         1500 yes 5
def atomic_fetch_add "ib_atomic_bw $PT -A FETCH_AND_ADD -n 20"                 1500 yes 150
def atomic_cmp_swap  "ib_atomic_bw $PT -A CMP_AND_SWAP -n 20"                  1500 yes 150
def write_lat        "ib_write_lat $PT -s 64 -n 20"                            1500 yes 80
def read_lat         "ib_read_lat $PT -s 64 -n 20"                             1500 yes 150

# ------------------------------------------------------------------ options
OUT= SEL= DIRS=hs,vs LOSS=both
while [ $# -gt 0 ]; do
  case $1 in
    -o) OUT=${2:?-o needs a directory}; shift 2 ;;
    -s) SEL=${2:?-s needs scenario names}; shift 2 ;;
    -d) DIRS=${2:?-d needs hs, vs or hs,vs}; shift 2 ;;
    --no-loss) LOSS=none; shift ;;
    --loss-only) LOSS=only; shift ;;
    --list) for n in "${NAMES[@]}"; do printf '%-18s %s%s\n' "$n" "${CMD[$n]}" "$([ "${RC[$n]}" != no ] && echo "   (+loss: -n ${LOSS_N[$n]})")"; done; exit 0 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
case $HOST_SIDE in urxe|vm) ;; *) die "HOST_SIDE must be urxe or vm (got '$HOST_SIDE')" ;; esac
for d in ${DIRS//,/ }; do [[ $d == hs || $d == vs ]] || die "-d: unknown direction '$d'"; done

CASES=()   # "scenario loss(0|1)"
pick() {   # $1 = name or name+loss
  local n=${1%+loss}
  [ -n "${CMD[$n]:-}" ] || die "unknown scenario '$n' (see --list)"
  if [[ $1 == *+loss ]]; then
    [ "${RC[$n]}" != no ] || die "'$n' is not an RC scenario: no loss variant"
    CASES+=("$n 1")
  else
    [ "$LOSS" != only ] && CASES+=("$n 0")
    [ "$LOSS" != none ] && [ "${RC[$n]}" != no ] && LATER+=("$n 1")
  fi
  return 0
}
LATER=()
if [ -n "$SEL" ]; then for s in ${SEL//,/ }; do pick "$s"; done
else for s in "${NAMES[@]}"; do pick "$s"; done; fi
CASES+=("${LATER[@]}")
[ ${#CASES[@]} -gt 0 ] || die "nothing selected"

# ------------------------------------------------------------------ preflight
[ "$(id -u)" = 0 ] || die "must run as root (netns, tap, capture)"
[ -f "$IX_CACHE/initrd.gz" ] || die "no VM image in $IX_CACHE: run tests/interop/setup.sh first"
for t in qemu-system-x86_64 dumpcap nft python3 ibv_rc_pingpong ib_send_bw; do
  command -v "$t" >/dev/null || die "missing '$t': run tests/interop/setup.sh first"
done
CHECK_MODE=pcap
if [ "$HOST_SIDE" = urxe ]; then
  HOST_DEV=urxe0 HOST_IP=10.77.0.1 HS_LABEL=urxe
  [ -f "$URXE_LIB_DIR/libibverbs.so.1" ] ||
    die "HOST_SIDE=urxe but $URXE_LIB_DIR/libibverbs.so.1 does not exist.
       Build urxe first (provider/build.sh -> target/urxe/lib), set URXE_LIB_DIR,
       or run the harness self-test with HOST_SIDE=vm."
  CHECK_MODE=urxe
else
  HOST_DEV=rxe0 HOST_IP=10.77.0.3 HS_LABEL=rxe-vm
fi
if [ -x "$URXE_CHECK" ]; then
  CHECK_MODE=urxe
elif [ "$CHECK_MODE" = urxe ]; then
  printf '\nmatrix: !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n' >&2
  printf 'matrix: !!! urxe checker %s is missing:\n' "$URXE_CHECK" >&2
  printf 'matrix: !!! the check column FAILS on every row (build it: cargo build --release)\n' >&2
  printf 'matrix: !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\n' >&2
fi

mkdir -p "$IX_RUN"
other=$(cat "$IX_RUN/matrix.pid" 2>/dev/null || true)
if [[ $other =~ ^[0-9]+$ ]] && [ "$other" != $$ ] &&
   tr '\0' ' ' <"/proc/$other/cmdline" 2>/dev/null | grep -q 'matrix\.sh'; then
  die "another matrix.sh (pid $other) is using netns $IX_NS; wait for it or stop it"
fi
echo $$ >"$IX_RUN/matrix.pid"

[ -n "$OUT" ] || OUT=$REPO/target/interop/$HOST_SIDE-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$OUT/pcaps" "$OUT/logs" "$IX_RUN/pids"
OUT=$(cd "$OUT" && pwd)

BG=()
cleanup() {
  local p
  for p in "${BG[@]}"; do kill "$p" 2>/dev/null || true; done
  "$HERE/lab.sh" down >/dev/null 2>&1 || true
  rm -f "$IX_RUN/matrix.pid"
}
trap cleanup EXIT
trap 'say "interrupted"; exit 130' INT TERM
"$HERE/lab.sh" down >/dev/null 2>&1 || true     # a leftover lab from an aborted run
"$HERE/lab.sh" up >/dev/null

in_ns_host() {  # run a command as the host side (urxe mode), inside the netns
  ip netns exec "$IX_NS" env LD_LIBRARY_PATH="$URXE_LIB_DIR" URXE_ADDR=10.77.0.1 "$@"
}
if [ "$HOST_SIDE" = urxe ] && [ "${IX_NO_PREFLIGHT:-0}" != 1 ]; then
  # Fail fast (and not 40 times by timeout) when the library cannot even list its device.
  if ! in_ns_host timeout 20 ibv_devinfo -d urxe0 >"$OUT/logs/preflight.log" 2>&1; then
    cat "$OUT/logs/preflight.log" >&2
    die "ibv_devinfo -d urxe0 with LD_LIBRARY_PATH=$URXE_LIB_DIR URXE_ADDR=10.77.0.1 failed (log above)"
  fi
fi

# urxe's own count of retransmitted request packets in the host-side process: `urxe stat`
# (abstract Unix sockets are per netns, so it runs in $IX_NS) while the tool runs; the last
# answer before the process ends is kept (a figure at most one poll interval old).
urxe_resent() {  # prints retransmitted_pkts summed over the urxe processes in the netns
  ip netns exec "$IX_NS" timeout 5 "$URXE_CHECK" stat 2>/dev/null |
    awk '/retransmitted_pkts:/ { n += $2; seen = 1 } END { if (seen) print n }'
}

per_drop() {  # $1 retransmissions, $2 drops: "$1/$2" to one decimal, or - without figures
  if [[ $1 =~ ^[0-9]+$ ]] && [[ $2 =~ ^[1-9][0-9]*$ ]]; then
    awk -v r="$1" -v d="$2" 'BEGIN { printf "%.1f", r / d }'
  else echo -; fi
}

# ------------------------------------------------------------------ one case
ROWS=() NFAIL=0
run_case() {  # $1 scenario, $2 loss 0|1, $3 direction hs|vs, $4 attempt (1)
  local s=$1 loss=$2 dir=$3 attempt=${4:-1} id name t limit retry=80
  name=$s; [ "$loss" = 1 ] && name="$s+loss"
  id=$name.$dir; id=${id//+/_}
  limit=$CASE_TIMEOUT; [ "$loss" = 1 ] && limit=$((CASE_TIMEOUT * 2))
  local cmd=${CMD[$s]}
  if [ "$loss" = 1 ]; then cmd=$(sed -E "s/ -n [0-9]+/ -n ${LOSS_N[$s]}/" <<<"$cmd"); fi
  local cmd_host=${cmd//@DEV@/$HOST_DEV} cmd_vm=${cmd//@DEV@/rxe0}
  local srv_log="$OUT/logs/$id.server.log" cli_log="$OUT/logs/$id.client.log"
  local pcap="$OUT/pcaps/$id.pcap" tmpcap="$IX_RUN/urxe-ix-capture.pcap"
  local t0=$SECONDS
  export IX_VM_MTU=${MTU[$s]} IX_VM_TIMEOUT=$((limit + 45))
  ip -n "$IX_NS" link set br0 mtu 9000

  if [ "$loss" = 0 ]; then "$HERE/lab.sh" loss 0 >/dev/null
  elif [ "${RC[$s]}" = tail ]; then "$HERE/lab.sh" loss "$LOSS_PCT" spare-acks >/dev/null
  else "$HERE/lab.sh" loss "$LOSS_PCT" >/dev/null; fi

  rm -f "$tmpcap"
  ip netns exec "$IX_NS" dumpcap -q -P -i br0 -f 'udp port 4791' -a "duration:$((limit + 60))" \
    -w "$tmpcap" >"$OUT/logs/$id.dumpcap.log" 2>&1 &
  local cap=$!; BG+=("$cap"); echo "$cap" >"$IX_RUN/pids/dumpcap.pid"
  for t in $(seq 1 50); do [ -s "$tmpcap" ] && break; sleep 0.1; done
  [ -s "$tmpcap" ] || say "$id: capture did not start (see logs/$id.dumpcap.log)"

  # Server first, then the client (which retries its TCP connect until the server listens).
  # Both run in the background under their own timeouts; this loop only ends a case early:
  # a side that fails takes its peer down after FAIL_GRACE s instead of the peer's timeout.
  local srv_pid cli_pid cli_rc=0 srv_rc=0 srv_done= cli_done= kills=0
  if [ "$dir" = hs ]; then                      # host side serves, the rxe VM is the client
    if [ "$HOST_SIDE" = urxe ]; then
      in_ns_host timeout -k 5 "$((limit + 15))" $cmd_host >"$srv_log" 2>&1 & srv_pid=$!
    else
      "$HERE/vm.sh" h "$HOST_IP" "timeout $((limit + 10)) $cmd_host" >"$srv_log" 2>&1 & srv_pid=$!
    fi
    "$HERE/vm.sh" r "$VM_IP" "timeout $limit oob-retry $retry $cmd_vm $HOST_IP" >"$cli_log" 2>&1 & cli_pid=$!
  else                                          # the rxe VM serves, the host side is the client
    "$HERE/vm.sh" r "$VM_IP" "timeout $((limit + 10)) $cmd_vm" >"$srv_log" 2>&1 & srv_pid=$!
    if [ "$HOST_SIDE" = urxe ]; then
      in_ns_host timeout -k 5 "$limit" "$HERE/guest/oob-retry" "$retry" $cmd_host "$VM_IP" >"$cli_log" 2>&1 & cli_pid=$!
    else
      "$HERE/vm.sh" h "$HOST_IP" "timeout $limit oob-retry $retry $cmd_host $VM_IP" >"$cli_log" 2>&1 & cli_pid=$!
    fi
  fi
  BG+=("$srv_pid" "$cli_pid")
  local deadline=$((SECONDS + limit + 90)) stop_at= resent=- r
  local poll=0; [ "$loss" = 1 ] && [ "$HOST_SIDE" = urxe ] && [ -x "$URXE_CHECK" ] && poll=1
  while [ -z "$srv_done" ] || [ -z "$cli_done" ]; do
    if [ "$poll" = 1 ]; then r=$(urxe_resent); [ -n "$r" ] && resent=$r; fi
    if [ -z "$srv_done" ] && ! kill -0 "$srv_pid" 2>/dev/null; then
      wait "$srv_pid" || srv_rc=$?; srv_done=1
      # a failed server: the client cannot succeed any more
      [ "$srv_rc" != 0 ] && [ -z "$cli_done" ] && stop_at=$((SECONDS + FAIL_GRACE))
    fi
    if [ -z "$cli_done" ] && ! kill -0 "$cli_pid" 2>/dev/null; then
      wait "$cli_pid" || cli_rc=$?; cli_done=1
      # the server ends right after its client; a hang past TAIL_WAIT is a failure
      if [ -z "$srv_done" ]; then
        [ "$cli_rc" = 0 ] && stop_at=$((SECONDS + TAIL_WAIT)) || stop_at=$((SECONDS + FAIL_GRACE))
      fi
    fi
    if { [ -n "$stop_at" ] && [ "$SECONDS" -ge "$stop_at" ]; } || [ "$SECONDS" -ge "$deadline" ]; then
      kills=$((kills + 1))
      [ "$kills" -gt 2 ] && { say "$id: a side does not stop; giving up on it"; break; }
      local sig=TERM; [ "$kills" = 2 ] && sig=KILL
      [ -z "$srv_done" ] && { say "$id: stopping the server ($sig; client rc ${cli_rc})"; kill -s $sig "$srv_pid" 2>/dev/null || true; }
      [ -z "$cli_done" ] && { say "$id: stopping the client ($sig; server rc ${srv_rc})"; kill -s $sig "$cli_pid" 2>/dev/null || true; }
      stop_at=$((SECONDS + 15)); deadline=$stop_at
    fi
    sleep 0.2
  done
  [ -n "$srv_done" ] || srv_rc=137
  [ -n "$cli_done" ] || cli_rc=137
  sleep 0.3
  kill -INT "$cap" 2>/dev/null || true
  wait "$cap" 2>/dev/null || true
  rm -f "$IX_RUN/pids/dumpcap.pid"
  mv -f "$tmpcap" "$pcap" 2>/dev/null || : >"$pcap"
  local drops; drops=$("$HERE/lab.sh" drops 2>/dev/null || echo '?')
  # A VM that never booted (vm.sh 98: kernel panic or hang before the tool started) is an
  # infrastructure failure, not a result: run the case once more, and say so in the row.
  if { [ "$srv_rc" = 98 ] || [ "$cli_rc" = 98 ]; } && [ "$attempt" = 1 ]; then
    say "$id: a VM did not boot (server rc $srv_rc, client rc $cli_rc): running the case again"
    mkdir -p "$OUT/logs/boot-failure"
    mv -f "$srv_log" "$cli_log" "$OUT/logs/boot-failure/" 2>/dev/null || true
    run_case "$s" "$loss" "$dir" 2
    return
  fi

  # every packet, two ways: our own stdlib verifier, and (when built) urxe check
  local stat packets='?' retrans='?' check check_note=''
  python3 "$HERE/lib/roce_pcap.py" "$pcap" >"$OUT/logs/$id.pcapcheck.log" 2>&1 && check=ok || check=FAIL
  stat=$(tail -n 1 "$OUT/logs/$id.pcapcheck.log")
  [[ $stat =~ packets=([0-9]+) ]] && packets=${BASH_REMATCH[1]}
  [[ $stat =~ retrans=([0-9]+) ]] && retrans=${BASH_REMATCH[1]}
  [[ $stat =~ bad=([1-9][0-9]*) ]] && check_note=" (${BASH_REMATCH[1]} bad)"
  if [ "$CHECK_MODE" = urxe ]; then
    if [ ! -x "$URXE_CHECK" ]; then
      check="FAIL (urxe check missing)"
    elif "$URXE_CHECK" check "$pcap" >"$OUT/logs/$id.urxecheck.log" 2>&1; then
      [ "$check" = ok ] && check="ok (urxe+icrc)" || check="FAIL (icrc)$check_note"
    else
      check="FAIL (urxe check)"
    fi
  else
    [ "$check" = ok ] && check="ok (icrc)" || check="FAIL$check_note"
  fi

  local result=pass
  if [ "$srv_rc" != 0 ] || [ "$cli_rc" != 0 ]; then result="FAIL (srv $srv_rc, cli $cli_rc)"
  elif [ "$packets" = 0 ] || [ "$packets" = '?' ]; then result="FAIL (no packets)"; fi
  [ "$loss" = 1 ] && [ "$result" = pass ] && [ "$drops" = 0 ] && result="FAIL (loss not applied)"
  local dlabel
  if [ "$dir" = hs ]; then dlabel="$HS_LABEL server, rxe client"; else dlabel="rxe server, $HS_LABEL client"; fi
  [ "$loss" = 1 ] || drops=-
  # retransmissions per drop: urxe's own counter (urxe's side as requester), and the
  # capture's retrans (whichever side was the requester)
  local urxe_per_drop all_per_drop
  urxe_per_drop=$(per_drop "$resent" "${drops%\*}") all_per_drop=$(per_drop "$retrans" "${drops%\*}")
  [ "$loss" = 1 ] && [ "${RC[$s]}" = tail ] && drops="$drops*"
  [ "$attempt" = 1 ] || result="$result (VM boot retried)"
  local row="$name|$dlabel|$result|$packets|$retrans|$drops|$resent|$urxe_per_drop|$all_per_drop|$check|$((SECONDS - t0))s"
  ROWS+=("$row")
  if [[ $result != pass* ]] || [[ $check != ok* ]]; then
    NFAIL=$((NFAIL + 1))
    say "FAIL $id: logs in $OUT/logs/$id.*"
    tail -n 4 "$srv_log" "$cli_log" >&2 || true
  fi
  local f; IFS='|' read -r -a f <<<"$row"
  printf '  %-22s %-28s %-6s %5s pkts %3s retrans %3s dropped %4s resent %4s urxe/drop %4s retrans/drop  check %-14s %s\n' "${f[@]}" >&2
}

say "HOST_SIDE=$HOST_SIDE, ${#CASES[@]} scenarios x ${DIRS//,/+}, loss ${LOSS_PCT}%, output $OUT"
T0=$SECONDS
for c in "${CASES[@]}"; do
  read -r s l <<<"$c"
  for d in ${DIRS//,/ }; do run_case "$s" "$l" "$d"; done
done
ELAPSED=$((SECONDS - T0))

# ------------------------------------------------------------------ report
{
  echo "| scenario | direction | result | packets | retrans | dropped | urxe resent | urxe/drop | retrans/drop | check | time |"
  echo "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"
  for r in "${ROWS[@]}"; do echo "| ${r//|/ | } |"; done
} >"$OUT/table.md"
{
  echo "# urxe interop matrix ($HOST_SIDE)"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'), wall time ${ELAPSED}s, $((${#ROWS[@]} - NFAIL))/${#ROWS[@]} rows passed"
  echo "- host side: $HOST_SIDE ($([ "$HOST_SIDE" = urxe ] && echo "LD_LIBRARY_PATH=$URXE_LIB_DIR URXE_ADDR=10.77.0.1, urxe0" || echo "rxe VM at 10.77.0.3, rxe0")); peer: rdma_rxe in Debian kernel $(cat "$IX_CACHE/kernel-version" 2>/dev/null) at $VM_IP"
  echo "- tools: rdma-core $(dpkg-query -W -f='${Version}' ibverbs-utils 2>/dev/null), perftest $(dpkg-query -W -f='${Version}' perftest 2>/dev/null); loss variants: ${LOSS_PCT}% random drop of UDP/4791 on br0, both directions"
  echo "- dropped*: pingpong loss rows spare RC ACK packets (opcode 0x11): the pingpong tools have no final barrier, so a lost last ACK would leave the server retransmitting into the client's destroyed QP"
  echo "- check: $([ "$CHECK_MODE" = urxe ] && echo "\`urxe check\` + tests/interop/lib/roce_pcap.py" || echo "tests/interop/lib/roce_pcap.py (ICRC, lengths, opcodes)") on every captured packet; retrans = request packets whose PSN did not advance (both sides); urxe resent = urxe's retransmitted_pkts (\`urxe stat\` while the tool runs); urxe/drop = urxe resent / dropped; retrans/drop = retrans / dropped"
  echo
  cat "$OUT/table.md"
} >"$OUT/matrix.md"
echo
cat "$OUT/table.md"
echo
echo "$((${#ROWS[@]} - NFAIL))/${#ROWS[@]} passed in ${ELAPSED}s; report: $OUT/matrix.md, captures: $OUT/pcaps/"
[ "$NFAIL" = 0 ]
