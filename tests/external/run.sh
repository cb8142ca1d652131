#!/usr/bin/env bash
# Programs we did not write, built from current upstream sources, over urxe's libibverbs.so.1
# and librdmacm.so.1 (docs/external-programs.md):
#   * rdma-core 56.1's example programs (ibv_*_pingpong, rping, ucmatose, udaddy, mckey,
#     rdma_server/rdma_client, rcopy, rstream, riostream, cmtime) and its pyverbs suite;
#   * perftest 25.01's verbs and rdma_cm (-R) pairs;
#   * libfabric 2.1.0's fabtests for the verbs provider, msg and rdm (ofi_rxm) modes.
#
#   tests/external/run.sh [-o DIR]      (default DIR: target/urxe/reports)
#   URXE_EXT_ONLY="programs perftest" tests/external/run.sh     (some groups only)
#
# tests/external/fetch-build.sh downloads and builds them once (cached). Everything runs in a
# private network and PID namespace (unshare) with its own URXE_RUNTIME_DIR, so nothing here
# meets another urxe or fabtests run on the host (runfabtests.sh kills every process named
# fi_* it can see). The four groups run in parallel on disjoint ports. Writes DIR/external.md
# and one log per group; exits nonzero if a test failed that is not listed with its reason.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=$ROOT/target/urxe/reports
while getopts o: opt; do case $opt in o) OUT=$(realpath -m "$OPTARG") ;; *) exit 2 ;; esac; done
LIB=$ROOT/target/urxe/lib

if [ -z "${URXE_EXT_INSIDE:-}" ]; then
  T0=$(date +%s)
  CACHE=$(bash tests/external/fetch-build.sh | tail -1)
  [ -f "$LIB/librdmacm.so.1" ] || bash provider/build.sh --release >/dev/null
  [ -x target/release/urxe ] || cargo build -q --release --bin urxe
  mkdir -p "$OUT"
  export URXE_EXT_INSIDE=1 URXE_EXT_CACHE=$CACHE URXE_EXT_T0=$T0
  exec unshare --net --pid --fork --mount-proc -- bash "$0" -o "$OUT"
fi

# --- inside the private namespaces ---
CACHE=$URXE_EXT_CACHE
RC=$CACHE/rdma-core-56.1/build
PT=$CACHE/perftest-25.01.0+0.80/install/bin
LF=$CACHE/libfabric-2.1.0/install
RT=$(mktemp -d /tmp/urxe-external.XXXXXX)
trap 'rm -rf "$RT"' EXIT
export URXE_RUNTIME_DIR=$RT XDG_RUNTIME_DIR=$RT
ip link set lo up
# A veth pair for libfabric (its verbs provider lists devices by their netdev address).
ip link add ext0 type veth peer name ext1
ip addr add 10.43.0.1/24 dev ext0
ip link set ext0 up; ip link set ext1 up
SRV=127.31.0.2 CLI=127.31.0.3
# perftest 25.01 links rdma-core 56's vendor libraries (libmlx5, libefa, libhns, libmana) as
# Debian's does; they load against urxe's libibverbs.so.1 (its IBVERBS_PRIVATE_34 calls) and
# stay idle, as no device is theirs. Only they are taken from rdma-core's build, never its
# libibverbs.so.1 or librdmacm.so.1.
mkdir -p "$RT/vendor"
for l in "$RC"/lib/lib{mlx5,efa,hns,mana}.so.1; do [ -e "$l" ] && ln -s "$l" "$RT/vendor/"; done
LDP=$LIB:$RT/vendor
RES=$RT/results; : > "$RES"
LOGDIR=$OUT/external-logs; rm -rf "$LOGDIR"; mkdir -p "$LOGDIR"

# result GROUP NAME pass|FAIL|notrun REASON
result() { echo "$1|$2|$3|$4" >> "$RES"; }

# pair GROUP NAME PORT-SETTLE-S "SERVER CMD" "CLIENT CMD" [CHECK-REGEX]: server (URXE_ADDR=SRV)
# then client (URXE_ADDR=CLI), each bounded by 120 s; pass if both exit 0 (a server that
# serves forever, marked by a leading '&', is stopped after the client) and the client's
# output matches CHECK-REGEX. A client refused because the server was not listening yet is
# run again (at most 3 times).
pair() {
  local g=$1 n=$2 scmd=$3 ccmd=$4 check=${5:-} forever=0 log="$LOGDIR/$1-$2.log" try rc_s rc_c spid
  [ "${scmd:0:1}" = "&" ] && { forever=1; scmd=${scmd:1}; }
  for try in 1 2 3; do
    : > "$log"
    rm -f "$log.pid"
    (cd "$RT" && URXE_ADDR=$SRV LD_LIBRARY_PATH=$LDP timeout 120 bash -c "echo \$\$ > $log.pid; exec $scmd" >"$log.s" 2>&1) & spid=$!
    sleep 2
    rc_c=0; (cd "$RT" && URXE_ADDR=$CLI LD_LIBRARY_PATH=$LDP timeout 120 bash -c "$ccmd" >"$log.c" 2>&1) || rc_c=$?
    if [ $forever = 1 ]; then sleep 1; [ -s "$log.pid" ] && kill -TERM "$(cat "$log.pid")" 2>/dev/null || true; fi
    rc_s=0; wait $spid || rc_s=$?
    [ $forever = 1 ] && rc_s=0
    { echo "== server: $scmd (rc $rc_s)"; cat "$log.s"; echo "== client: $ccmd (rc $rc_c)"; cat "$log.c"; } >> "$log"
    rm -f "$log.s" "$log.c" "$log.pid"
    if [ $rc_c != 0 ] && grep -qE "REJECTED|error 8|Connection refused|ECONNREFUSED|connect: |Couldn't connect" "$log" && [ $try -lt 3 ]; then
      echo "(refused: attempt $try; again)" >> "$log.retries"; continue
    fi
    break
  done
  if [ $rc_s = 0 ] && [ $rc_c = 0 ] && { [ -z "$check" ] || grep -qE "$check" "$log"; }; then
    result "$g" "$n" pass ""
  else
    result "$g" "$n" FAIL "server rc $rc_s, client rc $rc_c; see external-logs/$g-$n.log"
  fi
}

rdma_core_programs() {
  local b=$RC/bin g=rdma-core-56
  for t in rc uc ud srq xsrq; do
    # -c: the pingpongs check every received buffer (xsrq has no such option: "success").
    local extra="-c" ok="iters in"; [ $t = ud ] && extra="-c -s 1024"; [ $t = xsrq ] && extra="" ok="^success"
    pair $g ibv_${t}_pingpong "$b/ibv_${t}_pingpong -d urxe0 -g 1 -p 18701 $extra" \
      "$b/ibv_${t}_pingpong -d urxe0 -g 1 -p 18701 $extra $SRV" "$ok"
  done
  pair $g ibv_rc_pingpong-events "$b/ibv_rc_pingpong -d urxe0 -g 1 -p 18710 -e -c" \
    "$b/ibv_rc_pingpong -d urxe0 -g 1 -p 18710 -e -c $SRV" "iters in"
  pair $g ibv_rc_pingpong-new-send "$b/ibv_rc_pingpong -d urxe0 -g 1 -p 18711 -N -c" \
    "$b/ibv_rc_pingpong -d urxe0 -g 1 -p 18711 -N -c $SRV" "iters in"
  pair $g rping "$b/rping -s -a $SRV -C 100 -p 18720 -V -S 1000" "$b/rping -c -a $SRV -C 100 -p 18720 -V -S 1000"
  pair $g ucmatose "$b/ucmatose -p 18721" "$b/ucmatose -s $SRV -p 18721" "test complete|return status 0"
  pair $g udaddy "$b/udaddy" "$b/udaddy -s $SRV" "test complete|return status 0"
  pair $g rdma_server-client "$b/rdma_server -p 18722" "$b/rdma_client -s $SRV -p 18722" "rdma_client: end 0"
  # cmtime 56 syncs client and server over a TCP socket on the same port; both run -c times.
  pair $g cmtime "$b/cmtime -b $SRV -p 18723 -c 20" "$b/cmtime -s $SRV -p 18723 -c 20" "connect"
  pair $g rstream-verified "$b/rstream -p 18724 -T b -T v -S 1000000 -C 40" \
    "$b/rstream -s $SRV -p 18724 -T b -T v -S 1000000 -C 40"
  pair $g rstream-async "$b/rstream -p 18725 -T a -T v -S 4096 -C 500" \
    "$b/rstream -s $SRV -p 18725 -T a -T v -S 4096 -C 500"
  pair $g riostream "$b/riostream -p 18726 -T b -S 1000000 -C 40" \
    "$b/riostream -s $SRV -p 18726 -T b -S 1000000 -C 40"
  head -c 3000000 /dev/urandom > "$RT/rcopy.src"
  pair $g rcopy "&$b/rcopy -p 18727" "$b/rcopy $RT/rcopy.src $SRV:$RT/rcopy.dst -p 18727 && cmp $RT/rcopy.src $RT/rcopy.dst && echo SAME" "SAME"
  # mckey's -p is the port space (UDP by default), not a port.
  pair $g mckey "$b/mckey -m 239.1.2.3 -b $SRV -C 20" "$b/mckey -m 239.1.2.3 -b $CLI -s -C 20" \
    "test complete|return status 0"
}

perftest_pairs() {
  local g=perftest-25.01 port=18800 t m
  for t in ib_send_bw ib_write_bw ib_read_bw ib_atomic_bw ib_send_lat ib_write_lat ib_read_lat ib_atomic_lat; do
    for m in verbs rdma_cm; do
      local extra="-x 1"; [ $m = rdma_cm ] && extra="-R"
      port=$((port + 1))
      pair $g "$t-$m" "$PT/$t -d urxe0 -F -p $port -n 200 $extra" \
        "$PT/$t -d urxe0 -F -p $port -n 200 $extra $SRV" "^ *[0-9]+ +[0-9]+"
    done
  done
}

pyverbs_suite() {
  local rc=0 real
  # rdma-core 56's suite (tests/base.py get_net_name) asks `rdma link show -j` (netlink RDMA,
  # a kernel service) for a port's netdev before it looks at sysfs; without a kernel RDMA
  # device that fails and every traffic test errors in setUp. A stand-in `rdma` first on PATH
  # answers that one query the way the kernel answers it for a soft-RoCE port: urxe0 port 1
  # on `lo` (the netdev urxe run's sysfs view gives, scripts/rdma_core_suite.py); every other
  # use goes to the real tool.
  real=$(command -v rdma || echo /sbin/rdma)
  mkdir -p "$RT/shim"
  cat > "$RT/shim/rdma" <<SHIM
#!/bin/sh
if [ "\$*" = "link show -j" ]; then
  echo '[{"ifindex":1,"ifname":"urxe0","port":1,"state":"ACTIVE","physical_state":"LINK_UP","netdev":"lo","netdev_index":1}]'
  exit 0
fi
exec $real "\$@"
SHIM
  chmod +x "$RT/shim/rdma"
  # pyverbs 56's mlx5/efa modules need rdma-core 56's vendor libraries (the vendor dir).
  PATH=$RT/shim:$PATH LD_LIBRARY_PATH=$RT/vendor PYTHONPATH=$RC/python /usr/bin/python3 "$ROOT/scripts/rdma_core_suite.py" --lib "$LIB" \
    --urxe "$ROOT/target/release/urxe" --src "$RC/../tests" \
    --out "$LOGDIR/pyverbs-56.md" --log "$LOGDIR/pyverbs-56.log" > "$LOGDIR/pyverbs-56.summary" 2>&1 || rc=$?
  if [ $rc = 0 ]; then result pyverbs-56 suite pass "$(sed -n 2p "$LOGDIR/pyverbs-56.summary")"
  else result pyverbs-56 suite FAIL "$(sed -n 2,3p "$LOGDIR/pyverbs-56.summary" | tr '\n' ' ')"; fi
}

# fabtests MODE PROVIDER: runfabtests.sh's quick set over 10.43.0.1 with the provider's own
# exclusion file; every test line becomes a result.
fabtests() {
  local mode=$1 prov=$2 excl=$3 log="$LOGDIR/fabtests-$1.log"
  (cd "$RT" && URXE_ADDR=10.43.0.1 LD_LIBRARY_PATH=$LIB:$LF/lib PATH=$LF/bin:$PATH FI_PROVIDER_PATH=$LF/lib/libfabric \
     setsid --wait timeout 1200 "$LF/bin/runfabtests.sh" -v -T 60 -p "$LF/bin" -f "$excl" -s 10.43.0.1 -c 10.43.0.1 \
     -t quick "$prov" > "$log" 2>&1) || true
  # runfabtests.sh writes one "- name: ..." block per test with a "  result: ..." line.
  awk '/^- name:/ { sub(/^- name: +/, ""); n = $0 } /^  result:/ { print $2 "|" n }' "$log" |
  while IFS='|' read -r st name; do
    case $st in Pass) result "fabtests-$mode" "$name" pass "" ;;
                Fail) result "fabtests-$mode" "$name" FAIL "see external-logs/fabtests-$mode.log" ;;
                Excluded) result "fabtests-$mode" "$name" excluded "in libfabric's own $(basename "$excl")" ;;
                *) result "fabtests-$mode" "$name" notrun "$st" ;; esac
  done
  grep -q "Total Pass" "$log" || result "fabtests-$mode" runfabtests.sh FAIL "no summary; see the log"
}

T1=$(date +%s)
# URXE_EXT_ONLY="programs perftest pyverbs fabtests" (the default: all four) picks groups.
want() { [[ " ${URXE_EXT_ONLY:-programs perftest pyverbs fabtests} " == *" $1 "* ]]; }
pids=()
want programs && { rdma_core_programs & pids+=($!); }
want perftest && { perftest_pairs & pids+=($!); }
want pyverbs && { pyverbs_suite & pids+=($!); }
want fabtests && { { fabtests msg verbs "$LF/share/fabtests/test_configs/verbs/verbs.exclude"
  fabtests rdm "verbs;ofi_rxm" "$LF/share/fabtests/test_configs/ofi_rxm/ofi_rxm.exclude"; } & pids+=($!); }
for p in "${pids[@]}"; do wait "$p" || true; done
T2=$(date +%s)

# Known failures that are not urxe's (tests/external/known-failures.txt): FAIL -> known.
KNOWN=$ROOT/tests/external/known-failures.txt
if [ -f "$KNOWN" ]; then
  grep -v '^#' "$KNOWN" | while IFS='|' read -r g n why; do
    [ -n "$g" ] || continue
    awk -F'|' -v g="$g" -v n="$n" -v why="$why" 'BEGIN { OFS = "|" }
      $1 == g && $2 == n && $3 == "FAIL" { $3 = "known"; $4 = why } { print }' "$RES" > "$RES.new"
    mv "$RES.new" "$RES"
  done
fi

# --- report --- (greps that find nothing are fine here)
set +e +o pipefail
REP=$OUT/external.md
{
  echo "# Programs we did not write, over urxe"
  echo
  echo "Built from Debian trixie's source packages (tests/external/fetch-build.sh, cache $CACHE):"
  echo "rdma-core 56.1, perftest 25.01.0+0.80, libfabric 2.1.0 (fabtests). Run $(date -u +%FT%TZ);"
  echo "tests $((T2 - T1)) s, whole run (with fetch/build) $((T2 - URXE_EXT_T0)) s."
  echo
  echo "| group | pass | FAIL | known (not urxe's) | not run | excluded by upstream |"
  echo "|---|---|---|---|---|---|"
  cut -d'|' -f1 "$RES" | sort -u | while read -r g; do
    printf "| %s | %s | %s | %s | %s | %s |\n" "$g" "$(grep -c "^$g|[^|]*|pass|" "$RES" || true)" \
      "$(grep -c "^$g|[^|]*|FAIL|" "$RES" || true)" "$(grep -c "^$g|[^|]*|known|" "$RES" || true)" "$(grep -c "^$g|[^|]*|notrun|" "$RES" || true)" \
      "$(grep -c "^$g|[^|]*|excluded|" "$RES" || true)"
  done
  echo
  echo "## Every test that did not pass"
  echo
  echo "| group | test | result | reason |"
  echo "|---|---|---|---|"
  grep -v "|pass|" "$RES" | grep -v "|excluded|" | sort | awk -F'|' '{printf "| %s | %s | %s | %s |\n", $1, $2, $3, $4}'
  echo
  echo "## pyverbs (rdma-core 56.1's suite)"
  echo; echo '```'; cat "$LOGDIR/pyverbs-56.summary" 2>/dev/null; echo '```'
  echo
  echo "## Passed"
  echo
  grep "|pass|" "$RES" | sort | awk -F'|' '{printf "%s: %s %s\n", $1, $2, $4}' | sed 's/ *$//; s/^/- /'
} > "$REP"
sed -n 1,16p "$REP"
FAILS=$(grep -c "|FAIL|" "$RES" || true)
echo "external: $FAILS failing; report $REP"
[ "$FAILS" = 0 ]
