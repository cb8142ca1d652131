#!/usr/bin/env bash
# bench/ucx.sh - UCX and Open MPI over urxe beside perftest over urxe, measured in the same run on
# the same machine, with the ratios against the issue's bars. A benchmark, not a test.
#
#   bench/ucx.sh
#
# Figures (server/receiver pinned to CPU 1, client/sender to CPU 0, like bench/run.sh):
#   ucx_perftest tag_bw 64 KiB (UCX_TLS=rc_verbs,ud_verbs)   vs  ib_write_bw 64 KiB   bar >= 0.7x
#   ucx_perftest tag_lat 8 B, median one-way                 vs  ib_send_lat 8 B      bar <= 1.3x
#   MPI ping-pong 8 B one-way (tests/mpi/mpi_check.c --lat,
#     mpirun -np 2 --mca pml ucx, UCX_TLS=rc_verbs,ud_verbs,self) vs ib_send_lat 8 B  bar <= 1.5x
# Every program runs under `urxe run` (no UCX workaround variable). Every command runs under
# `timeout`; a figure that cannot be had reads "error", and the exit status is 1.
# The five measurements run ROUNDS times in turn (a round's figures are printed as it ends);
# the table gives each figure's median over the rounds and the ratios of those medians, so a
# noisy spell on the machine, which moves both sides of a ratio but rarely at the same moment,
# does not decide the ratio.
#
# Settings (environment):
#   BW_ITERS=20000 LAT_ITERS=20000 MPI_ITERS=20000   iterations per figure
#   ROUNDS=3       rounds of the five measurements (odd: the median is one round's figure)
#   URXE_LIB_DIR   directory holding urxe's libibverbs.so.1 (default <repo>/target/urxe/lib)
#   URXE           the urxe binary (default <repo>/target/release/urxe, built if missing)
#   PORT=19410     first TCP port for the out-of-band exchanges (the next few are used too)
#   OUT            directory for logs (default /tmp/urxe-bench/ucx-<UTC time>)
set -u -o pipefail

BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$BENCH/.." && pwd)
BW_ITERS=${BW_ITERS:-20000}
LAT_ITERS=${LAT_ITERS:-20000}
MPI_ITERS=${MPI_ITERS:-20000}
ROUNDS=${ROUNDS:-3}
URXE_LIB_DIR=${URXE_LIB_DIR:-$REPO/target/urxe/lib}
URXE=${URXE:-$REPO/target/release/urxe}
PORT=${PORT:-19410}
OUT=${OUT:-/tmp/urxe-bench/ucx-$(date -u +%Y%m%dT%H%M%SZ)}
export URXE_LIB_DIR
unset UCX_UD_ETH_DGID_CHECK UCX_NET_DEVICES UCX_IB_GID_INDEX
mkdir -p "$OUT"
status=0

for v in BW_ITERS LAT_ITERS MPI_ITERS PORT ROUNDS; do
  case ${!v} in '' | *[!0-9]*) echo "ucx.sh: $v must be a whole number, got '${!v}'" >&2; exit 2 ;; esac
done
for t in ucx_perftest mpirun mpicc ib_write_bw ib_send_lat taskset; do
  command -v "$t" >/dev/null || { echo "ucx.sh: $t missing (bash scripts/deps.sh installs it)" >&2; exit 1; }
done
[ -f "$URXE_LIB_DIR/libibverbs.so.1" ] || bash "$REPO/provider/build.sh" --release >/dev/null || exit 1
[ -x "$URXE" ] || (cd "$REPO" && cargo build -q --release --bin urxe) || exit 1
MPI_BIN="$OUT/mpi_check"
mpicc -O2 -o "$MPI_BIN" "$REPO/tests/mpi/mpi_check.c" || exit 1

# pair NAME TIMEOUT "SERVER CMD" "CLIENT CMD": server on CPU 1, client on CPU 0 after the
# server listens on $PORT; the client's output is left in $OUT/NAME.client.
pair() {
  local name=$1 tmo=$2 srv=$3 cli=$4 i
  # shellcheck disable=SC2086
  timeout "$tmo" taskset -c 1 $srv >"$OUT/$name.server" 2>&1 &
  local spid=$!
  for i in $(seq 1 200); do
    ss -ltn 2>/dev/null | grep -q ":$PORT " && break
    sleep 0.05
  done
  # shellcheck disable=SC2086
  timeout "$tmo" taskset -c 0 $cli >"$OUT/$name.client" 2>&1
  local rc=$?
  wait "$spid" || rc=1
  PORT=$((PORT + 1))
  return $rc
}

# Every latency figure is in microseconds one-way, every bandwidth figure in Gb/s (10^9 bit/s).
run="$URXE run --"
echo "== ucx.sh ($(date -u +%H:%M:%S) UTC, $(nproc) CPUs, load: $(cut -d' ' -f1-3 /proc/loadavg)); logs in $OUT"

# round R: the five measurements; the figures land in the arrays below ("error" if missing).
ucx_bws=() ucx_lats=() mpi_lats=() ibw_bws=() ibs_lats=()
round() {
  local r=$1 ucx_bw=error ucx_lat=error mpi_lat=error ibw_bw=error ibs_lat=error
  if pair ib_write_bw.$r 120 "$run ib_write_bw -d urxe0 -x 1 -F -p $PORT -s 65536 -n $BW_ITERS --report_gbits" \
    "$run ib_write_bw -d urxe0 -x 1 -F -p $PORT -s 65536 -n $BW_ITERS --report_gbits 127.0.0.1"; then
    ibw_bw=$(awk -f "$BENCH/parse_perftest.awk" "$OUT/ib_write_bw.$r.client" | tr ' ' '\n' | sed -n 's/^bw_avg_gbps=//p')
  fi
  if pair ib_send_lat.$r 120 "$run ib_send_lat -d urxe0 -x 1 -F -p $PORT -s 8 -n $LAT_ITERS" \
    "$run ib_send_lat -d urxe0 -x 1 -F -p $PORT -s 8 -n $LAT_ITERS 127.0.0.1"; then
    ibs_lat=$(awk -f "$BENCH/parse_perftest.awk" "$OUT/ib_send_lat.$r.client" | tr ' ' '\n' | sed -n 's/^lat_typical_us=//p')
  fi
  # ucx_perftest's "Final:" row: iterations, latency 50%ile / average / overall (us), bandwidth
  # average / overall (MB/s = 2^20 B/s), message rate average / overall.
  if pair tag_bw.$r 120 "$run ucx_perftest -p $PORT" "$run ucx_perftest -p $PORT 127.0.0.1 -t tag_bw -s 65536 -n $BW_ITERS"; then
    ucx_bw=$(awk '$1 == "Final:" { printf "%.2f", $7 * 1048576 * 8 / 1e9 }' "$OUT/tag_bw.$r.client")
  fi
  if pair tag_lat.$r 120 "$run ucx_perftest -p $PORT" "$run ucx_perftest -p $PORT 127.0.0.1 -t tag_lat -s 8 -n $LAT_ITERS"; then
    ucx_lat=$(awk '$1 == "Final:" { print $3 }' "$OUT/tag_lat.$r.client")
  fi
  if UCX_TLS=rc_verbs,ud_verbs,self timeout 300 $run mpirun --allow-run-as-root -np 2 --bind-to core --mca pml ucx \
    --mca btl self -x UCX_TLS "$MPI_BIN" "$MPI_ITERS" --lat >"$OUT/mpi_lat.$r" 2>&1; then
    mpi_lat=$(sed -n 's/^mpi_check: lat8 one-way median \([0-9.]*\) us.*/\1/p' "$OUT/mpi_lat.$r")
  fi
  ucx_bws+=("${ucx_bw:-error}") ucx_lats+=("${ucx_lat:-error}") mpi_lats+=("${mpi_lat:-error}")
  ibw_bws+=("${ibw_bw:-error}") ibs_lats+=("${ibs_lat:-error}")
  echo "round $r: tag_bw $ucx_bw Gb/s, ib_write_bw $ibw_bw Gb/s; tag_lat $ucx_lat us, MPI $mpi_lat us, ib_send_lat $ibs_lat us"
}
export UCX_TLS=rc_verbs,ud_verbs
for r in $(seq 1 "$ROUNDS"); do
  round "$r"
done

# median VALUES...: the middle value (the lower middle for an even count); "error" if any
# value is not a number.
median() {
  printf '%s\n' "$@" | sort -g | awk '!/^[0-9.]+$/ { bad = 1 } { v[NR] = $1 }
    END { if (bad || NR == 0) print "error"; else print v[int((NR + 1) / 2)] }'
}
ucx_bw=$(median "${ucx_bws[@]}") ucx_lat=$(median "${ucx_lats[@]}") mpi_lat=$(median "${mpi_lats[@]}")
ibw_bw=$(median "${ibw_bws[@]}") ibs_lat=$(median "${ibs_lats[@]}")

# ratio NUM DEN BAR OP: prints "x.xx (bar OP BAR: ok|MISSED)".
ratio() {
  awk -v a="$1" -v b="$2" -v bar="$3" -v op="$4" 'BEGIN {
    if (a !~ /^[0-9.]+$/ || b !~ /^[0-9.]+$/ || b == 0) { print "error"; exit 1 }
    r = a / b; ok = (op == ">=") ? r >= bar : r <= bar
    printf "%.2fx (bar %s %s: %s)\n", r, op, bar, ok ? "ok" : "MISSED" }'
}
echo
echo "medians over $ROUNDS rounds:"
printf '| %-44s | %-12s | %-26s | %-9s | %s\n' figure urxe+UCX "perftest over urxe" value ratio
printf '|%s|%s|%s|%s|%s\n' "----------------------------------------------" "--------------" "----------------------------" "-----------" "------"
printf '| %-44s | %-12s | %-26s | %-9s | %s\n' "ucx_perftest tag_bw 64 KiB (Gb/s)" "$ucx_bw" "ib_write_bw 64 KiB" "$ibw_bw" "$(ratio "$ucx_bw" "$ibw_bw" 0.7 '>=')"
printf '| %-44s | %-12s | %-26s | %-9s | %s\n' "ucx_perftest tag_lat 8 B median one-way (us)" "$ucx_lat" "ib_send_lat 8 B typical" "$ibs_lat" "$(ratio "$ucx_lat" "$ibs_lat" 1.3 '<=')"
printf '| %-44s | %-12s | %-26s | %-9s | %s\n' "MPI ping-pong 8 B one-way median (us)" "$mpi_lat" "ib_send_lat 8 B typical" "$ibs_lat" "$(ratio "$mpi_lat" "$ibs_lat" 1.5 '<=')"
for v in "$ucx_bw" "$ucx_lat" "$mpi_lat" "$ibw_bw" "$ibs_lat"; do
  [ "$v" = error ] || [ -z "$v" ] && status=1
done
exit $status
